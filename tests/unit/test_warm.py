"""lattice.cli.warm and lattice.cli.client without a machine: requests, the code
stamp, and a server that leaves when lattice's code changes under it."""
from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from conftest import wait_for, warm_servers
from lattice.cli import client, warm

ROOT = Path(__file__).resolve().parents[2]
PR_SET_CHILD_SUBREAPER = 36      # <linux/prctl.h>


def test_request_round_trip() -> None:
    data = client.request(["run", "-n", "2", "a b", "ü"])
    req = warm.Request(data, [10, 11, 12, 13])
    assert req.argv == ["run", "-n", "2", "a b", "ü"]
    assert req.env == dict(os.environ)
    mask = os.umask(0)
    os.umask(mask)
    assert req.umask == mask
    assert len(req.limits) == client.LIMITS
    import resource
    assert req.limits[resource.RLIMIT_NOFILE] == resource.getrlimit(resource.RLIMIT_NOFILE)


@pytest.mark.parametrize("data,fds", [
    (b"NOTWARM\x000\x0016", [1, 2, 3, 4]),
    (client.HELLO + b"\x00022\x003\x001,1", [1, 2, 3, 4]),      # wrong number of limits
    (client.HELLO + b"\x00022\x0016", [1, 2, 3, 4]),           # limits missing
    (client.request(["x"]), [1, 2, 3]),                          # a descriptor short
])
def test_bad_requests_are_refused(data: bytes, fds: list[int]) -> None:
    with pytest.raises((ValueError, IndexError)):
        warm.Request(data, fds)


def server_of(home: Path) -> int | None:
    pids = warm_servers(home)
    return pids[0] if pids else None


def children() -> set[int]:
    """This process's children now, zombies too (/proc/PID/stat's ppid)."""
    me, kids = os.getpid(), set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rpartition(")")[2].split()[1]) == me:
                kids.add(int(d.name))
    return kids


@contextlib.contextmanager
def adopting() -> Iterator[Callable[[], set[int]]]:
    """This process the subreaper of what the commands run inside leave
    behind (PR_SET_CHILD_SUBREAPER): a server a command spawned outlives it
    and so becomes our child, dead or alive, the moment the command exits
    (warm.start's posix_spawn returns once the server runs).  Yields what
    has been adopted so far: the event of a spawn, not a wait for one."""
    libc = ctypes.CDLL(None, use_errno=True)
    before = children()
    assert libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0, os.strerror(ctypes.get_errno())
    try:
        yield lambda: children() - before
    finally:
        libc.prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        for pid in children() - before:          # reaped here, not left as zombies
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)


def test_a_server_leaves_when_the_code_changes(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    shutil.copytree(ROOT / "service" / "lattice", pkg / "lattice", ignore=shutil.ignore_patterns("__pycache__"))
    home = tmp_path / "home"
    home.mkdir()
    env = dict(os.environ, PYTHONPATH=str(pkg), LATTICE_HOME=str(home), LATTICE_WARM="1")

    def version() -> str:
        p = subprocess.run([sys.executable, "-m", "lattice", "--version"], env=env, capture_output=True, text=True,
                           timeout=600)     # a hang guard
        assert p.returncode == 0, p.stderr
        return p.stdout
    expected = version()                        # run here; starts the server
    assert expected.startswith("lattice ")
    wait_for(lambda: (home / "warm.sock").exists() and server_of(home) is not None)
    first = server_of(home)
    assert version() == expected                # served warm
    assert server_of(home) == first
    later = time.time() + 5
    os.utime(pkg / "lattice" / "jobs" / "jobenv.py", (later, later))
    assert version() == expected                # the old server says no; run here
    wait_for(lambda: server_of(home) != first)     # it left
    version()                                   # this one starts a new server
    wait_for(lambda: server_of(home) not in (None, first) and (home / "warm.sock").exists())
    os.unlink(home / "warm.sock")               # a socket taken away: the server leaves
    wait_for(lambda: server_of(home) is None)


def test_a_server_that_cannot_start_says_why_and_is_not_retried_at_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "warm.sock" / "in-the-way").mkdir(parents=True)     # the socket's path is taken by a directory
    env = dict(os.environ, LATTICE_HOME=str(home), LATTICE_WARM="1", PYTHONPATH=str(ROOT / "service"))

    def version() -> None:
        p = subprocess.run([sys.executable, "-m", "lattice", "--version"], env=env, capture_output=True, text=True,
                           timeout=600)     # a hang guard
        assert p.returncode == 0 and p.stdout.startswith("lattice "), p.stderr
    version()
    failed = home / "warm.failed"
    wait_for(lambda: failed.exists() and server_of(home) is None)
    assert "could not start" in failed.read_text(), failed.read_text()
    assert failed.stat().st_mode & 0o777 == 0o600
    stamp = failed.stat().st_mtime_ns
    with adopting() as adopted:
        for _ in range(3):
            version()                           # commands still run, in their own processes
            assert adopted() == set()           # no new server tried: none was spawned
    assert server_of(home) is None and failed.stat().st_mtime_ns == stamp


def test_a_home_too_long_for_a_socket_runs_commands_without_a_server(tmp_path: Path) -> None:
    home = tmp_path / ("h" * 100) / "home"
    home.mkdir(parents=True)
    env = dict(os.environ, LATTICE_HOME=str(home), LATTICE_WARM="1", PYTHONPATH=str(ROOT / "service"))
    with adopting() as adopted:
        for _ in range(2):
            p = subprocess.run([sys.executable, "-m", "lattice", "--version"], env=env, capture_output=True,
                               text=True, timeout=600)     # a hang guard
            assert p.returncode == 0, p.stderr
            assert adopted() == set()           # no server spawned (whose failure could come later)
    assert server_of(home) is None and not (home / "warm.failed").exists()


SLOW_CLIENT = r"""
import os, socket, sys
from lattice.cli import client
home, = sys.argv[1:]
data = client.request(["--version"])
msg = len(data).to_bytes(8, "big") + data
sock = socket.socket(socket.AF_UNIX)
sock.connect(os.path.join(home, client.SOCKET))
cwd = os.open(".", os.O_PATH | os.O_DIRECTORY)
fds = b"".join(fd.to_bytes(4, sys.byteorder) for fd in (0, 1, 2, cwd))
sock.sendmsg([msg[:10]], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
os.write(2, b"half sent\n")
sys.stdin.readline()                    # the test's go: another command was served meanwhile
sock.sendall(msg[10:])
answer = sock.recv(64)
os.write(2, b"answer " + answer)
"""


def test_a_client_slow_to_send_its_request_stalls_nobody_and_is_served(tmp_path: Path) -> None:
    """A request that arrives in pieces (a client descheduled on a loaded
    host) is waited for, however long, while other clients are served."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    env = dict(os.environ, LATTICE_HOME=str(home), LATTICE_WARM="1", PYTHONPATH=str(ROOT / "service"))

    def version() -> subprocess.CompletedProcess[str]:
        p = subprocess.run([sys.executable, "-m", "lattice", "--version"], env=env, capture_output=True, text=True,
                           timeout=600)
        assert p.returncode == 0 and p.stdout.startswith("lattice "), p.stderr
        return p
    expected = version().stdout                  # starts the server
    wait_for(lambda: (home / "warm.sock").exists() and server_of(home) is not None)
    slow = subprocess.Popen([sys.executable, "-c", SLOW_CLIENT, str(home)], env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert slow.stdin and slow.stdout and slow.stderr
    try:
        assert slow.stderr.readline() == b"half sent\n"
        assert version().stdout == expected     # served while the slow request waits
        slow.stdin.write(b"go\n")
        slow.stdin.close()
        out, err = slow.stdout.read(), slow.stderr.read()
        slow.wait(timeout=600)
    finally:
        if slow.poll() is None:
            slow.kill()
    assert err == b"answer E0\n", err           # the slow client was served too, not refused
    assert out.decode() == expected
