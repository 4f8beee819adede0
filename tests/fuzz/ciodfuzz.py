#!/usr/bin/env python3
"""ciodfuzz: a protocol fuzzer for ciod, the I/O node daemon.

It starts a standalone ciod as the unit tests do (tests/unit/test_ciod.py:
a unix socket in a private directory, the test key), plays the service
node and two compute nodes so that a job runs (then PROC and PMI hellos
are accepted), and throws random and structure-aware inputs at every kind
of connection: garbage before the hello and bad hellos; after a valid
hello, control, node, proc (function shipping, data path, mailbox,
plug-in calls) and PMI (PMI-1 lines, PMI-2 length-prefixed commands).
After each round it checks that ciod still runs, that a fresh control
session answers CTL_STATUS, and that its threads and descriptors went
back to what they were; at the end a normal process session writes and
reads back a file.

Used by tests/unit/test_ciod_fuzz.py (about 10^5 inputs) and as a script
(scripts/fuzz.sh, `python3 tests/fuzz/ciodfuzz.py --inputs N --seed S`).
Everything a case sends is a function of (seed, case index) and of the
target's ids (job id, holder pid): a failure prints both and the bytes.

Every connection is set up by open_session(): the handshake (wire v2:
take ciod's challenge, say a hello MACed with the block key, check ciod's
proof in the ack) is there and only there.  Hellos a pre-hello case sends
are Hello items, made on the connection they go out on (they need its
challenge).  After the hello ciod closes a connection on a message whose
seq is not after the last one: valid sessions number theirs increasing
(sometimes skipping, sometimes across the 2^32 wrap), and a few messages
are sent again or out of order on purpose, each the last of its case.

The job runs PPN processes on each of nodes 0 and 1 (a placed job), and
ciod takes one PROC connection per process at a time (EBUSY for a second
one, and for a moment after one closed, until the job's I/O worker has
noticed): a PROC case holds its process's lock, retries a hello answered
EBUSY briefly, and some cases try a second hello for their process while
theirs is open, which must be refused with EBUSY.
"""
from __future__ import annotations

import argparse
import errno
import hashlib
import mmap
import os
import random
import re
import selectors
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "service"))
from lattice.transport import wire  # noqa: E402  (the Python mirror of wire.h: layouts and payload builders)


# ---- the protocol's numbers, read from the one header ----

def wire_numbers(path: Path = ROOT / "protocol/lattice/wire.h") -> dict[str, int]:
    """Every enumerator and plain numeric #define of wire.h, by name: new
    message types and roles are fuzzed as soon as they are declared."""
    text = re.sub(r"/\*.*?\*/", "", path.read_text(), flags=re.S)
    out: dict[str, int] = {}
    for m in re.finditer(r"\b(LAT_[A-Z0-9_]+)\s*=\s*(0x[0-9A-Fa-f]+|\d+)\s*,", text):
        out[m[1]] = int(m[2], 0)
    for m in re.finditer(r"#define\s+(LAT_[A-Z0-9_]+)\s+\(?(0x[0-9A-Fa-f]+|\d+)u?\)?\s*$", text, flags=re.M):
        out[m[1]] = int(m[2], 0)
    return out


W = wire_numbers()
MAGIC, VERSION, REPLY = W["LAT_MAGIC"], W["LAT_VERSION"], W["LAT_REPLY"]
MAX_IO, MAX_PAYLOAD = wire.MAX_IO, wire.MAX_PAYLOAD
HDR = wire.HDR
HELLO, ERROR = W["LAT_HELLO"], W["LAT_ERROR"]
ROLE_CONTROL, ROLE_NODE, ROLE_PROC, ROLE_PMI = (W[f"LAT_ROLE_{r}"] for r in ("CONTROL", "NODE", "PROC", "PMI"))
SYS = {k[8:].lower(): v for k, v in W.items() if k.startswith("LAT_SYS_") and not k.startswith("LAT_SYS__")}
CTL = {k[8:].lower(): v for k, v in W.items() if k.startswith("LAT_CTL_")}
NODE = {k[9:].lower(): v for k, v in W.items() if k.startswith("LAT_NODE_")}
_ENUM = re.search(r"enum lat_type \{(.*?)\};", re.sub(r"/\*.*?\*/", "", (ROOT / "protocol/lattice/wire.h").read_text(),
                                                        flags=re.S), re.S)
ALL_TYPES = sorted({int(v, 0) for k, v in re.findall(r"\b(LAT_[A-Z0-9_]+)\s*=\s*(0x[0-9A-Fa-f]+)", _ENUM[1] if _ENUM else "")
                    if not k.startswith("LAT_SYS__")})
DP_SHARE, MBOX_SHARE, MBOX_RING, PLUG_CALL = W["LAT_DP_SHARE"], W["LAT_MBOX_SHARE"], W["LAT_MBOX_RING"], W["LAT_PLUG_CALL"]
RDV, PIPE_FIRST, PIPE_NEXT = W["LAT_HF_RDV"], W["LAT_HF_PIPE_FIRST"], W["LAT_HF_PIPE_NEXT"]   # lat_hdr.flags
MBOX_SIZE, MBOX_REQ_SLOT = W["LAT_MBOX_SIZE"], W["LAT_MBOX_REQ_SLOT"]
CHALLENGE = W["LAT_CHALLENGE"]
PSET, PSET_SIZE = 1, 4          # nodes 0, 1 run the job; 2, 3 are for node sessions
PPN = 4                         # the job's processes per node: PROC and PMI sessions at once
SEQ_MASK = 0xFFFFFFFF
FUZZ_ABS = b"/nonexistent-lattice-fuzz"   # the only absolute paths a process case names
# CTL_SHUTDOWN ends ciod by design: a control case never sends it
NEVER_ON_CONTROL = {CTL["shutdown"]}


TYPE_NAMES = {int(v, 0): k for k, v in re.findall(r"\b(LAT_[A-Z0-9_]+)\s*=\s*(0x[0-9A-Fa-f]+)", _ENUM[1] if _ENUM else "")
              if not k.startswith("LAT_SYS__")}


class FuzzFailure(AssertionError):
    """ciod died, hung, leaked or answered out of protocol: a finding."""


class HarnessFailure(RuntimeError):
    """The fuzzer itself broke (a thread of its fake service node or nodes
    died, a bug in its own code): not a finding about ciod."""


# Every wait of the harness is for an event (a reply, a connection closed,
# a count back to its baseline); this bounds each one only so that a hang
# ends the run: ciod answering nothing for this long is a hang, however
# loaded the host.
GUARD_S = float(os.environ.get("FUZZ_HANG_SECONDS", "300"))


# ---- sessions: the one place a connection is set up ----

def connect(addr: str, timeout: float = GUARD_S) -> socket.socket:
    if addr.startswith("unix:"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(addr[5:])
        return s
    host, port = addr[4:].rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=timeout)


def recv_exact(s: socket.socket, n: int) -> bytes:
    b = b""
    while len(b) < n:
        chunk = s.recv(n - len(b))
        if not chunk:
            raise EOFError("connection closed early")
        b += chunk
    return b


def recv_msg(s: socket.socket) -> tuple[int, int, bytes]:
    magic, version, flags, typ, ln, seq = HDR.unpack(recv_exact(s, HDR.size))
    if (magic, version, flags) != (MAGIC, VERSION, 0) or ln > MAX_PAYLOAD:
        raise FuzzFailure(f"reply header magic 0x{magic:x} version {version} len {ln}")
    return typ, seq, recv_exact(s, ln)


@dataclass
class Session:
    sock: socket.socket
    err: int                    # the hello's answer: 0 or an errno
    ack: bytes                  # the hello ack's payload
    seq: int = 1                # last seq used on this connection (the hello's)

    def next_seq(self) -> int:
        """Messages of a valid session are numbered after the hello's, one by one."""
        self.seq = (self.seq + 1) & SEQ_MASK
        return self.seq

    def close(self) -> None:
        self.sock.close()


def take_challenge(s: socket.socket) -> bytes:
    """ciod's first message on every connection: LAT_CHALLENGE (seq 0) with its nonce."""
    typ, seq, body = recv_msg(s)
    if (typ, seq, len(body)) != (CHALLENGE, 0, wire.NONCE_BYTES):
        raise FuzzFailure(f"a connection began with type 0x{typ:04x} seq {seq}, {len(body)} bytes, not a challenge")
    return body


def hello_bytes(key: bytes, challenge: bytes, role: int, node: int = 0, job: int = 0, extra: bytes = b"",
                seq: int = 1) -> tuple[bytes, bytes]:
    """A v2 hello answering challenge, MACed with key (extra: a lat_hello_proc
    and whatever follows, MACed too): (the message, our nonce)."""
    body, nonce = wire.hello_payload(key, challenge, role, node, job, extra)
    return frame(HELLO, body, seq), nonce


# the last hello ciod accepted, on whichever connection: what a replay case sends on another
RECORDED: list[bytes] = [b""]


def open_session(addr: str, key: bytes, role: int, node: int = 0, job: int = 0, extra: bytes = b"",
                 timeout: float = GUARD_S, seq: int = 1) -> Session:
    """Connects and does the handshake as `role`: every fuzz connection past
    the hello, and every health check, is set up here (as
    tests/unit/test_ciod.py Ciod.hello).  An ack that accepts us must carry
    ciod's proof (HMAC with the block key over both nonces and the ack).
    The socket keeps `timeout` as a hang guard on each later read."""
    s = connect(addr, timeout)
    try:
        challenge = take_challenge(s)
        msg, nonce = hello_bytes(key, challenge, role, node, job, extra, seq)
        s.sendall(msg)
        typ, rseq, body = recv_msg(s)
    except TimeoutError as e:
        s.close()
        raise FuzzFailure(f"ciod did not answer a hello (role {role}) in {timeout:.0f} s (hang)") from e
    except BaseException:
        s.close()
        raise
    dp = role == ROLE_PROC and len(extra) == wire.HELLO_PROC.size
    err = struct.unpack_from("<i", body)[0] if len(body) >= 4 else -1
    want = wire.HELLO_ACK.size + (wire.DATAPATH.size if dp and err == 0 else 0)
    if typ != HELLO | REPLY or rseq != seq or len(body) != want:
        s.close()
        raise FuzzFailure(f"hello (role {role}, {len(extra)} bytes after it) answered with type 0x{typ:04x} "
                          f"seq {rseq}, {len(body)} bytes, not {want}")
    if err == 0:
        if not wire.ack_ok(key, challenge, nonce, body):
            s.close()
            raise FuzzFailure(f"ciod accepted a hello (role {role}) with an ack whose proof is wrong")
        RECORDED[0] = msg
    elif body[wire.ACK_FIELDS.size:wire.HELLO_ACK.size] != bytes(wire.MAC_BYTES) and \
            not wire.ack_ok(key, challenge, nonce, body):
        s.close()
        raise FuzzFailure(f"a refusal ({os.strerror(err)}) carries a proof that is neither zeroes nor right")
    return Session(s, err, body, seq)


def open_proc_session(addr: str, key: bytes, node: int, job: int, extra: bytes = b"", seq: int = 1,
                      wait: float = GUARD_S) -> tuple[Session, int]:
    """A PROC hello, again while it is answered EBUSY: the process's last
    connection is closed (callers hold the process's lock) and only the job's
    worker has still to notice, which it must however long that takes on a
    loaded host.  The session and how many EBUSYs it took; EBUSY for `wait`
    s (a hang guard) is a closed connection ciod never let go: a finding."""
    busy = 0
    deadline = time.monotonic() + wait
    while True:
        sess = open_session(addr, key, ROLE_PROC, node, job, extra, seq=seq)
        if sess.err != errno.EBUSY:
            return sess, busy
        sess.close()
        if time.monotonic() > deadline:
            raise FuzzFailure(f"a PROC hello for process {node & 0xFFFF}.{node >> 16} of job {job} was answered "
                              f"EBUSY for {wait:.0f} s after its last connection closed (hang)")
        busy += 1
        time.sleep(0.005)


# ---- the target: ciod, the service node, two compute nodes, a job ----

HOLDER = r"""
import fcntl, os, sys, time
def memfd(size):
    fd = os.memfd_create("cnk-bigmem", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
    return fd
print(memfd(1 << 20), memfd(int(sys.argv[1])), flush=True)
time.sleep(1e9)
"""


def as_owner(argv: list[str], uid: int, gid: int) -> list[str]:
    """argv as a process of the job's owner: as root, setpriv to uid/gid (the
    job's I/O worker, which runs as the owner without capabilities, may reach
    only such a process's memory, as cnode's children)."""
    if os.geteuid() != 0 or uid == 0:
        return argv
    return ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--", *argv]


def ciod_binary() -> Path:
    if os.environ.get("CIOD_BIN"):
        return Path(os.environ["CIOD_BIN"])
    subprocess.run(["make", "-s", "-C", str(ROOT), "ciod"], check=True)
    return ROOT / "build/bin/ciod"


class Reader(threading.Thread):
    """A thread of the harness that reads one of ciod's long-lived
    connections (the fake service node's, a fake node's) for the whole run.
    It waits for ciod's messages however long they take (no read timeout:
    a node hears nothing between jobs), and its end is never silent: why it
    ended is kept in `failure`, a FuzzFailure when ciod closed the
    connection or sent a bad message, a HarnessFailure when the harness
    itself broke, and Target.check() and every wait on it raise that."""

    def __init__(self, target: "Target", name: str, role: int, node: int = 0) -> None:
        super().__init__(daemon=True, name=name)
        self.t = target
        self.s = open_session(target.addr, target.key, role, node)
        if self.s.err:
            self.s.close()
            raise FuzzFailure(f"{name}: hello refused: {os.strerror(self.s.err)}")
        self.s.sock.settimeout(None)            # the connect timeout is not a limit on ciod's silence
        self.cv = threading.Condition()
        self.wlock = threading.Lock()
        self.failure: BaseException | None = None
        self.closing = False                    # Target.close(): an end then is no failure

    def serve(self) -> None:
        raise NotImplementedError

    def run(self) -> None:
        try:
            self.serve()
            why: BaseException = HarnessFailure(f"the {self.name} thread stopped reading")
        except FuzzFailure as e:
            why = FuzzFailure(f"{self.name}: {e}")
        except (EOFError, ConnectionError) as e:
            why = (FuzzFailure(f"ciod exited with {self.t.proc.returncode} ({self.name} lost its connection)")
                   if not self.t.alive() else FuzzFailure(f"ciod closed the {self.name} connection: {e!r}"))
        except BaseException as e:  # noqa: BLE001  (whatever it is, it is reported, not lost)
            why = HarnessFailure(f"the {self.name} thread died: "
                                 + "".join(traceback.format_exception(e)).rstrip())
        with self.cv:
            if not self.closing:
                self.failure = why
            self.cv.notify_all()

    def check(self) -> None:
        if self.failure is not None:
            raise self.failure

    def wait(self, pred: Callable[[], bool], what: str, timeout: float = GUARD_S) -> None:
        """Until pred() holds (checked under self.cv, notified on every
        message) or this reader ended; `timeout` is a hang guard."""
        with self.cv:
            done = self.cv.wait_for(lambda: pred() or self.failure is not None, timeout)
        self.check()
        if not done:
            raise FuzzFailure(f"the {self.name} waited {timeout:.0f} s for {what} (hang)")

    def send(self, frame_of: Callable[[int], bytes]) -> None:
        """Sends one message numbered after the last (frame_of(seq)); a
        connection this reader saw end raises why it ended."""
        try:
            with self.wlock:                    # one message at a time, in the order of their seqs
                self.s.sock.sendall(frame_of(self.s.next_seq()))
        except OSError:
            if threading.current_thread() is not self:
                self.join(GUARD_S)              # the reader sees the same end: report its reason
                self.check()
            raise


class FakeNode(Reader):
    """A compute node that takes its pushes and, like cnode, reports an
    exit when a job other than the fixture's is killed."""

    def __init__(self, target: "Target", node: int) -> None:
        super().__init__(target, f"fake node {node}", ROLE_NODE, node)
        self.node = node
        self.jobs: dict[int, int] = {}          # job id -> rank of the node's first process

    def serve(self) -> None:
        while True:
            typ, _, body = recv_msg(self.s.sock)
            if typ == NODE["job"]:
                job, _size, rank = struct.unpack_from("<QQI", body)
                self.jobs[job] = rank
            elif typ == NODE["kill"] and self.jobs:
                for job, rank in list(self.jobs.items()):
                    if job != self.t.job_id:
                        self.exit(job, rank, wire.EXIT_SIGNAL, 9)

    def exit(self, job: int, rank: int, how: int = wire.EXIT_CODE, value: int = 0) -> None:
        self.jobs.pop(job, None)
        self.send(lambda seq: frame(NODE["exit"], wire.EXIT.pack(job, rank, self.node, how, value), seq))


class Owner(Reader):
    """The service node's control connection that owns the job: drains what
    ciod sends it and completes every fence (CTL_FENCE -> CTL_FENCE_OUT)."""

    def __init__(self, target: "Target") -> None:
        super().__init__(target, "fake service node", ROLE_CONTROL)
        self.replies: dict[int, bytes] = {}
        self.ended: set[int] = set()
        self.counts: dict[int, int] = {}

    def serve(self) -> None:
        while True:
            typ, seq, body = recv_msg(self.s.sock)
            self.counts[typ] = self.counts.get(typ, 0) + 1
            if typ == CTL["fence"] and len(body) >= wire.FENCE.size:
                job, epoch, nkv, flags, _ = wire.FENCE.unpack_from(body)
                if not flags & wire.FENCE_MORE:
                    self.send_msg(CTL["fence_out"], wire.FENCE.pack(job, epoch, nkv, 0, 0) + body[wire.FENCE.size:])
            with self.cv:
                if typ & REPLY:
                    self.replies[seq] = body
                elif typ == CTL["job_end"]:
                    self.ended.add(struct.unpack("<Q", body)[0])
                self.cv.notify_all()

    def send_msg(self, typ: int, payload: bytes) -> int:
        sent: list[int] = []

        def framed(seq: int) -> bytes:
            sent.append(seq)
            return HDR.pack(MAGIC, VERSION, 0, typ, len(payload), seq) + payload
        self.send(framed)
        return sent[0]


class Sink(threading.Thread):
    """127.0.0.1 TCP and UDP ports of ours: the only peers a shipped socket
    call may name (addresses are rewritten to them).  Accepted connections
    never send (a READ on them waits) and are read and dropped, until the
    end of the round."""

    def __init__(self) -> None:
        super().__init__(daemon=True, name="sink")
        self.tcp = socket.socket()
        self.tcp.bind(("127.0.0.1", 0))
        self.tcp.listen(64)
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.ports = (self.tcp.getsockname()[1], self.udp.getsockname()[1])
        self.held: list[socket.socket] = []
        self.lock = threading.Lock()

    def run(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self.tcp, selectors.EVENT_READ)
        try:
            while True:
                for key, _ in sel.select():
                    if key.fileobj is self.tcp:
                        c, _ = self.tcp.accept()
                        c.setblocking(False)
                        with self.lock:
                            self.held.append(c)
                        sel.register(c, selectors.EVENT_READ)
                        continue
                    try:
                        if key.fileobj.recv(1 << 20) == b"":   # type: ignore[union-attr]
                            raise OSError
                    except BlockingIOError:
                        pass
                    except OSError:
                        sel.unregister(key.fileobj)
        except (OSError, ValueError):
            pass

    def release(self) -> None:
        with self.lock:
            for c in self.held:
                c.close()
            self.held.clear()
        try:
            while True:
                self.udp.recv(1 << 16, socket.MSG_DONTWAIT)
        except OSError:
            pass


class Target:
    """A running ciod with a job on nodes 0 and 1, ready to be fuzzed."""

    def __init__(self, binary: Path | None = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="ciodfuzz-", dir="/tmp"))
        os.chmod(self.dir, 0o755)
        self.key = bytes(random.Random(7).getrandbits(8) for _ in range(32))
        (self.dir / "key").write_text(self.key.hex() + "\n")
        (self.dir / "key").chmod(0o600)
        # the job's files: a tree of its own, nothing else under it, open to the job's owner
        self.workroot = Path(tempfile.mkdtemp(prefix="ciodfuzz-work-", dir="/tmp"))
        os.chmod(self.workroot, 0o755)
        self.work = self.workroot / "w"
        self.work.mkdir()
        os.chmod(self.work, 0o777)
        self.exe = self.workroot / "prog"
        self.exe.write_bytes(b"\x7fELF fuzz image\n")
        self.exe.chmod(0o755)
        # as root, the job runs as nobody: shipped calls must not act as root on this box
        self.uid, self.gid = (65534, 65534) if os.geteuid() == 0 else (os.getuid(), os.getgid())
        self.addr = f"unix:{self.dir / 'ciod.sock'}"
        self.ras = self.dir / "ras.log"
        self.logf = open(self.dir / "ciod.log", "ab")
        # ciod drops a peer silent before its hello for this long: every connection of the fuzzer
        # says its hello or closes, so only a harness stalled on a loaded host would be dropped
        env = dict(os.environ, LATTICE_HELLO_TIMEOUT=str(int(GUARD_S)))
        self.proc = subprocess.Popen(
            [str(binary or ciod_binary()), "--block", "F", "--pset", str(PSET), "--pset-size", str(PSET_SIZE),
             "--listen", self.addr, "--key-file", str(self.dir / "key"), "--ras", str(self.ras),
             "--location", "R00-M0-N00-I:J01"], stdout=self.logf, stderr=subprocess.STDOUT, env=env)
        self.holder: subprocess.Popen[str] | None = None
        try:
            end = time.monotonic() + GUARD_S
            while not (self.dir / "ciod.sock").exists():     # it listens: ready
                if self.proc.poll() is not None or time.monotonic() > end:
                    raise FuzzFailure(f"ciod did not start:\n{self.logtext()}")
                time.sleep(0.02)
            # the process PROC hellos name: our child, as the job's owner (as root: nobody, whose
            # I/O worker may then reach its memory), so rendezvous and shared memory are granted
            self.holder = subprocess.Popen(as_owner([sys.executable, "-c", HOLDER, str(MBOX_SIZE)], self.uid,
                                                    self.gid), stdout=subprocess.PIPE, text=True)
            assert self.holder.stdout is not None
            self.shm_fd, self.mbox_fd = map(int, self.holder.stdout.readline().split())
            with open(f"/proc/{self.holder.pid}/fd/{self.mbox_fd}", "r+b") as f:
                self.mbox = mmap.mmap(f.fileno(), MBOX_SIZE)
            self.sink = Sink()
            self.sink.start()
            self.job_id = 0
            self.owner = Owner(self)
            self.owner.start()
            self.nodes = [FakeNode(self, n) for n in (0, 1)]
            for n in self.nodes:
                n.start()
            # one PROC and one PMI connection per process, one NODE connection per node
            self.locks = {f"{kind}{n}.{t}": threading.Lock() for kind in ("proc", "pmi") for n in (0, 1)
                          for t in range(PPN)}
            self.locks.update({"node2": threading.Lock(), "node3": threading.Lock()})
            self.start_job(1001)
            self.settle_base()
        except BaseException:
            self.close()
            raise

    # -- the job --

    def start_job(self, job: int) -> None:
        """A placed job of PPN processes on each of nodes 0 and 1 (ranks
        node * PPN + t)."""
        slots = [(n * PPN + t, n, t, 0) for n in (0, 1) for t in range(PPN)]
        payload = wire.placed_job_payload(job, self.uid, self.gid, [self.gid], [0, PPN, -1, -1], 2 * PPN,
                                          str(self.work), ["A=1"], 0, PPN, slots, [(str(self.exe), ["prog", "-x"])],
                                          "")
        seq = self.owner.send_msg(CTL["job"], payload)
        self.owner.wait(lambda: seq in self.owner.replies, "the CTL_JOB reply")
        ret, err, _ = wire.SYSRET.unpack_from(self.owner.replies.pop(seq))
        if ret != 0:
            raise FuzzFailure(f"job {job} refused: {os.strerror(err)}")
        self.job_id = job

    def restart_job(self) -> None:
        """Ends the job as two nodes would (an exit per rank) and starts the
        next: PMI state that a case broke starts afresh."""
        old = self.job_id
        for n in self.nodes:
            for t in range(PPN):
                n.exit(old, n.node * PPN + t)
        self.owner.wait(lambda: old in self.owner.ended, f"JOB_END of job {old}")
        self.start_job(old + 1)
        self.settle_base()              # the new job has a new I/O worker

    @property
    def kvsname(self) -> str:
        return f"lattice-{self.job_id}"

    # -- health --

    def alive(self) -> bool:
        return self.proc.poll() is None

    def workers(self) -> list[int]:
        """The pids of ciod's children named ciod-worker: the job's I/O worker
        (and one that is still ending), which serves the PROC connections."""
        out = []
        for task in Path(f"/proc/{self.proc.pid}/task").iterdir():
            try:
                kids = (task / "children").read_text().split()
            except OSError:
                continue
            for k in kids:
                try:
                    if Path(f"/proc/{k}/comm").read_text().strip() == "ciod-worker":
                        out.append(int(k))
                except OSError:
                    pass
        return sorted(out)

    @staticmethod
    def proc_counts(pid: int) -> tuple[int, int, int]:
        """A process's threads, open descriptors (-1: not ours to see) and resident kB."""
        st = Path(f"/proc/{pid}/status").read_text()
        threads = int(re.search(r"^Threads:\s+(\d+)", st, re.M)[1])  # type: ignore[index]
        rss = int(re.search(r"^VmRSS:\s+(\d+)", st, re.M)[1])       # type: ignore[index]
        try:
            fds = len(os.listdir(f"/proc/{pid}/fd"))
        except PermissionError:         # the worker is not dumpable: only root sees its descriptors
            fds = -1
        return threads, fds, rss

    def counts(self) -> tuple[int, int, int]:
        """ciod's threads, open descriptors and resident kB."""
        return self.proc_counts(self.proc.pid)

    def worker_counts(self) -> tuple[int, int, int] | None:
        """The job's I/O worker's threads, descriptors and resident kB; None
        while there is not exactly one (a worker ending)."""
        w = self.workers()
        if len(w) != 1:
            return None
        try:
            return self.proc_counts(w[0])
        except OSError:
            return None

    def status(self) -> tuple[int, int, int]:
        s = open_session(self.addr, self.key, ROLE_CONTROL)
        try:
            if s.err:
                raise FuzzFailure(f"control hello refused: {os.strerror(s.err)}")
            seq = s.next_seq()
            s.sock.sendall(HDR.pack(MAGIC, VERSION, 0, CTL["status"], 0, seq))
            typ, rseq, body = recv_msg(s.sock)
            if (typ, rseq, len(body)) != (CTL["status"] | REPLY, seq, 16):
                raise FuzzFailure(f"CTL_STATUS answered with type 0x{typ:04x} seq {rseq}")
            return struct.unpack("<IIQ", body)    # type: ignore[return-value]
        finally:
            s.close()

    def readers(self) -> list[Reader]:
        return [r for r in [getattr(self, "owner", None), *getattr(self, "nodes", [])] if r is not None]

    def settle_base(self) -> None:
        """The baseline: ciod's and the job's worker's counts once the job
        has exactly one worker (the last job's has ended)."""
        end = time.monotonic() + GUARD_S
        while True:
            time.sleep(0.2)
            for r in self.readers():
                r.check()
            wbase = self.worker_counts()
            if wbase is not None:
                break
            if time.monotonic() > end:
                raise FuzzFailure(f"ciod runs {len(self.workers())} I/O workers, not the job's one, "
                                  f"after {GUARD_S:.0f} s (hang)")
        self.base = self.counts()
        self.wbase = wbase

    def check(self, slack_fds: int = 16, wait: float = GUARD_S) -> None:
        """ciod runs, answers a fresh control session, the job is intact, and
        its threads and descriptors are back to the baseline (they go back as
        the round's sessions end in ciod: waited for, `wait` a hang guard).
        And the harness's own readers still read."""
        if not self.alive():
            raise FuzzFailure(f"ciod exited with {self.proc.returncode}:\n{self.logtext()[-3000:]}")
        for r in self.readers():
            r.check()
        try:
            st = self.status()
        except (OSError, EOFError) as e:
            raise FuzzFailure(f"CTL_STATUS failed: {e!r}") from e
        if st[2] != self.job_id or st[0] < 2:
            raise FuzzFailure(f"status {st}: job {self.job_id} on 2 nodes expected")
        end = time.monotonic() + wait
        while True:
            threads, fds, _ = self.counts()
            w = self.worker_counts()
            ok = threads <= self.base[0] and fds <= self.base[1] + slack_fds
            wok = w is not None and w[0] <= self.wbase[0] and w[1] <= self.wbase[1] + slack_fds
            if ok and wok:
                return
            if time.monotonic() > end:
                if not ok:
                    raise FuzzFailure(f"ciod holds {threads} threads and {fds} descriptors (baseline "
                                      f"{self.base[0]} and {self.base[1]}): a leak or a stuck thread")
                if w is None:
                    raise FuzzFailure(f"ciod runs I/O workers {self.workers()}, not the job's one")
                raise FuzzFailure(f"the job's I/O worker holds {w[0]} threads and {w[1]} descriptors (baseline "
                                  f"{self.wbase[0]} and {self.wbase[1]}): a leak or a stuck thread")
            time.sleep(0.05)

    def normal_session(self) -> None:
        """A process of the job opens, writes, reads back and closes a file."""
        s, _ = open_proc_session(self.addr, self.key, 0, self.job_id)
        try:
            if s.err:
                raise FuzzFailure(f"PROC hello refused: {os.strerror(s.err)}")
            data = random.Random(self.job_id).randbytes(100_000)

            def call(name: str, *a: int, data: bytes = b"") -> tuple[int, bytes]:
                seq = s.next_seq()
                args = struct.pack("<4q", *(list(a) + [0, 0, 0, 0])[:4])
                s.sock.sendall(HDR.pack(MAGIC, VERSION, 0, SYS[name], 32 + len(data), seq) + args + data)
                typ, rseq, body = recv_msg(s.sock)
                ret, err, _ = wire.SYSRET.unpack_from(body)
                if (typ, rseq) != (SYS[name] | REPLY, seq) or ret < 0:
                    raise FuzzFailure(f"{name}: type 0x{typ:04x} seq {rseq} ret {ret} {os.strerror(err)}")
                return ret, body[16:]

            name = f"normal-{time.time_ns()}"          # no case names it
            fd, _ = call("openat", -100, os.O_CREAT | os.O_RDWR | os.O_EXCL, 0o644, data=name.encode() + b"\0")
            assert call("write", fd, data=data)[0] == len(data)
            got = call("pread", fd, len(data), 0)[1]
            call("close", fd)
            if got != data or (self.work / name).read_bytes() != data:
                raise FuzzFailure("a normal session read back other bytes than it wrote")
        finally:
            s.close()

    def trim(self) -> None:
        """Between rounds of a long run: empty the job's directory and the
        logs (ciod appends to both), so 10^7 inputs fit on the disk."""
        for p in self.work.iterdir():
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
        for f in (self.ras, self.dir / "ciod.log"):
            if f.exists() and f.stat().st_size > 64 << 20:
                os.truncate(f, 0)

    def logtext(self) -> str:
        self.logf.flush()
        return (self.dir / "ciod.log").read_text(errors="replace")

    def rastext(self) -> str:
        return self.ras.read_text(errors="replace") if self.ras.exists() else ""

    def close(self) -> None:
        for r in self.readers():
            with r.cv:
                r.closing = True
        for closer in (lambda: self.proc.terminate(), lambda: self.proc.wait(10),
                       lambda: self.holder and self.holder.kill(), lambda: self.holder and self.holder.wait(),
                       lambda: self.mbox.close(), lambda: self.sink.tcp.close(), lambda: self.sink.udp.close(),
                       lambda: self.sink.release(), lambda: self.logf.close()):
            try:
                closer()
            except Exception:  # noqa: BLE001  (best effort: some parts may not exist)
                pass
        shutil.rmtree(self.dir, ignore_errors=True)
        shutil.rmtree(self.workroot, ignore_errors=True)


# ---- generation ----

@dataclass
class Poke:
    """Bytes written into the shared mailbox (not on the socket)."""
    off: int
    data: bytes


@dataclass
class Hello:
    """A hello a pre-hello case sends, made on its connection (it answers
    that connection's challenge).  mac: "ok" (MACed with the block key),
    "key" (with another key), "flip" (the right mac, a bit flipped),
    "zero", "fields" (MACed over other fields than it carries), "replay"
    (a hello ciod accepted on an earlier connection, sent again)."""
    role: int
    node: int = 0
    job: int = 0
    extra: bytes = b""
    seq: int = 1
    mac: str = "ok"
    other_key: bytes = b""
    flip_at: int = 0            # "flip": which bit of the mac

    def make(self, key: bytes, challenge: bytes) -> bytes:
        if self.mac == "replay" and RECORDED[0]:
            return RECORDED[0]
        if self.mac.startswith("cut:"):
            return hello_bytes(key, challenge, self.role)[0][:int(self.mac[4:])]
        msg, _ = hello_bytes(self.other_key if self.mac == "key" else key, challenge, self.role, self.node,
                             self.job, self.extra, self.seq)
        b = bytearray(msg)
        mac_at = HDR.size + wire.HELLO_MSG.size - wire.MAC_BYTES
        if self.mac == "flip":
            b[mac_at + self.flip_at // 8 % 32] ^= 1 << (self.flip_at % 8)
        elif self.mac == "zero":
            b[mac_at:mac_at + 32] = bytes(32)
        elif self.mac == "fields":          # the mac of a CONTROL hello on a hello of other fields
            good, _ = hello_bytes(key, challenge, ROLE_CONTROL, 0, 0, b"", self.seq)
            b[mac_at:mac_at + 32] = good[mac_at:mac_at + 32]
        return bytes(b)


@dataclass
class BadHeader:
    """A good hello's bytes under a header with a wrong magic or version."""
    what: str
    value: int

    def make(self, key: bytes, challenge: bytes) -> bytes:
        msg, _ = hello_bytes(key, challenge, ROLE_CONTROL)
        magic, version = (self.value, VERSION) if self.what == "magic" else (MAGIC, self.value)
        return HDR.pack(magic, version, 0, HELLO, len(msg) - HDR.size, 1) + msg[HDR.size:]


Item = bytes | Poke | Hello | BadHeader


class Seqs:
    """A session's seqs: after the last one (wrap-aware, as ciod checks:
    (int32)(seq - last) > 0), mostly one by one, sometimes skipping; or on
    purpose not after it (bad(): sent again or out of order)."""

    def __init__(self, rng: random.Random, first: int) -> None:
        self.rng, self.last = rng, first

    def next(self) -> int:
        step = 1 if self.rng.random() < 0.93 else self.rng.choice([2, 3, 100, 65536, 2**31 - 1])
        self.last = (self.last + step) & SEQ_MASK
        return self.last

    def bad(self) -> int:
        return (self.last - self.rng.choice([0, 0, 1, 2, 1000, 2**31])) & SEQ_MASK


def first_seq(rng: random.Random) -> int:
    """The hello's seq: 1 as the service node and cnode, 0 as a process's
    hello, or just before the wrap (the session's seqs cross it)."""
    return rng.choice([1, 1, 1, 0, 2**32 - 3, 2**31 - 1])


@dataclass
class Case:
    index: int
    seed: int
    kind: str
    hello: tuple[int, int, int, bytes] | None        # role, node, job, extra; None: raw bytes from the start
    items: list[Item] = field(default_factory=list)  # each one input
    framed: bool = True         # every item a well-framed message: replies must echo our seqs
    abrupt: bool = False        # close without reading the answers
    lock: str = ""              # "proc0.3", "pmi1.0", "node2"...: one such connection at a time
    seq0: int = 1               # the hello's seq
    seq_broken: bool = False    # the last message's seq is not after the one before: ciod closes
    bad_seq: int = -1           # that seq
    dup_hello: bool = False     # PROC: a second hello for the process while this one is open (EBUSY)

    def describe(self, limit: int = 2000) -> str:
        lines = [f"case {self.index} (case seed {self.seed}): {self.kind}, hello {self.hello}, "
                 f"{len(self.items)} inputs, abrupt={self.abrupt}"]
        for i, it in enumerate(self.items):
            if isinstance(it, Hello):
                lines.append(f"  [{i}] {it}")
                continue
            b = it.data if isinstance(it, Poke) else it
            where = f"mailbox+{it.off}" if isinstance(it, Poke) else "socket"
            if len(b) >= 16 and struct.unpack_from("<I", b)[0] == MAGIC:
                typ, ln, seq = struct.unpack_from("<HII", b, 6)
                where += f" {TYPE_NAMES.get(typ, hex(typ))} len={ln} seq={seq}"
                if len(b) >= 48:
                    where += " a=" + ",".join(str(x) for x in struct.unpack_from("<4q", b, 16))
            lines.append(f"  [{i}] {where} {len(b)} bytes: {b[:64].hex()}{'...' if len(b) > 64 else ''}")
        text = "\n".join(lines)
        return text if len(text) < limit else text[:limit] + "\n  ..."


INTS = [0, 1, -1, 2, 3, 4, 5, 7, 8, 15, 16, 31, 32, 63, 64, 127, 128, 255, 256, 1023, 1024, 1025, 4095, 4096,
        4097, 65535, 65536, MAX_IO - 1, MAX_IO, MAX_IO + 1, 2**31 - 1, 2**31, -2**31, 2**32 - 1, 2**32, 2**63 - 1,
        -2**63, -100, RDV, PIPE_FIRST, PIPE_NEXT, 0x1000, 0x200, 0o100 | 2, 0o200000, 0o1000 | 1, 0o4000]
NAMES = [b"f0", b"f1", b"f2", b"d0", b"d0/f1", b"d1/d2/f3", b"", b".", b"d0/", b"x" * 255,
         b"x" * 256, b"d0/" * 1400, b"f\xff\xfe", b"sp ace", FUZZ_ABS + b"/a", b"n" * 4095]
PATH_CALLS = {"openat", "fstatat", "statx", "faccessat", "unlinkat", "renameat", "mkdirat", "readlinkat",
              "truncate", "chdir", "fchmodat", "utimensat", "statfs"}
ADDR_CALLS = {"connect", "bind", "sendmsg", "send_rdv"}


def pick_int(rng: random.Random) -> int:
    r = rng.random()
    if r < 0.6:
        return rng.choice(INTS)
    if r < 0.8:
        return rng.randrange(-8, 4096)
    return rng.getrandbits(64) - 2**63


def pick_fd(rng: random.Random) -> int:
    return rng.choice([0, 1, 2, 3, 3, 4, 4, 5, 6, 7, 1023, 1024, -1, -100, 1 << 40]) if rng.random() < 0.9 \
        else pick_int(rng)


def pick_count(rng: random.Random) -> int:
    return rng.choice([0, 1, 2, 7, 16, 100, 4096, 65536, MAX_IO, MAX_IO + 1, -1]) if rng.random() < 0.9 \
        else pick_int(rng)


def blob(rng: random.Random, big: bool = False) -> bytes:
    n = rng.choice([0, 1, 3, 8, 16, 31, 32, 100, 4096]) if not big or rng.random() < 0.97 else \
        rng.choice([MAX_IO, MAX_IO + 1, 70000])
    return rng.randbytes(n)


def a_path(rng: random.Random) -> bytes:
    r = rng.random()
    p = rng.choice(NAMES) if r < 0.8 else rng.randbytes(rng.randrange(0, 40))
    return p + (b"\0" if rng.random() < 0.93 else b"")


def sockaddr(rng: random.Random, ports: tuple[int, int]) -> bytes:
    port = rng.choice([ports[0], ports[1], 0, ports[0]])
    r = rng.random()
    if r < 0.55:
        a = struct.pack("<H", socket.AF_INET) + struct.pack(">H", port) + bytes([127, 0, 0, 1]) + bytes(8)
    elif r < 0.75:
        a = struct.pack("<H", socket.AF_INET6) + struct.pack(">H", port) + bytes(4) + bytes(15) + b"\1" + bytes(4)
    elif r < 0.85:
        a = struct.pack("<H", socket.AF_UNIX) + b"\0latfuzz" + bytes(rng.randrange(0, 100))
    else:
        a = rng.randbytes(rng.choice([0, 1, 2, 16, 128, 129]))
    return a


def segs(rng: random.Random, holder_base: int) -> bytes:
    n = rng.choice([0, 1, 2, 3, 1024, 1025]) if rng.random() < 0.9 else rng.randrange(0, 8)
    out = []
    for _ in range(min(n, 1100)):
        addr = rng.choice([0, 8, 4096, holder_base, holder_base + 100, 2**64 - 4096, rng.getrandbits(64)])
        ln = rng.choice([0, 1, 16, 4096, MAX_IO, 2**64 - 1, rng.getrandbits(32)])
        out.append(struct.pack("<QQ", addr, ln))
    return b"".join(out)


def sanitize_paths(data: bytes) -> bytes:
    """No '..' and no absolute path but FUZZ_ABS: a process case reaches
    nothing outside its own directory, whatever the mutations did."""
    parts = data.split(b"\0")
    for i, p in enumerate(parts):
        if p.startswith(b"/") and not p.startswith(FUZZ_ABS):
            p = b"_" + p[1:]
        parts[i] = p.replace(b"..", b"._")
    return b"\0".join(parts)


def sanitize_addr(addr: bytes, ports: tuple[int, int]) -> bytes:
    """Any INET/INET6 address becomes loopback and one of the sink's ports
    (or 0): shipped sockets talk to nobody else."""
    a = bytearray(addr)
    if len(a) >= 4:
        fam = struct.unpack_from("<H", a)[0]
        port = struct.unpack_from(">H", a, 2)[0]
        if fam in (socket.AF_INET, socket.AF_INET6):
            struct.pack_into(">H", a, 2, port if port in ports else 0)
        if fam == socket.AF_INET and len(a) >= 8:
            a[4:8] = bytes([127, 0, 0, 1])
        if fam == socket.AF_INET6 and len(a) >= 24:
            a[8:24] = bytes(15) + b"\1"
    elif len(a) >= 2 and struct.unpack_from("<H", a)[0] in (socket.AF_INET, socket.AF_INET6):
        a[0] = 0xFF
    return bytes(a)


def sys_request(rng: random.Random, name: str, ctx: "Ctx") -> tuple[list[int], bytes, int]:
    """Arguments, data and header flags of one shipped call, shaped as
    lattice/fwd_posix.h says (now and then flags it may not carry)."""
    a = [pick_int(rng) for _ in range(4)]
    data = b""
    flags = rng.getrandbits(8) if rng.random() < 0.03 else 0
    if name in ("close", "fsync", "fdatasync", "dup", "fchdir", "fstatfs", "ftruncate", "fchmod", "lseek", "fcntl",
                "getsockname", "getpeername", "shutdown", "read", "pread", "getdents64", "write", "pwrite",
                "setsockopt", "getsockopt", "recvmsg", "sendmsg", "connect", "bind", "send_rdv", "recv_rdv"):
        a[0] = pick_fd(rng)
    if name in ("read", "pread", "getdents64", "getcwd", "readlinkat", "recvmsg"):
        a[1 if name != "getcwd" else 0] = pick_count(rng)
        if name == "recvmsg":
            a[2] = pick_count(rng)
    if name in ("read", "pread", "write", "pwrite") and rng.random() < 0.5:
        flags = rng.choice([0, 0, RDV, PIPE_FIRST, PIPE_NEXT])
        if flags == RDV:
            data = segs(rng, ctx.shm_base)
    if name in ("write", "pwrite") and flags != RDV:
        data = blob(rng, big=True)
    if name in ("recvmsg", "sendmsg", "connect", "send_rdv", "recv_rdv", "poll"):
        a[3 if name in ("recvmsg", "sendmsg", "send_rdv") else (2 if name == "recv_rdv" else 1)] = \
            rng.choice([0, 0, 1, 10, -1, 100])
    if name in PATH_CALLS:
        if name in ("openat", "fstatat", "statx", "faccessat", "unlinkat", "mkdirat", "readlinkat", "fchmodat",
                    "utimensat", "renameat"):
            a[0] = rng.choice([-100, -100, -100, 3, 4, 0, 999]) if rng.random() < 0.9 else pick_fd(rng)
        if name == "openat":
            a[1] = rng.choice([0, 1, 2, 0o100 | 2, 0o100 | 0o200 | 1, 0o200000, 0o1000 | 2, 0o2000 | 1,
                               0o20000000]) if rng.random() < 0.9 else pick_int(rng)
            a[2] = rng.choice([0o644, 0o755, 0, 0o7777])
        if name == "renameat":
            a[1] = rng.choice([-100, 3, 4])
            data = a_path(rng) + a_path(rng)
        elif name == "utimensat":
            data = (struct.pack("<qqqq", *(pick_int(rng) for _ in range(4))) if rng.random() < 0.9 else blob(rng)) \
                + a_path(rng)
        else:
            data = a_path(rng)
        data = sanitize_paths(data)
    if name == "socket":
        a[0] = rng.choice([socket.AF_INET, socket.AF_INET6, socket.AF_UNIX, 16, 17, 0]) if rng.random() < 0.9 \
            else pick_int(rng)
        a[1] = rng.choice([1, 2, 3, 5, 1 | 0o4000, 2 | 0o4000]) if rng.random() < 0.9 else pick_int(rng)
        a[2] = rng.choice([0, 0, 6, 17, 255])
    if name in ADDR_CALLS:
        addr = sockaddr(rng, ctx.ports)
        if name in ("sendmsg", "send_rdv"):
            a[2] = len(addr) if rng.random() < 0.8 else pick_int(rng)
            data = addr + (segs(rng, ctx.shm_base) if name == "send_rdv" else blob(rng))
        else:
            data = addr
    if name == "recv_rdv":
        data = segs(rng, ctx.shm_base)
    if name == "poll":
        a[0] = rng.choice([0, 1, 2, 3, 1024, 1025])
        data = b"".join(struct.pack("<ihh", max(-2**31, min(pick_fd(rng), 2**31 - 1)), rng.choice([1, 4, 0, -1]), 0)
                        for _ in range(min(rng.choice([0, 1, 2, 3, a[0]]), 1100) if a[0] >= 0 else 1))
    if name in ("setsockopt", "getsockopt"):
        a[1] = rng.choice([1, 6, 0, 41, 17, 255])
        a[2] = rng.randrange(0, 80)
        if name == "setsockopt":
            data = blob(rng)
        else:
            a[3] = pick_count(rng)
    return a, data, flags


@dataclass
class Ctx:
    """What of the target a generator may name."""
    job: int
    kvsname: str
    holder_pid: int
    shm_fd: int
    mbox_fd: int
    ports: tuple[int, int]
    shm_base: int = 0x7E0000000000


def frame(typ: int, payload: bytes, seq: int, flags: int = 0) -> bytes:
    return HDR.pack(MAGIC, VERSION, flags, typ, len(payload), seq & SEQ_MASK) + payload


def mutate_message(rng: random.Random, typ: int, payload: bytes, sq: Seqs, case: Case,
                   allowed: Callable[[int], bool], seq: int | None = None, flags: int = 0) -> bytes:
    """One message, sometimes mutated: payload cut, grown, flipped; type
    replaced; numbered by sq (or seq if given), rarely with a seq not after
    the last (sent again, out of order: ciod closes, so the case's last,
    case.seq_broken).  A header that lies about its length, a bad magic or
    version is the case's last input."""
    r = rng.random()
    if r < 0.12 and payload:
        payload = payload[:rng.randrange(len(payload))]
    elif r < 0.17:
        payload = payload + blob(rng)
    elif r < 0.24 and payload:
        b = bytearray(payload)
        for _ in range(rng.randrange(1, 5)):
            i = rng.randrange(len(b))
            b[i] = rng.choice([0, 0xFF, 0x7F, 0x80, rng.getrandbits(8)])
        payload = bytes(b)
    if rng.random() < 0.05:
        t = rng.choice(ALL_TYPES) if rng.random() < 0.7 else rng.getrandbits(16)
        typ = t if allowed(t) else typ
    if seq is None:
        if rng.random() < 0.006:
            seq = case.bad_seq = sq.bad()
            case.seq_broken = True
        else:
            seq = sq.next()
    if typ not in SYS.values():
        flags = 0                   # flags on another message close the connection (fatal_tail's job)
    return frame(typ, payload, seq, flags)


def fatal_tail(rng: random.Random, typ: int, seq: int) -> bytes:
    """The last input of a session: something ciod must close on."""
    k = rng.randrange(6)
    seq &= SEQ_MASK
    if k == 0:
        return HDR.pack(0xDEADBEEF, VERSION, 0, typ, 0, seq)
    if k == 1:
        return HDR.pack(MAGIC, rng.choice([0, 1, VERSION - 1, 0xFF]), 0, typ, 0, seq)
    if k == 2:
        return HDR.pack(MAGIC, VERSION, 0, typ, MAX_PAYLOAD + rng.choice([1, 2**31, 2**32 - 1 - MAX_PAYLOAD]), seq)
    if k == 3:                                  # half a message, then EOF
        ln = rng.choice([32, 100, 5000, MAX_IO])
        return HDR.pack(MAGIC, VERSION, 0, typ, ln, seq) + rng.randbytes(rng.randrange(min(ln, 200)))
    if k == 4:                                  # half a header
        return HDR.pack(MAGIC, VERSION, 0, typ, 0, seq)[:rng.randrange(1, 16)]
    return rng.randbytes(rng.randrange(1, 300))


def gen_prehello(rng: random.Random, case: Case, ctx: Ctx, key: bytes) -> None:
    """What a peer sends after the challenge instead of a good hello (or a
    good one, then what breaks the session at once).  Hello items are made
    on the connection: they need its challenge."""
    case.framed = False
    k = rng.randrange(20)
    good = Hello(ROLE_CONTROL)
    if k == 0:
        case.items.append(rng.randbytes(rng.choice([1, 15, 16, 17, 100, 4096, 5000])))
    elif k == 1:
        t = rng.choice(ALL_TYPES)
        case.items.append(frame(t, blob(rng), rng.getrandbits(32)))
    elif k == 2:        # a hello of another length (v1's 48 bytes among them)
        body = rng.randbytes(rng.choice([0, 1, 47, 48, 49, 79, 81, 87, 89, 100, 4096]))
        case.items.append(frame(HELLO, body, 1))
    elif k == 3:        # MACed with another key
        bad = bytearray(key)
        if rng.random() < 0.5:
            bad[rng.randrange(32)] ^= 1 << rng.randrange(8)
        else:
            bad = bytearray(rng.choice([bytes(32), b"\xff" * 32, rng.randbytes(32)]))
        case.items.append(Hello(rng.choice([1, 2, 3, 4]), rng.randrange(4), ctx.job, mac="key", other_key=bytes(bad)))
    elif k == 4:
        case.items.append(BadHeader("magic", rng.choice([0, MAGIC ^ 1, 0x4C544154])))
    elif k == 5:
        case.items.append(BadHeader("version", rng.choice([0, 1, VERSION - 1, 0xFF])))
    elif k == 6:        # a well-MACed hello of an unknown role
        case.items.append(Hello(rng.choice([0, 5, 255, 2**32 - 1, rng.getrandbits(32)])))
    elif k == 7:        # half a good hello, then EOF
        case.items.append(Hello(ROLE_CONTROL, mac="cut:" + str(rng.randrange(1, HDR.size + wire.HELLO_MSG.size))))
    elif k == 8:
        case.items.append(HDR.pack(MAGIC, VERSION, 0, HELLO, rng.choice([MAX_PAYLOAD, MAX_PAYLOAD + 1, 2**32 - 1]), 1))
    elif k == 9:        # well-MACed hellos ciod must refuse for what they ask
        role = rng.choice([ROLE_NODE, ROLE_PROC, ROLE_PMI])
        node = rng.choice([0, 1, 4, 5, 127, 128, 0xFFFF, 0x10000 * PPN, 0x10000 * 64, 0x10001 * 65, 2**32 - 1])
        job = rng.choice([0, ctx.job + 1, ctx.job - 1, 2**64 - 1]) if role != ROLE_NODE else 0
        case.items.append(Hello(role, node, job))
    elif k == 10:       # a PROC hello with a data-path tail of the wrong size (MACed)
        case.items.append(Hello(ROLE_PROC, 0, ctx.job, rng.randbytes(rng.choice([1, 4, 7, 9, 16]))))
    elif k == 11:       # a valid hello, then garbage
        case.items += [good, rng.randbytes(rng.randrange(1, 2000))]
    elif k == 12:       # two hellos
        case.items += [good, Hello(ROLE_CONTROL, seq=2)]
    elif k == 13:       # a valid hello, then half a message
        case.items += [good, fatal_tail(rng, CTL["status"], 2)]
    elif k == 14:       # a hello accepted on another connection, sent again: its mac answers another challenge
        case.items.append(Hello(ROLE_CONTROL, mac="replay"))
    elif k == 15:       # the right mac with a bit flipped, or none
        case.items.append(Hello(rng.choice([1, 2, 3, 4]), rng.randrange(4), ctx.job,
                                mac=rng.choice(["flip", "zero"]), flip_at=rng.randrange(256)))
    elif k == 16:       # a CONTROL hello's mac on a hello asking for more
        case.items.append(Hello(rng.choice([ROLE_NODE, ROLE_PROC, ROLE_PMI]), rng.choice([0, 1, 2, 3]), ctx.job,
                                mac="fields"))
    elif k == 17:       # a valid hello, then a message not after it (sent again, out of order)
        seq0 = first_seq(rng)
        sq = Seqs(rng, seq0)
        case.items += [Hello(ROLE_CONTROL, seq=seq0), frame(CTL["status"], b"", sq.bad())]
    elif k == 18:       # a valid hello, then a valid request, then one of them again
        case.items += [good, frame(CTL["status"], b"", 2), frame(CTL["status"], b"", rng.choice([1, 2]))]
    else:               # garbage before the hello, then a good hello
        case.items += [rng.randbytes(rng.randrange(1, 40)), good]
    case.abrupt = rng.random() < 0.3


def job_variant(rng: random.Random, ctx: Ctx, exe: str, cwd: str) -> bytes:
    ranks = rng.choice([[0, 1, -1, -1], [0, -1, -1, -1], [0, 1, 2, 3], [1, 0, -1, -1], [0, 0, -1, -1], [5, -2, 0, 0]])
    jid = rng.choice([ctx.job, ctx.job + 7, 0, 2**64 - 1])
    uid = rng.choice([os.getuid(), 65534, 0, 12345])
    groups = rng.choice([[], [0], [65534], list(range(256)), list(range(257))])
    argv = rng.choice([["p"], [], ["p"] * 3, ["a" * 5000], ["x"] * 4097])
    env = rng.choice([[], ["A=1"], ["E=" + "v" * 100] * 10])
    flags = rng.choice([0, 1, 2, 3, 4, 5, 8, 16, 24, 32, 0xFFFFFFFF])
    exe = rng.choice([exe, exe, "relative", "/nonexistent-lattice-fuzz", "/", "/" + "a" * 5000])
    cwd = rng.choice([cwd, cwd, "rel", "/nonexistent-lattice-fuzz", exe])
    nranks = rng.choice([2, 1, 4, 0, 2**32 - 1])
    if flags & wire.JOB_PLACED and rng.random() < 0.7:
        napps = rng.choice([1, 2, 0, 65])
        slots = [(r, i, 0, 0) for i, r in enumerate(ranks) if r >= 0]
        if rng.random() < 0.3:
            slots.append((rng.randrange(8), rng.randrange(6), rng.randrange(3), rng.randrange(3)))
        apps = [(exe, argv or ["p"])] + [(exe, ["q"])] * max(0, min(napps, 3) - 1)
        cpus = None         # LAT_JOB_CPUS: each slot's CPUs, good or not
        if rng.random() < 0.5:
            cpus = [(tuple(rng.choice([0, 1, 4095, wire.CPU_LIMIT, 2**32 - 1]) for _ in range(rng.choice([1, 1, 2, 0]))),
                     rng.choice([0, 1, wire.PROGRESS_UNSET, 2, -7])) for _ in slots]
        try:
            p = wire.placed_job_payload(jid & (2**64 - 1), uid, uid, groups, ranks, nranks & 0xFFFFFFFF, cwd, env,
                                        flags & ~wire.JOB_PLACED, rng.choice([1, 2, 0, 65]), slots, apps,
                                        rng.choice(["(vector,(0,2,1))", "", "m" * 1025]), cpus)
        except struct.error:
            p = b""
    else:
        p = wire.job_payload(jid & (2**64 - 1), uid, uid, groups, ranks, nranks & 0xFFFFFFFF, exe, cwd, argv, env,
                             flags & ~wire.JOB_PLACED if rng.random() < 0.8 else flags)
    if rng.random() < 0.3 and len(p) >= wire.JOB.size:      # lie in the counts of the lat_job head
        b = bytearray(p)
        struct.pack_into("<I", b, rng.choice([16, 20, 24, 28, 32]), rng.choice([0, 1, 3, 256, 4096, 2**32 - 1]))
        p = bytes(b)
    return p


def gen_control(rng: random.Random, case: Case, ctx: Ctx, target_files: tuple[str, str]) -> None:
    sq = Seqs(rng, case.seq0)
    for _ in range(rng.randrange(5, 60)):
        if case.seq_broken:
            break
        r = rng.random()
        if r < 0.3:
            typ, p = CTL["job"], job_variant(rng, ctx, *target_files)
        elif r < 0.45:
            typ = CTL["fence_out"]
            kvs = {f"k{i}": "v" * rng.choice([0, 1, 100, 2048, 2049]) for i in range(rng.choice([0, 1, 3, 50]))}
            msgs = wire.fence_messages(rng.choice([ctx.job, ctx.job, 0, ctx.job + 1]), rng.choice([0, 1, 2, 2**32 - 1]),
                                       kvs)
            p = rng.choice(msgs)
            if rng.random() < 0.3:
                b = bytearray(p + bytes(24))
                struct.pack_into("<II", b, 12, rng.choice([0, 1, 2**31, 2**32 - 1]), rng.choice([0, 1, 3]))
                p = bytes(b[:len(p)])
        elif r < 0.6:
            typ, p = CTL["kill"], struct.pack("<iI", rng.choice([0, 1, 9, 15, 64, 65, -1, 2**31 - 1]), 0)
        elif r < 0.75:
            typ, p = rng.choice([CTL["status"], CTL["counters"]]), b""
        else:
            typ, p = rng.choice(ALL_TYPES), blob(rng)
            if typ in NEVER_ON_CONTROL:
                typ = CTL["status"]
        case.items.append(mutate_message(rng, typ, p, sq, case, lambda t: t not in NEVER_ON_CONTROL))
    if rng.random() < 0.15 and not case.seq_broken:
        case.items.append(fatal_tail(rng, CTL["kill"], sq.next()))
        case.framed = False


def pmi1_line(rng: random.Random, ctx: Ctx) -> bytes:
    cmd = rng.choice(["init", "get_maxes", "get_appnum", "get_universe_size", "get_my_kvsname", "put", "get", "get",
                      "barrier_in", "finalize", "abort", "publish_name", "lookup_name", "unpublish_name", "spawn",
                      "frobnicate", ""])
    kv = {"init": "pmi_version=1 pmi_subversion=1", "put": "kvsname={k} key={key} value={val}",
          "get": "kvsname={k} key={key}", "abort": "exitcode=3 message=fuzz"}.get(cmd, "")
    key = rng.choice(["k", "card-0", "PMI_process_mapping", "k" * 64, "k" * 65, "", "a=b", "sp ace"])
    val = rng.choice(["v", "", "v" * 1024, "v" * 1025, "x=y/z", "(vector,(0,2,1))"])
    kvs = rng.choice([ctx.kvsname, ctx.kvsname, "other", "", "l" * 300])
    line = f"cmd={cmd} " + kv.format(k=kvs, key=key, val=val)
    if cmd == "spawn" or rng.random() < 0.03:
        line = "mcmd=spawn\nnprocs=1\nexecname=x\nendcmd"
    b = line.encode()
    r = rng.random()
    if r < 0.05:
        b = rng.randbytes(rng.randrange(0, 100))
    elif r < 0.08:
        b = b"cmd=put key=" + b"k" * rng.choice([4090, 4095, 4096, 5000])
    elif r < 0.1:
        b = b.replace(b" ", b"\0", 1)
    return b + (b"\n" if rng.random() < 0.95 else b"")


def pmi2_cmd(rng: random.Random, ctx: Ctx) -> bytes:
    cmd = rng.choice(["fullinit;pmirank=0;threaded=FALSE;", "fullinit;pmirank=9;", "job-getid;",
                      "info-getjobattr;key=PMI_process_mapping;", "kvs-put;key=k;value=v;", "kvs-fence;",
                      f"kvs-get;jobid={ctx.kvsname};key=k;", "kvs-get;jobid=x;key=" + "k" * 65 + ";",
                      "info-putnodeattr;key=a;value=b;", "info-getnodeattr;key=a;wait=TRUE;",
                      "info-getnodeattr;key=zz;wait=TRUE;thrid=1;", "finalize;", "abort;message=x;", "no-such;",
                      "kvs-put;key=;value=;", "kvs-put;key=k;value=" + "v" * 1025 + ";", ";;;", "cmd=;"])
    body = b"cmd=" + cmd.encode()
    if rng.random() < 0.1:
        body = body.replace(b";", b"", 1)
    n = len(body)
    r = rng.random()
    prefix = (b"%06d" % n if r < 0.8 else rng.choice([b"%06d" % (n + 5), b"%06d" % max(n - 3, 0), b"00000x",
                                                       b"999999", b"-00001", b"%06d" % 4097]))
    return prefix + body


def gen_pmi(rng: random.Random, case: Case, ctx: Ctx) -> None:
    case.framed = False
    node, t = rng.randrange(2), rng.randrange(PPN)
    case.lock = f"pmi{node}.{t}"
    case.hello = (ROLE_PMI, node | t << 16, ctx.job, b"")
    v2 = rng.random() < 0.4
    case.items.append(b"cmd=init pmi_version=%d pmi_subversion=%d\n" % ((2, 0) if v2 else (1, 1)))
    for _ in range(rng.randrange(3, 40)):
        case.items.append(pmi2_cmd(rng, ctx) if v2 and rng.random() < 0.9 else pmi1_line(rng, ctx))
    if rng.random() < 0.1:
        case.items.append(rng.randbytes(rng.randrange(1, 20000)))


def gen_node(rng: random.Random, case: Case, ctx: Ctx) -> None:
    node = rng.choice([2, 3])
    case.lock = f"node{node}"
    case.hello = (ROLE_NODE, node, 0, b"")
    sq = Seqs(rng, case.seq0)
    for _ in range(rng.randrange(5, 80)):
        if case.seq_broken:
            break
        r = rng.random()
        if r < 0.3:
            typ, p = NODE["output"], struct.pack("<II", rng.choice([0, 1, 2, 2**32 - 1]),
                                                 rng.choice([1, 2, 0, 3, 2**32 - 1])) + blob(rng, big=True)
        elif r < 0.55:
            typ = NODE["exit"]
            p = wire.EXIT.pack(rng.choice([ctx.job, ctx.job, 0, 2**64 - 1]), rng.choice([0, 1, 2, 2**32 - 1]),
                               rng.choice([node, 0, 1, 200]), rng.choice([0, 1, 2, 3, 4, 5, 2**32 - 1]),
                               rng.choice([0, 1, 9, -1])) + blob(rng)
        elif r < 0.8:
            typ = NODE["pmi"]
            p = struct.pack("<II", rng.choice([0, 1, 2, 2**32 - 1]), 0) + pmi1_line(rng, ctx)
        else:
            typ, p = rng.choice(ALL_TYPES), blob(rng)
        case.items.append(mutate_message(rng, typ, p, sq, case, lambda t: True))
    if rng.random() < 0.15 and not case.seq_broken:
        case.items.append(fatal_tail(rng, NODE["output"], sq.next()))
        case.framed = False


def gen_proc(rng: random.Random, case: Case, ctx: Ctx) -> None:
    node, t = rng.randrange(2), rng.randrange(PPN)
    case.lock = f"proc{node}.{t}"
    case.dup_hello = rng.random() < 0.03
    hp = rng.random()
    if hp < 0.4:
        extra = b""
    elif hp < 0.8:      # a child of ours: rendezvous and shared memory granted
        extra = struct.pack("<II", ctx.holder_pid, rng.choice([3, 1, 0, 0xFFFFFFFF]))
    else:               # not our child (ourselves, init, nobody): messages only
        extra = struct.pack("<II", rng.choice([os.getpid(), 1, 0, 2**31 - 1]), 3)
    case.hello = (ROLE_PROC, node | t << 16, ctx.job, extra)
    names = sorted(SYS)
    sq = Seqs(rng, case.seq0)
    mbox = False
    for _ in range(rng.randrange(5, 80)):
        if case.seq_broken:
            break
        r = rng.random()
        flags = 0
        if r < 0.08:
            # a descriptor and then a call on it: fds are handed out lowest first, so 3 is likely it
            for typ, a, data in chain(rng, ctx):
                case.items.append(frame(typ, struct.pack("<4Q", *(x & (2**64 - 1) for x in a)) + data, sq.next()))
            continue
        if r < 0.78:
            name = rng.choice(names)
            a, data, flags = sys_request(rng, name, ctx)
            typ = SYS[name]
        elif r < 0.83:
            typ, data = DP_SHARE, b""
            a = [rng.choice([ctx.shm_base, 0, 2**64 - 4096, pick_int(rng)]),
                 rng.choice([1 << 20, 0, 2 << 20, 4096, pick_int(rng)]),
                 rng.choice([ctx.shm_fd, ctx.shm_fd, ctx.mbox_fd, 0, 999, -1]), 0]
        elif r < 0.87:
            typ, data = MBOX_SHARE, b""
            a = [rng.choice([ctx.mbox_fd, ctx.mbox_fd, ctx.shm_fd, 999, -1]), 0, 0, 0]
            mbox = True
        elif r < 0.93 and mbox:
            # a request through the mailbox: a socket-like message in req, then req_seq, then a ring
            # (its seq from the connection's counter; the ring carries it, and is a socket
            # message like any other: after the last one)
            name = rng.choice(names)
            ma, mdata, mflags = sys_request(rng, name, ctx)
            seq = sq.next()
            msg = mutate_message(rng, SYS[name], struct.pack("<4Q", *(x & (2**64 - 1) for x in ma)) + mdata,
                                 sq, case, lambda t: True, seq=seq, flags=mflags)
            case.items.append(Poke(128, msg[:MBOX_REQ_SLOT]))
            case.items.append(Poke(0, struct.pack("<I", seq if rng.random() < 0.8 else rng.getrandbits(32))))
            if rng.random() < 0.2:
                case.items.append(Poke(rng.randrange(MBOX_SIZE - 8), rng.randbytes(8)))
            case.items.append(frame(MBOX_RING, b"" if rng.random() < 0.9 else blob(rng), seq))
            continue
        elif r < 0.96:
            typ, data = PLUG_CALL, blob(rng)
            a = [rng.choice([0, 1, 2**32, -1]), rng.choice([0, 1, 7, -1]), pick_count(rng), 0]
        else:
            typ, data, a = rng.choice(ALL_TYPES), blob(rng), [pick_int(rng) for _ in range(4)]
        payload = struct.pack("<4Q", *(x & (2**64 - 1) for x in a)) + data
        msg = mutate_message(rng, typ, payload, sq, case, lambda t: True, flags=flags)
        if typ in SYS.values() and SYS_NAME.get(typ) in PATH_CALLS | ADDR_CALLS:
            msg = resanitize(msg, ctx)
        case.items.append(msg)
    if rng.random() < 0.15 and not case.seq_broken:
        case.items.append(fatal_tail(rng, SYS["read"], sq.next()))
        case.framed = False


SYS_NAME = {v: k for k, v in SYS.items()}


def chain(rng: random.Random, ctx: Ctx) -> list[tuple[int, list[int], bytes]]:
    """A socket connected to the sink, or a file of the job's directory,
    then calls on descriptor 3 (the lowest free one in a fresh session)."""
    out: list[tuple[int, list[int], bytes]] = []
    if rng.random() < 0.5:
        kind = rng.choice([1, 2])
        out.append((SYS["socket"], [socket.AF_INET, kind, 0, 0], b""))
        addr = struct.pack("<H", socket.AF_INET) + struct.pack(">H", ctx.ports[kind - 1]) + bytes([127, 0, 0, 1]) + bytes(8)
        out.append((SYS["connect"], [3, rng.choice([-1, 100]), 0, 0], addr))
    else:
        out.append((SYS["openat"], [-100, 0o100 | 2, 0o644, 0], rng.choice([b"f0", b"f1", b"d0/f1"]) + b"\0"))
    for _ in range(rng.randrange(1, 4)):
        name = rng.choice(["read", "write", "pread", "pwrite", "recvmsg", "sendmsg", "poll", "fcntl", "lseek",
                           "fstatat", "getdents64", "ftruncate", "fsync", "dup", "shutdown", "getsockopt", "close"])
        a, data, _ = sys_request(rng, name, ctx)     # the chain's calls travel without flags
        a[0] = 3
        if name == "poll":
            a[0], data = 1, struct.pack("<ihh", 3, rng.choice([1, 4]), 0)
        if name in ("read", "write") and rng.random() < 0.7:
            a[1], a[3], data = 100, 0, (rng.randbytes(rng.choice([10, MAX_IO])) if name == "write" else b"")
        out.append((SYS[name], a, data))
    return out


def resanitize(msg: bytes, ctx: Ctx) -> bytes:
    """After mutation, the path and address rules hold again (same length)."""
    typ = struct.unpack_from("<H", msg, 6)[0]
    name = SYS_NAME.get(typ, "")
    head, body = msg[:16 + 32], msg[16 + 32:]
    if name in PATH_CALLS:
        body = sanitize_paths(body)
    if name in ADDR_CALLS and len(msg) >= 48:
        n = len(body)
        if name in ("sendmsg", "send_rdv"):
            n = max(0, min(struct.unpack_from("<q", msg, 16 + 16)[0], len(body)))
        body = sanitize_addr(body[:n], ctx.ports) + body[n:]
    return head + body


KINDS: list[tuple[str, float]] = [("prehello", 0.3), ("control", 0.13), ("node", 0.13), ("proc", 0.29), ("pmi", 0.15)]


def case_seed(seed: int, index: int) -> int:
    return int.from_bytes(hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=8).digest(), "little")


def generate(seed: int, index: int, ctx: Ctx, key: bytes, files: tuple[str, str], kind: str = "") -> Case:
    cs = case_seed(seed, index)
    rng = random.Random(cs)
    if not kind:
        r, acc = rng.random(), 0.0
        for kind, w in KINDS:
            acc += w
            if r < acc:
                break
    case = Case(index, cs, kind, None, seq0=first_seq(rng))
    if kind == "prehello":
        gen_prehello(rng, case, ctx, key)
    elif kind == "control":
        case.hello = (ROLE_CONTROL, 0, 0, b"")
        gen_control(rng, case, ctx, files)
    elif kind == "node":
        gen_node(rng, case, ctx)
    elif kind == "proc":
        gen_proc(rng, case, ctx)
    else:
        gen_pmi(rng, case, ctx)
    if kind != "prehello":
        case.abrupt = rng.random() < 0.05
    return case


# ---- running a case ----

HANG_S = GUARD_S    # a session ciod does not finish within this is a hang
# ciod reads nothing of a session for this long: stop sending, hang up.  Not a
# limit on ciod (a session cut short is still served and checked), only how a
# case whose call waits on a silent peer of ours ends: on a loaded host more
# cases end early, which changes what they send, never what passes.
STALL_S = 0.5


@dataclass
class Result:
    inputs: int = 0
    refused: bool = False
    served: int = 0             # inputs sent on a session whose hello was accepted
    busy: int = 0               # PROC hellos answered EBUSY before this one was accepted
    dup_refused: int = 0        # second hellos for an open process refused with EBUSY


def check_replies(buf: bytearray, seqs: set[int], case: Case, answered: dict[int, int]) -> bytearray:
    """Consumes whole reply messages from buf: each well framed, and in a
    framed session an answer to one of our seqs (0: one-way)."""
    off = 0
    while len(buf) - off >= 16:
        magic, version, flags, typ, ln, seq = HDR.unpack_from(buf, off)
        if magic != MAGIC or version != VERSION or flags or ln > MAX_PAYLOAD:
            raise FuzzFailure(f"ciod sent a malformed header (magic 0x{magic:x} version {version} len {ln})\n"
                              + case.describe())
        if case.framed and seq and seq not in seqs:
            raise FuzzFailure(f"ciod answered seq {seq} (type 0x{typ:04x}) that was never sent\n" + case.describe())
        if len(buf) - off < 16 + ln:
            break
        if typ & REPLY:
            answered[seq] = answered.get(seq, 0) + 1
        off += 16 + ln
    del buf[:off]
    return buf


def run_case(t: Target, case: Case) -> Result:
    res = Result()
    challenge = b""
    if case.hello:
        role, node, job, extra = case.hello
        if role == ROLE_PROC:
            sess, res.busy = open_proc_session(t.addr, t.key, node, job, extra, seq=case.seq0)
        else:
            sess = open_session(t.addr, t.key, role, node, job, extra, seq=case.seq0)
        res.inputs += 1
        if sess.err:                    # refused (e.g. a process's PMI connection is taken): nothing more
            sess.close()
            res.refused = True
            return res
        if case.dup_hello:              # one connection per process at a time
            dup = open_session(t.addr, t.key, role, node, job, extra, seq=case.seq0)
            dup.close()
            res.inputs += 1
            if dup.err != errno.EBUSY:
                sess.close()
                raise FuzzFailure(f"a second PROC hello for an open process answered "
                                  f"{dup.err and os.strerror(dup.err)!r}, not EBUSY\n" + case.describe())
            res.dup_refused += 1
        s = sess.sock
    else:
        s = connect(t.addr)
        try:
            challenge = take_challenge(s)
        except (EOFError, OSError):     # shut before its challenge (too many waiting for their hello)
            s.close()
            return res
        except BaseException:
            s.close()
            raise
    served = res.inputs
    parse = case.framed and case.kind != "pmi"
    answered: dict[int, int] = {}
    ok = False
    try:
        s.setblocking(False)
        sel = selectors.DefaultSelector()
        sel.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE)
        seqs = {struct.unpack_from("<I", it, 12)[0] for it in case.items if isinstance(it, bytes) and len(it) >= 16}
        rbuf = bytearray()
        items = list(case.items)
        cur = memoryview(b"")
        wclosed = peer_gone = False
        deadline = time.monotonic() + HANG_S
        progress = time.monotonic()
        while True:
            if (cur or items) and not wclosed and time.monotonic() - progress > STALL_S:
                # ciod stopped reading: a call blocks on a peer of ours that never reads or
                # sends, as it would for a real process.  Hang up: that must free it.
                cur, items = memoryview(b""), []
            if not cur and items and not peer_gone:
                it = items.pop(0)
                res.inputs += 1
                if isinstance(it, Poke):
                    t.mbox[it.off:it.off + len(it.data)] = it.data
                    continue
                if isinstance(it, (Hello, BadHeader)):
                    it = it.make(t.key, challenge)
                cur = memoryview(it)
            if not cur and not items and not wclosed:
                if case.abrupt:
                    break
                try:
                    s.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                wclosed = True
                sel.modify(s, selectors.EVENT_READ)
            if time.monotonic() > deadline:
                raise FuzzFailure(f"ciod did not finish the session in {HANG_S:.0f} s (hang)\n" + case.describe())
            for _, ev in sel.select(timeout=1.0):
                if ev & selectors.EVENT_READ:
                    try:
                        data = s.recv(1 << 18)
                    except (BlockingIOError, InterruptedError):
                        data = None
                    except OSError:
                        data = b""
                    if data == b"":
                        ok = True
                        return res
                    if data:
                        progress = time.monotonic()
                    if data and parse:
                        rbuf += data
                        check_replies(rbuf, seqs, case, answered)
                if ev & selectors.EVENT_WRITE and cur:
                    try:
                        n = s.send(cur)
                        cur = cur[n:]
                        progress = time.monotonic()
                    except (BlockingIOError, InterruptedError):
                        pass
                    except OSError:         # ciod closed on a bad message: the rest is not sent
                        peer_gone, cur, items = True, memoryview(b""), []
                        sel.modify(s, selectors.EVENT_READ)
                        wclosed = True
        ok = True
        return res
    finally:
        s.close()
        if case.hello:
            res.served = res.inputs - served
        if ok and case.seq_broken and parse and not case.abrupt:
            # the message sent again or out of order was not acted on: no more answers
            # with its seq than to the messages before it that carried the same
            before = sum(1 for it in case.items[:-1] if isinstance(it, bytes) and len(it) >= 16
                         and struct.unpack_from("<I", it, 12)[0] == case.bad_seq)
            if answered.get(case.bad_seq, 0) > before:
                raise FuzzFailure(f"ciod answered a message whose seq {case.bad_seq} is not after the last "
                                  "(it must close the connection unanswered)\n" + case.describe())


# ---- the fuzzing loop ----

@dataclass
class Stats:
    inputs: int = 0
    cases: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    crashes: int = 0
    rounds: int = 0
    max_rss_kb: int = 0
    proc_sessions: int = 0      # PROC hellos accepted (sessions the job's worker served)
    proc_served: int = 0        # inputs sent on them after the hello
    proc_refused: int = 0       # PROC hellos refused in the end (after EBUSYs for up to 3 s)
    proc_busy: int = 0          # EBUSY answers retried
    dup_refused: int = 0        # second hellos for an open process, refused with EBUSY as they must be
    seq_broken: int = 0         # sessions ended by a message sent again or out of order

    def line(self) -> str:
        rate = self.inputs / self.seconds if self.seconds else 0.0
        return (f"{self.inputs} inputs in {self.cases} sessions, {self.seconds:.1f} s, {rate:.0f} inputs/s, "
                f"crashes/hangs/leaks found: {self.crashes}, ciod RSS max {self.max_rss_kb} kB; by kind: "
                + ", ".join(f"{k} {v}" for k, v in sorted(self.by_kind.items()))
                + f"; PROC: {self.proc_sessions} sessions served {self.proc_served} inputs, {self.proc_refused} "
                f"refused, {self.proc_busy} EBUSY retried, {self.dup_refused} second hellos refused; "
                f"{self.seq_broken} sessions closed on a replayed or out-of-order seq")


def ctx_of(t: Target) -> Ctx:
    assert t.holder is not None
    return Ctx(t.job_id, t.kvsname, t.holder.pid, t.shm_fd, t.mbox_fd, t.sink.ports)


def fuzz(t: Target, seed: int, inputs: int, workers: int = 4, round_cases: int = 96,
         restart_every: int = 25, first_case: int = 0, log: Callable[[str], None] | None = None,
         time_limit: float | None = None) -> Stats:
    """Runs cases seed:first_case, seed:first_case+1... on `workers`
    connections at a time until `inputs` inputs went out (however long that
    takes: time_limit, if given, stops it sooner); checks ciod after every
    round of `round_cases`.  Raises FuzzFailure with the seed and the round's
    cases if a check fails, HarnessFailure if the fuzzer itself broke."""
    st = Stats()
    t0 = time.monotonic()
    locks = t.locks
    files = (str(t.exe), str(t.work))
    index = first_case
    with ThreadPoolExecutor(max_workers=workers) as pool:
        while st.inputs < inputs and (time_limit is None or time.monotonic() - t0 < time_limit):
            ctx = ctx_of(t)
            cases = [generate(seed, i, ctx, t.key, files) for i in range(index, index + round_cases)]
            index += round_cases

            def one(c: Case) -> Result:
                lk = locks.get(c.lock)
                if lk:
                    with lk:
                        return run_case(t, c)
                return run_case(t, c)

            try:
                for c, r in zip(cases, pool.map(one, cases)):
                    st.inputs += r.inputs
                    st.cases += 1
                    st.by_kind[c.kind] = st.by_kind.get(c.kind, 0) + r.inputs
                    st.seq_broken += c.seq_broken
                    if c.kind == "proc":
                        st.proc_sessions += not r.refused
                        st.proc_refused += r.refused
                        st.proc_served += r.served
                        st.proc_busy += r.busy
                        st.dup_refused += r.dup_refused
                t.check()
                t.sink.release()
                if (st.rounds + 1) % restart_every == 0:
                    t.restart_job()
                    t.trim()
            except HarnessFailure as e:
                raise HarnessFailure(f"seed {seed}, cases {cases[0].index}..{cases[-1].index}: {e}") from e
            except (FuzzFailure, OSError, EOFError) as e:
                st.crashes += 1
                raise FuzzFailure(f"seed {seed}, cases {cases[0].index}..{cases[-1].index}: {e}\n"
                                  f"reproduce: tests/fuzz/ciodfuzz.py --seed {seed} --first-case {cases[0].index} "
                                  f"--inputs 1 --bisect\n") from e
            except Exception as e:      # a bug of the harness's own, not a finding: said so, with where
                raise HarnessFailure(f"seed {seed}, cases {cases[0].index}..{cases[-1].index}: the harness broke: "
                                     + "".join(traceback.format_exception(e)).rstrip()) from e
            st.rounds += 1
            st.max_rss_kb = max(st.max_rss_kb, t.counts()[2])
            st.seconds = time.monotonic() - t0
            if log and st.rounds % 10 == 0:
                log(st.line())
    st.seconds = time.monotonic() - t0
    return st


def bisect(seed: int, first_case: int, count: int, binary: Path | None = None) -> Case | None:
    """Replays cases one at a time, each on a fresh ciod, until one fails a
    check: the input that killed it."""
    for i in range(first_case, first_case + count):
        t = Target(binary)
        try:
            c = generate(seed, i, ctx_of(t), t.key, (str(t.exe), str(t.work)))
            try:
                run_case(t, c)
                t.check()
            except (FuzzFailure, OSError, EOFError) as e:
                print(f"case {i} fails alone: {e}\n{c.describe(20000)}")
                return c
        finally:
            t.close()
    return None


HARNESS_EXIT = 3     # main()'s status when the fuzzer itself broke (1: ciod failed; 2: bad arguments)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Fuzz ciod's wire protocol (all connection kinds).")
    ap.add_argument("--inputs", type=int, default=10_000_000)
    ap.add_argument("--seed", type=int, default=None, help="default: random, printed")
    ap.add_argument("--workers", type=int, default=4, help="connections at a time")
    ap.add_argument("--round", type=int, default=96, help="sessions between health checks")
    ap.add_argument("--first-case", type=int, default=0)
    ap.add_argument("--bisect", action="store_true", help="replay one round case by case on fresh ciods")
    ap.add_argument("--ciod", type=Path, default=None, help="ciod binary (default: build it; or $CIOD_BIN)")
    a = ap.parse_args(argv)
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(2**32)
    print(f"ciodfuzz: seed {seed}", flush=True)
    if a.bisect:
        c = bisect(seed, a.first_case, a.round, a.ciod)
        print("no single case fails alone" if c is None else "found")
        return 1 if c else 0
    t: Target | None = None
    try:
        t = Target(a.ciod)
        st = fuzz(t, seed, a.inputs, a.workers, a.round, first_case=a.first_case,
                  log=lambda s: print(s, flush=True))
        t.normal_session()
        t.check()
    except FuzzFailure as e:
        print(f"ciodfuzz: FAILED (seed {seed}): {e}", flush=True)
        return 1
    except HarnessFailure as e:
        print(f"ciodfuzz: HARNESS FAILED (seed {seed}), not a finding about ciod: {e}", flush=True)
        return HARNESS_EXIT
    except Exception as e:  # noqa: BLE001  (the harness's own bug: said to be one)
        print(f"ciodfuzz: HARNESS FAILED (seed {seed}), not a finding about ciod: "
              + "".join(traceback.format_exception(e)).rstrip(), flush=True)
        return HARNESS_EXIT
    finally:
        if t is not None:
            t.close()
    print(st.line())
    print(f"ciodfuzz: ok, seed {seed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
