"""The handshake and the seq rule (docs/protocol.md section 3) on a ciod
listening on TCP: the block key never travels, a hello needs it, a recorded
hello or message does not work twice, and a daemon without the key is
refused by the service node's client."""
from __future__ import annotations

import errno
import os
import shutil
import socket
import struct
import tempfile
import threading
from pathlib import Path
from typing import Iterator

import pytest

from conftest import wait_for
from lattice.transport import wire
from lattice.transport.ciodclient import Ciod as Client
from lattice.transport.ciodclient import CiodError
from test_ciod import (CHALLENGES, CTL_SHUTDOWN, CTL_STATUS, HDR, HELLO, MAGIC, PSET_SIZE, REPLY, ROLE_CONTROL,
                       VERSION, Ciod, ciod_bin, closed, recv, send, status)  # noqa: F401 (ciod_bin: a fixture)


@pytest.fixture
def tcp_ciod(ciod_bin: Path) -> Iterator[Ciod]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    d = Path(tempfile.mkdtemp(prefix="ciod-auth-", dir="/tmp"))
    c = Ciod(ciod_bin, d, tcp_port=port)
    try:
        yield c
    finally:
        if c.alive():
            c.proc.terminate()
        c.proc.wait(600)        # a hang guard
        c.log.close()
        shutil.rmtree(d, ignore_errors=True)


def ras_lines(c: Ciod, text: str) -> list[str]:
    """The RAS lines holding text, once there is one (ciod writes it after
    answering: wait for the line itself, a hang guard of 600 s)."""
    def lines() -> list[str]:
        return [line for line in c.rastext().splitlines() if text in line]
    wait_for(lambda: bool(lines()))
    return lines()


def test_a_wrong_key_is_refused_and_nothing_is_done(tcp_ciod: Ciod) -> None:
    s = tcp_ciod.raw()
    hello, _ = wire.hello_payload(os.urandom(32), CHALLENGES[s], ROLE_CONTROL)
    # the hello and a shutdown behind it, before any answer
    s.sendall(HDR.pack(MAGIC, VERSION, 0, HELLO, len(hello), 1) + hello + HDR.pack(MAGIC, VERSION, 0, CTL_SHUTDOWN, 0, 2))
    t, q, body = recv(s)
    assert (t, q) == (HELLO | REPLY, 1) and len(body) == 48
    err, _, _, _, proof = wire.HELLO_ACK.unpack(body)
    assert err == errno.EACCES and proof == bytes(32)       # no proof for a stranger
    assert closed(s)
    # the shutdown was not acted on: ciod answers a client with the key
    assert tcp_ciod.alive() and status(tcp_ciod) == (0, PSET_SIZE, 0)
    (line,) = ras_lines(tcp_ciod, "mac is wrong")
    assert "WARNING" in line and "connection from 127.0.0.1:" in line


def test_the_key_never_travels(tcp_ciod: Ciod) -> None:
    """Everything the service node's client sends, seen on the wire by a relay."""
    sent: list[bytes] = []
    with socket.socket() as lst:
        lst.bind(("127.0.0.1", 0))
        lst.listen(1)

        def relay() -> None:
            a, _ = lst.accept()
            b = socket.create_connection(("127.0.0.1", tcp_ciod.tcp_port))

            def pump(src: socket.socket, dst: socket.socket, log: list[bytes] | None) -> None:
                while chunk := src.recv(1 << 16):
                    if log is not None:
                        log.append(chunk)
                    dst.sendall(chunk)
                dst.shutdown(socket.SHUT_WR)
            back = threading.Thread(target=pump, args=(b, a, None), daemon=True)
            back.start()
            pump(a, b, sent)
            back.join(600)
            a.close()
            b.close()
        t = threading.Thread(target=relay, daemon=True)
        t.start()
        with Client(f"tcp:127.0.0.1:{lst.getsockname()[1]}", tcp_ciod.key, "R00-M0-N00-I:J01") as c:
            assert c.status() == (0, PSET_SIZE, 0)
            assert "read" in c.counters()
        t.join(600)
    wire_bytes = b"".join(sent)
    assert len(wire_bytes) >= HDR.size + wire.HELLO_MSG.size + 2 * HDR.size
    assert tcp_ciod.key not in wire_bytes and tcp_ciod.key.hex().encode() not in wire_bytes
    # the hello carried a mac over our nonce and ciod's instead
    _, _, _, typ, ln, _ = HDR.unpack_from(wire_bytes)
    assert (typ, ln) == (HELLO, wire.HELLO_MSG.size)


def test_a_replayed_hello_is_refused(tcp_ciod: Ciod) -> None:
    a = tcp_ciod.raw()
    hello, _ = wire.hello_payload(tcp_ciod.key, CHALLENGES[a], ROLE_CONTROL)
    send(a, HELLO, hello, 1)
    t, _, body = recv(a)
    assert t == HELLO | REPLY and wire.HELLO_ACK.unpack(body)[0] == 0
    a.close()
    b = tcp_ciod.raw()                      # another challenge: the recorded hello is worthless
    assert CHALLENGES[b] != CHALLENGES[a]
    send(b, HELLO, hello, 1)
    send(b, CTL_SHUTDOWN, b"", 2)
    t, _, body = recv(b)
    assert t == HELLO | REPLY and wire.HELLO_ACK.unpack(body)[0] == errno.EACCES
    assert closed(b)
    assert tcp_ciod.alive() and status(tcp_ciod) == (0, PSET_SIZE, 0)


def test_a_message_sent_twice_is_refused_and_the_connection_closed(tcp_ciod: Ciod) -> None:
    s = tcp_ciod.connect(ROLE_CONTROL)
    send(s, CTL_STATUS, b"", 5)
    t, q, _ = recv(s)
    assert (t, q) == (CTL_STATUS | REPLY, 5)
    send(s, CTL_SHUTDOWN, b"", 5)           # seq 5 again: not acted on
    assert closed(s)
    assert tcp_ciod.alive() and status(tcp_ciod) == (0, PSET_SIZE, 0)
    (line,) = ras_lines(tcp_ciod, "with seq 5, not after the last one 5")
    assert "control connection from 127.0.0.1:" in line
    # an older seq is refused the same way
    s = tcp_ciod.connect(ROLE_CONTROL)
    send(s, CTL_STATUS, b"", 9)
    assert recv(s)[1] == 9
    send(s, CTL_SHUTDOWN, b"", 8)
    assert closed(s)
    assert tcp_ciod.alive() and status(tcp_ciod) == (0, PSET_SIZE, 0)
    # the rule is wrap-aware: (int32_t)(seq - last) > 0, so 0 and 1 follow 0xFFFFFFFF
    s = tcp_ciod.connect(ROLE_CONTROL)
    for seq in (0x7FFFFFF0, 0xFFFFFFEF, 0xFFFFFFFF, 0, 1):
        send(s, CTL_STATUS, b"", seq)
        assert recv(s)[:2] == (CTL_STATUS | REPLY, seq)
    s.close()


def fake_ciod(proof_key: bytes) -> tuple[socket.socket, threading.Thread]:
    """A daemon that accepts every hello and signs its ack with proof_key."""
    lst = socket.socket()
    lst.bind(("127.0.0.1", 0))
    lst.listen(1)

    def serve() -> None:
        c, _ = lst.accept()
        with c:
            nonce = os.urandom(32)
            send(c, wire.CHALLENGE, nonce)
            t, q, body = recv(c)
            assert t == HELLO
            cnonce = wire.HELLO_MSG.unpack(body)[3]
            send(c, HELLO | REPLY, wire.ack_payload(proof_key, nonce, cnonce, 0, wire.MAX_IO, 1, 2), q)
            c.recv(1)
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return lst, t


def test_a_daemon_without_the_key_is_refused_by_the_client() -> None:
    key = os.urandom(32)
    lst, t = fake_ciod(os.urandom(32))
    with lst, pytest.raises(CiodError, match="failed to prove it holds the block key"):
        Client(f"tcp:127.0.0.1:{lst.getsockname()[1]}", key, "R00-M0-N00-I:J01", timeout=600)
    t.join(600)
    # the same daemon with the key is accepted: the check is the proof, not something else
    lst, t = fake_ciod(key)
    with lst, Client(f"tcp:127.0.0.1:{lst.getsockname()[1]}", key, "R00-M0-N00-I:J01", timeout=600) as c:
        assert (c.pset, c.pset_size) == (1, 2)
    t.join(600)
