"""A real PostgreSQL server for the tests: Debian's initdb and postgres run
in a temporary directory as an unprivileged user (postgres refuses root;
as root, a system user made for the session, not `nobody`: the server's
processes would count against the RLIMIT_NPROC of jobs run as nobody),
listening on a unix socket in that directory only (no TCP port to clash
with anything), one server per test session, a fresh database per test.

The server trusts local connections (it is reachable only through a socket
in a directory the tests made) and runs without fsync: a crash of the host
loses nothing the tests need.
"""
from __future__ import annotations

import itertools
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

SUPERUSER = "lattice"

# The session's server, once a test needed one (tests/conftest.py): kept here,
# not in conftest, which a test may import a second time as tests.conftest
SESSION: list[Server] = []


def binaries() -> Path:
    """The newest installed PostgreSQL's bin directory (Debian's layout)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/postgres"),
                   key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0)
    if not found:
        raise RuntimeError("no PostgreSQL server in /usr/lib/postgresql: scripts/setup.sh installs Debian's "
                           "postgresql package")
    return found[-1].parent


def die_with_parent() -> None:
    """In the server's process before it execs (after its change of user,
    which would clear it): SIGQUIT, postgres's immediate shutdown, when the
    test process that started it ends, however it ends; no server outlives it."""
    import ctypes
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGQUIT)


class Server:
    """One postgres process and its directory; start() waits until it accepts connections."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="lattice-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "postgres.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.names = itertools.count(1)
        self.user: dict[str, int] = {}
        if os.geteuid() == 0:
            # Debian's own server user (package postgresql): not `nobody`, whose process count
            # the capacity tests limit, nor a user the tests run jobs as
            owner = pwd.getpwnam("postgres")
            self.user = {"user": owner.pw_uid, "group": owner.pw_gid}
            os.chown(self.dir, owner.pw_uid, owner.pw_gid)
        os.chmod(self.dir, 0o755)        # the socket: reachable by the test users lattice runs as

    def start(self) -> None:
        bin_dir = binaries()
        env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C", "HOME": str(self.dir)}
        subprocess.run([str(bin_dir / "initdb"), "-D", str(self.data), "-U", SUPERUSER, "--auth=trust",
                        "-E", "UTF8", "--no-locale", "--no-sync"], env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **self.user)  # type: ignore[call-overload]
        log = open(self.log, "wb")
        if self.user:
            os.fchown(log.fileno(), self.user["user"], self.user["group"])
        self.proc = subprocess.Popen(
            [str(bin_dir / "postgres"), "-D", str(self.data), "-k", str(self.dir), "-c", "listen_addresses=",
             "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
             "-c", "max_connections=200", "-c", "shared_buffers=16MB"],
            env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, preexec_fn=die_with_parent, **self.user)  # type: ignore[call-overload]
        log.close()
        self.wait_ready()

    def wait_ready(self, timeout: float = 120) -> None:
        """Until the server says it is ready (its log line); a hang guard, not a delay."""
        end = time.monotonic() + timeout
        assert self.proc is not None
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited {self.proc.returncode}:\n{self.log.read_text()}")
            if "ready to accept connections" in self.log.read_text(errors="replace"):
                return
            time.sleep(0.05)
        raise RuntimeError(f"postgres not ready after {timeout} s:\n{self.log.read_text()}")

    def url(self, dbname: str) -> str:
        return f"postgresql://{SUPERUSER}@/{dbname}?host={self.dir}"

    def create_database(self) -> str:
        """A new empty database: its URL."""
        import psycopg
        name = f"test{next(self.names)}"
        with psycopg.connect(self.url("postgres"), autocommit=True) as con:
            con.execute(f"CREATE DATABASE {name}")
        return self.url(name)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGQUIT)      # immediate shutdown: nothing to keep
            try:
                self.proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
