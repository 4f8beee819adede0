"""Unit tests of ciod, the I/O node daemon, speaking its wire protocol from Python.

Each test starts a real ciod (pset 1 of size 2, so its compute nodes are
R00-M0-N00-C:J02 and -C:J03) on a unix socket in a private directory and
plays the service node, the compute nodes and the compute processes.
Set CIOD_BIN to test another build (e.g. one with -fsanitize=address).
"""
from __future__ import annotations

import errno
import os
import random
import re
import shutil
import socket
import stat
import struct
import subprocess
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Iterator

import pytest

from lattice.transport import wire

ROOT = Path(__file__).resolve().parents[2]
MAGIC, VERSION, REPLY = wire.MAGIC, wire.VERSION, wire.REPLY
MAX_IO = 1 << 20
MAX_PAYLOAD = MAX_IO + 8192
HDR = wire.HDR                  # magic, version, flags, type, len, seq

HELLO, CHALLENGE, ERROR = 0x0001, 0x0005, 0x00FF
CTL_STATUS, CTL_JOB, CTL_KILL, CTL_SHUTDOWN, CTL_COUNTERS = 0x0100, 0x0101, 0x0102, 0x0103, 0x0104
CTL_OUTPUT, CTL_EXIT, CTL_JOB_END = 0x0180, 0x0181, 0x0182
NODE_JOB, NODE_IMAGE, NODE_START, NODE_KILL, NODE_SHUTDOWN = 0x0200, 0x0201, 0x0202, 0x0203, 0x0204
NODE_OUTPUT, NODE_EXIT = 0x0280, 0x0281
SYS = dict(openat=0x300, close=0x301, read=0x302, write=0x303, pread=0x304, pwrite=0x305,
           lseek=0x306, fstatat=0x307, statx=0x308, faccessat=0x309, unlinkat=0x30A,
           renameat=0x30B, mkdirat=0x30C, getdents64=0x30D, readlinkat=0x30E, truncate=0x30F,
           ftruncate=0x310, fsync=0x311, fdatasync=0x312, dup=0x313, fcntl=0x314, chdir=0x315,
           fchdir=0x316, getcwd=0x317, umask=0x318, fchmodat=0x319, fchmod=0x31A,
           utimensat=0x31B, statfs=0x31C, fstatfs=0x31D, openat_stat=0x332)
SYS_NAMES = {v: k for k, v in SYS.items()}
NSYS = 0x31E - 0x300
ROLE_CONTROL, ROLE_NODE, ROLE_PROC = 1, 2, 3
EXIT_CODE, EXIT_SIGNAL, EXIT_LAUNCH, EXIT_LOST = 1, 2, 3, 4
AT_FDCWD = -100
AT_EMPTY_PATH, AT_REMOVEDIR = 0x1000, 0x200
O_RDONLY, O_WRONLY, O_RDWR, O_CREAT, O_EXCL, O_TRUNC, O_DIRECTORY = 0, 1, 2, 0o100, 0o200, 0o1000, 0o200000
F_GETFL, F_SETFL, F_DUPFD = 3, 4, 0
PSET, PSET_SIZE = 1, 2
IO_LOCATION = "R00-M0-N00-I:J01"
STAT = struct.Struct("<QQQIIIIQqqqqqqqqq")  # struct lat_stat
assert STAT.size == 120


# ---- building and running ciod ----

@pytest.fixture(scope="session")
def ciod_bin() -> Path:
    if os.environ.get("CIOD_BIN"):
        return Path(os.environ["CIOD_BIN"])
    if (ROOT / "Makefile").exists():
        subprocess.run(["make", "-s", "-C", str(ROOT), "ciod"], check=True)
    else:
        (ROOT / "build/bin").mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, PYTHONPATH=str(ROOT / "protocol"))
        subprocess.run(["python3", "-m", "pluggen", "--wire", "protocol/lattice/fwd_posix.h", "--out",
                        "build/gen"], check=True, cwd=ROOT, env=env)
        subprocess.run(["gcc", "-std=c11", "-D_GNU_SOURCE", "-O2", "-g", "-Wall", "-Wextra",
                        "-Wimplicit-fallthrough", "-Iprotocol", "-Iionode/ciod", "-Ibuild/gen", "-pthread",
                        "-o", "build/bin/ciod", "build/gen/fwd_posix_ciod.c",
                        *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "ionode/ciod").glob("*.c")),
                        "protocol/peer/peer.c", "protocol/peer/seal.c", "-lcrypto"],
                       check=True, cwd=ROOT)
    return ROOT / "build/bin/ciod"


class Ciod:
    def __init__(self, binary: Path, d: Path, tcp_port: int = 0, pset: int = PSET) -> None:
        self.dir = d
        self.pset = pset
        self.key = bytes(random.Random(7).getrandbits(8) for _ in range(32))
        keyfile = d / "key"
        keyfile.write_text(self.key.hex() + "\n")
        keyfile.chmod(0o600)
        self.sock = d / "ciod.sock"
        self.addr = f"tcp:127.0.0.1:{tcp_port}" if tcp_port else f"unix:{self.sock}"
        self.tcp_port = tcp_port
        self.ras = d / "ras.log"
        self.log = open(d / "ciod.log", "w")
        self.exited_ok = False
        self.proc = subprocess.Popen(
            [str(binary), "--block", "T", "--pset", str(pset), "--pset-size", str(PSET_SIZE),
             "--listen", self.addr, "--key-file", str(keyfile), "--ras", str(self.ras),
             "--location", IO_LOCATION], stdout=self.log, stderr=subprocess.STDOUT)
        end = time.time() + 600         # a hang guard: listening is the event
        while not self.listening():
            assert self.proc.poll() is None, self.logtext()
            assert time.time() < end, "ciod did not listen"
            time.sleep(0.02)

    def listening(self) -> bool:
        # a Unix socket's file exists from bind(), before listen(): connect to know
        if not self.tcp_port and not self.sock.exists():
            return False
        try:
            self.raw().close()
            return True
        except OSError:
            return False

    def logtext(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return (self.dir / "ciod.log").read_text()

    def rastext(self) -> str:
        return self.ras.read_text() if self.ras.exists() else ""

    def raw(self) -> socket.socket:
        """A connection, its challenge taken (CHALLENGES[s])."""
        if self.tcp_port:
            s = socket.create_connection(("127.0.0.1", self.tcp_port), timeout=600)    # hang guards
        else:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(600)
            s.connect(str(self.sock))
        typ, seq, body = recv(s)
        assert (typ, seq, len(body)) == (CHALLENGE, 0, 32)
        CHALLENGES[s] = body
        return s

    def hello(self, role: int, node: int = 0, job: int = 0, key: bytes | None = None,
              proc: bytes = b"", s: socket.socket | None = None) -> tuple[socket.socket, int]:
        """The handshake (a hello MACed with key, ours by default); an ack
        that accepts us must prove ciod holds our key."""
        s = s or self.raw()
        hello, nonce = wire.hello_payload(self.key if key is None else key, CHALLENGES[s], role, node, job, proc)
        send(s, HELLO, hello, 1)
        typ, seq, body = recv(s)
        assert (typ, seq) == (HELLO | REPLY, 1) and len(body) in (48, 64)
        err, max_io, pset, pset_size = struct.unpack_from("<iIII", body)
        assert (max_io, pset, pset_size) == (MAX_IO, self.pset, PSET_SIZE)
        if err == 0:
            assert wire.ack_ok(self.key, CHALLENGES[s], nonce, body), "ciod's proof is wrong"
            if s.family != socket.AF_UNIX:      # between hosts: sealed from now on (protocol.md 3.3)
                SEALERS[s] = wire.Sealer(*wire.seal_keys(self.key, CHALLENGES[s], nonce, role, node, job))
        ACKS[s] = body
        return s, err

    def connect(self, role: int, node: int = 0, job: int = 0) -> socket.socket:
        s, err = self.hello(role, node, job)
        deadline = time.monotonic() + 600       # a hang guard
        while role == ROLE_PROC and err == errno.EBUSY and time.monotonic() < deadline:
            s.close()                   # its last connection is still closing in the worker
            time.sleep(0.02)
            s, err = self.hello(role, node, job)
        assert err == 0, os.strerror(err)
        return s

    def alive(self) -> bool:
        return self.proc.poll() is None


@pytest.fixture
def ciod(ciod_bin: Path) -> Iterator[Ciod]:
    d = Path(tempfile.mkdtemp(prefix="ciod-", dir="/tmp"))
    os.chmod(d, 0o755)
    c = Ciod(ciod_bin, d)
    try:
        yield c
    finally:
        alive = c.alive() or c.exited_ok
        if c.alive():
            c.proc.terminate()
        c.proc.wait(10)
        c.log.close()
        text = c.logtext()
        shutil.rmtree(d, ignore_errors=True)
    assert alive, f"ciod died:\n{text}"
    for bad in ("AddressSanitizer", "runtime error", "ThreadSanitizer", "LeakSanitizer"):
        assert bad not in text, text


# ---- wire helpers ----

CHALLENGES: "weakref.WeakKeyDictionary[socket.socket, bytes]" = weakref.WeakKeyDictionary()
ACKS: "weakref.WeakKeyDictionary[socket.socket, bytes]" = weakref.WeakKeyDictionary()
LAST_SEQ: "weakref.WeakKeyDictionary[socket.socket, int]" = weakref.WeakKeyDictionary()
SEALERS: "weakref.WeakKeyDictionary[socket.socket, wire.Sealer]" = weakref.WeakKeyDictionary()


def send(s: socket.socket, typ: int, payload: bytes = b"", seq: int | None = None, flags: int = 0) -> int:
    """One message; seq: the next after the last sent on s unless given;
    flags: the header's LAT_HF_*."""
    if seq is None:
        seq = (LAST_SEQ.get(s, 0) + 1) & 0xFFFFFFFF
    LAST_SEQ[s] = seq
    frame = HDR.pack(MAGIC, VERSION, flags, typ, len(payload), seq) + payload
    s.sendall(SEALERS[s].seal(frame) if s in SEALERS else frame)
    return seq


def recv_exact(s: socket.socket, n: int) -> bytes:
    b = b""
    while len(b) < n:
        chunk = s.recv(n - len(b))
        assert chunk, "connection closed early"
        b += chunk
    return b


def recv(s: socket.socket) -> tuple[int, int, bytes]:
    if s in SEALERS:
        lenbuf = recv_exact(s, 4)
        opened = SEALERS[s].open(lenbuf + recv_exact(s, struct.unpack("<I", lenbuf)[0] + 16))
        assert opened is not None
        frame = opened[0]
        magic, version, flags, typ, ln, seq = HDR.unpack_from(frame)
        assert (magic, version, flags, ln) == (MAGIC, VERSION, 0, len(frame) - 16)
        return typ, seq, frame[16:]
    magic, version, flags, typ, ln, seq = HDR.unpack(recv_exact(s, 16))
    assert (magic, version, flags) == (MAGIC, VERSION, 0)
    return typ, seq, recv_exact(s, ln)


def closed(s: socket.socket) -> bool:
    try:
        return s.recv(1 << 16) == b""
    except ConnectionResetError:
        return True


def sysret(body: bytes) -> tuple[int, int, bytes]:
    ret, err, _ = struct.unpack("<qiI", body[:16])
    return ret, err, body[16:]


def request(s: socket.socket, typ: int, payload: bytes = b"", seq: int | None = None,
            flags: int = 0) -> tuple[int, int, bytes]:
    seq = send(s, typ, payload, seq, flags)
    t, q, body = recv(s)
    assert (t, q) == (typ | REPLY, seq), hex(t)
    return sysret(body)


def status(c: Ciod) -> tuple[int, int, int]:
    with c.connect(ROLE_CONTROL) as s:
        send(s, CTL_STATUS, b"", 3)
        t, q, body = recv(s)
        assert (t, q) == (CTL_STATUS | REPLY, 3)
        return struct.unpack("<IIQ", body)


def counters(c: Ciod) -> dict[str, int]:
    with c.connect(ROLE_CONTROL) as s:
        send(s, CTL_COUNTERS, b"", 4)
        t, _, body = recv(s)
        # calls[nsys] first; the trailing lat_counters_ext says what nsys is
        nsys, nbuckets, nstats, _ = struct.unpack("<IIII", body[-16:])
        assert t == CTL_COUNTERS | REPLY and nsys >= NSYS
        assert len(body) == 8 * (nsys * (3 + nbuckets) + nstats) + 16
        vals = struct.unpack(f"<{nsys}Q", body[:8 * nsys])
        names = {v: k for k, v in SYS.items()}      # SYS as extended by other modules (sockets)
        return {names.get(0x300 + i, hex(0x300 + i)): v for i, v in enumerate(vals)}


def job_payload(job: int, exe: str, cwd: str, ranks: list[int], nranks: int,
                argv: list[str] | None = None, env: list[str] | None = None,
                uid: int | None = None, gid: int | None = None, groups: list[int] | None = None,
                pset_size: int = PSET_SIZE, flags: int = 0) -> bytes:
    argv = argv or [exe]
    env = env or []
    groups = [os.getgid()] if groups is None else groups
    head = struct.pack("<QIIIIIIII", job, os.getuid() if uid is None else uid,
                       os.getgid() if gid is None else gid, len(groups), len(argv), len(env),
                       nranks, pset_size, flags)
    tail = struct.pack(f"<{len(ranks)}i", *ranks) + struct.pack(f"<{len(groups)}I", *groups)
    return head + tail + b"".join(x.encode() + b"\0" for x in [exe, cwd, *argv, *env])


class Proc:
    """A compute process's function-shipping connection."""

    def __init__(self, s: socket.socket) -> None:
        self.s = s
        self.seq = 100

    def call(self, name: str, *a: int, data: bytes = b"", flags: int = 0) -> tuple[int, int, bytes]:
        """Shipped call name with arguments a0.., data and header flags."""
        self.seq += 1
        args = (list(a) + [0, 0, 0, 0])[:4]
        return request(self.s, SYS[name], struct.pack("<4q", *args) + data, self.seq, flags)

    def ok(self, name: str, *a: int, data: bytes = b"", flags: int = 0) -> tuple[int, bytes]:
        ret, err, out = self.call(name, *a, data=data, flags=flags)
        assert ret >= 0 and err == 0, f"{name}: {os.strerror(err)}"
        return ret, out

    def fails(self, name: str, *a: int, data: bytes = b"", flags: int = 0) -> int:
        ret, err, _ = self.call(name, *a, data=data, flags=flags)
        assert ret == -1, f"{name} succeeded with {ret}"
        return err


def path(p: str | Path) -> bytes:
    return str(p).encode() + b"\0"


def dirents(buf: bytes) -> list[str]:
    names, off = [], 0
    while off < len(buf):
        _ino, _off, reclen, _typ = struct.unpack_from("<QqHB", buf, off)
        names.append(buf[off + 19:off + reclen].split(b"\0")[0].decode())
        off += reclen
    return names


class Job:
    """A job started on two fake compute nodes; ranks = per node."""

    def __init__(self, c: Ciod, cwd: Path, job_id: int = 42, ranks: tuple[int, int] = (0, 1),
                 image: bytes | None = None, reuse: "Job | None" = None,
                 **kw) -> None:  # type: ignore[no-untyped-def]
        self.c, self.id, self.ranks = c, job_id, ranks
        if reuse:                       # the same nodes and control connection
            self.nodes, self.ctl = reuse.nodes, reuse.ctl
        else:
            self.nodes = [c.connect(ROLE_NODE, n) for n in range(PSET_SIZE)]
            self.ctl = c.connect(ROLE_CONTROL)
        self.image = image if image is not None else random.Random(1).randbytes(MAX_IO * 2 + 12345)
        self.exe = c.dir / "prog"
        self.exe.write_bytes(self.image)
        self.exe.chmod(0o755)
        payload = job_payload(job_id, str(self.exe), str(cwd), list(ranks), 2,
                              argv=["prog", "-x", "arg two"], env=["A=1", "PATH=/bin"], **kw)
        seq = send(self.ctl, CTL_JOB, payload)
        for n, r in enumerate(ranks):
            if r >= 0:
                self.expect_push(self.nodes[n], r)
        for n, r in enumerate(ranks):
            if r >= 0:
                t, _, body = recv(self.nodes[n])
                assert t == NODE_START and struct.unpack("<Q", body)[0] == job_id
        t, q, body = recv(self.ctl)
        assert (t, q) == (CTL_JOB | REPLY, seq)
        assert sysret(body)[:2] == (0, 0), body

    def expect_push(self, s: socket.socket, rank: int) -> None:
        t, _, body = recv(s)
        assert t == NODE_JOB
        job, size, r, nranks, uid, gid, ngroups, nargs, nenv, _ = struct.unpack_from("<QQIIIIIIII", body)
        assert (job, size, r, nranks, nargs, nenv) == (self.id, len(self.image), rank, 2, 3, 2)
        assert (uid, gid, ngroups) == (os.getuid(), os.getgid(), 1)
        strings = body[48 + 4 * ngroups:].split(b"\0")
        assert strings == [b"prog", b"-x", b"arg two", b"A=1", b"PATH=/bin", b""]
        got = b""
        while len(got) < size:
            t, _, chunk = recv(s)
            assert t == NODE_IMAGE and 0 < len(chunk) <= MAX_IO
            got += chunk
        assert got == self.exe.read_bytes()

    def proc(self, node: int) -> Proc:
        return Proc(self.c.connect(ROLE_PROC, node, self.id))

    def exit(self, node: int, how: int = EXIT_CODE, value: int = 0, msg: bytes = b"") -> None:
        send(self.nodes[node], NODE_EXIT, struct.pack("<QIIIi", self.id, 0, node, how, value) + msg)

    def next_ctl(self, want: int) -> bytes:
        t, _, body = recv(self.ctl)
        assert t == want, hex(t)
        return body


# ---- the tests ----

def test_hello_with_wrong_key_version_or_role_is_refused(ciod: Ciod) -> None:
    s, err = ciod.hello(ROLE_CONTROL, key=bytes(32))
    assert err == errno.EACCES and closed(s)
    s, err = ciod.hello(9)
    assert err == errno.EPROTO and closed(s)
    s = ciod.raw()
    hello, _ = wire.hello_payload(ciod.key, CHALLENGES[s], ROLE_CONTROL, 0, 0)
    s.sendall(HDR.pack(MAGIC, VERSION + 1, 0, HELLO, len(hello), 1) + hello)
    t, _, body = recv(s)
    assert t == HELLO | REPLY and struct.unpack("<i", body[:4])[0] == errno.EPROTO and closed(s)
    # a request before the hello
    s = ciod.raw()
    send(s, CTL_STATUS, b"", 1)
    t, _, body = recv(s)
    assert t == HELLO | REPLY and struct.unpack("<i", body[:4])[0] == errno.EPROTO and closed(s)
    ras = [line.split("\t") for line in ciod.rastext().splitlines()]
    assert all(len(f) == 6 for f in ras)      # time, severity, component, location, job, message
    assert any(f[1] == "WARNING" and f[2] == "CIOD" and f[3] == IO_LOCATION and "mac is wrong" in f[5]
               for f in ras), ras
    assert status(ciod) == (0, PSET_SIZE, 0)


def test_status_counts_nodes_and_refuses_a_second_hello_per_node(ciod: Ciod) -> None:
    assert status(ciod) == (0, 2, 0)
    n0 = ciod.connect(ROLE_NODE, 0)
    assert status(ciod) == (1, 2, 0)
    s, err = ciod.hello(ROLE_NODE, 0)
    assert err == errno.EBUSY and closed(s)
    s, err = ciod.hello(ROLE_NODE, 2)     # only nodes 0 and 1
    assert err == errno.EPROTO and closed(s)
    n0.close()
    deadline = time.time() + 5
    while status(ciod)[0] != 0:
        assert time.time() < deadline
        time.sleep(0.02)
    assert "R00-M0-N00-C:J02" in ciod.rastext()      # pset 1 * size 2 + node 0
    n1 = ciod.connect(ROLE_NODE, 0)                   # the slot is free again
    n1.close()


def test_job_push_output_shipping_exits_and_counters(ciod: Ciod, tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "data").write_bytes(b"0123456789" * 1000)
    before = counters(ciod)
    job = Job(ciod, work)
    assert status(ciod) == (2, 2, 42)

    # a second job is refused while this one runs
    send(job.ctl, CTL_JOB, job_payload(43, str(job.exe), str(work), [0, 1], 2))
    t, _, body = recv(job.ctl)
    ret, err, text = sysret(body)
    assert (t, ret, err) == (CTL_JOB | REPLY, -1, errno.EBUSY) and text

    # node output is forwarded with the node's rank
    send(job.nodes[1], NODE_OUTPUT, struct.pack("<II", 0, 2) + b"err from node 1\n")
    assert job.next_ctl(CTL_OUTPUT) == struct.pack("<II", 1, 2) + b"err from node 1\n"

    p = job.proc(0)
    calls: dict[str, int] = {}

    def count(name: str) -> None:
        calls[name] = calls.get(name, 0) + 1

    def ok(name: str, *a: int, data: bytes = b"") -> tuple[int, bytes]:
        count(name)
        return p.ok(name, *a, data=data)

    def fails(name: str, *a: int, data: bytes = b"") -> int:
        count(name)
        return p.fails(name, *a, data=data)

    # the thread starts in the job's cwd
    ret, out = ok("getcwd", 4096)
    assert out == path(work) and ret == len(out)
    assert fails("getcwd", 3) == errno.ERANGE
    # fd 1 forwards as the rank's stdout, fd 0 reads EOF
    assert ok("write", 1, data=b"hello out\n")[0] == 10
    assert job.next_ctl(CTL_OUTPUT) == struct.pack("<II", 0, 1) + b"hello out\n"
    assert ok("read", 0, 100) == (0, b"")
    # openat/write/pread/lseek/fstatat
    fd, _ = ok("openat", AT_FDCWD, O_CREAT | O_RDWR | O_TRUNC, 0o644, data=b"new.txt\0")
    assert fd == 3
    assert ok("write", fd, data=b"abcdef")[0] == 6
    assert ok("pread", fd, 3, 2) == (3, b"cde")
    assert ok("lseek", fd, 0, os.SEEK_CUR)[0] == 6
    assert ok("pwrite", fd, 0, 0, data=b"XY")[0] == 2
    assert (work / "new.txt").read_bytes() == b"XYcdef"
    _, st = ok("fstatat", fd, AT_EMPTY_PATH, data=b"\0")
    fields = STAT.unpack(st)
    assert stat.S_ISREG(fields[3]) and fields[8] == 6 and fields[4] == os.getuid()
    _, st = ok("fstatat", AT_FDCWD, 0, data=b"data\0")
    assert STAT.unpack(st)[8] == 10000
    _, st = ok("fstatat", 1, AT_EMPTY_PATH, data=b"\0")
    assert stat.S_ISFIFO(STAT.unpack(st)[3])
    assert ok("fcntl", fd, F_GETFL)[0] & 3 == O_RDWR
    assert fails("fcntl", fd, F_DUPFD) == errno.EINVAL
    dfd, _ = ok("dup", fd)
    assert dfd == 4
    # a big read in one chunk
    big, _ = ok("openat", AT_FDCWD, O_RDONLY, 0, data=b"data\0")
    n, data = ok("read", big, MAX_IO)
    assert n == 10000 and data == b"0123456789" * 1000
    assert fails("read", big, MAX_IO + 1) == errno.EINVAL
    # directories: mkdirat, getdents64 through a directory fd, renameat, unlinkat
    ok("mkdirat", AT_FDCWD, 0o755, data=b"sub\0")
    assert fails("mkdirat", AT_FDCWD, 0o755, data=b"sub\0") == errno.EEXIST
    sub, _ = ok("openat", AT_FDCWD, O_RDONLY | O_DIRECTORY, 0, data=b"sub\0")
    f2, _ = ok("openat", sub, O_CREAT | O_WRONLY, 0o600, data=b"inner\0")
    ok("close", f2)
    ok("renameat", sub, AT_FDCWD, 0, data=b"inner\0moved\0")
    assert (work / "moved").exists() and not (work / "sub/inner").exists()
    n, ents = ok("getdents64", sub, 4096)
    assert sorted(dirents(ents)) == [".", ".."]
    n, ents = ok("getdents64", sub, 4096)
    assert n == 0
    assert fails("unlinkat", AT_FDCWD, 0, data=b"sub\0") == errno.EISDIR
    ok("unlinkat", AT_FDCWD, AT_REMOVEDIR, data=b"sub\0")
    ok("unlinkat", AT_FDCWD, 0, data=b"moved\0")
    assert fails("unlinkat", AT_FDCWD, 0, data=b"moved\0") == errno.ENOENT
    assert fails("openat", AT_FDCWD, O_RDONLY, 0, data=b"missing\0") == errno.ENOENT
    assert fails("fstatat", AT_FDCWD, 0, data=b"missing\0") == errno.ENOENT
    # absolute paths ignore dirfd; relative ones need a directory fd
    ok("fstatat", 999, 0, data=path(work / "data"))
    assert fails("fstatat", 999, 0, data=b"data\0") == errno.EBADF
    assert fails("openat", fd, O_RDONLY, 0, data=b"x\0") == errno.ENOTDIR
    # faccessat, readlinkat, truncate/ftruncate, fchmod(at), statfs, fsync
    ok("faccessat", AT_FDCWD, os.R_OK, 0, data=b"data\0")
    assert fails("faccessat", AT_FDCWD, os.F_OK, 0, data=b"nope\0") == errno.ENOENT
    os.symlink("data", work / "link")
    assert ok("readlinkat", AT_FDCWD, 100, data=b"link\0") == (4, b"data")
    ok("truncate", 0, 4, data=b"data\0")
    assert (work / "data").read_bytes() == b"0123"
    ok("ftruncate", fd, 1)
    ok("fsync", fd)
    ok("fchmod", fd, 0o600)
    assert stat.S_IMODE((work / "new.txt").stat().st_mode) == 0o600
    ok("fchmodat", AT_FDCWD, 0o640, 0, data=b"new.txt\0")
    assert stat.S_IMODE((work / "new.txt").stat().st_mode) == 0o640
    _, sfs = ok("statfs", data=path(work))
    assert len(sfs) == 88 and struct.unpack_from("<q", sfs, 8)[0] > 0
    _, sfs = ok("fstatfs", fd)
    assert len(sfs) == 88
    _, stx = ok("statx", AT_FDCWD, 0, 0xFFF, data=b"new.txt\0")
    assert len(stx) == 256 and struct.unpack_from("<Q", stx, 40)[0] == 1   # stx_size
    ok("utimensat", AT_FDCWD, 0, 1, data=struct.pack("<qqqq", 1000, 0, 2000, 0) + b"new.txt\0")
    assert (work / "new.txt").stat().st_mtime == 2000
    # umask and chdir belong to this process only
    ok("umask", 0o077)
    assert ok("umask", 0o022)[0] == 0o077
    ok("mkdirat", AT_FDCWD, 0o755, data=b"d2\0")
    ok("chdir", data=b"d2\0")
    assert ok("getcwd", 4096)[1] == path(work / "d2")
    assert fails("chdir", data=b"nowhere\0") == errno.ENOENT
    ok("chdir", data=b"..\0")
    wfd, _ = ok("openat", AT_FDCWD, O_RDONLY | O_DIRECTORY, 0, data=b"d2\0")
    ok("fchdir", wfd)
    assert ok("getcwd", 4096)[1] == path(work / "d2")
    assert fails("fchdir", fd) == errno.ENOTDIR
    ok("chdir", data=path(work))
    ok("close", wfd)
    # bad descriptors, unterminated and too long paths, oversized writes
    assert fails("read", 77, 10) == errno.EBADF
    assert fails("close", 77) == errno.EBADF
    assert fails("write", -1, data=b"x") == errno.EBADF
    assert fails("read", 5000, 10) == errno.EBADF
    assert fails("openat", AT_FDCWD, O_RDONLY, 0, data=b"no-nul") == errno.EINVAL
    assert fails("openat", AT_FDCWD, O_RDONLY, 0, data=b"a" * 5000 + b"\0") == errno.ENAMETOOLONG
    assert fails("write", fd, data=b"x" * (MAX_IO + 1)) == errno.EINVAL
    assert fails("pread", 1, 10, 0) == errno.ESPIPE
    for f in (fd, dfd, big, 1):
        ok("close", f)
    assert fails("close", fd) == errno.EBADF
    assert fails("write", 1, data=b"x") == errno.EBADF
    # the lowest free descriptor is reused
    assert ok("openat", AT_FDCWD, O_RDONLY, 0, data=b"data\0")[0] == 1

    after = counters(ciod)
    for name in SYS:
        assert after[name] - before[name] == calls.get(name, 0), name

    # exits: one CTL_EXIT per rank, then JOB_END
    job.exit(0, EXIT_CODE, 0)
    ex = job.next_ctl(CTL_EXIT)
    assert struct.unpack("<QIIIi", ex[:24]) == (42, 0, 0, EXIT_CODE, 0)
    job.exit(1, EXIT_LAUNCH, errno.ENOEXEC, b"exec format error")
    ex = job.next_ctl(CTL_EXIT)
    assert struct.unpack("<QIIIi", ex[:24]) == (42, 1, 1, EXIT_LAUNCH, errno.ENOEXEC)
    assert ex[24:] == b"exec format error"
    assert struct.unpack("<Q", job.next_ctl(CTL_JOB_END)) == (42,)
    assert status(ciod) == (2, 2, 0)
    assert "exec format error" in ciod.rastext()
    # the process connection of a finished job gets nothing new
    s, err = ciod.hello(ROLE_PROC, 0, 42)
    assert err == errno.EACCES and closed(s)
    # and a next job runs
    Job(ciod, work, job_id=44, ranks=(-1, 0), image=b"\x7fELF tiny", reuse=job)
    assert status(ciod)[2] == 44


def test_job_requests_are_validated(ciod: Ciod, tmp_path: Path) -> None:
    nodes = [ciod.connect(ROLE_NODE, n) for n in range(2)]
    ctl = ciod.connect(ROLE_CONTROL)
    exe = tmp_path / "exe"
    exe.write_bytes(b"#!/bin/true\n")
    exe.chmod(0o755)

    def refused(payload: bytes, want: int) -> str:
        ret, err, text = request(ctl, CTL_JOB, payload)
        assert (ret, err) == (-1, want), (os.strerror(err), text)
        return text.decode()

    good = job_payload(5, str(exe), str(tmp_path), [0, 1], 2)
    refused(good[:-1], errno.EINVAL)                                   # last string unterminated
    refused(good + b"x\0", errno.EINVAL)                               # stray string
    refused(job_payload(5, str(exe), str(tmp_path), [0, 1], 2, pset_size=3) + b"", errno.EINVAL)
    refused(job_payload(5, str(exe), str(tmp_path), [0, 2], 2), errno.EINVAL)   # rank >= nranks
    refused(job_payload(5, str(exe), str(tmp_path), [1, 1], 2), errno.EINVAL)   # rank twice
    refused(job_payload(5, str(exe), str(tmp_path), [0, 1], 2, groups=list(range(257))), errno.EINVAL)
    refused(job_payload(5, str(exe), "relative", [0, 1], 2), errno.EINVAL)
    bad = bytearray(good)
    struct.pack_into("<I", bad, 20, 0)                                 # nargs = 0
    refused(bytes(bad), errno.EINVAL)
    struct.pack_into("<II", bad, 20, 3000, 2000)                       # nargs + nenv > 4096
    refused(bytes(bad), errno.EINVAL)
    struct.pack_into("<II", bad, 20, 0xFFFFFFFF, 0xFFFFFFFF)
    refused(bytes(bad), errno.EINVAL)
    text = refused(job_payload(5, str(tmp_path / "missing"), str(tmp_path), [0, 1], 2), errno.ENOENT)
    assert text == f"cannot read {tmp_path / 'missing'}: No such file or directory"
    text = refused(job_payload(5, str(exe), str(tmp_path / "nodir"), [0, 1], 2), errno.ENOENT)
    assert "nodir" in text
    text = refused(job_payload(5, str(exe), str(exe), [0, 1], 2), errno.ENOTDIR)
    plain = tmp_path / "plain"
    plain.write_bytes(b"data")
    plain.chmod(0o644)
    assert "cannot execute" in refused(job_payload(5, str(plain), str(tmp_path), [0, 1], 2), errno.EACCES)
    if os.geteuid() == 0:
        # the owner's identity, not ciod's, reads the executable
        secret = tmp_path / "secret"
        secret.write_bytes(b"\x7fELF")
        secret.chmod(0o700)
        text = refused(job_payload(5, str(secret), "/tmp", [0, 1], 2, uid=65534, gid=65534,
                                   groups=[65534]), errno.EACCES)
        assert text == f"cannot read {secret}: Permission denied"
    else:
        refused(job_payload(5, str(exe), str(tmp_path), [0, 1], 2, uid=os.getuid() + 1), errno.EPERM)
    # a rank on a node that is not connected
    nodes[1].close()
    deadline = time.time() + 5
    while status(ciod)[0] != 1:
        assert time.time() < deadline
        time.sleep(0.02)
    text = refused(good, errno.EHOSTDOWN)
    assert "R00-M0-N00-C:J03" in text
    # nothing ran: the pset is idle
    assert status(ciod) == (1, 2, 0)
    # KILL without a job
    ret, err, _ = request(ctl, CTL_KILL, wire.KILL.pack(5, 9, 0))
    assert (ret, err) == (-1, errno.ESRCH)


def test_malformed_input_leaves_ciod_serving(ciod: Ciod, tmp_path: Path) -> None:
    rnd = random.Random(42)
    with ciod.raw() as s:                       # random bytes
        s.sendall(bytes(rnd.getrandbits(8) for _ in range(4096)))
        assert closed(s)
    with ciod.raw() as s:                       # a header that lies about its length
        s.sendall(HDR.pack(MAGIC, VERSION, 0, HELLO, 0xFFFFFFF0, 1) + b"x" * 100)
        assert closed(s)
    with ciod.raw() as s:                       # a truncated hello
        s.sendall(HDR.pack(MAGIC, VERSION, 0, HELLO, 80, 1) + b"short")
        s.shutdown(socket.SHUT_WR)
        assert closed(s)
    with ciod.raw() as s:                       # a short hello
        send(s, HELLO, b"abc", 1)
        t, _, body = recv(s)
        assert t == HELLO | REPLY and struct.unpack("<i", body[:4])[0] == errno.EPROTO
    # an authenticated control connection: unknown opcode and a file-system call
    with ciod.connect(ROLE_CONTROL) as s:
        send(s, 0x0777, b"", 2)
        t, q, body = recv(s)
        assert (t, q) == (ERROR | REPLY, 2) and sysret(body)[:2] == (-1, errno.ENOSYS)
        send(s, SYS["close"], struct.pack("<4q", 99, 0, 0, 0), 3)
        t, q, body = recv(s)
        assert q == 3 and sysret(body)[0] == -1
        send(s, CTL_KILL, b"ab", 4)             # shorter than its struct: closed
        assert closed(s)
    # function shipping: unknown call, lying length, garbage after a good call
    job = Job(ciod, tmp_path, job_id=7, ranks=(0, -1), image=b"img")
    p = job.proc(0)
    send(p.s, 0x03F0, struct.pack("<4q", 0, 0, 0, 0), 5)   # past LAT_SYS__END
    t, q, body = recv(p.s)
    assert (t, q) == (ERROR | REPLY, 5) and sysret(body)[:2] == (-1, errno.ENOSYS)
    assert p.fails("fstatfs", 12345) == errno.EBADF
    send(p.s, SYS["read"], b"short")             # less than a lat_sysreq
    assert closed(p.s)
    p = job.proc(0)
    p.s.sendall(HDR.pack(MAGIC, VERSION, 0, SYS["write"], MAX_PAYLOAD + 1, 1))
    assert closed(p.s)
    p = job.proc(0)
    p.s.sendall(HDR.pack(0xDEADBEEF, VERSION, 0, SYS["write"], 10, 1) + b"x" * 10)
    assert closed(p.s)
    p = job.proc(0)
    p.s.sendall(HDR.pack(MAGIC, VERSION, 0, SYS["write"], 1000, 1) + b"x" * 10)
    p.s.shutdown(socket.SHUT_WR)
    assert closed(p.s)
    # a PROC hello for another job or a node without a rank
    for node, jid in ((0, 8), (1, 7), (5, 7)):
        s, err = ciod.hello(ROLE_PROC, node, jid)
        assert err == errno.EACCES and closed(s)
    # still serving, the job is intact and a new process works
    assert ciod.alive()
    assert status(ciod) == (2, 2, 7)
    p = job.proc(0)
    assert p.ok("getcwd", 4096)[1] == path(tmp_path)
    ras = ciod.rastext()
    assert "bad magic" in ras and "claims" in ras and "truncated" in ras, ras


def test_header_flags_are_checked(ciod: Ciod, tmp_path: Path) -> None:
    """lat_hdr.flags carries the transport (docs/protocol.md section 2.1):
    a shipped call with flags it may not carry is answered LAT_ERROR EINVAL
    and the connection goes on; flags on any other message close it; the
    old a3 markers are plain argument values now."""
    job = Job(ciod, tmp_path, job_id=12, ranks=(0, -1), image=b"img")
    p = job.proc(0)
    fd, _ = p.ok("openat", AT_FDCWD, O_CREAT | O_RDWR | O_TRUNC, 0o644, data=path(tmp_path / "f"))
    refused = [("pwrite", 0x80), ("pwrite", wire.HF_RDV | wire.HF_PIPE_FIRST), ("close", wire.HF_RDV),
               ("fstatfs", wire.HF_PIPE_FIRST), ("recvmsg", wire.HF_PIPE_NEXT), ("send_rdv", wire.HF_RDV)]
    for name, flags in refused:
        typ = wire.SYS_BASE + wire.SYS_NAMES.index(name)
        p.seq += 1
        send(p.s, typ, struct.pack("<4q", fd, 0, 0, 0), p.seq, flags)
        t, q, body = recv(p.s)
        assert (t, q) == (ERROR | REPLY, p.seq) and sysret(body)[:2] == (-1, errno.EINVAL), (name, flags)
        assert f"header flags 0x{flags:02x} are not a transport of call 0x{typ:04x}".encode() in body
    assert (tmp_path / "f").read_bytes() == b"", "a refused call did nothing"
    # a3 = the version 2 rendezvous marker, no flags: an ordinary write (a3 unused)
    assert p.ok("pwrite", fd, 0, 0, 0x52445600, data=b"plain")[0] == 5
    assert (tmp_path / "f").read_bytes() == b"plain"
    # flags on a message that is not a shipped call: the connection is closed
    send(p.s, DP_SHARE, struct.pack("<4q", 0, 0, 0, 0), None, wire.HF_RDV)
    assert closed(p.s)
    assert "header flags 0x01 on type 0x0002" in ciod.rastext()


LAT_RDV = wire.HF_RDV          # header flag of a rendezvous


def test_generated_decoder_refuses_what_the_annotations_forbid(ciod: Ciod, tmp_path: Path) -> None:
    """Each annotation kind of lattice/fwd_posix.h, enforced by the generated
    decoder (docs/plugins.md "Wire mode") before any implementation runs."""
    job = Job(ciod, tmp_path, job_id=9, ranks=(0, -1), image=b"img")
    p = job.proc(0)
    f = tmp_path / "f"
    f.write_bytes(b"hello")
    (tmp_path / "l").symlink_to("target")
    # str: no NUL in the payload, none within LAT_MAX_PATH, a second string missing
    assert p.fails("openat", AT_FDCWD, O_RDONLY, 0, data=str(f).encode()) == errno.EINVAL
    assert p.fails("openat", AT_FDCWD, O_RDONLY, 0, data=b"a" * 5000) == errno.ENAMETOOLONG
    assert p.fails("renameat", AT_FDCWD, AT_FDCWD, 0, data=path(f)) == errno.EINVAL
    assert f.exists()
    # more payload than the arguments take, less than a fixed array (arr:len=2)
    assert p.fails("openat", AT_FDCWD, O_RDONLY, 0, data=path(f) + b"x") == errno.EINVAL
    assert p.fails("utimensat", AT_FDCWD, 0, 1, data=bytes(31) + path(f)[:0]) == errno.EINVAL
    assert p.fails("fsync", 1, data=b"junk") == errno.EINVAL
    # obj: an int slot outside 32 bits
    assert p.fails("openat", AT_FDCWD, 1 << 40, 0, data=path(f)) == errno.EINVAL
    # fd: not open, past the table, negative, past 32 bits
    for bad in (77, 1024, -1, 1 << 40):
        assert p.fails("fstatfs", bad) == errno.EBADF
        assert p.fails("read", bad, 10) == errno.EBADF
        assert p.fails("write", bad, data=b"x") == errno.EBADF
    fd, _ = p.ok("openat", AT_FDCWD, O_RDONLY, 0, data=path(f))
    # max=: counts over the agreed limits, also when the length is the payload's (a=none)
    assert p.fails("read", fd, MAX_IO + 1) == errno.EINVAL
    assert p.fails("pread", fd, -1, 0) == errno.EINVAL
    assert p.fails("getdents64", fd, MAX_IO + 1) == errno.EINVAL
    assert p.fails("getcwd", -1) == errno.EINVAL
    assert p.fails("write", 1, data=bytes(MAX_IO + 1)) == errno.EINVAL
    # min= and clamp=: a readlink buffer of 0 is refused, a huge one clamped
    assert p.fails("readlinkat", AT_FDCWD, 0, data=path(tmp_path / "l")) == errno.EINVAL
    assert p.ok("readlinkat", AT_FDCWD, 1 << 40, data=path(tmp_path / "l")) == (6, b"target")
    # out arrays carry ret bytes; out objects their size; nothing on an error
    assert p.ok("read", fd, 3) == (3, b"hel")
    assert p.ok("pread", fd, 100, 1) == (4, b"ello")
    ret, out = p.ok("fstatat", fd, AT_EMPTY_PATH, data=b"\0")
    assert ret == 0 and STAT.unpack(out)[8] == 5
    assert p.call("fstatat", AT_FDCWD, 0, data=path(tmp_path / "nope")) == (-1, errno.ENOENT, b"")
    # zerocopy: header flag LAT_HF_RDV goes to the rendezvous implementation, past max= (not granted here)
    ret, err, _ = p.call("read", fd, MAX_IO * 4, 0, data=struct.pack("<QQ", 4096, MAX_IO * 4), flags=LAT_RDV)
    assert (ret, err) == (-1, errno.EOPNOTSUPP)
    assert p.fails("read", 99, 10, 0, data=b"", flags=LAT_RDV) == errno.EBADF
    # still serving; the malformed encodings (not the bad values) were RAS events
    assert ciod.alive()
    assert p.ok("getcwd", 4096)[1] == path(tmp_path)
    ras = ciod.rastext()
    for what in ("malformed OPENAT request (", "): a string without its NUL", "malformed RENAMEAT request",
                 "OPENAT request (", "): longer than its arguments", "malformed UTIMENSAT request (31 data bytes)",
                 "shorter than times needs", "malformed FSYNC request (4 data bytes)"):
        assert what in ras, (what, ras)
    assert "job 9 rank 0" in ras and "READ request" not in ras and ras.count("malformed") == 5, ras


def test_node_dropping_mid_job_is_reported_lost(ciod: Ciod, tmp_path: Path) -> None:
    job = Job(ciod, tmp_path, job_id=11, image=b"x" * 10)
    job.nodes[1].close()
    ex = job.next_ctl(CTL_EXIT)
    assert struct.unpack("<QIIIi", ex[:24]) == (11, 1, 1, EXIT_LOST, 0)
    assert b"R00-M0-N00-C:J03" in ex[24:] and b"lost" in ex[24:]
    ras = [line.split("\t") for line in ciod.rastext().splitlines()]
    assert any(f[1] == "ERROR" and f[3] == "R00-M0-N00-C:J03" for f in ras), ras
    # the other rank ends the job; KILL reaches the live node first, naming the job
    ret, err, _ = request(job.ctl, CTL_KILL, wire.KILL.pack(11, 15, 0))
    assert (ret, err) == (0, 0)
    t, _, body = recv(job.nodes[0])
    assert t == NODE_KILL and wire.KILL.unpack(body)[:2] == (11, 15)
    job.exit(0, EXIT_SIGNAL, 15)
    assert struct.unpack("<QIIIi", job.next_ctl(CTL_EXIT)[:24]) == (11, 0, 0, EXIT_SIGNAL, 15)
    assert struct.unpack("<Q", job.next_ctl(CTL_JOB_END)) == (11,)


def test_kill_for_another_job_is_refused_and_touches_nothing(ciod: Ciod, tmp_path: Path) -> None:
    job = Job(ciod, tmp_path, job_id=13, image=b"x")
    ret, err, text = request(job.ctl, CTL_KILL, wire.KILL.pack(12, 9, 0))
    assert (ret, err) == (-1, errno.ESRCH)
    assert b"job 12 does not run here (job 13 does)" in text
    for n in job.nodes:                         # no node heard of it
        n.settimeout(0.5)
        with pytest.raises((socket.timeout, TimeoutError)):
            recv(n)
        n.settimeout(10)
    assert "job 12 does not run here (job 13 does): signal 9 refused" in ciod.rastext()
    # the job's own kill works, and its ranks are logged as ended on purpose, not as failures
    assert request(job.ctl, CTL_KILL, wire.KILL.pack(13, 9, 0))[:2] == (0, 0)
    for n in job.nodes:
        t, _, body = recv(n)
        assert t == NODE_KILL and wire.KILL.unpack(body)[:2] == (13, 9)
    job.exit(0, EXIT_SIGNAL, 9)
    job.exit(1, EXIT_SIGNAL, 9)
    job.next_ctl(CTL_EXIT)
    job.next_ctl(CTL_EXIT)
    assert struct.unpack("<Q", job.next_ctl(CTL_JOB_END)) == (13,)
    ras = ciod.rastext()
    assert "job 13 rank 0 ended by signal 9 on purpose: killed at the service node's request" in ras, ras
    assert "job 13 rank 0 killed by signal" not in ras


def test_control_dropping_kills_its_job(ciod: Ciod, tmp_path: Path) -> None:
    job = Job(ciod, tmp_path, job_id=12, image=b"x")
    job.ctl.close()
    for n in job.nodes:
        t, _, body = recv(n)
        assert t == NODE_KILL and wire.KILL.unpack(body)[:2] == (12, 9)
    assert "job 12" in ciod.rastext()
    job.exit(0, EXIT_SIGNAL, 9)
    job.exit(1, EXIT_SIGNAL, 9)
    deadline = time.time() + 5
    while status(ciod)[2] != 0:
        assert time.time() < deadline
        time.sleep(0.02)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_calls_run_with_the_job_owners_identity(ciod: Ciod) -> None:
    work = ciod.dir / "identity"          # tmp_path's parents are private to root
    work.mkdir()
    work.chmod(0o777)
    secret = work / "secret"
    secret.write_text("root only\n")
    secret.chmod(0o600)
    exe = work / "exe"
    exe.write_bytes(b"\x7fELF")
    exe.chmod(0o755)
    nodes = [ciod.connect(ROLE_NODE, n) for n in range(2)]
    ctl = ciod.connect(ROLE_CONTROL)

    def start(job: int, exe: Path, **kw) -> None:  # type: ignore[no-untyped-def]
        send(ctl, CTL_JOB, job_payload(job, str(exe), str(work), [0, -1], 1, **kw))
        assert recv(nodes[0])[0] == NODE_JOB
        assert recv(nodes[0])[0] == NODE_IMAGE
        assert recv(nodes[0])[0] == NODE_START
        assert sysret(recv(ctl)[2])[:2] == (0, 0)

    start(21, exe, uid=65534, gid=65534, groups=[65534])
    p = Proc(ciod.connect(ROLE_PROC, 0, 21))
    assert p.fails("openat", AT_FDCWD, O_RDONLY, 0, data=b"secret\0") == errno.EACCES
    assert p.fails("faccessat", AT_FDCWD, os.R_OK, 0, data=b"secret\0") == errno.EACCES
    p.ok("faccessat", AT_FDCWD, os.R_OK | os.X_OK, 0, data=b"exe\0")
    fd, _ = p.ok("openat", AT_FDCWD, O_CREAT | O_WRONLY, 0o644, data=b"mine\0")
    p.ok("close", fd)
    st = (work / "mine").stat()
    assert (st.st_uid, st.st_gid) == (65534, 65534)
    send(nodes[0], NODE_EXIT, struct.pack("<QIIIi", 21, 0, 0, EXIT_CODE, 0))
    assert recv(ctl)[0] == CTL_EXIT and recv(ctl)[0] == CTL_JOB_END
    # the control thread went back to root after reading as nobody
    exe.chmod(0o700)
    start(22, exe)
    p = Proc(ciod.connect(ROLE_PROC, 0, 22))
    fd, _ = p.ok("openat", AT_FDCWD, O_RDONLY, 0, data=b"secret\0")
    assert p.ok("read", fd, 100)[1] == b"root only\n"


def test_shutdown_tells_the_nodes_and_exits(ciod: Ciod) -> None:
    nodes = [ciod.connect(ROLE_NODE, n) for n in range(2)]
    with ciod.connect(ROLE_CONTROL) as s:
        ret, err, _ = request(s, CTL_SHUTDOWN)
        assert (ret, err) == (0, 0)
    for n in nodes:
        assert recv(n)[0] == NODE_SHUTDOWN
    assert ciod.proc.wait(10) == 0
    assert not ciod.sock.exists()
    ciod.exited_ok = True


def test_tcp_address(ciod_bin: Path, tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    d = Path(tempfile.mkdtemp(prefix="ciod-", dir="/tmp"))
    c = Ciod(ciod_bin, d, tcp_port=port)
    try:
        assert status(c) == (0, PSET_SIZE, 0)
        job = Job(c, tmp_path, job_id=3, ranks=(0, 1), image=b"x" * 100)
        p = job.proc(0)
        assert p.ok("getcwd", 4096)[1] == path(tmp_path)
        # another host: no rendezvous, no shared memory, even for a child of ours...
        child = job_process(["sleep", "60"])
        try:
            s, body = proc_hello(c, 3, child.pid, node=1)
            assert struct.unpack("<IIII", body[48:])[1:3] == (0, 0)         # rdv_min 0, flags 0
            q = Proc(s)
            assert share(q, SHM_BASE, 1 << 20, 3) == (-1, errno.EPERM)
            # ... big transfers are pipelined series: sent back to back, answered in order
            fd, _ = q.ok("openat", AT_FDCWD, O_CREAT | O_RDWR | O_TRUNC, 0o644, data=path(tmp_path / "t"))
            chunks = [random.Random(i).randbytes(MAX_IO) for i in range(3)] + [b"tail"]
            for i, data in enumerate(chunks):
                q.seq += 1
                args = struct.pack("<4q", fd, 0, i * MAX_IO, 0)
                send(q.s, SYS["pwrite"], args + data, q.seq, PIPE_NEXT if i else PIPE_FIRST)
            for i, data in enumerate(chunks):
                t, seq, body = recv(q.s)
                assert (t, seq) == (SYS["pwrite"] | REPLY, q.seq - len(chunks) + 1 + i)
                assert sysret(body)[:2] == (len(data), 0)
            assert (tmp_path / "t").read_bytes() == b"".join(chunks)
            s.close()
        finally:
            child.kill()
            child.wait()
        assert c.alive()
    finally:
        c.proc.terminate()
        c.proc.wait(10)
        c.log.close()
        shutil.rmtree(d, ignore_errors=True)


def test_parallel_processes_and_output(ciod: Ciod, tmp_path: Path) -> None:
    """Process connections at once (one per process: one per node here);
    output from them and from the nodes all arrives intact."""
    import threading
    job = Job(ciod, tmp_path, job_id=9, image=b"x")
    nthreads, rounds = 2, 200
    errors: list[str] = []

    def worker(i: int) -> None:
        try:
            p = job.proc(i % 2)
            name = f"f{i}".encode() + b"\0"
            for r in range(rounds):
                fd, _ = p.ok("openat", AT_FDCWD, O_CREAT | O_RDWR, 0o644, data=name)
                p.ok("pwrite", fd, 0, r * 4, data=struct.pack("<I", r))
                p.ok("close", fd)
                p.ok("write", 1, data=f"t{i} r{r}\n".encode())
            p.s.close()
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    def node_output(n: int) -> None:
        for r in range(rounds):
            send(job.nodes[n], NODE_OUTPUT, struct.pack("<II", 0, 2) + f"n{n} r{r}\n".encode())

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(nthreads)]
    threads += [threading.Thread(target=node_output, args=(n,)) for n in range(2)]
    for t in threads:
        t.start()
    got: dict[tuple[int, int], list[bytes]] = {}
    # the processes' writes of one stream may come gathered in one CTL_OUTPUT (worker.c)
    shipped = sum(len(f"t{i} r{r}\n") for i in range(nthreads) for r in range(rounds))
    while (sum(len(b) for k, v in got.items() if k[1] == 1 for b in v) < shipped
           or sum(len(got.get((n, 2), [])) for n in range(2)) < 2 * rounds):
        rank, stream = struct.unpack_from("<II", body := job.next_ctl(CTL_OUTPUT))
        got.setdefault((rank, stream), []).append(body[8:])
    for t in threads:
        t.join()
    assert not errors, errors
    for n in range(2):   # one node's output keeps its order
        assert got[(n, 2)] == [f"n{n} r{r}\n".encode() for r in range(rounds)]
    lines = b"".join(got[(0, 1)] + got[(1, 1)]).splitlines()
    assert sorted(lines) == sorted(f"t{i} r{r}".encode() for i in range(nthreads) for r in range(rounds))
    for i in range(nthreads):
        assert (tmp_path / f"f{i}").read_bytes() == b"".join(struct.pack("<I", r) for r in range(rounds))


# ---- the data path: PROC hello with the process, rendezvous requests ----

def as_job(argv: list[str]) -> list[str]:
    """argv run as a compute process of this test's job: as root, root without
    capabilities, as cnode starts a root job's processes (compute/cnode/launch.c),
    so that the job's I/O worker, which holds none, may reach its memory."""
    if os.geteuid() != 0:
        return argv
    return ["setpriv", "--securebits=+noroot,+noroot_locked,+no_setuid_fixup,+no_setuid_fixup_locked",
            "--bounding-set=-all", "--inh-caps=-all", "--", *argv]


def job_process(argv: list[str]) -> subprocess.Popen[bytes]:
    """as_job(argv) started, once it runs argv[0] itself: a connection is bound
    to the program the process runs at its first request, as after cnode's exec."""
    p = subprocess.Popen(as_job(argv))
    want = shutil.which(argv[0])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if os.path.realpath(f"/proc/{p.pid}/exe") == os.path.realpath(want or argv[0]):
                return p
        except OSError:
            pass
        time.sleep(0.005)
    p.kill()
    raise AssertionError(f"{argv} did not start")


RDV = wire.HF_RDV       # header flag of a rendezvous (wire.h LAT_HF_RDV)


def proc_hello(c: Ciod, job: int, pid: int, extra: bytes = b"", node: int = 0) -> tuple[socket.socket, bytes]:
    """A PROC hello with lat_hello_proc (pid, LAT_DP_VM) and extra bytes after
    it (MACed too): the socket and ciod's ack (+ lat_datapath).  One process
    has one connection at a time, so an earlier one of the test's, just
    closed, may still be closing in the worker (EBUSY): then again."""
    deadline = time.monotonic() + 5
    while True:
        s, err = c.hello(ROLE_PROC, node, job, proc=struct.pack("<II", pid, 1) + extra)
        if err != errno.EBUSY or time.monotonic() > deadline:
            return s, ACKS[s]
        s.close()
        time.sleep(0.02)


def test_datapath_hello_and_malformed_rendezvous(ciod: Ciod, tmp_path: Path) -> None:
    job = Job(ciod, tmp_path, job_id=9, ranks=(0, -1), image=b"img")  # noqa: F841 (keeps it running)
    # a hello of neither length is refused
    s, body = proc_hello(ciod, 9, os.getpid(), extra=b"x")
    assert struct.unpack("<i", body[:4])[0] == errno.EPROTO
    s.close()
    # a pid that is not a child of the connecting process: messages only
    s, body = proc_hello(ciod, 9, os.getppid())
    assert len(body) == 64 and struct.unpack("<i", body[:4])[0] == 0
    eager, rdv_min, flags, window = struct.unpack("<IIII", body[48:])
    assert (eager, rdv_min, flags, window) == (MAX_IO, 0, 0, MAX_IO)
    p = Proc(s)
    fd, _ = p.ok("openat", AT_FDCWD, O_CREAT | O_RDWR | O_TRUNC, 0o644, data=path(tmp_path / "f"))
    assert p.fails("write", fd, 16, 0, data=struct.pack("<QQ", 4096, 16), flags=RDV) == errno.EOPNOTSUPP
    s.close()
    # a child of ours: granted
    child = job_process(["sleep", "60"])
    try:
        s, body = proc_hello(ciod, 9, child.pid)
        eager, rdv_min, flags, window = struct.unpack("<IIII", body[48:])
        assert flags == 1 | 2 and 0 < rdv_min <= MAX_IO and window == MAX_IO   # rendezvous, shared memory
        p = Proc(s)
        fd, _ = p.ok("openat", AT_FDCWD, O_CREAT | O_RDWR | O_TRUNC, 0o644, data=path(tmp_path / "g"))
        seg = struct.pack("<QQ", 4096, 16)
        assert p.fails("write", fd, 16, 0, data=seg[:15], flags=RDV) == errno.EINVAL        # not whole segments
        assert p.fails("write", fd, 0, 0, data=b"", flags=RDV) == errno.EINVAL              # no segment
        assert p.fails("write", fd, 10, 0, data=seg, flags=RDV) == errno.EINVAL             # count != their sum
        assert p.fails("write", fd, 1025, 0, data=struct.pack("<QQ", 4096, 1) * 1025, flags=RDV) == errno.EINVAL
        assert p.fails("write", fd, 2, 0, data=struct.pack("<QQ", 2**64 - 1, 2), flags=RDV) == errno.EINVAL
        assert p.fails("pwrite", fd, 16, -1, data=seg, flags=RDV) == errno.EINVAL           # negative offset
        # memory the process does not have: EFAULT, nothing written
        assert p.fails("write", fd, 16, 0, data=struct.pack("<QQ", 8, 16), flags=RDV) == errno.EFAULT
        assert os.path.getsize(tmp_path / "g") == 0
        p.ok("write", fd, data=b"0123456789")
        assert p.fails("pread", fd, 10, 0, data=struct.pack("<QQ", 8, 10), flags=RDV) == errno.EFAULT
        # still in step, and eager calls work as before
        ret, out = p.ok("pread", fd, 4, 2)
        assert (ret, out) == (4, b"2345")
        p.ok("close", fd)
    finally:
        child.kill()
        child.wait()
    assert ciod.alive()


def test_a_connection_dies_with_its_process(ciod: Ciod, tmp_path: Path) -> None:
    """The connection is bound to the process that said hello (a pidfd and its
    address space, taken at the first request), not to its pid: once it ended,
    a rendezvous touches nothing, the call is EFAULT, the connection closes,
    and a RAS event names the process."""
    job = Job(ciod, tmp_path, job_id=10, ranks=(0, -1), image=b"img")  # noqa: F841 (keeps it running)
    child = job_process(["sleep", "60"])
    try:
        s, body = proc_hello(ciod, 10, child.pid)
        assert struct.unpack("<IIII", body[48:])[2] & 1                   # rendezvous granted
        p = Proc(s)
        fd, _ = p.ok("openat", AT_FDCWD, O_CREAT | O_RDWR | O_TRUNC, 0o644, data=path(tmp_path / "d"))
        child.kill()
        child.wait()
        # a process of the same user under that pid could be anything now
        assert p.fails("write", fd, 16, 0, data=struct.pack("<QQ", 4096, 16), flags=RDV) == errno.EFAULT
        assert closed(s)
        assert os.path.getsize(tmp_path / "d") == 0
    finally:
        child.kill()
        child.wait()
    assert re.search(rf"process {child.pid} ended: its I/O connection is closed", ciod.rastext())
    assert ciod.alive()


# ---- shared memory (LAT_DP_SHARE) and pipelined series ----

DP_SHARE = 0x0002
PIPE_FIRST, PIPE_NEXT = wire.HF_PIPE_FIRST, wire.HF_PIPE_NEXT     # header flags of a series
SHM_BASE = 0x7E0000000000                          # where the fake process "has" its region (unmapped there)

HOLDER = """
import fcntl, os, sys, time
def memfd(seal):
    fd = os.memfd_create("cnk-bigmem", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, 1 << 20)
    os.pwrite(fd, bytes(range(256)) * 4096, 0)
    if seal:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
    return fd
plain = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
os.ftruncate(plain, 1 << 20)
print(memfd(True), memfd(False), plain, flush=True)
time.sleep(60)
"""


def stats(c: Ciod) -> dict[str, int]:
    """The data path counters of LAT_CTL_COUNTERS, by lattice's names for them."""
    from lattice.transport import wire
    with c.connect(ROLE_CONTROL) as s:
        send(s, CTL_COUNTERS, b"", 4)
        _, _, body = recv(s)
    nsys, nbuckets, nstats, _ = struct.unpack("<IIII", body[-16:])
    off = 8 * nsys * (3 + nbuckets)
    return dict(zip(wire.CTR_NAMES, struct.unpack_from(f"<{nstats}Q", body, off)))


def share(p: Proc, base: int, length: int, fd: int) -> tuple[int, int]:
    p.seq += 1
    ret, err, _ = request(p.s, DP_SHARE, struct.pack("<QQqq", base, length, fd, 0), p.seq)
    return ret, err


def test_shared_memory_is_mapped_only_for_a_child_and_bounded(ciod: Ciod, tmp_path: Path) -> None:
    job = Job(ciod, tmp_path, job_id=11, ranks=(0, -1), image=b"img")  # noqa: F841 (keeps it running)
    holder = subprocess.Popen(as_job(["python3", "-c", HOLDER, str(tmp_path / "plain")]), stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout is not None
        sealed, unsealed, plain = map(int, holder.stdout.readline().split())
        # the holder is not a child of this connection's peer... from a pid we did not fork: refused
        s, body = proc_hello(ciod, 11, os.getppid())
        assert struct.unpack("<IIII", body[48:])[2] == 0                    # neither VM nor SHM granted
        assert share(Proc(s), SHM_BASE, 1 << 20, sealed) == (-1, errno.EPERM)
        s.close()
        # our child: both granted, but only a sealed memfd is mapped
        s, body = proc_hello(ciod, 11, holder.pid)
        assert struct.unpack("<IIII", body[48:])[2] == 1 | 2
        p = Proc(s)
        before = stats(ciod)
        assert share(p, SHM_BASE, 1 << 20, unsealed) == (-1, errno.EPERM)   # could shrink under ciod
        assert share(p, SHM_BASE, 1 << 20, plain) == (-1, errno.EBADF)      # a file, not memory
        assert share(p, SHM_BASE, 1 << 20, 999) == (-1, errno.EBADF)        # no such descriptor
        assert share(p, SHM_BASE, 2 << 20, sealed) == (-1, errno.EINVAL)    # larger than the memfd
        assert share(p, 2**64 - 4096, 8192, sealed) == (-1, errno.EINVAL)   # wraps around
        assert stats(ciod)["shm_refused"] - before["shm_refused"] == 5
        assert share(p, SHM_BASE, 1 << 20, sealed) == (0, 0)
        # a rendezvous inside the region reads the memfd: the address is not mapped in the
        # holder, so process_vm_readv could not have done it
        fd, _ = p.ok("openat", AT_FDCWD, O_CREAT | O_RDWR | O_TRUNC, 0o644, data=path(tmp_path / "out"))
        odd = 123457
        ret, _ = p.ok("write", fd, odd, 0, data=struct.pack("<QQ", SHM_BASE + 1000, odd), flags=RDV)
        assert ret == odd
        assert (tmp_path / "out").read_bytes() == (bytes(range(256)) * 4096)[1000:1000 + odd]
        # two segments, one read into the region
        ret, _ = p.ok("pread", fd, 300, 10, data=struct.pack("<QQQQ", SHM_BASE + 5, 100, SHM_BASE + 9000, 200), flags=RDV)
        assert ret == 300
        with open(f"/proc/{holder.pid}/fd/{sealed}", "rb") as m:
            mem = m.read()
        src = (tmp_path / "out").read_bytes()
        assert mem[5:105] == src[10:110] and mem[9000:9200] == src[110:310]
        # memory and file offset agreeing modulo 64 (read straight into the mapping), and not
        # (through the window: the kernel's copy is slow then), both with the file position
        for at, where in ((64, SHM_BASE + 4096 + 64), (64, SHM_BASE + 300001)):
            p.ok("lseek", fd, at, 0)
            ret, _ = p.ok("read", fd, odd - at, 0, data=struct.pack("<QQ", where, odd - at), flags=RDV)
            assert ret == odd - at
            with open(f"/proc/{holder.pid}/fd/{sealed}", "rb") as m:
                mem = m.read()
            assert mem[where - SHM_BASE:where - SHM_BASE + ret] == src[at:odd]
        d = {k: v - before[k] for k, v in stats(ciod).items() if k in before}
        assert d["shm"] == 4 and d["shm_bytes"] == odd + 300 + 2 * (odd - 64) and d["shm_shares"] == 1, d
        # a segment running past the region's end is not ciod's to touch there: it falls back to
        # process_vm_*, where the holder has no such memory: EFAULT, nothing written
        assert p.fails("pwrite", fd, 16, 0, data=struct.pack("<QQ", SHM_BASE + (1 << 20) - 8, 16), flags=RDV) == errno.EFAULT
        assert (tmp_path / "out").read_bytes() == src
        # dropped (execve): the region is gone for good
        assert share(p, 0, 0, -1) == (0, 0)
        assert p.fails("pwrite", fd, 16, 0, data=struct.pack("<QQ", SHM_BASE, 16), flags=RDV) == errno.EFAULT
        # a malformed share is refused and the connection stays in step
        p.seq += 1
        send(p.s, DP_SHARE, b"short", p.seq)
        t, _, body = recv(p.s)
        assert t in (ERROR, ERROR | REPLY) and sysret(body)[1] == errno.EINVAL
        p.ok("close", fd)
        s.close()
    finally:
        holder.kill()
        holder.wait()
    assert ciod.alive()


def test_a_failed_chunk_cancels_the_rest_of_its_series(ciod: Ciod, tmp_path: Path) -> None:
    job = Job(ciod, tmp_path, job_id=12, ranks=(0, -1), image=b"img")  # noqa: F841
    p = job.proc(0)
    fd, _ = p.ok("openat", AT_FDCWD, O_CREAT | O_RDWR | O_TRUNC, 0o644, data=path(tmp_path / "f"))
    before = stats(ciod)
    # a write series whose first chunk fails (bad descriptor): the next ones do not run
    assert p.fails("pwrite", 77, 0, 0, data=b"a" * 10, flags=PIPE_FIRST) == errno.EBADF
    assert p.fails("pwrite", fd, 0, 10, data=b"b" * 10, flags=PIPE_NEXT) == errno.ECANCELED
    assert p.fails("pwrite", fd, 0, 20, data=b"c" * 10, flags=PIPE_NEXT) == errno.ECANCELED
    assert (tmp_path / "f").read_bytes() == b""
    # a new series starts afresh; its chunks run in order
    assert p.ok("pwrite", fd, 0, 0, data=b"x" * 10, flags=PIPE_FIRST)[0] == 10
    assert p.ok("pwrite", fd, 0, 10, data=b"y" * 10, flags=PIPE_NEXT)[0] == 10
    assert (tmp_path / "f").read_bytes() == b"x" * 10 + b"y" * 10
    # a short read (end of file) ends a read series: the position does not move past it
    p.ok("lseek", fd, 15, 0)
    ret, out = p.ok("read", fd, 8, 0, flags=PIPE_FIRST)
    assert (ret, out) == (5, b"yyyyy")
    p.ok("pwrite", fd, 0, 20, 0, data=b"z" * 8)                             # the file grows meanwhile
    assert p.fails("read", fd, 8, 0, flags=PIPE_NEXT) == errno.ECANCELED
    assert p.ok("lseek", fd, 0, 1)[0] == 20
    d = {k: v - before[k] for k, v in stats(ciod).items() if k in before}
    assert d["pipe_series"] == 3 and d["pipe_chunks"] == 7 and d["pipe_cancelled"] == 3, d
    p.ok("close", fd)
    assert ciod.alive()


def test_a_silent_connection_is_dropped_and_ciod_keeps_serving(ciod_bin: Path, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """A peer that connects and never says hello must not hold a thread:
    after LATTICE_HELLO_TIMEOUT (30 s by default) ciod closes it with a RAS
    warning, while others are served meanwhile."""
    monkeypatch.setenv("LATTICE_HELLO_TIMEOUT", "1")
    c = Ciod(ciod_bin, tmp_path)
    try:
        silent = c.raw()
        assert status(c) == (0, PSET_SIZE, 0)         # served while the silent one waits
        assert closed(silent)                          # the close is the event (raw(): a 600 s guard)
        assert "closed: no hello within 1 s" in c.rastext()     # by LATTICE_HELLO_TIMEOUT, not the default 30
        assert status(c) == (0, PSET_SIZE, 0)
    finally:
        c.proc.terminate()
        c.proc.wait(10)
        c.log.close()


# ---- standard input (docs/protocol.md section 4.1) ----

def start_stdin_job(c: Ciod, cwd: Path, job_id: int, stdin_rank: int,
                    node_jobs: list[bytes] | None = None) -> tuple[socket.socket, list[socket.socket]]:
    """A placed job of ranks 0 and 1 on nodes 0 and 1 whose input goes to
    stdin_rank; node_jobs gets the nodes' NODE_JOB payloads."""
    nodes = [c.connect(ROLE_NODE, n) for n in range(PSET_SIZE)]
    ctl = c.connect(ROLE_CONTROL)
    exe = c.dir / "prog"
    exe.write_bytes(b"x")
    exe.chmod(0o755)
    payload = wire.placed_job_payload(job_id, os.getuid(), os.getgid(), [os.getgid()], [0, 1], 2, str(cwd), [],
                                      0, 1, [(0, 0, 0, 0), (1, 1, 0, 0)], [(str(exe), [str(exe)])], "",
                                      stdin_rank=stdin_rank)
    seq = send(ctl, CTL_JOB, payload)
    for n in nodes:
        while (m := recv(n))[0] != NODE_START:
            if m[0] == NODE_JOB and node_jobs is not None:
                node_jobs.append(m[2])
    t, q, body = recv(ctl)
    assert (t, q, sysret(body)[:2]) == (CTL_JOB | REPLY, seq, (0, 0)), body
    return ctl, nodes


def stdin_msg(job: int, data: bytes, flags: int = 0) -> bytes:
    return wire.STDIN.pack(job, len(data), flags) + data


def test_stdin_goes_to_its_rank_within_the_window(ciod: Ciod, tmp_path: Path) -> None:
    ctl, nodes = start_stdin_job(ciod, tmp_path, 61, stdin_rank=1)
    reader, other = Proc(ciod.connect(ROLE_PROC, 1, 61)), Proc(ciod.connect(ROLE_PROC, 0, 61))
    assert other.ok("read", 0, 100) == (0, b"")             # rank 0 reads end of file at once
    send(ctl, wire.CTL_STDIN, stdin_msg(61, b"hello\n"))
    t, _, body = recv(ctl)
    assert t == wire.CTL_STDIN_ACK and wire.STDIN.unpack(body)[:2] == (61, 6)
    assert reader.ok("read", 0, 100) == (6, b"hello\n")
    # more than the window while rank 1 does not read: the rest is refused, said in a RAS event
    chunk = bytes(range(256)) * (wire.STDIN_MAX // 256)
    sent = wire.STDIN_WINDOW // wire.STDIN_MAX + 8       # the window, a pipe's worth and more
    for _ in range(sent):
        send(ctl, wire.CTL_STDIN, stdin_msg(61, chunk))
    send(ctl, wire.CTL_STDIN, stdin_msg(61, b"", wire.STDIN_EOF))
    deadline = time.time() + 10
    while "over the window" not in ciod.rastext():
        assert time.time() < deadline, ciod.rastext()
        time.sleep(0.02)
    got = b""
    while True:
        n, data = reader.ok("read", 0, 1 << 16)
        if n == 0:
            break
        got += data
    # whole chunks, in order, at least what the window and a pipe hold; not all of them
    assert got == chunk * (len(got) // len(chunk)) and wire.STDIN_WINDOW <= len(got) < sent * len(chunk)
    # a message whose length disagrees with what it says closes the connection
    send(ctl, wire.CTL_STDIN, wire.STDIN.pack(61, 10, 0) + b"short")
    ctl.settimeout(10)
    while ctl.recv(1 << 16):                # acknowledgements of what was read, then the end
        pass
    assert "CTL_STDIN of 21 bytes announcing 10" in ciod.rastext()
    for n in nodes:
        send(n, NODE_EXIT, struct.pack("<QIIIi", 61, 0, nodes.index(n), EXIT_CODE, 0))
    deadline = time.time() + 5
    while status(ciod)[2] != 0:
        assert time.time() < deadline
        time.sleep(0.02)


def test_stdin_all_goes_on_when_a_rank_ends_without_reading(ciod: Ciod, tmp_path: Path) -> None:
    """Every rank reads; rank 0's connection closes without a read (the
    process ended): rank 1 still gets all of the input, window after window.
    Before, ciod waited for ever on rank 0's full pipe (and the job with it).
    The nodes learn who reads (lat_job_ext.stdin_rank in NODE_JOB), for the
    sandbox's pump (compute/cnode/stdin_pump.c)."""
    node_jobs: list[bytes] = []
    ctl, nodes = start_stdin_job(ciod, tmp_path, 62, stdin_rank=wire.STDIN_ALL, node_jobs=node_jobs)
    ngroups = 1                                     # lat_node_job, groups, then lat_job_ext
    assert [struct.unpack_from("<4I", b, 48 + 4 * ngroups)[3] for b in node_jobs] == [wire.STDIN_ALL] * 2
    gone = ciod.connect(ROLE_PROC, 0, 62)
    reader = Proc(ciod.connect(ROLE_PROC, 1, 62))
    gone.close()
    data = os.urandom(16 * wire.STDIN_MAX)          # four windows, many pipes
    got = bytearray()

    def read_all() -> None:
        while (r := reader.ok("read", 0, 1 << 16))[0]:
            got.extend(r[1])

    t = threading.Thread(target=read_all, daemon=True)
    t.start()
    ctl.settimeout(300)                             # a hang guard
    held = pos = 0
    while pos < len(data):
        if held + wire.STDIN_MAX <= wire.STDIN_WINDOW:
            send(ctl, wire.CTL_STDIN, stdin_msg(62, data[pos:pos + wire.STDIN_MAX]))
            held, pos = held + wire.STDIN_MAX, pos + wire.STDIN_MAX
        else:
            typ, _, body = recv(ctl)
            assert typ == wire.CTL_STDIN_ACK, typ
            held -= wire.STDIN.unpack(body)[1]
    send(ctl, wire.CTL_STDIN, stdin_msg(62, b"", wire.STDIN_EOF))
    t.join(300)
    assert not t.is_alive() and bytes(got) == data, len(got)
    for n in nodes:
        send(n, NODE_EXIT, struct.pack("<QIIIi", 62, 0, nodes.index(n), EXIT_CODE, 0))
    deadline = time.time() + 60
    while status(ciod)[2] != 0:
        assert time.time() < deadline
        time.sleep(0.02)
