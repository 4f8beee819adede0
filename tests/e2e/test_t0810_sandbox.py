"""The node sandbox (issue 25, part 1): a `--kernel linux` job runs in the
node's own namespaces, and nothing of it is left on the host after it.

Each compute node of the job has a holder process (compute/cnode/sandbox.c),
in the block's pid namespace on that host (its pid 1 the host agent's
lattice-pidns-init), that built the node's file view: the host's system tree
read-only, its own /proc, a minimal /dev, a /tmp of its own.  From inside a
job (tests/e2e/sandbox/sandbox_view.sh): ps shows the processes of the
block's nodes on the host only (both nodes' holders and ranks: one pid
namespace, so MPI's single-copy transfers reach another node's rank), pid 1
is the block's init, the hostname is the node's location, /tmp is empty, files planted in the host's /tmp, the
machine directory, /root and another user's home are not there, the mounts
are the node's and a job of root can change none of them.  After a job,
after its cnode is killed outright and after `lattice free`, no holder, no
namespace of one and no mount of one is left.  A holder killed mid-job ends
the job with one line naming it and a RAS event.

Before issue 25 a Linux-mode job saw the host's processes, name, /tmp and
files, and every one of these assertions failed.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

from conftest import Machine, ROOT, local_users, make_machine, processes, wait_for

BLOCK = "X"
PROBE = ROOT / "tests" / "e2e" / "sandbox" / "sandbox_view.sh"
HOLDER = b"lattice-node-holder"
NODE_FS = {"lattice-node", "lattice-tmp", "lattice-dev", "lattice-shm", "lattice-fs"}   # sandbox.c's, fs.c's
NS_KINDS = ("mnt", "pid", "net", "ipc", "uts")
# what a node's /proc/self/mountinfo may name: its file view (sandbox.c)
NODE_MOUNTS = {"/", "/usr", "/etc", "/opt", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin",
               "/dev", "/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty",
               "/dev/pts", "/dev/shm", "/proc", "/proc/sys", "/proc/irq", "/proc/bus", "/proc/fs",
               "/proc/sysrq-trigger", "/sys", "/tmp", "/run/lattice-hwloc.xml",
               str(ROOT / "build" / "lib")}       # Lattice's libraries (libpmi.so), read-only


@pytest.fixture(scope="module")
def probe() -> Iterator[str]:
    """The probe where any job user can read it (pytest's directories are private)."""
    d = Path(tempfile.mkdtemp(prefix="lattice-test-sandbox-"))
    os.chmod(d, 0o755)
    exe = shutil.copy(PROBE, d / "sandbox_view.sh")
    yield str(exe)
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def cwd() -> Iterator[str]:
    """The jobs' working directory (a file tree, through lattice-fs): outside
    /tmp, whose node-local tmpfs would otherwise hold its mount point."""
    d = tempfile.mkdtemp(prefix="lattice-test-sandbox-", dir="/var/tmp")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@contextmanager
def machine(tmp: Path) -> Iterator[Machine]:
    """A booted 2-node block in one pset; freed after."""
    m = make_machine(tmp, "--shape", "1x1x2", "--pset-size", "2", "--memory", "256M")
    try:
        m.run("block", "create", BLOCK, "--shape", "1x1x2")
        m.run("boot", BLOCK)
        yield m
    finally:
        m.run("free", BLOCK, "--force", check=False)
        shutil.rmtree(m.work, ignore_errors=True)


@pytest.fixture(scope="module")
def sm(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    with machine(tmp_path_factory.mktemp("sandbox")) as m:
        yield m


def answers(out: str) -> list[dict[str, str]]:
    """The probe's "key value" lines of a run with -l ("RANK: key value"), one dict per rank."""
    ranks: dict[int, dict[str, str]] = {}
    for line in out.splitlines():
        rank, _, rest = line.partition(": ")
        key, _, value = rest.partition(" ")
        r = ranks.setdefault(int(rank), {})
        if key in ("seen", "unseen"):
            r[value] = key
        else:
            r[key] = value.strip()
    return [ranks[k] for k in sorted(ranks)]


def holders(name: bytes = HOLDER) -> dict[int, int]:
    """The host's sandbox holders (or file clients, name b"lattice-fs"): pid -> parent pid."""
    found = {}
    for pid, argv in processes():
        if argv[0] == name:
            try:
                stat = Path(f"/proc/{pid}/stat").read_text()
            except OSError:
                continue
            found[pid] = int(stat.rpartition(")")[2].split()[1])
    return found


def namespaces(pids: list[int]) -> set[str]:
    """The namespaces (kind:[inode]) those processes are in."""
    seen = set()
    for pid in pids:
        for kind in NS_KINDS:
            try:
                seen.add(os.readlink(f"/proc/{pid}/ns/{kind}"))
            except OSError:
                pass
    return seen


def every_namespace() -> set[str]:
    """Every namespace a process of this host is in, or a mount holds (nsfs)."""
    seen = namespaces([pid for pid, _ in processes()])
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        head, _, tail = line.partition(" - ")
        if tail.startswith("nsfs "):
            seen.add(head.split()[3])
    return seen


def sandbox_mounts(pid: int | str = "self") -> list[str]:
    """Mounts of a node's file view in a mount namespace (the host's, or a
    cnode's): the node's file systems are named lattice-*."""
    lines = Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
    return [l for l in lines if l.partition(" - ")[2].split()[1] in NODE_FS]


def census(m: Machine) -> tuple[list[int], list[str], list[str], set[str]]:
    """What the sandbox could leave on this host: holders and file clients
    of this machine's cnodes, node mounts in the host's and the cnodes' mount
    namespaces, the namespaces of the machine's daemons."""
    cnodes = m.processes("cnode", BLOCK)
    mine = sorted(pid for pid, parent in [*holders().items(), *holders(b"lattice-fs").items()] if parent in cnodes)
    in_cnodes = [l for pid in cnodes for l in sandbox_mounts(pid)]
    return mine, sandbox_mounts(), in_cnodes, namespaces(cnodes)


def test_a_node_sees_its_own_processes_name_and_tmp(sm: Machine, probe: str, cwd: str) -> None:
    """ps shows the processes of the block's nodes on this host only, the
    block's init as pid 1 and the holders (the nodes share the block's pid
    namespace); the hostname is the node's location; /tmp is the
    node's own, empty."""
    marker = f"/tmp/lattice-sandbox-{uuid.uuid4().hex[:12]}"
    Path(marker).write_text("the host's /tmp\n")
    try:
        p = sm.run("run", "--block", BLOCK, "-n", "2", "--kernel", "linux", "-l", "--cwd", cwd, probe, "view", marker)
    finally:
        os.unlink(marker)
    ranks = answers(p.stdout)
    assert len(ranks) == 2, p.stdout
    assert {r["node"] for r in ranks} == {str(x["location"]) for x in sm.personalities(BLOCK)}
    host_pidns = os.readlink("/proc/self/ns/pid")
    assert ranks[0]["pidns"] == ranks[1]["pidns"] != host_pidns, ranks
    for r in ranks:
        assert r["hostname"] == r["node"], r
        assert r["pid1"].split()[0].endswith("/lattice-pidns-init"), r
        procs = dict(w.split(":", 1) for w in r["procs"].split())
        assert procs.pop("1") == "lattice-pidns-i", procs          # comm: 15 characters
        # its node's holder, and the other's while that node's part of the job lasts
        assert list(procs.values()).count("lattice-node-ho") in (1, 2), procs
        assert set(procs.values()) <= {"lattice-node-ho", "dash", "sh", "ps", "awk", "tr"}, procs
        # empty, but for the way to Lattice's libraries (bound read-only at their host path) when this
        # checkout is below /tmp
        libs = (ROOT / "build" / "lib").resolve().parts
        allowed = f"[{libs[2]} ]" if libs[1] == "tmp" else "[]"
        assert r["tmp"] == allowed, r
        assert r[marker] == "unseen", r


def test_host_files_are_out_of_sight(sm: Machine, probe: str, cwd: str) -> None:
    """A job of a user without a home (so its only tree is its working
    directory): files planted in the machine directory, /root and another
    user's home are not in the node's view, nor are the host's mounts (its
    cgroups, the I/O node's directories, /run/netns)."""
    tag = uuid.uuid4().hex[:12]
    with local_users(f"lsbx{tag[:6]}", f"lsby{tag[:6]}") as (user, job_user):
        home = Path("/home") / user.pw_name
        home.mkdir(mode=0o755)
        planted = [sm.home / f"planted-{tag}", Path("/root") / f"planted-{tag}", home / f"planted-{tag}"]
        try:
            os.chown(home, user.pw_uid, user.pw_gid)
            for f in planted:
                f.write_text("secret\n")
            p = sm.run("run", "--block", BLOCK, "-n", "1", "--kernel", "linux", "-l", "--user",
                       job_user.pw_name, "--cwd", cwd, probe, "view",
                       *map(str, planted), str(sm.home), str(sm.work), "/root", str(home))
        finally:
            shutil.rmtree(home, ignore_errors=True)
            for f in planted[:2]:
                f.unlink(missing_ok=True)
    (r,) = answers(p.stdout)
    for path in [*planted, sm.home, sm.work, Path("/root"), home]:
        assert r[str(path)] == "unseen", (path, r)
    mounts = set(r["mounts"].split())
    assert mounts <= NODE_MOUNTS | {cwd}, mounts - NODE_MOUNTS
    assert {"/", "/usr", "/proc", "/dev", "/tmp"} <= mounts, mounts


def test_a_root_job_cannot_change_the_node_or_the_host(sm: Machine, probe: str, cwd: str) -> None:
    """A job of root (root without capabilities) cannot remount / read-write,
    mount, unmount the read-only /proc/sys, write the system tree or a
    sysctl; it can write its node's /tmp, which only its node sees."""
    p = sm.run("run", "--block", BLOCK, "-n", "2", "--kernel", "linux", "--cwd", cwd, probe, "write")
    lines = p.stdout.splitlines()
    for key in ("remount-root", "mount-tmpfs", "umount-proc-sys", "write-usr", "write-root", "write-sysctl"):
        got = [l.split()[1] for l in lines if l.split()[0] == key]
        assert len(got) == 2 and "0" not in got, (key, p.stdout)
    assert [l for l in lines if l.startswith("write-tmp")] == ["write-tmp 0"] * 2, p.stdout
    assert [l for l in lines if l.startswith("uid")] == ["uid 0"] * 2, p.stdout
    assert not Path("/tmp/mine").exists() or Path("/tmp/mine").read_text() != "x\n"


def start_waiting(m: Machine, probe: str, cwd: str) -> tuple[subprocess.Popen[str], list[int]]:
    """A 2-node job whose ranks wait; each node's holder."""
    run = m.popen("run", "--block", BLOCK, "-n", "2", "--kernel", "linux", "--cwd", cwd, probe, "wait")
    assert run.stdout is not None
    assert [run.stdout.readline() for _ in range(2)] == ["ready\n"] * 2
    cnodes = m.processes("cnode", BLOCK)
    mine = sorted(pid for pid, parent in holders().items() if parent in cnodes)
    assert len(mine) == 2, (mine, holders(), cnodes)
    return run, mine


def test_nothing_is_left_after_a_job_a_killed_cnode_and_free(built: Path, tmp_path: Path, probe: str,
                                                             cwd: str) -> None:
    """Holders, their namespaces and the node mounts are counted before and
    after: a cancelled job, one whose cnode is killed outright (SIGKILL) and
    `lattice free` each leave the count as it was, and no namespace a holder
    made is left anywhere on the host (the node's network namespace, the
    host agent's when it made a block network, goes at `lattice free`)."""
    with machine(tmp_path) as m:
        before = census(m)
        assert before[0] == [] and before[1] == [] and before[2] == [], before
        # a job that ends by itself
        run, held = start_waiting(m, probe, cwd)
        gone = namespaces(held)
        agent_made = any("sandbox" in p for p in m.personalities(BLOCK))
        # each node's own; with the agent's block network the two share the block's IPC and pid namespaces
        assert len(gone) == 2 * len(NS_KINDS) - (2 if agent_made else 0), gone
        assert not gone & before[3], "a holder shares a namespace with its cnode"
        # the agent's (the nodes' network namespaces, the block's IPC and pid namespaces) stay until free
        agents = {n for n in gone if n.startswith(("net:", "ipc:", "pid:"))} if agent_made else set()
        job = int(m.run("jobs", "--running").stdout.splitlines()[1].split()[0])
        m.run("cancel", str(job))
        run.communicate(timeout=120)
        assert census(m) == before
        assert not (gone - agents) & every_namespace(), (gone - agents) & every_namespace()
        # a cnode killed outright: its holder dies with it (its parent-death signal, or in the block's
        # pid namespace its watch on cnode's pidfd, killing the node's processes first)
        run, held = start_waiting(m, probe, cwd)
        gone |= namespaces(held)
        cnodes = m.processes("cnode", BLOCK)
        os.kill(cnodes[0], signal.SIGKILL)
        run.communicate(timeout=120)
        wait_for(lambda: not set(held) & set(holders()))
        assert not (gone - agents) & every_namespace(), (gone - agents) & every_namespace()
        m.run("free", BLOCK, "--force")
        assert m.processes("cnode", BLOCK) == []
        assert [pid for pid in holders() if pid in held] == []
        assert sandbox_mounts() == []
        assert not gone & every_namespace(), gone & every_namespace()


def test_a_dead_holder_ends_the_job_with_its_name(sm: Machine, probe: str, cwd: str) -> None:
    """The holder killed while the job runs: its ranks are ended, each rank's
    end says why, the run fails with one line naming it, and a RAS event
    records it."""
    run, held = start_waiting(sm, probe, cwd)
    os.kill(held[0], signal.SIGKILL)
    _, err = run.communicate(timeout=120)
    assert run.returncode != 0
    assert "the node sandbox's holder died" in err, err
    assert "Traceback" not in err
    assert "the node sandbox's holder died" in sm.run("ras").stdout
    # the node takes the next job
    p = sm.run("run", "--block", BLOCK, "-n", "2", "--kernel", "linux", "-l", "--cwd", cwd, probe, "view")
    assert len(answers(p.stdout)) == 2, p.stdout
    assert census(sm)[0] == []


def test_a_dead_file_client_ends_the_job_with_its_name(sm: Machine, probe: str, cwd: str) -> None:
    """lattice-fs killed while the job runs: the same, naming the file client
    and how it ended; its node's holder and mounts go with the job."""
    run, held = start_waiting(sm, probe, cwd)
    cnodes = sm.processes("cnode", BLOCK)
    clients = sorted(pid for pid, parent in holders(b"lattice-fs").items() if parent in cnodes)
    assert len(clients) == 2, clients
    os.kill(clients[0], signal.SIGKILL)
    _, err = run.communicate(timeout=120)
    assert run.returncode != 0
    assert "the node's file client (lattice-fs) died: killed by signal 9" in err, err
    assert "Traceback" not in err
    assert "the node's file client (lattice-fs) died" in sm.run("ras").stdout
    assert census(sm)[:3] == ([], [], [])
