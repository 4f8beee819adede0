"""A host that cannot hold the ranks asked gets one clear error before
launch (issue 15): the user's process limit (ulimit -u, RLIMIT_NPROC), a
pids cgroup with a low pids.max, and nodes that ask more memory than the
host has.  Each refusal names the number used and how to raise the limit,
exits non-zero, starts nothing, harms no daemon, and the block runs the
next job that fits.

A 1x1x4 machine in psets of two (two I/O nodes).  The limits are real: the
block is booted under `ulimit -u N` (its cnodes pass the limit on to the
ranks they start as the job's user), or inside a pids cgroup of its own.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from conftest import EXAMPLES, LATTICE, ROOT, Machine, local_users, make_machine, wait_for

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: jobs as another user, pids cgroups")

PIDS = Path("/sys/fs/cgroup/pids")


@pytest.fixture
def sm(small_machine: Machine) -> Machine:
    """A 1x1x4 machine in psets of two (conftest); its block S over all of it, not booted."""
    small_machine.run("block", "create", "S", "--shape", "1x1x4")
    return small_machine


def boot_under(m: Machine, shell: str) -> None:
    """`lattice boot S` after shell (a ulimit, joining a cgroup) in the same
    process, which starts no warm server there (it would be one task more)."""
    argv = " ".join(LATTICE)
    subprocess.run(["bash", "-c", f"{shell} && exec {argv} boot S"], env=dict(m.env, LATTICE_WARM="0"), check=True,
                   capture_output=True, text=True, timeout=600)     # a hang guard


def daemons(m: Machine) -> list[int]:
    return m.processes("ciod", "S") + m.processes("cnode", "S")


def jobs(m: Machine) -> list[str]:
    return m.run("jobs").stdout.splitlines()[1:]


def refused(m: Machine, *args: str) -> str:
    """The run is refused before launch: status 1, one error, no job record; its message."""
    before = jobs(m)
    p = m.run("run", *args, check=False)
    assert p.returncode == 1, p
    assert p.stdout == ""
    assert p.stderr.startswith("lattice: error: host "), p.stderr
    assert jobs(m) == before
    return p.stderr


def test_user_process_limit(sm: Machine) -> None:
    """Four ranks as a user of the test's own need 4 + 2 I/O workers x (3 + 2) = 14 of
    that user's tasks; the block's limit is 10: refused, saying so; one rank (5) runs.
    Not `nobody`: RLIMIT_NPROC counts every process of the uid on the host, and other
    software (a database server, another session's tests) may run as nobody."""
    m = sm
    boot_under(m, "ulimit -u 10")
    pids = daemons(m)
    hello = str(EXAMPLES / "hello")
    with local_users(f"latnp{os.getpid() % 100000}") as (u,):
        err = refused(m, "--block", "S", "-n", "4", "--user", u.pw_name, "--cwd", "/tmp", hello)
        assert "cannot hold 4 ranks" in err
        assert f"14 of them run as uid {u.pw_uid}, whose limit (ulimit -u, RLIMIT_NPROC" in err
        assert "is 10; raise it with `ulimit -u 28`" in err
        assert daemons(m) == pids and all(Path(f"/proc/{p}").exists() for p in pids)
        assert " Initialized " in m.run("blocks").stdout
        p = m.run("run", "--block", "S", "-n", "1", "--user", u.pw_name, "--cwd", "/tmp", hello)
        assert p.stdout == "hello from rank 0 of 1 on R00-M0-N00-C:J00\n"
    # root's jobs are exempt from RLIMIT_NPROC: all four ranks run
    assert len(m.run("run", "--block", "S", "-n", "4", hello).stdout.splitlines()) == 4


def comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


@pytest.fixture
def cgroup(tmp_path: Path) -> Iterator[Path]:
    """A pids cgroup (v1) of the test's own, removed afterwards."""
    if not (PIDS / "cgroup.procs").exists():
        pytest.skip("no cgroup v1 pids hierarchy at /sys/fs/cgroup/pids")
    d = PIDS / f"lattice-test-{os.getpid()}-{tmp_path.name}"
    try:
        d.mkdir()
    except OSError as e:
        pytest.skip(f"cannot make a pids cgroup: {e}")
    yield d
    for p in (d / "cgroup.procs").read_text().split():     # anything left: the tests free their blocks
        try:
            os.kill(int(p), 9)
        except ProcessLookupError:
            pass
    wait_for(lambda: not (d / "cgroup.procs").read_text().strip())
    d.rmdir()


def test_pids_cgroup(sm: Machine, cgroup: Path) -> None:
    """The block's daemons in a pids cgroup with room for 18 more tasks: four
    ranks (26 with their I/O nodes' threads) are refused even as root, one
    rank (11; 9 measured, and a `lattice` command's sweep may hold a
    connection thread or two of the I/O nodes for a moment) runs."""
    m = sm
    boot_under(m, f"echo $$ > {cgroup}/cgroup.procs")
    held = int((cgroup / "pids.current").read_text())
    # with the block network, its pid namespace's init and the unshare waiting for it (blocknet)
    comms = [comm(int(t)) for t in (cgroup / "tasks").read_text().split()]
    ns = comms.count("unshare") + comms.count("lattice-pidns-i")
    assert ns in (0, 2), comms
    assert held == 1 + 4 + 2 * (2 + 2) + ns  # the host agent, four cnodes, two ciods of main, RAS timer, two node threads
    (cgroup / "pids.max").write_text(f"{held + 18}\n")
    pids = daemons(m)
    hello = str(EXAMPLES / "hello")
    err = refused(m, "--block", "S", "-n", "4", hello)
    assert "cannot hold 4 ranks: they need about 26 processes and threads" in err
    assert f"the pids cgroup {cgroup} allows {held + 18} (pids.max) and {held} are in use" in err
    assert f"echo {held + 26} > {cgroup}/pids.max" in err
    assert daemons(m) == pids
    assert m.run("run", "--block", "S", "-n", "1", hello).stdout == "hello from rank 0 of 1 on R00-M0-N00-C:J00\n"
    m.run("free", "S")


def test_pids_cgroup_refuses_a_boot_before_any_daemon(sm: Machine, cgroup: Path) -> None:
    """`lattice boot` in a cgroup of 5 pids: the 13 tasks of S's daemons do not
    fit; nothing starts, the block stays Free and boots outside it."""
    m = sm
    (cgroup / "pids.max").write_text("5\n")
    argv = " ".join(LATTICE)
    p = subprocess.run(["bash", "-c", f"echo $$ > {cgroup}/cgroup.procs && exec {argv} boot S"], env=m.env,
                       capture_output=True, text=True, timeout=600)     # a hang guard
    assert p.returncode == 1, p
    assert p.stderr.startswith("lattice: error: host "), p.stderr
    assert "cannot hold the daemons of block S (4 compute nodes, 2 I/O nodes): they need about 13" in p.stderr
    assert f"the pids cgroup {cgroup} allows 5 (pids.max)" in p.stderr
    assert daemons(m) == []
    assert " Free " in m.run("blocks").stdout
    m.run("boot", "S")
    assert len(daemons(m)) == 6
    m.run("free", "S")


def test_memory_beyond_mem_available(built: Path, tmp_path: Path) -> None:
    """Compute nodes of 64 TiB: a cnk job's big memory cannot be had.  Refused
    before the block is even booted (lattice run boots none); on a booted
    block refused with the block untouched, and a Linux-mode job (no memory
    asked up front) runs there."""
    m = make_machine(tmp_path, "--shape", "1x1x2", "--pset-size", "2", "--memory", "64T")
    try:
        hello = str(EXAMPLES / "hello")
        err = refused(m, "-n", "2", hello)
        assert "cannot hold 2 ranks: their nodes' memory (big memory) is 131072.0 GiB, the host has" in err
        assert "MemAvailable" in err and "lattice init --memory" in err
        assert "auto-" not in m.run("blocks").stdout and daemons(m) == []
        m.run("block", "create", "S", "--shape", "1x1x2")
        m.run("boot", "S")
        pids = daemons(m)
        refused(m, "--block", "S", "-n", "2", hello)
        assert daemons(m) == pids
        p = m.run("run", "--block", "S", "-n", "2", "--kernel", "linux", hello)
        assert len(p.stdout.splitlines()) == 2
    finally:
        m.run("free", "--all", "--force", check=False)
        shutil.rmtree(m.work, ignore_errors=True)


def test_more_processes_per_node_than_the_old_cap(built: Path, tmp_path: Path) -> None:
    """Nodes of 80 cores in virtual node mode: 80 ranks each, past the old
    fixed cap of 64 processes per node (LAT_MAX_PPN; cnode's process table,
    the I/O worker's and the lofar plug-in's are sized per job now, and
    ciod's connection cap grows with the job's processes per node)."""
    m = make_machine(tmp_path, "--shape", "1x1x2", "--pset-size", "2", "--cores", "80", "--memory", "8G")
    try:
        m.run("block", "create", "S", "--shape", "1x1x2")
        m.run("boot", "S")
        for kernel in ("linux", "cnk"):
            p = m.run("run", "--block", "S", "--mode", "vn", "-n", "160", "--kernel", kernel, "--label",
                      str(EXAMPLES / "hello"))
            lines = p.stdout.splitlines()
            assert sorted(int(l.split(":")[0]) for l in lines) == list(range(160)), p
            assert sum(l.endswith(" of 160 on R00-M0-N00-C:J00") for l in lines) == 80, p
            assert sum(l.endswith(" of 160 on R00-M0-N00-C:J01") for l in lines) == 80, p
        log = (m.home / "blocks" / "S" / "log" / "ciod-0.log").read_text()
        assert "a job of 80 processes per node: at most 402 connections now" in log, log
    finally:
        m.run("free", "--all", "--force", check=False)
        shutil.rmtree(m.work, ignore_errors=True)


def test_a_host_agent_checks_its_own_host_before_starting_daemons(built: Path, tmp_path: Path,
                                                                  cgroup: Path) -> None:
    """With ssh or Slurm placement each host's agent checks its host: an agent
    in a pids cgroup of 3 is told to start two nodes' daemons (1 + 2 + 4
    tasks): it reports the error and starts nothing."""
    (cgroup / "pids.max").write_text("3\n")
    d = tmp_path / "agent"
    d.mkdir()
    spec = {"block": "X", "pset_size": 2, "key": "00" * 32, "prefix": str(built), "ras_dir": str(d),
            "hosts": {"h1": [{"pset": 0, "location": "R00-M0-N00-I:J00",
                              "nodes": [{"index": i, "personality": {}} for i in (0, 1)]}]},
            "dirs": {"h1": str(d)}, "log_dirs": {"h1": str(d)}, "socket_dirs": {"h1": str(d)}}
    env = dict(os.environ, PYTHONPATH=str(ROOT / "service"))
    p = subprocess.run(["bash", "-c", f"echo $$ > {cgroup}/cgroup.procs && exec {sys.executable} -m lattice.nodes.agent "
                        "--host h1"], input=json.dumps(spec) + "\n", env=env, capture_output=True, text=True,
                       timeout=600)     # a hang guard
    assert p.returncode == 1, p
    report = json.loads(p.stdout.splitlines()[-1])
    assert report["host"] == "h1" and report["event"] == "error", report
    assert report["message"].startswith("host h1 cannot hold the daemons of block X (2 compute nodes, 1 I/O "
                                        "node): they need about 7 processes and threads"), report
    assert f"the pids cgroup {cgroup} allows 3 (pids.max)" in report["message"]
    assert not list(d.glob("*.log")) and not (d / "key").exists()      # no daemon started, no key written
