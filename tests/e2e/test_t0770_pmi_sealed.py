"""Every PMI connection belongs to one job, and to one process of it
(issue 24, docs/security.md "A connection belongs to its job").

A process of a job that outlives it keeps the job's PMI connection (its
PMI_FD).  The test plays that process: while a rank of user A's job waits,
the test copies the rank's PMI_FD (pidfd_getfd, as a setsid'd grandchild
would inherit it), and keeps it after the rank and its job are gone, so the
attack does not depend on whether the job's leftovers are killed.  Before,
the root ciod fed what came on that connection to whatever job ran next:
user B's next job was aborted by the leftover's `cmd=abort`, got replies it
never asked for, and read what the leftover put into its key space.  Now
ciod closes a process's PMI connection when the process ends (and every one
of a job when the job ends), refuses anything that still comes, and the
next job is untouched.  Also: leaked PMI connections no longer cost ciod a
thread and a descriptor each; the key space is bounded, with the reason
sent to the process that passes the bound; and a lost I/O worker ends its
job with an error instead of `Terminated 0`."""
from __future__ import annotations

import ctypes
import errno
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest

from conftest import Machine, make_machine, processes, local_users

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: users of its own and pidfd_getfd")

PMI_FD = 8                      # docs/protocol.md section 10
SYS_PIDFD_GETFD = 438           # x86_64 and aarch64 alike
GUARD = 120                     # seconds: a failure guard, never a window the test relies on
Users = tuple[pwd.struct_passwd, pwd.struct_passwd]
Runs = list[subprocess.Popen[str]]


@pytest.fixture(scope="module")
def users() -> Iterator[Users]:
    with local_users(*(f"latpmi{c}{os.getpid() % 10000}" for c in "ab")) as (a, b):
        yield a, b


@pytest.fixture(scope="module")
def pm(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    m = make_machine(tmp_path_factory.mktemp("t0770"), "--shape", "1x1x2", "--pset-size", "2")
    m.run("block", "create", "P", "--shape", "1x1x2")
    m.run("boot", "P")
    yield m
    m.run("free", "P", check=False)
    shutil.rmtree(m.work, ignore_errors=True)


@pytest.fixture(scope="module")
def probe(pm: Machine) -> str:
    """tests/e2e/pmi_probe.c, in the machine's work directory (every job user reads it)."""
    exe = pm.work / "pmi_probe"
    subprocess.run(["gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(exe),
                    str(Path(__file__).with_name("pmi_probe.c"))], check=True)
    return str(exe)


@pytest.fixture
def fifos() -> Iterator[Path]:
    """A directory every job user can reach, for the FIFOs the ranks wait on."""
    d = Path(tempfile.mkdtemp(prefix="lattice-t0770-"))
    os.chmod(d, 0o755)
    yield d
    for f in d.iterdir():
        f.unlink()
    d.rmdir()


@pytest.fixture
def runs() -> Iterator[Runs]:
    """The test's `lattice run`s: any still running when it ends (it failed)
    is interrupted, which ends its job, so the next test finds the block free."""
    started: Runs = []
    yield started
    for p in started:
        if p.poll() is None:
            p.send_signal(signal.SIGINT)
            p.communicate(timeout=GUARD)


def start(m: Machine, runs: Runs, *args: str, kernel: str = "linux") -> subprocess.Popen[str]:
    """Linux mode is the preload client's (--no-sandbox): the ranks wait on
    FIFOs of the host's, which a sandboxed rank cannot reach (its files are
    its job's trees through FUSE, where a FIFO is the node kernel's own).
    ciod's PMI side under test is the same for both modes."""
    mode = ("--no-sandbox",) if kernel == "linux" else ()
    p = m.popen("run", "--block", "P", "--kernel", kernel, *mode, "--cwd", "/tmp", *args)
    runs.append(p)
    return p


def fifo(d: Path, name: str) -> Path:
    p = d / name
    os.mkfifo(p)
    os.chmod(p, 0o666)
    return p


def rank_pid(marker: Path) -> int:
    """The rank whose command line names marker (it waits on it now)."""
    for pid, argv in processes():
        if any(a.endswith(b"pmi_probe") for a in argv[:1]) and str(marker).encode() in argv:
            return pid
    raise AssertionError(f"no rank waiting on {marker}")


def steal_fd(pid: int, fd: int) -> socket.socket:
    """A copy of the rank's descriptor fd: what a process it left behind would hold."""
    libc = ctypes.CDLL(None, use_errno=True)
    pidfd = os.pidfd_open(pid)
    try:
        got = libc.syscall(SYS_PIDFD_GETFD, pidfd, fd, 0)
        if got < 0:
            raise OSError(ctypes.get_errno(), f"pidfd_getfd of {pid}'s descriptor {fd}")
    finally:
        os.close(pidfd)
    return socket.socket(fileno=got)


def steal_pmi_fd(pid: int) -> socket.socket:
    return steal_fd(pid, PMI_FD)


def steal_sockets(pid: int) -> list[socket.socket]:
    """Copies of every socket the rank holds but its PMI_FD: its shipping
    (PROC) connection, its output."""
    fds = [int(fd) for fd in os.listdir(f"/proc/{pid}/fd")
           if int(fd) != PMI_FD and os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")]
    return [steal_fd(pid, fd) for fd in fds]


def opened(f: Path, run: subprocess.Popen[str]) -> int:
    """FIFO f opened for writing once the rank opened it (it waits there now):
    the descriptor, which lets it go when closed.  A job that ended first fails."""
    deadline = time.monotonic() + GUARD
    while time.monotonic() < deadline:
        try:
            return os.open(f, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as e:
            if e.errno != errno.ENXIO:  # ENXIO: no reader yet
                raise
        if run.poll() is not None:
            raise AssertionError(f"the job ended before its rank waited on {f.name}: {run.communicate()}")
        time.sleep(0.02)
    raise AssertionError(f"no rank waited on {f.name}")


def hold_and_release(f: Path, run: subprocess.Popen[str], others: list[socket.socket] | None = None) -> socket.socket:
    """The rank waiting on FIFO f: its PMI_FD copied (and its other sockets
    into others), then let go (it exits)."""
    w = opened(f, run)
    try:
        pid = rank_pid(f)
        if others is not None:
            others += steal_sockets(pid)
        return steal_pmi_fd(pid)
    finally:
        os.close(w)


def running_job(m: Machine) -> int:
    ids = [int(line.split()[0]) for line in m.run("jobs").stdout.splitlines()[1:] if " Running " in line]
    assert len(ids) == 1, m.run("jobs").stdout
    return ids[0]


def job_row(m: Machine, job: int) -> list[str]:
    for line in m.run("jobs").stdout.splitlines()[1:]:
        if line.split()[0] == str(job):
            return line.split()
    raise AssertionError(f"no job {job}")


def attack(s: socket.socket, kvsname: str) -> str:
    """What the leftover writes: a put into the victim's key space, an abort."""
    lines = (f"cmd=put kvsname={kvsname} key=card value=forged\n"
             f"cmd=put kvsname={kvsname} key=leftover value=forged\n"
             "cmd=abort exitcode=9 message=hijacked\n")
    try:
        s.sendall(lines.encode())
        return "sent"
    except OSError as e:
        return f"refused: {e.strerror}"


def closed(s: socket.socket) -> bool:
    """Whether ciod closed the connection (EOF or reset), reading whatever was sent first."""
    s.settimeout(GUARD)
    try:
        while s.recv(65536):
            pass
        return True
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def ciod_pid(m: Machine) -> int:
    (pid,) = m.processes("ciod", "P")
    return pid


def cost(pid: int) -> tuple[int, int]:
    """ciod's threads and open descriptors now."""
    return len(os.listdir(f"/proc/{pid}/task")), len(os.listdir(f"/proc/{pid}/fd"))


def back(now: tuple[int, int], base: tuple[int, int]) -> bool:
    """No more threads and descriptors than at the baseline (one that ends
    after the baseline was read may make it fewer)."""
    return now[0] <= base[0] and now[1] <= base[1]


def rss_kb(pid: int) -> int:
    m = re.search(r"^VmRSS:\s+(\d+) kB", Path(f"/proc/{pid}/status").read_text(), re.M)
    assert m
    return int(m[1])


@pytest.mark.parametrize("kernel", ["linux", "cnk"])
def test_a_finished_jobs_leftover_cannot_reach_the_next_job(pm: Machine, users: Users, probe: str, fifos: Path,
                                                            runs: Runs, kernel: str) -> None:
    """A's rank's leftover (Linux mode) against B's next job, in either kernel."""
    a, b = users
    hold = fifo(fifos, "hold")
    run_a = start(pm, runs, "-n", "1", "--user", a.pw_name, probe, "hold", str(hold))
    others: list[socket.socket] = []
    leftover = hold_and_release(hold, run_a, others)
    out_a, err_a = run_a.communicate(timeout=GUARD)
    assert run_a.returncode == 0, (out_a, err_a)
    assert others                       # its shipping connection at least (Linux mode ships its I/O)
    # user B's next job on the same I/O node, same node, same rank
    wait = fifo(fifos, "victim")
    run_b = start(pm, runs, "-n", "1", "--user", b.pw_name, probe, "victim", str(wait), kernel=kernel)
    w = opened(wait, run_b)             # B has said init and put its card, and waits
    job_b = running_job(pm)
    said = attack(leftover, f"lattice-{job_b}")
    os.close(w)
    out_b, err_b = run_b.communicate(timeout=GUARD)
    assert run_b.returncode == 0, (said, out_b, err_b)
    assert "hijacked" not in err_b and "unexpected" not in out_b, (out_b, err_b)
    assert out_b.strip() == "rank 0 card victim-0 leftover key_not_found", (said, out_b, err_b)
    # the leftover's connection was closed when A's job ended: what it wrote never got in
    assert said.startswith("refused"), said
    assert closed(leftover)
    leftover.close()
    for s in others:                    # and so was every other connection of the job it held
        assert closed(s)
        s.close()
    assert "hijacked" not in pm.run("ras").stdout


def test_an_ended_process_cannot_feed_its_running_job(pm: Machine, users: Users, probe: str, fifos: Path,
                                                      runs: Runs) -> None:
    """The connection is bound to the process too: once rank 0 exited, what a
    process it left behind writes does not reach rank 1 of the same job."""
    a, _ = users
    hold, wait = fifo(fifos, "hold"), fifo(fifos, "victim")
    run = start(pm, runs, "--user", a.pw_name, "-n", "1", probe, "hold", str(hold),
                ":", "-n", "1", probe, "victim", str(wait), "nofence")
    w = opened(wait, run)               # rank 1 put its card and waits
    leftover = hold_and_release(hold, run)
    job = running_job(pm)
    assert closed(leftover)             # rank 0 exited: its connection is closed ...
    said = attack(leftover, f"lattice-{job}")
    os.close(w)
    assert said.startswith("refused"), said        # ... and nothing more is taken
    out, err = run.communicate(timeout=GUARD)
    assert run.returncode == 0, (out, err)
    assert "rank 1 card victim-1 leftover key_not_found" in out, (out, err)
    leftover.close()


def test_leaked_pmi_connections_cost_ciod_nothing_after_their_jobs(pm: Machine, users: Users, probe: str, fifos: Path,
                                                                   runs: Runs) -> None:
    """72 jobs leaving a PMI holder each took ciod from 6 to 593 threads and
    599 descriptors, and other users' jobs were refused.  Now each holder's
    connection ends with its job: ciod is back at its baseline."""
    a, b = users
    pid = ciod_pid(pm)
    pm.run("run", "--block", "P", "-n", "2", "--kernel", "linux", "--user", b.pw_name, "--cwd", "/tmp", "/bin/true")
    base = cost(pid)
    held = []
    for i in range(6):
        hold = fifo(fifos, f"hold{i}")
        run = start(pm, runs, "-n", "1", "--user", a.pw_name, probe, "hold", str(hold))
        held.append(hold_and_release(hold, run))
        assert run.wait(timeout=GUARD) == 0
    try:
        for s in held:
            assert closed(s)
        deadline = time.monotonic() + GUARD
        while not back(cost(pid), base) and time.monotonic() < deadline:
            time.sleep(0.1)             # the closed connections' threads are ending
        assert back(cost(pid), base), (base, cost(pid))
        # and B's jobs still get all their connections
        p = pm.run("run", "--block", "P", "-n", "2", "--kernel", "linux", "--user", b.pw_name, "--cwd", "/tmp",
                   "/bin/true")
        assert p.returncode == 0
    finally:
        for s in held:
            s.close()


def test_a_flood_of_puts_is_bounded_and_told(pm: Machine, users: Users, probe: str, fifos: Path,
                                             runs: Runs) -> None:
    """150,000 puts of 1 KiB took the root ciod from 6.5 to 315 MB (163 MB
    after the job).  Now a process's puts stop at its bound with the reason
    in the reply, and the memory comes back when the job ends (12,000 puts
    here: 25 MB before; about 9 MB during the job and 1 MB after it now)."""
    a, _ = users
    pid = ciod_pid(pm)
    before = rss_kb(pid)
    wait = fifo(fifos, "flood")
    run = start(pm, runs, "-n", "1", "--user", a.pw_name, probe, "flood", "12000", "1024", str(wait))
    w = opened(wait, run)               # every put answered; the job still runs
    during = rss_kb(pid)
    os.close(w)
    out, err = run.communicate(timeout=GUARD)
    assert run.returncode == 0, (out, err)
    m = re.search(r"^puts 12000 ok (\d+) first-error (.*)$", out, re.M)
    assert m, (out, err)
    assert 1000 < int(m[1]) < 12000, out                           # the bound, not memory, stopped it
    assert m[2].startswith("cmd=put_result rc=-1 msg=PMI_key_space_bound:_rank_0's_puts_since_its_last_fence"), m[2]
    assert during - before < 16 * 1024, (before, during)             # bounded: 4 MiB of puts per process
    after = rss_kb(pid)
    assert after - before < 4 * 1024, (before, during, after)        # and given back
    assert "PMI key space bound: rank 0" in pm.run("ras").stdout


def worker_pid(job: int, uid: int, deadline: float) -> int:
    # its title names job, uid and block: another machine's block P (another test run's) is not it
    title = f"job {job} uid {uid} block P ".encode()
    while time.monotonic() < deadline:
        for pid, argv in processes():
            if argv[0] == b"ciod-worker" and title in b" ".join(argv):
                return pid
        time.sleep(0.05)
    raise AssertionError("no I/O worker while the job ran")


def test_a_lost_io_worker_ends_the_job_with_an_error(pm: Machine, users: Users, probe: str, fifos: Path,
                                                     runs: Runs) -> None:
    """Killing the job's I/O worker let the job be recorded `Terminated 0`
    while its ranks' I/O was lost.  Now the job ends with an error: one line
    from `lattice run`, exit 255, the record and a RAS ERROR say why."""
    a, _ = users
    wait = fifo(fifos, "worker")
    run = start(pm, runs, "-n", "1", "--user", a.pw_name, probe, "hold", str(wait))
    w = opened(wait, run)
    job = running_job(pm)
    wpid = worker_pid(job, a.pw_uid, time.monotonic() + GUARD)
    assert Path(f"/proc/{wpid}/status").read_text().count(f"\t{a.pw_uid}\t") >= 1   # the job user's
    os.kill(wpid, signal.SIGKILL)
    try:
        run.wait(timeout=GUARD)         # ends without the rank being let go
    except subprocess.TimeoutExpired:
        pass
    os.close(w)
    out, err = run.communicate(timeout=GUARD)
    assert run.returncode == 255, (out, err)
    lines = [line for line in err.splitlines() if "I/O worker" in line]
    assert len(lines) == 1 and "was killed by signal 9" in lines[0], err
    row = job_row(pm, job)
    assert row[6] == "255" and "I/O worker" in " ".join(row), row
    ras = pm.run("ras").stdout
    assert re.search(rf"ERROR.*job {job} ended with an error: the I/O worker of job {job}", ras), ras
