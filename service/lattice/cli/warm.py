"""The warm server: `lattice` commands without Python's start-up.

One per LATTICE_HOME, started in the background by the first command run
without one (lattice.cli.client), listening on LATTICE_HOME/warm.sock (0600).
It imports every module of lattice once; for each command it forks a copy
of itself, which takes on the client's standard streams, working directory,
umask, limits and environment and runs lattice.cli as a fresh process
would (each command is a process of its own, forked from a server that
never opened the database: no state is shared between commands).  The
server reaps it and sends the client its exit status.  A client that dies
takes its command with it (the command's watcher thread sees the
connection close and kills the command, as if it had been killed itself).

Who is served: a peer (SO_PEERCRED) of the server's own uid and gid whose
/proc status shows the same groups, capabilities, no_new_privs and seccomp
mode, CPUs and memory nodes, in the same namespaces and cgroup, with the
same nice value: a command run by the server can do nothing the client
could not do itself.  Anyone else is answered "R" and runs the command in
its own process.

It leaves when idle for WARM_IDLE seconds (default 600), when its socket
is removed or replaced (LATTICE_HOME deleted, another server), or when
lattice's code changed under it (it would run old code).
"""
from __future__ import annotations

import io
import os
import resource
import selectors
import signal
import socket
import struct
import sys
import threading
import time
from pathlib import Path

from lattice import procs
from lattice.cli.client import FORWARD, HELLO, LIMITS, REFUSED, SOCKET

IDLE = 600.0
TICK = 5.0
FAILED = "warm.failed"          # in LATTICE_HOME: why the last server could not start
RETRY = 60.0                    # seconds before a command tries to start one again
MAX_REQUEST = 8 << 20           # arguments and environment: ARG_MAX is 2 MiB here
MAX_PENDING = 64                # clients whose request is still arriving
NAMESPACES = ("cgroup", "ipc", "mnt", "net", "pid", "user", "uts")
CREDENTIALS = ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs",
               "Seccomp", "Cpus_allowed_list", "Mems_allowed_list")
PACKAGE = Path(__file__).resolve().parents[1]     # service/lattice


class Request:
    def __init__(self, data: bytes, fds: list[int]) -> None:
        fields = data.split(b"\0")
        if fields[0] != HELLO or len(fds) != 4:
            raise ValueError("not a warm request")
        self.umask = int(fields[1])
        n = int(fields[2])
        if n != LIMITS:
            raise ValueError("limits")
        self.limits = [tuple(int(x) for x in f.split(b",")) for f in fields[3:3 + n]]
        argc = int(fields[3 + n])
        rest = fields[4 + n:]
        self.argv = [os.fsdecode(a) for a in rest[:argc]]
        self.env = {}
        for kv in rest[argc:]:
            k, sep, v = kv.partition(b"=")
            if sep:
                self.env[os.fsdecode(k)] = os.fsdecode(v)
        self.fds = fds


def start(home: str) -> None:
    """Start this home's server in the background (a session of its own, no
    terminal, standard streams on /dev/null), unless the home does not exist
    yet.  Called by a command that found none; costs it one posix_spawn."""
    if not os.path.isdir(home):
        return
    try:
        if time.time() - os.stat(os.path.join(home, FAILED)).st_mtime < RETRY:
            return              # the last one failed a moment ago: not one more per command
    except OSError:
        pass
    try:
        null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.posix_spawn(sys.executable, [sys.executable, "-m", "lattice.cli.warm", home], dict(os.environ),
                       file_actions=[(os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, null, 1),
                                     (os.POSIX_SPAWN_DUP2, null, 2)], setsid=True)
    except OSError:
        pass
    finally:
        os.close(null)


def code_stamp() -> tuple[int, int]:
    """What changes when lattice's code does: its files' count and newest mtime."""
    files = list(PACKAGE.rglob("*.py"))
    return len(files), max(f.stat().st_mtime_ns for f in files)


def preload() -> None:
    """Every module a command may import, imported once here."""
    import importlib
    from lattice.cli import main as cli
    cli.PARSER = cli.parser()   # every command's module and what it imports; argparse's set-up done once
    for f in sorted(PACKAGE.rglob("*.py")):
        name = ".".join(("lattice", *f.relative_to(PACKAGE).with_suffix("").parts))
        if name.endswith(".__init__"):
            name = name.removesuffix(".__init__")
        # not the console's web stack: `lattice serve` is one long process, the rest never need it
        if f.stem not in ("__main__", "client", "warm") and "cmd" not in f.parts[-2:-1] and "web" not in f.parts \
                and (name != "lattice.state.postgres" or on_postgres()):
            importlib.import_module(name)


def on_postgres() -> bool:
    """Whether this machine keeps its state in PostgreSQL: only then is psycopg
    (and libpq, 16 MB) worth holding, since every command's fork copies the
    server's page tables."""
    from lattice.state import db
    try:
        return db.database() != "sqlite"
    except Exception:           # no machine yet, or a damaged one: the command will say
        return False


def identity(pid: int | str) -> tuple[object, ...]:
    """What a process may do, as far as serving it goes (see the module's doc)."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    creds = tuple(line for line in status if line.split(":", 1)[0] in CREDENTIALS)
    ns = tuple(os.readlink(f"/proc/{pid}/ns/{n}") for n in NAMESPACES)
    cgroup = Path(f"/proc/{pid}/cgroup").read_text()
    nice = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[16]
    return creds, ns, cgroup, nice


class Pending:
    """A client's request as it arrives: an 8-byte size, then the body; the
    client's descriptors come with the first bytes."""

    def __init__(self, conn: socket.socket, pid: int) -> None:
        self.conn, self.pid = conn, pid
        self.data = bytearray()
        self.fds: list[int] = []

    def take(self) -> bool:
        """Read what has come; True once the whole request is here."""
        if not self.data and not self.fds:
            data, fds, _, _ = socket.recv_fds(self.conn, 65536, 4)
            self.fds = list(fds)
        else:
            data = self.conn.recv(1 << 20)
        if not data:
            raise ValueError("short request")
        self.data += data
        if len(self.data) < 8:
            return False
        size = int.from_bytes(self.data[:8], "big")
        if size > MAX_REQUEST or len(self.data) > 8 + size:
            raise ValueError("bad request size")
        return len(self.data) == 8 + size

    def body(self) -> bytes:
        return bytes(self.data[8:])


class Server:
    def __init__(self, home: str) -> None:
        self.path = os.path.join(home, SOCKET)
        self.sel = selectors.DefaultSelector()
        self.children: dict[int, tuple[int, socket.socket]] = {}     # pidfd -> (pid, client)
        self.pending: dict[int, Pending] = {}                         # fd -> a request still arriving
        self.me = identity("self")
        self.stamp = code_stamp()
        self.listener: socket.socket | None = None
        self.ino = 0

    def listen(self) -> bool:
        """Take the socket path (atomically: bind elsewhere, rename); False
        if a live server has it already."""
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(self.path)
            return False
        except OSError:
            pass
        finally:
            probe.close()
        tmp = f"{self.path}.{os.getpid()}"
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            s.bind(tmp)
        finally:
            os.umask(old)
        s.listen(64)
        os.rename(tmp, self.path)
        self.ino = os.stat(self.path).st_ino
        self.listener = s
        self.sel.register(s, selectors.EVENT_READ, None)
        return True

    def still_mine(self) -> bool:
        try:
            return os.stat(self.path).st_ino == self.ino
        except OSError:
            return False

    def stop_listening(self) -> None:
        if self.listener is None:
            return
        if self.still_mine():
            os.unlink(self.path)
        self.sel.unregister(self.listener)
        self.listener.close()
        self.listener = None

    def serve(self) -> None:
        last = time.monotonic()
        while self.listener is not None or self.children or self.pending:
            for key, _ in self.sel.select(TICK):
                if key.data is None:
                    last = time.monotonic()
                    self.accept()
                elif isinstance(key.data, Pending):
                    self.read_request(key.data)
                else:
                    self.reap(key.fd)
            if self.listener is None:
                continue
            if not self.still_mine() or (time.monotonic() - last > IDLE and not self.children):
                self.stop_listening()

    def accept(self) -> None:
        """A client's connection: its credentials now, its request as it
        arrives (read_request), so a client slowed by a loaded host is waited
        for as long as it takes and stalls no other."""
        assert self.listener is not None
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        try:
            pid, uid, gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                                 struct.calcsize("3i")))
        except OSError:
            conn.close()
            return
        if uid != os.getuid() or gid != os.getgid():
            self.refuse(conn, [])
            return
        if len(self.pending) >= MAX_PENDING:     # the oldest silent one makes room: a client's own loss
            oldest = next(iter(self.pending.values()))
            self.drop(oldest)
            self.refuse(oldest.conn, oldest.fds)
        conn.setblocking(False)
        waiting = Pending(conn, pid)
        self.pending[conn.fileno()] = waiting
        self.sel.register(conn, selectors.EVENT_READ, waiting)

    def read_request(self, p: Pending) -> None:
        try:
            done = p.take()
        except (OSError, ValueError):
            self.drop(p)
            self.refuse(p.conn, p.fds)
            return
        if not done:
            return
        self.drop(p)
        conn, fds = p.conn, p.fds
        try:
            conn.setblocking(True)
            req = Request(p.body(), fds)
            if code_stamp() != self.stamp:
                self.stop_listening()   # old code: this client runs it itself, the next starts a new server
                raise PermissionError("stale")
            if identity(p.pid) != self.me:
                raise PermissionError("not served")
            client = procs.start_time(p.pid)
            if client is None:
                raise ProcessLookupError("client gone")
        except (OSError, ValueError, IndexError):
            self.refuse(conn, fds)
            return
        child = os.fork()
        if child == 0:
            procs.run_for(p.pid, client)
            self.become(conn, req)
        for fd in fds:
            os.close(fd)
        pidfd = os.pidfd_open(child)
        self.children[pidfd] = (child, conn)
        self.sel.register(pidfd, selectors.EVENT_READ, child)

    def drop(self, p: Pending) -> None:
        self.pending.pop(p.conn.fileno(), None)
        try:
            self.sel.unregister(p.conn)
        except (KeyError, ValueError):
            pass

    @staticmethod
    def refuse(conn: socket.socket, fds: list[int]) -> None:
        for fd in fds:
            os.close(fd)
        try:
            conn.setblocking(True)
            conn.sendall(REFUSED)
        except OSError:
            pass
        conn.close()

    def reap(self, pidfd: int) -> None:
        pid, conn = self.children.pop(pidfd)
        self.sel.unregister(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        answer = (b"S%d\n" % os.WTERMSIG(status) if os.WIFSIGNALED(status) else
                  b"E%d\n" % os.waitstatus_to_exitcode(status))
        try:
            conn.sendall(answer)
        except OSError:
            pass                # the client is gone
        conn.close()

    def become(self, conn: socket.socket, req: Request) -> None:
        """In the forked child: be the client's command, then exit."""
        try:
            if self.listener is not None:
                self.listener.close()
            for fd, (_, other) in self.children.items():
                os.close(fd)
                other.close()
            for waiting in self.pending.values():
                waiting.conn.close()
                for fd in waiting.fds:
                    os.close(fd)
            self.sel.close()
            try:
                for r, (soft, hard) in enumerate(req.limits):
                    resource.setrlimit(r, (soft, hard))
            except (OSError, ValueError):
                conn.sendall(REFUSED)   # limits this process cannot take: the client runs it itself
                os._exit(0)
            for target, fd in enumerate(req.fds[:3]):
                os.dup2(fd, target)
            os.fchdir(req.fds[3])
            for fd in req.fds:
                if fd > 2:
                    os.close(fd)
            os.umask(req.umask)
            for k in [k for k in os.environ if k not in req.env]:
                del os.environ[k]   # (not clear() and update(): each unsetenv scans environ, ~1 ms in all)
            for k, v in req.env.items():
                if os.environ.get(k) != v:
                    os.environ[k] = v
            sys.argv = ["lattice", *req.argv]
            standard_streams(bool(req.env.get("PYTHONUNBUFFERED")))
            conn.settimeout(None)
            main = threading.main_thread().ident
            assert main is not None
            threading.Thread(target=watch, args=(conn, main), daemon=True).start()
        except BaseException:
            os._exit(70)
        from lattice.cli import main as cli
        cli.entry(lambda status: tell(conn, status))
        os._exit(70)


def tell(conn: socket.socket, status: int) -> None:
    """The command's exit status to its client, from the command itself: a
    server killed meanwhile cannot say it (the client would not know the
    outcome).  The server's own answer, after the reap, then finds the
    client gone; the client takes the first."""
    try:
        conn.sendall(b"E%d\n" % status)
    except OSError:
        pass


def standard_streams(unbuffered: bool) -> None:
    """sys.stdin/stdout/stderr over the new fds 0-2, buffered as Python
    buffers them at start (stdout by lines on a terminal, stderr by lines)."""
    def text(fd: int, mode: str) -> io.TextIOWrapper:
        raw = io.FileIO(fd, mode, closefd=False)
        tty = raw.isatty()
        old = (sys.__stdin__, sys.__stdout__, sys.__stderr__)[fd]
        enc, errors = (old.encoding, old.errors) if old is not None else ("utf-8", "strict")
        if mode == "r":
            return io.TextIOWrapper(io.BufferedReader(raw), encoding=enc, errors=errors)
        buf: io.RawIOBase | io.BufferedWriter = raw if unbuffered else io.BufferedWriter(raw)
        return io.TextIOWrapper(buf, encoding=enc, errors=errors, newline="\n",  # type: ignore[arg-type]
                                line_buffering=tty or fd == 2, write_through=unbuffered)
    sys.stdin = sys.__stdin__ = text(0, "r")     # type: ignore[misc]
    sys.stdout = sys.__stdout__ = text(1, "w")   # type: ignore[misc]
    sys.stderr = sys.__stderr__ = text(2, "w")   # type: ignore[misc]


def watch(conn: socket.socket, main: int) -> None:
    """The client's signals, passed on to the command (to its main thread,
    where Python runs handlers); the client gone: the command goes too."""
    while True:
        try:
            got = conn.recv(64)
        except OSError:
            got = b""
        if not got:
            os.kill(os.getpid(), signal.SIGKILL)
        for sig in got:
            if sig in FORWARD:
                signal.pthread_kill(main, sig)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m lattice.cli.warm LATTICE_HOME", file=sys.stderr)
        return 2
    global IDLE
    IDLE = float(os.environ.get("LATTICE_WARM_IDLE", IDLE))
    os.closerange(3, 1 << 16)   # whatever the first command's caller left open: not the server's to hold
    try:
        preload()
        server = Server(argv[0])
        if not server.listen():
            return 0
    except Exception as e:      # commands run in their own processes; say why in the home
        try:
            fd = os.open(os.path.join(argv[0], FAILED), os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            os.write(fd, f"lattice.cli.warm could not start: {type(e).__name__}: {e}\n".encode())
            os.close(fd)
        except OSError:
            pass
        return 1
    try:
        os.unlink(os.path.join(argv[0], FAILED))
    except OSError:
        pass
    server.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
