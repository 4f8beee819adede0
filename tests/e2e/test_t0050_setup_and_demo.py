"""The README's first command: the venv belongs to Debian's Python, and the demo runs in a machine of
its own, says what it showed, and leaves nothing behind."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from conftest import ROOT


def test_the_venv_is_made_from_debians_python(built: Path) -> None:
    # A venv's interpreter is a link to the Python that made it: one from a user's pyenv or conda
    # would not run on another machine of this kind.
    venv_python = Path(os.path.realpath(ROOT / ".venv" / "bin" / "python"))
    assert venv_python == Path(os.path.realpath("/usr/bin/python3")), venv_python
    assert Path(sys.executable).resolve() == venv_python or "/.venv/" in sys.executable


def demo(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(ROOT / "scripts" / "demo.sh")], env=env, text=True,
                          capture_output=True, timeout=300)


def leftovers() -> set[str]:
    return {p.name for p in Path("/tmp").glob("lattice-demo-*")}


def test_demo_runs_in_a_machine_of_its_own(built: Path, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "LATTICE_HOME"}
    env["HOME"] = str(home)
    before = leftovers()
    p = demo(env)
    assert p.returncode == 0, p.stdout + p.stderr
    # the user's own machine directory is never touched
    assert not (home / ".lattice").exists()
    # it says what each step showed, from what really happened
    out = p.stdout
    assert re.search(r"block R00 Initialized: 16 compute nodes, 2 I/O nodes", out), out
    assert re.search(r"^15: rank 15: ok \(\d+ bytes, 2 entries listed\)$", out, re.M), out
    assert "16 files in 16 rank directories; rank 15's file holds 16 lines" in out, out
    assert re.search(r"R00-M0-N00-I:J01\s+mkdirat\s+8$", out, re.M), out
    assert re.search(r"^\s+1 R00\s+\S+\s+16 cnk\s+Terminated\s+0 ", out, re.M), out
    assert out.rstrip().endswith("The block is freed now."), out
    # its machine directory and the job's files are gone
    assert leftovers() <= before


def test_demo_uses_the_machine_lattice_home_names(built: Path, tmp_path: Path) -> None:
    machine = tmp_path / "machine"
    env = dict(os.environ, LATTICE_HOME=str(machine), HOME=str(tmp_path))
    p = demo(env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"(in {machine})" in p.stdout
    # the machine stays (it is the user's), its block freed and deleted, the job recorded
    jobs = subprocess.run([str(ROOT / ".venv" / "bin" / "lattice"), "jobs"], env=env, text=True,
                          capture_output=True, check=True).stdout
    assert re.search(r"^\s+1 R00\s+\S+\s+16 cnk\s+Terminated\s+0 ", jobs, re.M), jobs
    blocks = subprocess.run([str(ROOT / ".venv" / "bin" / "lattice"), "blocks"], env=env, text=True,
                            capture_output=True, check=True).stdout
    assert "R00" not in blocks, blocks
