"""lattice.nodes.container: the host agent's sweep of the jobs' cgroups that a
killed cnode left (compute/cnode/container.c makes and ends them).

Real cgroups on this host (root only): a process put in a job's cgroup the
way cnode's child enters it (writing 0 to cgroup.procs before exec), then
swept: killed, the cgroups and the block's directory removed; in the v2
hierarchy (cgroup.kill) and in the v1 freezer (freeze, kill, thaw).
"""
from __future__ import annotations

import os
import subprocess
import uuid
from pathlib import Path

import pytest

from lattice.nodes import container

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="cgroups are root's")


def started_in(cg: Path) -> subprocess.Popen[bytes]:
    """A sleep that entered cg before it exec'd, in a session of its own."""
    procs = str(cg / "cgroup.procs")

    def enter() -> None:
        with open(procs, "w") as f:
            f.write("0")
    return subprocess.Popen(["sleep", "1000"], preexec_fn=enter, start_new_session=True)


@pytest.mark.parametrize("hierarchy", ["v2", "v1"])
def test_sweep_kills_what_a_job_left_and_removes_its_cgroups(monkeypatch: pytest.MonkeyPatch,
                                                              hierarchy: str) -> None:
    monkeypatch.setenv("LATTICE_CGROUP", hierarchy)
    found = container.root()
    if found is None or found[1] != (hierarchy == "v2"):
        pytest.skip(f"no cgroup {hierarchy} hierarchy here")
    top = found[0]
    name = f"lattice/unit-{uuid.uuid4().hex[:12]}"
    jobs = [top / name / "7-R00-M0-N00-C_J00", top / name / "7-R00-M0-N00-C_J01"]
    procs = []
    try:
        for cg in jobs:
            cg.mkdir(parents=True)
            procs.append(started_in(cg))
        assert all(str(p.pid) in (cg / "cgroup.procs").read_text().split() for p, cg in zip(procs, jobs))
        problems = container.sweep(name)
        assert sorted(problems) == sorted(f"{cg}: killed 1 process(es) a job left" for cg in jobs)
        assert [p.wait(timeout=60) for p in procs] == [-9, -9]
        assert not (top / name).exists()
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        for cg in [*jobs, top / name]:
            if cg.exists():
                cg.rmdir()


def test_sweep_of_a_block_without_cgroups_is_nothing() -> None:
    assert container.sweep(f"lattice/unit-{uuid.uuid4().hex[:12]}") == []


def test_names_are_per_block_directory_and_safe(tmp_path: Path) -> None:
    a, b = tmp_path / "a" / "blocks" / "S", tmp_path / "b" / "blocks" / "S"
    assert container.name("S", a) == container.name("S", a)
    assert container.name("S", a) != container.name("S", b)         # two machines, one block name
    assert container.name("S", a).startswith("lattice/S-")
    assert all(c.isalnum() or c in "/-._" for c in container.name("S", a))
