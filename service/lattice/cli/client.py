"""The `lattice` command's first step: hand the command to the machine's
warm server (lattice.cli.warm) if one runs, else run it here and start one.

Run here, a command pays for Python's imports first: ~40 ms, a third of a
small `lattice run`.  The warm server has them done and forks a copy of
itself for each command, which runs lattice.cli with this process's
arguments, environment, working directory, umask, limits and standard
streams (passed as file descriptors).  Meanwhile this process waits:
it passes on the signals it gets, leaves with the command's exit status
(or dies of the command's signal), and if it is killed the command is
killed too.  The server serves only a process of its own user with its
very credentials, namespaces, cgroup, CPUs and nice value; any other is
told no and runs the command here.  LATTICE_WARM=0 turns it off.

Before anything, the home is checked as ssh checks ~/.ssh: a LATTICE_HOME
that is not the caller's, or that others may write in (it or a directory
on the way to it), is refused with one line and exit status 1, since its
warm.sock, database and keys would be another user's to plant.  And the
warm server's credentials are checked before a byte goes to it: a server
whose SO_PEERCRED uid is not the caller's is refused the same way (it can
only be there if the home was planted), nothing sent.

Only modules built into the interpreter are imported here, and
lattice.safepath (which imports only such modules).
"""
import os
import sys

import _signal  # type: ignore[import-not-found]  # no stubs: signal itself would import enum
import _socket

SOCKET = "warm.sock"            # in LATTICE_HOME
SUN_PATH = 107                  # the longest path a unix socket's address holds
HELLO = b"LWARM1"
REFUSED = b"R"                  # the server's answers: R, or E<exit status>, or S<signal> ending in \n
FORWARD = (_signal.SIGINT, _signal.SIGTERM, _signal.SIGHUP, _signal.SIGQUIT, _signal.SIGUSR1, _signal.SIGUSR2)
LIMITS = 16                     # RLIMIT_CPU .. RLIMIT_RTTIME


def home() -> str:
    """LATTICE_HOME as lattice.state.machine.home() names it."""
    return os.path.abspath(os.environ.get("LATTICE_HOME") or os.path.join(os.path.expanduser("~"), ".lattice"))


def enabled() -> bool:
    return os.environ.get("LATTICE_WARM", "1") != "0"


def request(argv: list[str]) -> bytes:
    """The command as the server reads it: NUL-separated fields."""
    import resource     # a small extension module, not imported by the interpreter itself
    mask = os.umask(0)
    os.umask(mask)
    limits = ["%d,%d" % resource.getrlimit(r) for r in range(LIMITS)]
    env = [k + b"=" + v for k, v in os.environb.items()]
    fields = [HELLO, b"%d" % mask, b"%d" % len(limits), *(x.encode() for x in limits),
              b"%d" % len(argv), *(os.fsencode(a) for a in argv), *env]
    return b"\0".join(fields)


NONE = -1                       # warm(): no server to run the command
NO = -2                         # warm(): a server that will not run it (or cannot be given it)


def warm(argv: list[str]) -> int:
    """The command's exit status, run by the warm server; NONE or NO when the
    command is to run here."""
    path = os.path.join(home(), SOCKET)
    if len(os.fsencode(path)) > SUN_PATH:
        return NO               # no server can listen there: none is started either
    try:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM | _socket.SOCK_CLOEXEC)
        sock.connect(path)
        cred = sock.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)     # pid, uid, gid
    except OSError:
        return NONE
    uid = int.from_bytes(cred[4:8], sys.byteorder)
    if uid != os.geteuid():     # not one's own server: it gets nothing of this command
        sock.close()
        os.write(2, f"lattice: error: refusing the warm server at {path}: it runs as uid {uid}, not as you "
                    f"(uid {os.geteuid()}); nothing was sent to it (remove {path})\n".encode(errors="replace"))
        return 1
    try:
        cwd = os.open(".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        sock.close()
        return NO
    try:
        data = request(argv)
        fds = b"".join(fd.to_bytes(4, sys.byteorder) for fd in (0, 1, 2, cwd))
        head = len(data).to_bytes(8, "big")
        sent = sock.sendmsg([head + data], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, fds)])
        if sent < len(head) + len(data):
            sock.sendall((head + data)[sent:])
    except OSError:             # a closed standard stream, a server gone: run it here
        sock.close()
        return NO
    finally:
        os.close(cwd)
    for s in FORWARD:
        _signal.signal(s, lambda signum, _frame: forward(sock, signum))
    answer = b""
    while not answer.endswith(b"\n") and answer != REFUSED:
        try:
            got = sock.recv(64)
        except OSError:
            got = b""
        if not got:
            break
        answer += got
    for s in FORWARD:
        _signal.signal(s, _signal.default_int_handler if s == _signal.SIGINT else _signal.SIG_DFL)
    sock.close()
    if b"\n" in answer:         # the command's own answer first; the server's may have come with it
        answer = answer[:answer.index(b"\n") + 1]
    if answer == REFUSED:
        return NO
    if answer[:1] == b"S" and answer[1:-1].isdigit():
        sig = int(answer[1:-1])
        try:                    # die of it, as the command did
            _signal.signal(sig, _signal.SIG_DFL)
            os.kill(os.getpid(), sig)
        except (OSError, ValueError):
            pass                # SIGKILL, SIGSTOP: no handler to reset; said and returned instead
        os.write(2, b"lattice: error: the command was killed by signal %d\n" % sig)
        return 128 + sig
    if answer[:1] == b"E" and answer[1:-1].lstrip(b"-").isdigit():
        return int(answer[1:-1]) & 0xff
    os.write(2, b"lattice: error: the warm server ended during the command; its outcome is unknown\n")
    return 1


def forward(sock: "_socket.socket", signum: int) -> None:
    try:
        sock.send(bytes([signum]))
    except OSError:
        pass


def home_refused() -> bool:
    """Say why the home is refused, if it is (see the module's doc)."""
    from lattice import errors, safepath
    try:
        safepath.owned(home(), what="LATTICE_HOME")
    except errors.LatticeError as e:
        os.write(2, f"lattice: error: {e.message}\n".encode(errors="replace"))
        return True
    except OSError:
        pass                    # unreadable on the way: the command says so as it always did
    return False


def entry() -> None:
    """The `lattice` command."""
    if home_refused():
        os._exit(1)
    status = warm(sys.argv[1:]) if enabled() else NO
    if status >= 0:
        os._exit(status)
    if sys.flags.no_site:       # the launcher scripts/setup.sh writes: the venv's packages (tomli_w)
        import site
        site.main()
    from lattice.cli import main as cli
    from lattice.cli import warm as server
    if status == NONE:
        server.start(home())
    cli.entry()
