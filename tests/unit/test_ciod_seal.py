"""An on-path relay between the service node and a ciod listening on TCP
(docs/security.md "Links between hosts"): after the handshake it flips a
bit, replays a frame, injects one (a CTL_SHUTDOWN with the next seq, which
shut the old ciod down); each is refused, only that connection is closed,
a RAS event names it, and ciod goes on serving others.  What crosses the
link is sealed: a known plaintext is not on the wire."""
from __future__ import annotations

import socket
import struct
import threading
from typing import Callable

import pytest

from lattice import wire
from lattice.ciodclient import Ciod as Client
from lattice.ciodclient import CiodError
from test_ciod import CTL_SHUTDOWN, CTL_STATUS, HDR, MAGIC, PSET_SIZE, VERSION, Ciod, ciod_bin, status  # noqa: F401
from test_ciod_auth import ras_lines, tcp_ciod  # noqa: F401 (a fixture)

LOC = "R00-M0-N00-I:J01"
# frames of the handshake, before anything is sealed: challenge and ack down, hello up
PLAIN_DOWN, PLAIN_UP = 2, 1
Tamper = Callable[[int, bytes], list[bytes]]


def plain_header(typ: int, seq: int, length: int = 0) -> bytes:
    return HDR.pack(MAGIC, VERSION, 0, typ, length, seq)


class Relay:
    """A man in the middle that knows the framing: each frame after the
    handshake passes through tamper(index, frame), which returns what to
    send in its place.  It records every byte both ways."""

    def __init__(self, ciod_port: int, up: Tamper | None = None, down: Tamper | None = None) -> None:
        self.lst = socket.create_server(("127.0.0.1", 0))
        self.port = self.lst.getsockname()[1]
        self.ciod_port = ciod_port
        self.tamper = {"up": up, "down": down}
        self.wire: dict[str, list[bytes]] = {"up": [], "down": []}
        self.done = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    @staticmethod
    def _exact(s: socket.socket, n: int) -> bytes:
        b = b""
        while len(b) < n:
            chunk = s.recv(n - len(b))
            if not chunk:
                raise EOFError
            b += chunk
        return b

    def _frame(self, s: socket.socket, plain: bool) -> bytes:
        head = self._exact(s, 4)
        if plain or struct.unpack("<I", head)[0] == MAGIC:     # a plain frame (the old protocol's, too)
            rest = self._exact(s, HDR.size - 4)
            return head + rest + self._exact(s, struct.unpack_from("<I", rest, 4)[0])
        (n,) = struct.unpack("<I", head)
        return head + self._exact(s, n + wire.SEAL_TAG_BYTES)

    def _pump(self, src: socket.socket, dst: socket.socket, way: str, nplain: int) -> None:
        i = 0
        try:
            while True:
                frame = self._frame(src, i < nplain)
                self.wire[way].append(frame)
                tamper = self.tamper[way]
                out = tamper(i - nplain, frame) if tamper and i >= nplain else [frame]
                for f in out:
                    dst.sendall(f)
                i += 1
        except (EOFError, OSError):
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _run(self) -> None:
        a, _ = self.lst.accept()
        b = socket.create_connection(("127.0.0.1", self.ciod_port))
        down = threading.Thread(target=self._pump, args=(b, a, "down", PLAIN_DOWN), daemon=True)
        down.start()
        self._pump(a, b, "up", PLAIN_UP)
        down.join(30)
        a.close()
        b.close()
        self.lst.close()
        self.done.set()

    def sealed_bytes(self, way: str, plain: int) -> bytes:
        return b"".join(self.wire[way][plain:])


def client(relay: Relay, key: bytes) -> Client:
    return Client(f"tcp:127.0.0.1:{relay.port}", key, LOC, timeout=30)


def still_serving(c: Ciod) -> None:
    """ciod is up, and a client that is not tampered with is served."""
    assert c.alive()
    with Client(c.addr, c.key, LOC, timeout=30) as other:
        assert other.status() == (0, PSET_SIZE, 0)


def test_a_known_plaintext_is_not_on_the_wire(tcp_ciod: Ciod) -> None:
    r = Relay(tcp_ciod.tcp_port)
    marker = b"ARGV-MARKER-6f1d2c-a-secret-of-the-job"
    with client(r, tcp_ciod.key) as c:
        assert c.status() == (0, PSET_SIZE, 0)
        # an unknown request carrying the marker: ciod answers ENOSYS and keeps the link
        with pytest.raises(CiodError, match="not served|Function not implemented"):
            c.request(0x0FFF, marker * 4)
        assert c.status() == (0, PSET_SIZE, 0)
    assert r.done.wait(30)
    up, down = r.sealed_bytes("up", PLAIN_UP), r.sealed_bytes("down", PLAIN_DOWN)
    assert len(up) > 3 * HDR.size and len(down) > 3 * HDR.size
    for b in (up, down):
        assert marker not in b and marker[:8] not in b
        assert struct.pack("<I", MAGIC) not in b       # not even a frame header is in clear
    # every frame after the ack is a sealed one: its length, then length + tag bytes
    for f in r.wire["up"][PLAIN_UP:] + r.wire["down"][PLAIN_DOWN:]:
        assert len(f) == 4 + struct.unpack_from("<I", f)[0] + wire.SEAL_TAG_BYTES


def test_a_flipped_bit_is_refused_and_the_connection_closed(tcp_ciod: Ciod) -> None:
    def flip_second(i: int, frame: bytes) -> list[bytes]:
        # the second request's last byte: a seq byte on the old wire, where nothing checked it
        return [frame[:-1] + bytes([frame[-1] ^ 0x40])] if i == 1 else [frame]
    r = Relay(tcp_ciod.tcp_port, up=flip_second)
    with client(r, tcp_ciod.key) as c:
        assert c.status() == (0, PSET_SIZE, 0)
        with pytest.raises(CiodError, match="lost I/O node"):
            c.status()
    assert r.done.wait(30)
    (line,) = ras_lines(tcp_ciod, "failed authentication")
    assert "WARNING" in line and "control connection from 127.0.0.1:" in line and "sealed frame 1 " in line
    still_serving(tcp_ciod)


def test_a_replayed_frame_is_refused(tcp_ciod: Ciod) -> None:
    first: list[bytes] = []

    def replay(i: int, frame: bytes) -> list[bytes]:
        if i == 0:
            first.append(frame)
            return [frame]
        return [first[0]] if i == 1 else [frame]        # the first request again, in the second's place
    r = Relay(tcp_ciod.tcp_port, up=replay)
    with client(r, tcp_ciod.key) as c:
        assert c.status() == (0, PSET_SIZE, 0)
        with pytest.raises(CiodError, match="lost I/O node"):
            c.status()
    assert r.done.wait(30)
    (line,) = ras_lines(tcp_ciod, "failed authentication")
    assert "control connection from 127.0.0.1:" in line
    still_serving(tcp_ciod)


@pytest.mark.parametrize("forged", ["plain", "sealed"])
def test_an_injected_shutdown_is_refused_and_ciod_keeps_serving(tcp_ciod: Ciod, forged: str) -> None:
    """The attack that shut the old ciod down: after the handshake, the relay
    sends CTL_SHUTDOWN with the next seq before the client's request; as a
    plain frame, or shaped like a sealed one (it cannot make the tag)."""
    def inject(i: int, frame: bytes) -> list[bytes]:
        if i != 0:
            return [frame]
        shutdown = plain_header(CTL_SHUTDOWN, 2)
        if forged == "sealed":
            shutdown = struct.pack("<I", len(shutdown)) + shutdown + bytes(wire.SEAL_TAG_BYTES)
        return [shutdown, frame]
    r = Relay(tcp_ciod.tcp_port, up=inject)
    with client(r, tcp_ciod.key) as c:
        with pytest.raises(CiodError, match="lost I/O node"):
            c.status()
    assert r.done.wait(30)
    want = "not this link's" if forged == "plain" else "sealed frame 0 of 16 bytes failed authentication"
    (line,) = ras_lines(tcp_ciod, want)
    assert "WARNING" in line and "control connection from 127.0.0.1:" in line
    assert "shutdown requested" not in tcp_ciod.rastext()
    still_serving(tcp_ciod)


def test_the_service_node_refuses_a_tampered_reply(tcp_ciod: Ciod) -> None:
    """The other way: a bit flipped in ciod's reply makes the service node's
    client refuse it, with one clear error, and close the link."""
    def flip(i: int, frame: bytes) -> list[bytes]:
        return [frame[:10] + bytes([frame[10] ^ 0x01]) + frame[11:]] if i == 0 else [frame]
    r = Relay(tcp_ciod.tcp_port, down=flip)
    with client(r, tcp_ciod.key) as c:
        with pytest.raises(CiodError, match=r"sealed frame 0 of \d+ bytes failed authentication .*connection closed"):
            c.status()
    assert r.done.wait(30)
    still_serving(tcp_ciod)
