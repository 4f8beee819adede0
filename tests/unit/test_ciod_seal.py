"""An on-path relay between the service node and a ciod listening on TCP
(docs/security.md "Links between hosts"): after the handshake it flips a
bit, replays a frame, injects one (a CTL_SHUTDOWN with the next seq, which
shut the old ciod down); each is refused, only that connection is closed,
a RAS event names it, and ciod goes on serving others.  What crosses the
link is sealed: a known plaintext is not on the wire."""
from __future__ import annotations

import struct
from pathlib import Path

import pytest

from lattice.transport import wire
from lattice.transport.ciodclient import Ciod as Client
from lattice.transport.ciodclient import CiodError
from seal_relay import Link, Relay
from test_ciod import (CTL_SHUTDOWN, CTL_STATUS, HDR, MAGIC, PSET_SIZE, VERSION, Ciod,  # noqa: F401 (ciod_bin:
                       ciod_bin, recv, status)                                         # a fixture)
from test_ciod_auth import ras_lines, tcp_ciod  # noqa: F401 (a fixture)

LOC = "R00-M0-N00-I:J01"


def plain_header(typ: int, seq: int, length: int = 0) -> bytes:
    return HDR.pack(MAGIC, VERSION, 0, typ, length, seq)


def only(r: Relay) -> Link:
    """The one link of a test, once it has ended."""
    assert len(r.links) == 1 and r.links[0].done.wait(30)
    return r.links[0]


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
    link = only(r)
    up, down = b"".join(link.sealed("up")), b"".join(link.sealed("down"))
    assert len(up) > 3 * HDR.size and len(down) > 3 * HDR.size
    for b in (up, down):
        assert marker not in b and marker[:8] not in b
        assert struct.pack("<I", MAGIC) not in b       # not even a frame header is in clear
    # every frame after the ack is a sealed one: its length, then length + tag bytes
    for f in link.sealed("up") + link.sealed("down"):
        assert len(f) == 4 + struct.unpack_from("<I", f)[0] + wire.SEAL_TAG_BYTES


def test_a_flipped_bit_is_refused_and_the_connection_closed(tcp_ciod: Ciod) -> None:
    def flip_second(_: Link, i: int, frame: bytes) -> list[bytes]:
        # the second request's last byte: a seq byte on the old wire, where nothing checked it
        return [frame[:-1] + bytes([frame[-1] ^ 0x40])] if i == 1 else [frame]
    r = Relay(tcp_ciod.tcp_port, up=flip_second)
    with client(r, tcp_ciod.key) as c:
        assert c.status() == (0, PSET_SIZE, 0)
        with pytest.raises(CiodError, match="lost I/O node"):
            c.status()
    only(r)
    (line,) = ras_lines(tcp_ciod, "failed authentication")
    assert "WARNING" in line and "control connection from 127.0.0.1:" in line and "sealed frame 1 " in line
    still_serving(tcp_ciod)


def test_a_replayed_frame_is_refused(tcp_ciod: Ciod) -> None:
    first: list[bytes] = []

    def replay(_: Link, i: int, frame: bytes) -> list[bytes]:
        if i == 0:
            first.append(frame)
            return [frame]
        return [first[0]] if i == 1 else [frame]        # the first request again, in the second's place
    r = Relay(tcp_ciod.tcp_port, up=replay)
    with client(r, tcp_ciod.key) as c:
        assert c.status() == (0, PSET_SIZE, 0)
        with pytest.raises(CiodError, match="lost I/O node"):
            c.status()
    only(r)
    (line,) = ras_lines(tcp_ciod, "failed authentication")
    assert "control connection from 127.0.0.1:" in line
    still_serving(tcp_ciod)


@pytest.mark.parametrize("forged", ["plain", "sealed"])
def test_an_injected_shutdown_is_refused_and_ciod_keeps_serving(tcp_ciod: Ciod, forged: str) -> None:
    """The attack that shut the old ciod down: after the handshake, the relay
    sends CTL_SHUTDOWN with the next seq before the client's request; as a
    plain frame, or shaped like a sealed one (it cannot make the tag)."""
    def inject(_: Link, i: int, frame: bytes) -> list[bytes]:
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
    only(r)
    want = "not this link's" if forged == "plain" else "sealed frame 0 of 16 bytes failed authentication"
    (line,) = ras_lines(tcp_ciod, want)
    assert "WARNING" in line and "control connection from 127.0.0.1:" in line
    assert "shutdown requested" not in tcp_ciod.rastext()
    still_serving(tcp_ciod)


def test_the_service_node_refuses_a_tampered_reply(tcp_ciod: Ciod) -> None:
    """The other way: a bit flipped in ciod's reply makes the service node's
    client refuse it, with one clear error, and close the link."""
    def flip(_: Link, i: int, frame: bytes) -> list[bytes]:
        return [frame[:10] + bytes([frame[10] ^ 0x01]) + frame[11:]] if i == 0 else [frame]
    r = Relay(tcp_ciod.tcp_port, down=flip)
    with client(r, tcp_ciod.key) as c:
        with pytest.raises(CiodError, match=r"sealed frame 0 of \d+ bytes failed authentication .*connection closed"):
            c.status()
    only(r)
    still_serving(tcp_ciod)


def test_a_tampered_one_way_frame_ends_the_link_for_a_running_job() -> None:
    """What `lattice run` reads while a job runs (Ciod.frames): the frames
    before a tampered one are delivered, then the link reads as closed (the
    job ends with its I/O node lost, exit 255) and `broken` says why."""
    import os
    import select
    import socket
    import threading

    key = os.urandom(32)
    lst = socket.create_server(("127.0.0.1", 0))

    def fake_ciod() -> None:
        c, _ = lst.accept()
        with c:
            nonce = os.urandom(32)
            c.sendall(plain_header(wire.CHALLENGE, 0, 32) + nonce)
            head = c.recv(HDR.size, socket.MSG_WAITALL)
            body = c.recv(HDR.unpack(head)[4], socket.MSG_WAITALL)
            cnonce = wire.HELLO_MSG.unpack(body)[3]
            ack = wire.ack_payload(key, nonce, cnonce, 0, wire.MAX_IO, 0, 2)
            c.sendall(plain_header(wire.HELLO | wire.REPLY, 1, len(ack)) + ack)
            up, down = wire.seal_keys(key, nonce, cnonce, wire.ROLE_CONTROL)
            s = wire.Sealer(down, up)
            out = wire.OUTPUT.pack(0, 1) + b"authentic"
            good = s.seal(plain_header(wire.CTL_OUTPUT, 0, len(out)) + out)
            bad = s.seal(plain_header(wire.CTL_OUTPUT, 0, len(out)) + out)
            c.sendall(good + bad[:-1] + bytes([bad[-1] ^ 1]))
            c.recv(1)
    t = threading.Thread(target=fake_ciod, daemon=True)
    t.start()
    with lst, Client(f"tcp:127.0.0.1:{lst.getsockname()[1]}", key, LOC, timeout=30) as c:
        got: list[tuple[int, bytes]] = []
        while True:
            select.select([c], [], [], 30)
            frames = c.frames()
            if frames is None:
                break
            got += frames
        assert got == [(wire.CTL_OUTPUT, wire.OUTPUT.pack(0, 1) + b"authentic")]
        assert c.broken and "sealed frame 1 of" in c.broken and "failed authentication" in c.broken
    t.join(30)


@pytest.mark.parametrize("attack", ["none", "flip"])
def test_the_link_between_two_ciods_of_a_fence_tree(ciod_bin: Path, tmp_path: Path, attack: str) -> None:
    """A child ciod below a parent on TCP, through the relay: the ranks'
    cards in the fence are not on the wire; a bit flipped in the child's
    fence is refused by the parent (RAS, the tree fails, the job's owner
    is told) and both ciods go on."""
    import shutil
    import socket
    import tempfile

    from test_ciod import Job, request
    from test_ciod_tree import JOB, pset_in_fence, tree_fail

    def flip_fence(_: Link, i: int, frame: bytes) -> list[bytes]:
        return [frame[:30] + bytes([frame[30] ^ 0x04]) + frame[31:]] if attack == "flip" and i == 0 else [frame]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dirs = [Path(tempfile.mkdtemp(prefix="ciod-seal-", dir="/tmp")) for _ in range(2)]
    parent = Ciod(ciod_bin, dirs[0], tcp_port=port, pset=1)
    child = Ciod(ciod_bin, dirs[1], pset=2)
    r = Relay(port, up=flip_fence)
    try:
        jp = Job(parent, tmp_path, JOB, flags=wire.JOB_TREE)
        jc = Job(child, tmp_path, JOB, flags=wire.JOB_TREE)
        assert request(jp.ctl, wire.CTL_PMI_TREE, wire.pmi_tree_payload(JOB, [2], ""))[:2] == (0, 0)
        assert request(jc.ctl, wire.CTL_PMI_TREE, wire.pmi_tree_payload(JOB, [], r.addr))[:2] == (0, 0)
        pset_in_fence(jc)                       # the child's pset's fence goes up through the relay
        if attack == "none":
            pset_in_fence(jp)
            t, _, body = recv(jp.ctl)
            assert t == wire.CTL_FENCE and b"at-0" in body
            seen = r.wire_bytes()
            assert seen and b"at-0" not in seen and b"card-" not in seen
            assert [ln.role for ln in r.links] == [wire.ROLE_TREE]
        else:
            assert "failed authentication" in tree_fail(jp)
            (line,) = ras_lines(parent, "failed authentication")
            assert "from the I/O node of pset 2 below" in line and "sealed frame 0 " in line
        assert parent.alive() and child.alive()
        assert status(parent)[1] == PSET_SIZE and status(child)[1] == PSET_SIZE
    finally:
        r.close()
        for c, d in ((parent, dirs[0]), (child, dirs[1])):
            if c.alive():
                c.proc.terminate()
            c.proc.wait(10)
            c.log.close()
            shutil.rmtree(d, ignore_errors=True)


def test_a_pmi_connection_from_another_host_is_refused(tcp_ciod: Ciod, tmp_path: Path) -> None:
    """A PMI connection carries raw text after its hello, which cannot be
    sealed: over TCP ciod refuses it (PMI between hosts rides the node link)."""
    import errno

    from test_ciod import Job, closed
    job = Job(tcp_ciod, tmp_path, job_id=5, ranks=(0, 1), image=b"x")  # noqa: F841 (keeps it running)
    s, err = tcp_ciod.hello(wire.ROLE_PMI, 0, 5)
    assert err == errno.EPROTO and closed(s)
    (line,) = ras_lines(tcp_ciod, "a PMI connection from another host")
    assert "WARNING" in line and "refused" in line
    still_serving_job = status(tcp_ciod)
    assert still_serving_job == (2, PSET_SIZE, 5)
