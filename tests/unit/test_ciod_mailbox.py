"""The mailbox (docs/protocol.md section 6.4) against a real ciod: a process's
small calls through its shared page pair give the same results and errnos as
through the socket; garbage in the request slot is an EINVAL reply and a RAS
warning, never a crash; a process that dies mid-call leaves ciod serving; a
process that is not the node's child, or a memfd that could shrink, gets no
mailbox."""
from __future__ import annotations

import errno
import mmap
import os
import struct
import subprocess
import time
from pathlib import Path

from lattice.transport import wire
from test_ciod import (AT_FDCWD, as_job, ERROR, MAGIC, O_CREAT, O_RDWR, O_TRUNC, REPLY, STAT, SYS, VERSION, Ciod,  # noqa: F401
                       Job, Proc, ciod, ciod_bin, path, proc_hello, recv, request, send, stats)

MBOX_SHARE, MBOX_RING, DP_SHARE, PLUG_CALL, SYS_SOCKET = 0x0003, 0x0004, 0x0002, 0x0400, 0x031E
SIZE, REQ_MAX, REP_MAX = 16384, 8048, 8176        # wire.h LAT_MBOX_SIZE, _REQ_MAX, _REP_MAX
REQ_SEQ, SRV_SPIN, REP_SEQ, CLI_WAIT, REQ_H, REQ, REP_H, REP = 0, 4, 64, 68, 128, 144, 8192, 8208
HDR = wire.HDR

HOLDER = """
import fcntl, os, sys, time
def memfd(size, seal):
    fd = os.memfd_create("cnk-mailbox", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    if seal:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    return fd
plain = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
os.ftruncate(plain, 16384)
print(memfd(16384, True), memfd(16384, False), memfd(4096, True), plain, flush=True)
time.sleep(60)
"""


def holder(tmp_path: Path) -> tuple[subprocess.Popen[str], list[int]]:
    h = subprocess.Popen(as_job(["python3", "-c", HOLDER, str(tmp_path / "plain")]), stdout=subprocess.PIPE, text=True)
    assert h.stdout is not None
    return h, [int(x) for x in h.stdout.readline().split()]


def share(p: Proc, fd: int) -> tuple[int, int]:
    p.seq += 1
    ret, err, _ = request(p.s, MBOX_SHARE, struct.pack("<qqqq", fd, 0, 0, 0), p.seq)
    return ret, err


class Mailbox:
    """The process's side: the request slot written as cnk writes it, then a ring."""

    def __init__(self, p: Proc, pid: int, fd: int) -> None:
        self.p = p
        with open(f"/proc/{pid}/fd/{fd}", "r+b") as f:
            self.m = mmap.mmap(f.fileno(), SIZE)

    def u32(self, off: int) -> int:
        return int(struct.unpack_from("<I", self.m, off)[0])

    def raw(self, typ: int, payload: bytes, hdr: bytes | None = None) -> tuple[int, int, int, bytes]:
        """Puts one request in the slot (hdr: a header of our own) and rings;
        the reply's type, ret, err and data."""
        self.p.seq += 1
        seq = self.p.seq
        self.m[REQ:REQ + len(payload)] = payload
        self.m[REQ_H:REQ_H + 16] = hdr if hdr is not None else HDR.pack(MAGIC, VERSION, 0, typ, len(payload), seq)
        struct.pack_into("<I", self.m, REQ_SEQ, seq)
        send(self.p.s, MBOX_RING, b"", seq)         # a ring carries its request's seq
        deadline = time.monotonic() + 600                # a hang guard: the reply is the event
        while self.u32(REP_SEQ) != seq:
            assert time.monotonic() < deadline, "no reply in the mailbox"
            time.sleep(0.0005)
        magic, version, rflags, rtyp, ln, rseq = HDR.unpack_from(self.m, REP_H)
        assert (magic, version, rflags, rseq) == (MAGIC, VERSION, 0, seq) and 16 <= ln <= REP_MAX
        ret, err = struct.unpack_from("<qi", self.m, REP)
        return rtyp, ret, err, bytes(self.m[REP + 16:REP + ln])

    def call(self, name: str, *a: int, data: bytes = b"") -> tuple[int, int, bytes]:
        args = (list(a) + [0, 0, 0, 0])[:4]
        typ, ret, err, out = self.raw(SYS[name], struct.pack("<4q", *args) + data)
        assert typ == SYS[name] | REPLY
        return ret, err, out


def script(call: object, d: Path) -> list[tuple[int, int, bytes]]:
    """The same calls, through the socket or the mailbox; results made
    comparable (a descriptor number, a stat's inode and times differ)."""
    out = []
    c = call  # type: ignore[assignment]
    fd, err, _ = c("openat", AT_FDCWD, O_CREAT | O_RDWR | O_TRUNC, 0o644, data=path(d / "f"))
    out.append((int(fd >= 0), err, b""))
    out.append(c("pwrite", fd, 0, 3, data=b"0123456789"))
    out.append(c("pread", fd, 8, 1))
    out.append(c("pread", fd, 100, 50))                         # past the end: 0
    out.append(c("write", fd, data=b"x" * 4000))                 # a whole page's worth
    out.append(c("lseek", fd, 0, 2))
    ret, err, st = c("fstatat", fd, 0x1000, data=b"\0")          # AT_EMPTY_PATH
    out.append((ret, err, STAT.unpack(st)[3:4] + (STAT.unpack(st)[8],) if st else ()))  # type: ignore[arg-type]
    out.append(c("read", 999, 8))                                # EBADF
    out.append(c("openat", AT_FDCWD, 0, 0, data=path(d / "missing")))  # ENOENT
    out.append(c("unlinkat", AT_FDCWD, 0, data=path(d / "missing")))
    out.append(c("mkdirat", AT_FDCWD, 0o755, data=path(d / "sub")))
    out.append(c("mkdirat", AT_FDCWD, 0o755, data=path(d / "sub")))  # EEXIST
    out.append(c("openat", AT_FDCWD, 0, 0, data=b"no NUL"))      # malformed: EINVAL
    out.append(c("close", fd))
    out.append(c("close", fd))                                   # EBADF
    out.append((0, 0, (d / "f").read_bytes()))
    return out


def test_calls_through_the_mailbox_match_the_socket(ciod: Ciod, tmp_path: Path) -> None:
    job = Job(ciod, tmp_path, job_id=21, ranks=(0, -1), image=b"img")  # noqa: F841 (keeps it running)
    h, (sealed, _unsealed, _small, _plain) = holder(tmp_path)
    try:
        s, _ = proc_hello(ciod, 21, h.pid)
        p = Proc(s)
        before = stats(ciod)
        assert share(p, sealed) == (0, 0)
        mb = Mailbox(p, h.pid, sealed)
        (tmp_path / "sock").mkdir()
        (tmp_path / "mbox").mkdir()
        by_socket = script(p.call, tmp_path / "sock")
        by_mailbox = script(mb.call, tmp_path / "mbox")
        assert by_mailbox == by_socket
        errs = [e for _, e, _ in by_mailbox]
        assert errno.EBADF in errs and errno.ENOENT in errs and errno.EEXIST in errs and errno.EINVAL in errs
        # the socket still serves beside it; in order, so every ring before this was read
        assert p.ok("getcwd", 4096)[0] > 0
        d = {k: v - before[k] for k, v in stats(ciod).items() if k in before}
        assert d["mbox_shares"] == 1 and d["mbox_calls"] == len(by_mailbox) - 1 and d["mbox_bad"] == 0, d
        assert d["mbox_rings"] == d["mbox_calls"]
        s.close()
    finally:
        h.kill()
        h.wait()
    assert ciod.alive()


def test_garbage_in_the_mailbox_is_refused_and_ciod_keeps_serving(ciod: Ciod, tmp_path: Path) -> None:
    job = Job(ciod, tmp_path, job_id=22, ranks=(0, -1), image=b"img")  # noqa: F841
    h, (sealed, _u, _s, _p) = holder(tmp_path)
    try:
        s, _ = proc_hello(ciod, 22, h.pid)
        p = Proc(s)
        assert share(p, sealed) == (0, 0)
        mb = Mailbox(p, h.pid, sealed)
        before = stats(ciod)
        args = struct.pack("<4q", 1, 0, 0, 0)

        bad = [  # payload, type, length, magic, header seq (None: this request's), header flags
            (args, SYS["close"], 32, 0xDEADBEEF, None, 0),     # bad magic
            (args, SYS["close"], 32, MAGIC, 12345, 0),         # header seq is not req_seq
            (args, SYS["write"], REQ_MAX + 1, MAGIC, None, 0),  # beyond the slot
            (args, SYS["write"], 0xFFFFFFFF, MAGIC, None, 0),
            (args[:8], SYS["close"], 8, MAGIC, None, 0),       # less than its arguments
            (args, DP_SHARE, 32, MAGIC, None, 0),              # not a call the mailbox carries
            (args, PLUG_CALL, 32, MAGIC, None, 0),
            (args, 0x7FFF, 32, MAGIC, None, 0),                # no such type
            (args, SYS_SOCKET, 32, MAGIC, None, 0),            # socket calls stay on the socket
            (args, SYS["pwrite"], 32, MAGIC, None, wire.HF_RDV),         # a rendezvous: on the socket only
            (args, SYS["pwrite"], 32, MAGIC, None, wire.HF_PIPE_FIRST),  # a series too
            (args, SYS["close"], 32, MAGIC, None, 0x80),       # an unknown flag
        ]
        for payload, typ, ln, magic, seq, flags in bad:
            hdr = HDR.pack(magic, VERSION, flags, typ, ln, p.seq + 1 if seq is None else seq)
            rtyp, ret, err, _ = mb.raw(typ, payload, hdr)
            assert (rtyp, ret, err) == (ERROR | REPLY, -1, errno.EINVAL), (hex(typ), ln, rtyp, ret, err)
        d = {k: v - before[k] for k, v in stats(ciod).items() if k in before}
        assert d["mbox_bad"] == len(bad) and d["mbox_calls"] == 0, d
        ras = ciod.rastext()
        for why in ("bad header", "header seq 12345", "beyond the mailbox", "less than its arguments",
                    "0x031e (header flags 0x00) may not travel in the mailbox",
                    "0x0305 (header flags 0x01) may not travel in the mailbox"):   # the rest: folded (burst)
            assert why in ras, why
        # the next good call, through the mailbox and the socket, is served
        fd, err, _ = mb.call("openat", AT_FDCWD, O_CREAT | O_RDWR | O_TRUNC, 0o644, data=path(tmp_path / "after"))
        assert fd >= 0 and err == 0
        assert mb.call("pwrite", fd, 0, 0, data=b"still here") == (10, 0, b"")
        assert p.ok("close", fd)[0] == 0
        assert (tmp_path / "after").read_bytes() == b"still here"
        s.close()
    finally:
        h.kill()
        h.wait()
    assert ciod.alive()


def test_a_process_dying_mid_call_leaves_ciod_serving(ciod: Ciod, tmp_path: Path) -> None:
    job = Job(ciod, tmp_path, job_id=23, ranks=(0, 1), image=b"img")  # noqa: F841
    h, (sealed, _u, _s, _p) = holder(tmp_path)
    s, _ = proc_hello(ciod, 23, h.pid)
    p = Proc(s)
    assert share(p, sealed) == (0, 0)
    mb = Mailbox(p, h.pid, sealed)
    fd, _, _ = mb.call("openat", AT_FDCWD, O_CREAT | O_RDWR | O_TRUNC, 0o644, data=path(tmp_path / "dying"))
    # a request stored and rung, then the process is gone before the reply
    p.seq += 1
    payload = struct.pack("<4q", fd, 0, 0, 0) + b"last words"
    mb.m[REQ:REQ + len(payload)] = payload
    mb.m[REQ_H:REQ_H + 16] = HDR.pack(MAGIC, VERSION, 0, SYS["pwrite"], len(payload), p.seq)
    struct.pack_into("<I", mb.m, REQ_SEQ, p.seq)
    send(s, MBOX_RING)
    h.kill()
    h.wait()
    s.close()
    mb.m.close()
    # ciod serves the job's other process as before
    q = job.proc(1)
    assert q.ok("getcwd", 4096)[0] > 0
    assert ciod.alive()


def test_no_mailbox_for_a_stranger_or_a_memfd_that_can_change(ciod: Ciod, tmp_path: Path) -> None:
    job = Job(ciod, tmp_path, job_id=24, ranks=(0, -1), image=b"img")  # noqa: F841
    h, (sealed, unsealed, small, plain) = holder(tmp_path)
    try:
        # a pid that is not a child of the connection's peer: no LAT_DP_SHM, no mailbox
        s, _ = proc_hello(ciod, 24, os.getppid())
        assert share(Proc(s), sealed) == (-1, errno.EPERM)
        s.close()
        s, _ = proc_hello(ciod, 24, h.pid)
        p = Proc(s)
        before = stats(ciod)
        assert share(p, unsealed) == (-1, errno.EPERM)     # could shrink under ciod's mapping
        assert share(p, small) == (-1, errno.EINVAL)       # smaller than a mailbox
        assert share(p, plain) == (-1, errno.EBADF)        # a file, not memory
        assert share(p, -5) == (-1, errno.EBADF)
        assert share(p, 999) == (-1, errno.EBADF)
        # a ring without a mailbox is ignored; a malformed share is an error; the connection stays in step
        p.seq += 1
        send(s, MBOX_RING, b"", p.seq)
        p.seq += 1
        send(s, MBOX_SHARE, b"short", p.seq)
        t, _, body = recv(s)
        assert t in (ERROR, ERROR | REPLY) and struct.unpack_from("<qi", body)[1] == errno.EINVAL
        assert p.ok("getcwd", 4096)[0] > 0
        d = {k: v - before[k] for k, v in stats(ciod).items() if k in before}
        assert d["mbox_shares"] == 0 and d["mbox_calls"] == 0, d
        s.close()
    finally:
        h.kill()
        h.wait()
    assert ciod.alive()
