"""Programs cnk cannot load end the job with a clear message (launch failure,
exit status 126, the reason in `lattice jobs --ranks`), and the booted block
runs a good job right after."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterator

import pytest

from conftest import Machine, make_machine
from cnk_helpers import (CNK_EX, EM_AARCH64, by_rank, copy_exe, interpreter, last_job, rank_rows,
                         truncated, with_interpreter, with_machine)

LAUNCH_FAILED = 126
NODE_MIB = 512


@pytest.fixture(scope="module")
def bad_machine(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    assert (built / "bin" / "cnk").exists(), "build/bin/cnk missing: the compute node kernel is not built"
    m = make_machine(tmp_path_factory.mktemp("cnkbad"), "--shape", "1x1x2", "--pset-size", "2",
                     "--memory", f"{NODE_MIB}M")
    m.run("block", "create", "C", "--shape", "1x1x2")
    m.run("boot", "C")
    yield m
    m.run("free", "C", check=False)


def refused(m: Machine, exe: Path, reason: str) -> str:
    """Run exe on both nodes: it must not start, and every rank's failure must
    say `reason` (a regex); then a good job runs on the same block."""
    cnodes = m.processes("cnode", "C")
    p = m.run("run", "--block", "C", "-n", "2", "--label", "--kernel", "cnk", "--cwd", "/tmp", str(exe),
              check=False, timeout=600)
    assert p.returncode == LAUNCH_FAILED, (p.returncode, p.stdout, p.stderr)
    assert re.search(reason, p.stderr, re.I), f"stderr does not say /{reason}/:\n{p.stderr}"
    assert "stdio+malloc ok" not in p.stdout and "touched" not in p.stdout, p.stdout
    rows = rank_rows(m, last_job(m))
    # each rank failed to load, or was ended by lattice because another one did
    launch = [r for r in rows if r.split()[2] == "launch"]
    assert len(rows) == 2 and launch and all(re.search(reason, r, re.I) for r in launch), rows
    for r in rows:
        assert r in launch or re.search(r"ended by lattice because rank \d could not start: .*" + reason, r, re.I), rows
    # the node is ready for the next job: same compute node processes, a good job runs
    p = m.run("run", "--block", "C", "-n", "2", "--label", "--kernel", "cnk", "--cwd", "/tmp",
              str(CNK_EX / "stdio_malloc"), "100")
    assert sorted(by_rank(p.stdout)) == [0, 1] and p.stdout.count("stdio+malloc ok") == 2, p.stdout
    assert m.processes("cnode", "C") == cnodes
    return p.stderr


@pytest.mark.parametrize("keep", [40, 1000, 20000], ids=["in-header", "in-program-headers", "in-segments"])
def test_truncated_elf(bad_machine: Machine, keep: int) -> None:
    exe = truncated(CNK_EX / "stdio_malloc-static", bad_machine.work / f"truncated-{keep}", keep)
    refused(bad_machine, exe, r"truncat|short|too small|end of file")


def test_executable_for_another_architecture(bad_machine: Machine) -> None:
    exe = with_machine(CNK_EX / "stdio_malloc-static", bad_machine.work / "aarch64-program", EM_AARCH64)
    refused(bad_machine, exe, r"architecture|machine|aarch64|x86.64")


def test_missing_interpreter(bad_machine: Machine) -> None:
    src = CNK_EX / "stdio_malloc"
    assert interpreter(src), "the dynamic build has an interpreter"
    missing = "/nonexistent/ld-lattice.so"
    exe = with_interpreter(src, bad_machine.work / "no-interpreter", missing)
    assert interpreter(exe) == missing
    refused(bad_machine, exe, re.escape(missing))


def test_not_an_elf(bad_machine: Machine) -> None:
    exe = bad_machine.work / "script-like"
    exe.write_text("this is no program\n" * 10)
    exe.chmod(0o755)
    refused(bad_machine, exe, r"ELF|exec format")


@pytest.mark.parametrize("exe", ["bigbss", "bigbss-static"])
def test_static_array_bigger_than_the_node(bad_machine: Machine, exe: str) -> None:
    """1.5 GiB of bss on a 512 MiB node: cnk refuses to load it (plain Linux
    would start it and let it touch more than the node has)."""
    refused(bad_machine, copy_exe(CNK_EX / exe, bad_machine.work / exe),
            r"memory|ENOMEM|too (big|large)|does not fit")
