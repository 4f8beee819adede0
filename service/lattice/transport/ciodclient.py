"""A CONTROL connection to one I/O node daemon (ciod)."""
from __future__ import annotations

import errno
import os
import socket
import struct
import time

from lattice.transport import wire
from lattice.errors import LatticeError


class CiodError(LatticeError):
    """ciod refused a request or the connection failed."""


def keepalive(s: socket.socket) -> None:
    """TCP keepalive probes as ciod sets them (ionode/ciod/net.c): an I/O
    node whose host vanished without a word fails its connection within
    about 11 s, so a run waiting on it ends the job instead of hanging."""
    s.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 2)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)


def open_socket(address: str, timeout: float) -> socket.socket:
    kind, _, where = address.partition(":")
    if kind == "unix":
        deadline = time.monotonic() + timeout
        while True:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            s.settimeout(timeout)
            try:
                s.connect(where)
                break
            except BlockingIOError:     # its listen backlog is full (a burst, a flood): wait for room
                s.close()
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.01)
    elif kind == "tcp":
        host, _, port = where.rpartition(":")
        s = socket.create_connection((host, int(port)), timeout=timeout)
        keepalive(s)
    else:
        raise LatticeError(f"bad I/O node address {address!r}")
    return s


class Ciod:
    """Framed requests and replies; one-way messages are read with `frames()`."""

    def __init__(self, address: str, key: bytes, location: str, timeout: float = 10.0, wait: bool = True) -> None:
        """Connect and do the handshake (docs/protocol.md section 3): take
        the challenge, answer with a hello MACed with the block key (the
        key itself never travels); with wait=False the ack is read by
        `welcome()`, so that several I/O nodes can be greeted at once."""
        self.address = address
        self.location = location
        self.key = key
        self.seq = 0
        self.buf = bytearray()          # received, not yet taken (frames from self.pos on)
        self.pos = 0
        self.sealer: wire.Sealer | None = None    # a link between hosts, after the ack
        self.broken: str | None = None            # why the link was closed on our side, if it was
        self.pending: list[tuple[int, bytes]] = []
        self.lost: str | None = None    # why the connection failed, when frames() found it gone
        self.timeout = timeout
        # ciod evicts the oldest connection still without its hello when a flood of idle
        # ones comes (ionode/ciod/admit.c): a client slowed down (a loaded host) may be it,
        # so one closed before the ack is made again, until timeout
        self.deadline = time.monotonic() + timeout
        self._connect()
        if wait:
            self.welcome()

    def _connect(self) -> None:
        while True:
            try:
                return self._greet()
            except CiodError as e:
                if not self._evicted(e):
                    raise

    def _greet(self) -> None:
        """Connect, take the challenge and send the hello."""
        self.seq, self.buf, self.pos, self.pending = 0, bytearray(), 0, []
        try:
            self.sock = open_socket(self.address, self.timeout)
        except OSError as e:
            raise CiodError(f"cannot reach I/O node {self.location} at {self.address}: {e.strerror or e}") from e
        try:
            typ, _, body = self._read_frame()
            if typ != wire.CHALLENGE or len(body) != wire.CHALLENGE_MSG.size:
                raise CiodError(f"I/O node {self.location} at {self.address} did not start with a challenge "
                                f"(type 0x{typ:04x}, {len(body)} bytes)")
            (self.server_nonce,) = wire.CHALLENGE_MSG.unpack(body)
            hello, self.client_nonce = wire.hello_payload(self.key, self.server_nonce, wire.ROLE_CONTROL)
            self.hello = self.send(wire.HELLO, hello)
        except (OSError, CiodError) as e:
            self.sock.close()
            if isinstance(e, CiodError):
                raise
            raise CiodError(f"cannot reach I/O node {self.location} at {self.address}: {e.strerror or e}") from e

    def _evicted(self, e: CiodError) -> bool:
        """Was the connection closed by the I/O node before its hello ack, with
        time left to make it again?  (Then it is made again: it was evicted.)"""
        return (isinstance(e.__cause__, (ConnectionResetError, BrokenPipeError))
                and time.monotonic() < self.deadline)

    def welcome(self) -> None:
        """The I/O node's answer to our hello: its pset, or why it refused
        us; an ack without the proof that it holds the block key too is
        refused (CiodError): that daemon is not our I/O node."""
        while True:
            try:
                body = self.reply(wire.HELLO, self.hello)
                break
            except CiodError as e:
                self.sock.close()
                if not self._evicted(e):
                    raise
            self._connect()
        if len(body) != wire.HELLO_ACK.size:
            self.close()
            raise CiodError(f"I/O node {self.location} sent a hello ack of {len(body)} bytes, "
                            f"not {wire.HELLO_ACK.size}")
        err, _, self.pset, self.pset_size, _ = wire.HELLO_ACK.unpack(body)
        if err:
            self.close()
            raise CiodError(f"I/O node {self.location} refused us: {os.strerror(err)}")
        if not wire.ack_ok(self.key, self.server_nonce, self.client_nonce, body):
            self.close()
            raise CiodError(f"I/O node {self.location} at {self.address} failed to prove it holds the "
                            "block key (wrong proof in its hello ack); not trusting it")
        if self.sock.family in (socket.AF_INET, socket.AF_INET6):
            # between hosts every frame from now on is sealed (docs/protocol.md 3.3)
            up, down = wire.seal_keys(self.key, self.server_nonce, self.client_nonce, wire.ROLE_CONTROL)
            self.sealer = wire.Sealer(up, down)

    def fileno(self) -> int:
        return self.sock.fileno()

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Ciod:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def send(self, typ: int, payload: bytes = b"") -> int:
        self.seq += 1
        frame = wire.header(typ, len(payload), self.seq) + payload
        self.sock.sendall(self.sealer.seal(frame) if self.sealer else frame)
        return self.seq

    def request(self, typ: int, payload: bytes = b"") -> bytes:
        """Send a request and return its reply's payload (one-way messages
        that arrive meanwhile are kept for `frames()`)."""
        try:
            seq = self.send(typ, payload)
        except OSError as e:
            raise CiodError(f"lost I/O node {self.location}: {e.strerror or e}") from e
        return self.reply(typ, seq)

    def reply(self, typ: int, seq: int) -> bytes:
        """The reply to request seq of type typ, sent earlier with `send()`
        (so that several I/O nodes can work on their requests at once)."""
        try:
            while True:
                rtyp, rseq, body = self._read_frame()
                if rtyp == wire.ERROR | wire.REPLY:
                    ret, err, _ = wire.SYSRET.unpack_from(body)
                    raise CiodError(f"I/O node {self.location}: {body[wire.SYSRET.size:].decode(errors='replace')}"
                                    f" ({os.strerror(err)})")
                if rtyp == typ | wire.REPLY and rseq == seq:
                    return body
                self.pending.append((rtyp, body))
        except OSError as e:
            raise CiodError(f"lost I/O node {self.location}: {e.strerror or e}") from e

    def call(self, typ: int, payload: bytes = b"") -> tuple[int, int, str]:
        """A request answered by lat_sysret + text: (ret, errno, text)."""
        return sysret(self.request(typ, payload))

    def _read_frame(self) -> tuple[int, int, bytes]:
        while True:
            frame = self._take()
            if frame:
                return frame
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionResetError(errno.ECONNRESET, "connection closed")
            self.received(chunk)

    def received(self, chunk: bytes) -> None:
        """chunk joins what is not yet taken; the taken bytes are dropped
        now, once per read, not once per frame (that was quadratic in a read's frames)."""
        if self.pos:
            del self.buf[:self.pos]
            self.pos = 0
        self.buf += chunk

    def _take(self) -> tuple[int, int, bytes] | None:
        frame: bytes | bytearray
        if self.sealer:
            try:
                opened = self.sealer.open(self.buf, self.pos)
            except wire.SealError as e:
                # nothing of it is acted on, and the link is not trusted again (shut
                # down, not closed: a selector still sees it end, frames() says None)
                try:
                    self.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                self.broken = f"{e}; connection closed"
                raise CiodError(f"I/O node {self.location} at {self.address}: {self.broken}") from None
            if opened is None:
                return None
            frame, took = opened
            self.pos += took
            at = 0
        else:
            frame, at = self.buf, self.pos
        if len(frame) - at < wire.HDR.size:
            return None
        magic, version, flags, typ, length, seq = wire.HDR.unpack_from(frame, at)
        if magic != wire.MAGIC or version != wire.VERSION or flags or length > wire.MAX_PAYLOAD or \
                (self.sealer and length != len(frame) - wire.HDR.size):
            raise CiodError(f"I/O node {self.location} sent a malformed message")
        end = at + wire.HDR.size + length
        if len(frame) < end:
            return None
        body = bytes(frame[at + wire.HDR.size:end])
        if not self.sealer:
            self.pos = end
        return typ, seq, body

    def buffered(self) -> list[tuple[int, bytes]]:
        """One-way messages already received (e.g. while awaiting a reply)."""
        out, self.pending = self.pending, []
        try:
            while (frame := self._take()) is not None:
                out.append((frame[0], frame[2]))
        except CiodError:
            if self.broken is None:
                raise
        return out      # what came before a frame that was not authentic (then frames() says None)

    def frames(self) -> list[tuple[int, bytes]] | None:
        """Read what is available (the socket is readable); return complete
        one-way messages, or None when the connection has closed or failed
        (a reset, or a keepalive timeout when the I/O node's host vanished:
        `lost` says which), or when we closed it: a sealed frame that was
        not authentic (`broken`)."""
        if self.broken:
            return None
        try:
            chunk = self.sock.recv(1 << 20)
        except (ConnectionResetError, BrokenPipeError):
            chunk = b""
        except OSError as e:
            self.lost = e.strerror or str(e)
            chunk = b""
        if not chunk:
            return self.buffered() or None
        self.received(chunk)
        return self.buffered()

    def status(self) -> tuple[int, int, int]:
        nodes, pset_size, job = wire.CTL_STATUS_MSG.unpack(self.request(wire.CTL_STATUS))
        return nodes, pset_size, job

    def counters(self) -> dict[str, int]:
        """Calls executed, by call name."""
        return self.counters_full().calls

    def counters_full(self) -> "Counters":
        return parse_counters(self.request(wire.CTL_COUNTERS))


def sysret(body: bytes) -> tuple[int, int, str]:
    """A reply of lat_sysret + text as (ret, errno, text)."""
    ret, err, _ = wire.SYSRET.unpack_from(body)
    return ret, err, body[wire.SYSRET.size:].decode(errors="replace").rstrip("\0")


class Counters:
    """A LAT_CTL_COUNTERS reply: per call count, bytes, time and latency
    histogram (bucket b: [2^b, 2^(b+1)) ns), and the data path's counters.
    (Not a dataclass: `lattice run` imports this module, see lattice.state.machine.Machine.)"""

    def __init__(self, calls: dict[str, int]) -> None:
        self.calls = calls
        self.bytes: dict[str, int] = {}
        self.ns: dict[str, int] = {}
        self.hist: dict[str, list[int]] = {}
        self.stats: dict[str, int] = {}


def parse_counters(body: bytes) -> Counters:
    """calls[nsys] ... lat_counters_ext last; an old ciod sends calls[] only."""
    names = list(wire.SYS_NAMES)
    ext = wire.COUNTERS_EXT
    if len(body) >= ext.size:
        nsys, nb, nstats, _ = ext.unpack_from(body, len(body) - ext.size)
        if 8 * (nsys * (3 + nb) + nstats) + ext.size == len(body):
            words = struct.unpack_from(f"<{(len(body) - ext.size) // 8}Q", body)
            label = [names[i] if i < len(names) else f"0x{wire.SYS_BASE + i:04x}" for i in range(nsys)]
            c = Counters(calls=dict(zip(label, words[:nsys])))
            at = nsys
            for name in label:
                c.bytes[name], c.ns[name] = words[at], words[at + 1]
                c.hist[name] = list(words[at + 2:at + 2 + nb])
                at += 2 + nb
            stat_names = [wire.CTR_NAMES[i] if i < len(wire.CTR_NAMES) else f"stat{i}" for i in range(nstats)]
            c.stats = dict(zip(stat_names, words[at:at + nstats]))
            return c
    values = struct.unpack(f"<{len(body) // 8}Q", body)
    return Counters(calls=dict(zip(names, values)))
