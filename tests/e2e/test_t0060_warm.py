"""The warm server (lattice.cli.warm, lattice.cli.client): `lattice` commands run by
a forked copy of a server that has Python's imports done, with the caller's
streams, directory, environment, umask, limits and signals, and only for a
caller with the server's own credentials; otherwise run by the caller.

Whether a run was served warm, `lattice run -v` says ("run by process N of
the warm server"); while it runs, the server has a child whose standard
output is the client's.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from lattice.cli.client import SOCKET

from conftest import EXAMPLES, LATTICE, Machine, db_errors, make_machine, processes, wait_for, warm_servers

GUARD = 600             # s: a bound on waits for an event (a server up, a process gone), only so a hang fails


@pytest.fixture(scope="module")
def wm(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    """A 1x1x2 machine with block W booted, and its warm server up."""
    m = make_machine(tmp_path_factory.mktemp("warm"), "--shape", "1x1x2", "--pset-size", "2", "--memory", "256M")
    # the server (started by the first command after `init`) stays for the whole module: on a
    # loaded host the cold runs between warm ones can add up to the test machines' idle minute
    # (the session's end stops it, conftest)
    m.env["LATTICE_WARM_IDLE"] = "3600"
    m.run("block", "create", "W", "--shape", "1x1x2")
    m.run("boot", "W")
    wait_for(lambda: server_pid(m) is not None and listening(m), GUARD)
    yield m
    m.run("free", "W", check=False)
    shutil.rmtree(m.work, ignore_errors=True)


def server_pid(m: Machine) -> int | None:
    """The machine's warm server: the process with its command line that
    listens on the machine's socket.  The command line alone is not enough:
    the block's agent on this host, forked by a `lattice boot` the server
    ran, has it too (and a SIGTERM meant for the server ended the block's
    daemons with it)."""
    want = {f"socket:[{inode}]" for inode in listening_inodes(m.home / SOCKET)}
    for pid in warm_servers(m.home):
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in want for fd in os.listdir(f"/proc/{pid}/fd")):
                return pid
        except OSError:
            continue
    return None


def listening_inodes(path: Path) -> list[str]:
    """Inodes of the unix sockets listening at path (bound as path.PID, then renamed)."""
    out = []
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        f = line.split()
        if len(f) >= 8 and int(f[3], 16) & 0x10000 and (f[7] == str(path) or f[7].startswith(f"{path}.")):
            out.append(f[6])
    return out


def stop_server(m: Machine) -> None:
    """SIGTERM to the machine's warm server (only: not to the block's agent), until it is gone."""
    pid = server_pid(m)
    assert pid is not None
    os.kill(pid, signal.SIGTERM)
    wait_for(lambda: server_pid(m) is None, GUARD)


WARM_LINE = "of the warm server for this command"


def listening(m: Machine) -> bool:
    """Does a server take connections on the machine's socket (it preloads first)?"""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(str(m.home / SOCKET))
        return True
    except OSError:
        return False
    finally:
        s.close()


def last_job_pid(m: Machine) -> int:
    return int(m.rows("SELECT client_pid FROM jobs ORDER BY id DESC LIMIT 1")[0][0])


def parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def server_child_for(m: Machine, client: int) -> int | None:
    """The server's child whose standard output is the client's, if any."""
    server = server_pid(m)
    want = os.readlink(f"/proc/{client}/fd/1")
    for pid, _ in processes():
        try:
            if parent_of(pid) == server and os.readlink(f"/proc/{pid}/fd/1") == want:
                return pid
        except OSError:
            continue
    return None


def run(m: Machine, *args: str, warm: bool = True, prefix: tuple[str, ...] = (),
        **kw: object) -> tuple[subprocess.CompletedProcess[str], int]:
    env = dict(m.env, LATTICE_WARM="1" if warm else "0")
    p = subprocess.Popen([*prefix, *LATTICE, *args], env=env, stdin=kw.pop("stdin", subprocess.DEVNULL),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)  # type: ignore[call-overload]
    out, err = p.communicate(timeout=GUARD)
    return subprocess.CompletedProcess(p.args, p.returncode, out, err), p.pid


def test_a_run_is_served_warm_and_reports_like_a_cold_one(wm: Machine) -> None:
    server = server_pid(wm)
    assert server is not None
    for warm in (True, False):
        p, client = run(wm, "run", "-v", "--block", "W", "-n", "2", str(EXAMPLES / "hello"), warm=warm)
        assert p.returncode == 0, p.stderr
        lines = sorted(p.stdout.splitlines())
        assert [ln.split(" on ")[0] for ln in lines] == [f"hello from rank {r} of 2" for r in range(2)], p.stdout
        assert (WARM_LINE in p.stderr) == warm, p.stderr
        assert f"(pid {client})" in p.stderr or not warm, p.stderr
        assert last_job_pid(wm) == client       # the record names the pid the user knows, warm or not
    # exit status, stderr apart from stdout, the same warm or not
    outs = [run(wm, "run", "--block", "W", "-n", "1", "/bin/sh", "-c", "echo out; echo err >&2; exit 7",
                warm=w)[0] for w in (True, False)]
    for p in outs:
        assert (p.returncode, p.stdout) == (7, "out\n"), (p.returncode, p.stdout, p.stderr)
        assert "err\n" in p.stderr and "exited with status 7" in p.stderr, p.stderr
    assert outs[0].stderr == outs[1].stderr
    bad = [run(wm, "nosuch", warm=w)[0] for w in (True, False)]
    assert bad[0].returncode == bad[1].returncode == 2 and bad[0].stderr == bad[1].stderr


def test_the_command_gets_the_callers_environment_directory_umask_and_stdin(wm: Machine, tmp_path: Path) -> None:
    here = tmp_path / "here"
    here.mkdir()
    (here / "data").write_text("from the caller's stdin\n")
    # a server started from an environment with WARM_SERVER_ONLY: the callers below lack it
    stop_server(wm)
    subprocess.run([*LATTICE, "blocks"], env=dict(wm.env, LATTICE_WARM="1", WARM_SERVER_ONLY="1"),
                   capture_output=True, check=True)
    wait_for(lambda: server_pid(wm) is not None and listening(wm), GUARD)
    server = server_pid(wm)
    assert b"WARM_SERVER_ONLY=1" in Path(f"/proc/{server}/environ").read_bytes().split(b"\0")
    env = dict(wm.env, LATTICE_WARM="1", WARM_MARK="xyzzy")
    for exe, name in (("/bin/cat", "out.cat"), ("/usr/bin/env", "out.env")):
        with open(here / "data") as stdin:
            p = subprocess.Popen([*LATTICE, "run", "-v", "--block", "W", "-n", "1", "--kernel", "linux", "-o", name,
                                  exe], env=env, cwd=here, stdin=stdin, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, umask=0o077)
            out, err = p.communicate(timeout=GUARD)
        assert p.returncode == 0, err
        assert WARM_LINE in err, err
    # -o's files: named relative to the caller's directory, created under its umask
    assert (here / "out.cat").read_text() == "from the caller's stdin\n"
    assert "WARM_MARK=xyzzy\n" in (here / "out.env").read_text()
    assert "WARM_SERVER_ONLY=" not in (here / "out.env").read_text(), "a variable the caller lacks is gone"
    for f in ("out.cat", "out.env"):
        assert (here / f).stat().st_mode & 0o777 == 0o600, oct((here / f).stat().st_mode)


def running_job_pid(m: Machine) -> int:
    rows = m.rows("SELECT client_pid FROM jobs WHERE state = 'Running' ORDER BY id DESC LIMIT 1")
    assert rows
    return int(rows[0][0])


def start_sleeper(m: Machine) -> tuple[subprocess.Popen[str], int]:
    """A warm `lattice run` of a sleeping rank, once Running: (client, the command's pid).
    It sleeps an hour: the test ends it, however long a loaded host takes to get there."""
    p = subprocess.Popen([*LATTICE, "run", "--block", "W", "-n", "1", "/bin/sleep", "3600"], env=m.env,
                         stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    found: list[int] = []

    def running() -> bool:
        try:
            found.append(running_job_pid(m))
            return True
        except (AssertionError, *db_errors()):
            return False
    wait_for(running, GUARD)
    assert found[-1] == p.pid
    child = server_child_for(m, p.pid)
    assert child is not None, "not served warm"
    return p, child


def test_signals_reach_the_command_and_a_killed_client_takes_it_along(wm: Machine) -> None:
    p, cmd = start_sleeper(wm)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=GUARD)
    assert p.returncode == 130, (p.returncode, err)
    wait_for(lambda: not Path(f"/proc/{cmd}").exists(), GUARD)
    p, cmd = start_sleeper(wm)
    p.kill()
    p.wait()
    wait_for(lambda: not Path(f"/proc/{cmd}").exists(), GUARD)  # gone with its client
    wm.run("blocks")        # a command's sweep ends the record of a run that is gone
    state, message = wm.rows("SELECT state, message FROM jobs ORDER BY id DESC LIMIT 1")[0]
    assert state == "Error" and f"its lattice run (pid {p.pid}) ended without finishing" in message, message
    # the block is usable again at once
    assert run(wm, "run", "--block", "W", "-n", "1", "/bin/true")[0].returncode == 0


@pytest.mark.parametrize("prefix", [("nice", "-n", "3"), ("setpriv", "--no-new-privs"), ("taskset", "-c", "0"),
                                    ("setpriv", "--bounding-set", "-all"), ("unshare", "--net")],
                         ids=["nice", "no-new-privs", "cpus", "fewer-capabilities", "other-net-namespace"])
def test_a_caller_unlike_the_server_runs_the_command_itself(wm: Machine, prefix: tuple[str, ...]) -> None:
    if prefix[0] == "taskset" and os.cpu_count() == 1:
        pytest.skip("one CPU: taskset -c 0 changes nothing")
    p, client = run(wm, "run", "-v", "--block", "W", "-n", "1", "/bin/true", prefix=prefix)
    assert p.returncode == 0, p.stderr
    assert WARM_LINE not in p.stderr, p.stderr
    p, client = run(wm, "run", "-v", "--block", "W", "-n", "1", "/bin/true")
    assert WARM_LINE in p.stderr, p.stderr        # the server is still there for the others


def test_garbage_on_the_socket_is_refused_and_the_server_goes_on(wm: Machine) -> None:
    path = str(wm.home / "warm.sock")
    for junk in (b"", b"\0" * 8, (1 << 40).to_bytes(8, "big"), (20).to_bytes(8, "big") + b"NOTWARM\0" * 3):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        s.settimeout(GUARD)
        s.sendall(junk)
        s.shutdown(socket.SHUT_WR)
        assert s.recv(16) == b"R", junk
        s.close()
    p, client = run(wm, "blocks")
    assert p.returncode == 0 and "W " in p.stdout


def test_another_user_cannot_reach_the_socket(wm: Machine) -> None:
    sock = wm.home / "warm.sock"
    assert sock.stat().st_mode & 0o777 == 0o600
    code = (f"import socket,sys\ns=socket.socket(socket.AF_UNIX)\n"
            f"try:\n s.connect({str(sock)!r})\nexcept PermissionError:\n sys.exit(3)\n")
    p = subprocess.run(["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "/usr/bin/python3", "-c", code],
                       capture_output=True, text=True)
    assert p.returncode == 3, (p.returncode, p.stderr)


def test_the_server_leaves_when_its_home_goes(built: Path, tmp_path: Path) -> None:
    m = make_machine(tmp_path)
    m.run("blocks")
    wait_for(lambda: server_pid(m) is not None, GUARD)
    pid = server_pid(m)
    assert pid is not None
    shutil.rmtree(m.home)
    wait_for(lambda: not Path(f"/proc/{pid}").exists() or b"lattice.cli.warm" not in
             Path(f"/proc/{pid}/cmdline").read_bytes(), GUARD)


def test_warm_off_runs_every_command_itself(built: Path, tmp_path: Path) -> None:
    m = make_machine(tmp_path)
    m.env["LATTICE_WARM"] = "0"
    for _ in range(2):
        m.run("blocks")
    time.sleep(0.5)
    assert server_pid(m) is None and not (m.home / "warm.sock").exists()
