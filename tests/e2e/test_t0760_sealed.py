"""Jobs are sealed in time (issue 24, item 1): nothing of a job outlives it.

A Linux-mode job of user `nobody` whose ranks start a setsid, double-forked
`sleep` (argv[0] a marker) that holds nothing of the job's: while the job
runs the sleep is in the job's own cgroup on its node; once the job has
ended (normally, cancelled, at its time limit, its block freed, its compute
node killed outright and the block freed) no process with the marker is
left and the cgroup is gone.  Under cnk a rank with a second thread ends
the same way.  Its processes cannot move themselves out of it, not even as root.
Both Linux modes are checked: the node sandbox (its processes live in a pid
namespace of their own, so the test finds the escapees by their marker,
and no cgroup file system is mounted inside it) and --no-sandbox (the
preload client, the host's cgroup file systems read-only for a root job).
A container that cannot be emptied (its process frozen by
the test in a v1 freezer, where SIGKILL waits) is reported: a warning, a
RAS event and the job's record.  tests/e2e/sealed_probe.c is the job.
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from conftest import build_probe, Machine, make_machine, processes, wait_for

BLOCK = "Z"
MODES = {"sandbox": (), "no-sandbox": ("--no-sandbox",)}


@pytest.fixture(scope="module")
def probe(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The probe where user nobody can read it (pytest's directories are private)."""
    d = Path(tempfile.mkdtemp(prefix="lattice-test-sealed-"))
    os.chmod(d, 0o755)
    exe = shutil.copy(build_probe(tmp_path_factory, "sealed_probe"), d / "sealed_probe")
    yield str(exe)
    shutil.rmtree(d, ignore_errors=True)


@contextmanager
def machine(tmp: Path, **env: str) -> Iterator[Machine]:
    """A booted 2-node block in one pset (env: for its daemons); freed after."""
    m = make_machine(tmp, "--shape", "1x1x2", "--pset-size", "2", "--memory", "256M")
    m.env.update(env)
    try:
        m.run("block", "create", BLOCK, "--shape", "1x1x2")
        m.run("boot", BLOCK)
        yield m
    finally:
        m.run("free", BLOCK, "--force", check=False)
        shutil.rmtree(m.work, ignore_errors=True)


@pytest.fixture
def sm(built: Path, tmp_path: Path) -> Iterator[Machine]:
    """Containers in the host's default hierarchy."""
    with machine(tmp_path) as m:
        yield m


def hierarchy(v1: bool = False) -> Path:
    """The mount point of the cgroup v2 hierarchy (v1: of the v1 freezer)."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        head, _, tail = line.partition(" - ")
        fstype, _, opts = tail.split()[:3]
        if (not v1 and fstype == "cgroup2") or (v1 and fstype == "cgroup" and "freezer" in opts.split(",")):
            return Path(head.split()[4])
    pytest.skip("no cgroup v1 freezer" if v1 else "no cgroup v2 hierarchy")


def block_cgroups(m: Machine, v1: bool = False) -> Path:
    """The block's container directory (the agent names it in every personality)."""
    names = {str(p["container"]) for p in m.personalities(BLOCK)}
    assert len(names) == 1, names
    return hierarchy(v1) / names.pop()


def with_marker(marker: str) -> list[int]:
    """Live processes (a zombie has no command line) with the marker in theirs."""
    return [pid for pid, argv in processes() if marker.encode() in argv]


def cgroup_of(pid: int, v1: bool = False) -> str:
    """pid's cgroup in the v2 hierarchy (v1: in the freezer's), as the host sees it."""
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        num, ctrl, path = line.split(":", 2)
        if (not v1 and num == "0") or (v1 and "freezer" in ctrl.split(",")):
            return path
    raise AssertionError(f"process {pid} has no {'freezer' if v1 else 'v2'} cgroup")


def escaped(run: subprocess.Popen[str], n: int, marker: str) -> list[int]:
    """The host pids of the escapees the job's n ranks say they started (the
    pids they print are their own namespace's in the sandbox: the host's
    are found by the escapees' argv[0], the marker)."""
    assert run.stdout is not None
    lines = [run.stdout.readline() for _ in range(n)]
    assert all(l.startswith("escaped ") for l in lines), lines
    pids = [pid for pid, argv in processes() if argv[:1] == [marker.encode()]]
    assert len(pids) == n, pids
    return pids


def running_job(m: Machine) -> int:
    rows = [l.split() for l in m.run("jobs", "--running").stdout.splitlines()[1:] if l.split()]
    assert len(rows) == 1, rows
    return int(rows[0][0])


def start_escapees(m: Machine, probe: str, marker: str, *opts: str) -> tuple[subprocess.Popen[str], int, list[int]]:
    """A 2-rank Linux-mode job of nobody whose ranks each leave a sleep with the
    marker and wait: the run, its job and the sleeps (host pids), each checked
    to be in the job's own cgroup on its node."""
    run = m.popen("run", "--block", BLOCK, "-n", "2", "--kernel", "linux", "--user", "nobody", "--cwd", "/tmp",
                  *opts, probe, "escape", marker, "wait")
    pids = escaped(run, 2, marker)
    job = running_job(m)
    base = block_cgroups(m)
    assert {cgroup_of(p) for p in pids} == {"/" + str((base / f"{job}-{loc}").relative_to(hierarchy()))
                                            for loc in node_names(m)}
    return run, job, pids


def node_names(m: Machine) -> list[str]:
    """The compute nodes' container names: their locations, made safe."""
    return [re.sub(r"[^A-Za-z0-9.-]", "_", str(p["location"])) for p in m.personalities(BLOCK)]


def compute_nodes(m: Machine) -> list[int]:
    """The block's cnode daemons, not the processes they fork (a sandbox's
    holder and the relays of its processes have cnode's command line)."""
    pids = m.processes("cnode", BLOCK)
    parent = {p: int(Path(f"/proc/{p}/stat").read_text().rpartition(")")[2].split()[1]) for p in pids}
    return [p for p in pids if parent[p] not in parent]


def nothing_left(m: Machine, marker: str, base: Path, job: int) -> None:
    assert with_marker(marker) == [], f"processes of job {job} outlived it"
    left = sorted(p.name for p in base.glob(f"{job}-*")) if base.is_dir() else []
    assert left == [], f"containers of job {job} left: {left}"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("v1", [False, True], ids=["v2", "v1-freezer"])
def test_an_escaped_process_dies_with_its_job(built: Path, tmp_path: Path, probe: str, v1: bool, mode: str) -> None:
    """The job ends by itself; its ranks' setsid, double-forked sleeps end
    with it, before `lattice run` returns (v2: cgroup.kill; the v1 freezer:
    freeze, kill, thaw)."""
    hierarchy(v1)
    with machine(tmp_path, **({"LATTICE_CGROUP": "v1"} if v1 else {})) as m:
        marker = f"sealed-{uuid.uuid4().hex[:12]}"
        p = m.run("run", "--block", BLOCK, "-n", "2", "--kernel", "linux", "--user", "nobody", "--cwd", "/tmp",
                  *MODES[mode], probe, "escape", marker, "exit")
        assert p.stdout.count("escaped ") == 2, (p.stdout, p.stderr)
        job = int(m.run("jobs").stdout.splitlines()[-1].split()[0])
        assert with_marker(marker) == [], "the ranks' sleeps outlived their job"
        nothing_left(m, marker, block_cgroups(m, v1), job)
        # the block takes the next job, in a container of its own
        again = m.run("run", "--block", BLOCK, "-n", "2", "--kernel", "linux", "--user", "nobody", "--cwd", "/tmp",
                      *MODES[mode], probe, "escape", marker, "exit")
        assert again.stdout.count("escaped ") == 2, again.stderr
        nothing_left(m, marker, block_cgroups(m, v1), job + 1)


def test_a_job_of_root_cannot_leave_its_container(sm: Machine, probe: str) -> None:
    """--no-sandbox: another user's process cannot write the cgroup files
    (root's: EACCES, the kernel's own rule).  A job of root, root without
    capabilities, owns them, so it sees every cgroup file system read-only
    (EROFS): it cannot write itself into the hierarchy's root cgroup."""
    p = sm.run("run", "--block", BLOCK, "-n", "1", "--kernel", "linux", "--no-sandbox", "--cwd", "/tmp",
               probe, "leave", str(hierarchy()))
    assert p.stdout.strip() == "refused EROFS", (p.stdout, p.stderr)


def test_a_sandboxed_job_of_root_reaches_no_cgroup_file(sm: Machine, probe: str) -> None:
    """In the node sandbox no cgroup file system is mounted: a job of root
    finds no cgroup.procs at the host's hierarchy path, none in its mount
    table, and, without capabilities, cannot mount one itself."""
    leave = sm.run("run", "--block", BLOCK, "-n", "1", "--kernel", "linux", "--cwd", "/tmp",
                   probe, "leave", str(hierarchy()))
    assert leave.stdout.strip() == "refused ENOENT", (leave.stdout, leave.stderr)
    table = sm.run("run", "--block", BLOCK, "-n", "1", "--kernel", "linux", "--cwd", "/tmp",
                   "/bin/sh", "-c", "grep -c ' - cgroup' /proc/self/mountinfo; true")
    assert table.stdout.strip() == "0", (table.stdout, table.stderr)
    mount = sm.run("run", "--block", BLOCK, "-n", "1", "--kernel", "linux", "--cwd", "/tmp",
                   probe, "mount", "/tmp")
    assert mount.stdout.strip() == "refused EPERM", (mount.stdout, mount.stderr)


def test_an_existing_cgroup_is_never_reused(sm: Machine, probe: str) -> None:
    """A cgroup already there under the next job's name (a planted one, or
    one a crashed node left) is refused, not joined: the job does not start."""
    sm.run("run", "--block", BLOCK, "-n", "1", "--kernel", "linux", probe, "leave", "/nonexistent")
    job = int(sm.run("jobs").stdout.splitlines()[-1].split()[0]) + 1
    base = block_cgroups(sm)
    planted = base / f"{job}-{node_names(sm)[0]}"
    planted.mkdir(parents=True)
    try:
        p = sm.run("run", "--block", BLOCK, "-n", "1", "--kernel", "linux", "--user", "nobody", "--cwd", "/tmp",
                   probe, "leave", "/nonexistent", check=False)
        assert p.returncode != 0 and p.stdout == "", (p.stdout, p.stderr)
        assert f"cannot seal the job in a container: cgroup {planted} exists already" in p.stderr, p.stderr
    finally:
        planted.rmdir()


@pytest.mark.parametrize("mode", MODES)
def test_a_cancelled_job_leaves_nothing(sm: Machine, probe: str, mode: str) -> None:
    marker = f"sealed-{uuid.uuid4().hex[:12]}"
    run, job, _ = start_escapees(sm, probe, marker, *MODES[mode])
    sm.run("cancel", str(job))
    run.communicate(timeout=120)
    assert run.returncode == 128 + signal.SIGTERM
    nothing_left(sm, marker, block_cgroups(sm), job)


@pytest.mark.parametrize("mode", MODES)
def test_a_job_at_its_time_limit_leaves_nothing(sm: Machine, probe: str, mode: str) -> None:
    marker = f"sealed-{uuid.uuid4().hex[:12]}"
    run, job, _ = start_escapees(sm, probe, marker, "-t", "0:30", *MODES[mode])
    _, err = run.communicate(timeout=180)
    assert "time limit" in err, err
    nothing_left(sm, marker, block_cgroups(sm), job)


@pytest.mark.parametrize("mode", MODES)
def test_freeing_a_running_block_leaves_nothing(sm: Machine, probe: str, mode: str) -> None:
    marker = f"sealed-{uuid.uuid4().hex[:12]}"
    run, job, _ = start_escapees(sm, probe, marker, *MODES[mode])
    base = block_cgroups(sm)
    sm.run("free", BLOCK, "--force")
    run.communicate(timeout=120)
    nothing_left(sm, marker, base, job)
    assert not base.exists(), sorted(base.iterdir())


@pytest.mark.parametrize("mode", MODES)
def test_a_killed_compute_node_leaves_nothing_after_free(sm: Machine, probe: str, mode: str) -> None:
    """cnode killed outright cannot end its container: under --no-sandbox
    the escapee runs on there until `lattice free` (the host agent's sweep)
    kills it and removes the cgroup.  In the sandbox the holder dies with
    cnode (its parent-death signal) and, pid 1 of the job's pid namespace,
    takes every process of the node's with it; the sweep removes the cgroup."""
    marker = f"sealed-{uuid.uuid4().hex[:12]}"
    run, job, pids = start_escapees(sm, probe, marker, *MODES[mode])
    base = block_cgroups(sm)
    cnodes = compute_nodes(sm)
    assert len(cnodes) == 2, cnodes
    os.kill(cnodes[0], signal.SIGKILL)
    run.communicate(timeout=120)
    assert run.returncode == 255
    if mode == "no-sandbox":
        assert len(with_marker(marker)) >= 1     # the killed node's: nobody ended its container
    else:
        wait_for(lambda: with_marker(marker) == [], timeout=120)
    sm.run("free", BLOCK, "--force")
    nothing_left(sm, marker, base, job)
    assert not base.exists(), sorted(base.iterdir())


def test_a_cnk_job_with_a_thread_leaves_nothing(sm: Machine, probe: str) -> None:
    marker = f"sealed-{uuid.uuid4().hex[:12]}"
    run = sm.popen("run", "--block", BLOCK, "-n", "2", "--kernel", "cnk", "--user", "nobody", "--cwd", "/tmp",
                   probe, "thread", marker)
    assert run.stdout is not None
    lines = [run.stdout.readline() for _ in range(2)]
    assert lines == ["threaded\n"] * 2, (lines, run.stderr.read() if run.stderr else "")
    job = running_job(sm)
    ranks = [pid for pid, argv in processes() if marker.encode() in argv and argv[0] == b"cnk"]
    assert len(ranks) == 2, ranks
    base = block_cgroups(sm)
    for pid in ranks:
        assert len(list(Path(f"/proc/{pid}/task").iterdir())) >= 2
        assert cgroup_of(pid).startswith("/" + str(base.relative_to(hierarchy())) + f"/{job}-")
    sm.run("cancel", str(job))
    run.communicate(timeout=120)
    nothing_left(sm, marker, base, job)


@pytest.mark.parametrize("mode", MODES)
def test_a_container_that_cannot_be_emptied_is_reported(built: Path, tmp_path: Path, probe: str, mode: str) -> None:
    """The escapee frozen in a v1 freezer cgroup of the test's survives
    SIGKILL until thawed: the node waits LATTICE_CONTAINER_WAIT and reports
    it; the run warns, RAS and the job's record say it; once thawed, `lattice
    free` sweeps the cgroup the node had to leave."""
    freezer = hierarchy(v1=True) / f"lattice-test-{uuid.uuid4().hex[:12]}"
    freezer.mkdir()
    try:
        with machine(tmp_path, LATTICE_CONTAINER_WAIT="3") as m:
            marker = f"sealed-{uuid.uuid4().hex[:12]}"
            run = m.popen("run", "--block", BLOCK, "-n", "1", "--kernel", "linux", "--user", "nobody",
                          "--cwd", "/tmp", *MODES[mode], probe, "escape", marker, "wait")
            pid, = escaped(run, 1, marker)
            job = running_job(m)
            base = block_cgroups(m)
            (freezer / "cgroup.procs").write_text(str(pid))
            (freezer / "freezer.state").write_text("FROZEN")
            m.run("cancel", str(job))
            _, err = run.communicate(timeout=120)
            assert "lattice: warning: processes of the job outlived it on" in err, err
            assert f"still alive 3 s after SIGKILL" in err and f"pids {pid})" in err, err
            assert pid in with_marker(marker)
            record = next(l for l in m.run("jobs").stdout.splitlines() if l.split()[:1] == [str(job)])
            assert "processes of the job outlived it" in record, record
            ras = m.run("ras").stdout
            assert re.search(rf"ERROR .*job {job} processes of the job outlived it", ras), ras
            assert list(base.glob(f"{job}-*")), "the node removed a cgroup that was not empty"
            (freezer / "freezer.state").write_text("THAWED")       # the pending SIGKILL ends it
            wait_for(lambda: pid not in with_marker(marker), timeout=120)
            m.run("free", BLOCK, "--force")
            nothing_left(m, marker, base, job)
            assert not base.exists()
    finally:
        if freezer.exists():
            (freezer / "freezer.state").write_text("THAWED")
            for p in (freezer / "cgroup.procs").read_text().split():
                os.kill(int(p), signal.SIGKILL)
            wait_for(lambda: not (freezer / "cgroup.procs").read_text().split(), timeout=60)
            freezer.rmdir()
