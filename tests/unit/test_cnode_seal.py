"""Sealed links from compute nodes to an I/O node on another host (docs/
protocol.md 3.3): cnode's node connection and each process's PROC
connection (sealed for the process by cnode's relay, compute/cnode/relay.c)
go to a ciod on TCP through an on-path relay that records them.  A job's
argv, the contents of the files it writes and reads and its output are not
on the wire; a frame flipped or injected on a node or a process link is
refused, that link closed, a RAS event logged, and ciod keeps serving."""
from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from lattice.transport import wire
from lattice.transport.ciodclient import Ciod as Client
from lattice.transport.ciodclient import CiodError
from seal_relay import Link, Relay, Tamper

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build"
IO_LOC = "R00-M0-N00-I:J00"


def wait_for(what: str, cond, timeout: float = 120) -> None:  # type: ignore[no-untyped-def]
    """A failure guard only: returns as soon as cond() holds."""
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"waited {timeout} s for {what}"
        time.sleep(0.02)


class TcpPset:
    """A ciod listening on a unix socket (our control link) and on TCP, its
    two compute nodes connecting over TCP through the relay."""

    def __init__(self, tmp: Path, up: Tamper | None = None, down: Tamper | None = None) -> None:
        self.tmp = tmp
        self.key = os.urandom(32)
        kf = tmp / "key"
        kf.write_text(self.key.hex())
        kf.chmod(0o600)
        self.work = tmp / "work"
        self.work.mkdir()
        self.work.chmod(0o777)
        self.sock = tmp / "ciod.sock"
        self.ras = tmp / "ras"
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.log = open(tmp / "ciod.log", "w")
        self.cnodes: list[subprocess.Popen[bytes]] = []
        self.cnode_logs = [open(tmp / f"cnode{n}.log", "w") for n in range(2)]
        self.relay: Relay | None = None
        self.ciod = subprocess.Popen(
            [str(BUILD / "bin/ciod"), "--block", "S", "--pset", "0", "--pset-size", "2", "--listen",
             f"unix:{self.sock}", "--listen", f"tcp:127.0.0.1:{port}", "--key-file", str(kf), "--ras",
             str(self.ras), "--location", IO_LOC], stdout=self.log, stderr=subprocess.STDOUT)
        try:
            self.start(port, up, down)
        except BaseException:
            self.close()
            raise

    def start(self, port: int, up: Tamper | None, down: Tamper | None) -> None:
        tmp = self.tmp
        wait_for("ciod to listen", self.listening)
        self.relay = Relay(port, up, down)
        for n in range(2):
            pf = tmp / f"p{n}.json"
            pf.write_text(json.dumps({
                "block": "S", "key": self.key.hex(), "ciod": self.relay.addr, "node": n, "pset": 0,
                "pset_size": 2, "coords": [0, 0, n], "torus": [1, 1, 2], "memory": 1 << 30, "mode": "co",
                "location": f"R00-M0-N00-C:J0{n}", "ionode_location": IO_LOC, "hide": []}))
            self.cnodes.append(subprocess.Popen(
                [str(BUILD / "bin/cnode"), "--personality", str(pf), "--client", str(BUILD / "lib/libcnclient.so"),
                 "--cnk", str(BUILD / "bin/cnk")],
                stdout=self.cnode_logs[n], stderr=subprocess.STDOUT))
        wait_for("both compute nodes", lambda: self.status()[0] == 2)

    def listening(self) -> bool:
        assert self.ciod.poll() is None, "ciod ended"
        try:
            self.status()
            return True
        except (CiodError, OSError):
            return False

    def ctl(self) -> Client:
        return Client(f"unix:{self.sock}", self.key, IO_LOC, timeout=120)

    def status(self) -> tuple[int, int, int]:
        with self.ctl() as c:
            return c.status()

    def rastext(self) -> str:
        return self.ras.read_text() if self.ras.exists() else ""

    def cnode_log(self, n: int) -> str:
        self.cnode_logs[n].flush()
        return (self.tmp / f"cnode{n}.log").read_text()

    def run(self, job: int, argv: list[str], flags: int = 0) -> tuple[str, list[bytes]]:
        """Runs argv as ranks 0 and 1 (one a node): the output, the exits' payloads."""
        exe = str(BUILD / "examples" / argv[0])
        out, exits = "", []
        with self.ctl() as c:
            c.call(wire.CTL_JOB, wire.job_payload(job, os.getuid(), os.getgid(), [], [0, 1], 2, exe,
                                                  str(self.work), argv, [], flags))
            frames = c.buffered()
            while True:
                for typ, body in frames:
                    if typ == wire.CTL_OUTPUT:
                        text = body[wire.OUTPUT.size:].decode(errors="replace")
                        # the program's own output (not cnk's word on the node's pages)
                        out += "".join(ln for ln in text.splitlines(True) if not ln.startswith("cnk: "))
                    elif typ == wire.CTL_EXIT:
                        exits.append(body)
                    elif typ == wire.CTL_JOB_END:
                        return out, exits
                select.select([c], [], [], 120)
                got = c.frames()
                assert got is not None, "the control link closed"
                frames = got

    def close(self) -> None:
        for p in [self.ciod, *self.cnodes]:
            if p.poll() is None:
                p.terminate()
        for p in [*self.cnodes, self.ciod]:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self.relay:
            self.relay.close()
        self.log.close()
        for f in self.cnode_logs:
            f.close()


@pytest.fixture
def built() -> None:
    for p in ("bin/ciod", "bin/cnode", "bin/cnk", "lib/libcnclient.so", "examples/writefile", "examples/catfile"):
        if not (BUILD / p).exists():
            pytest.skip(f"{BUILD / p} not built")


def pset_with(tmp: Path, up: Tamper | None = None, down: Tamper | None = None) -> Iterator[TcpPset]:
    tmp.chmod(0o755)
    ps = TcpPset(tmp, up, down)         # it stops what it started if it cannot come up
    try:
        yield ps
    finally:
        ps.close()


@pytest.fixture
def pset(tmp_path: Path, built: None) -> Iterator[TcpPset]:
    yield from pset_with(tmp_path)


@pytest.mark.parametrize("kernel", ["linux", "cnk"])
def test_argv_files_and_output_do_not_cross_in_clear(pset: TcpPset, kernel: str) -> None:
    flags = wire.JOB_CNK if kernel == "cnk" else 0
    argv_marker = "ARGV-MARKER-3d9a71e0c2"
    out, exits = pset.run(1, ["writefile", str(pset.work / "w.txt"), argv_marker], flags)
    assert len(exits) == 2 and out == "", (out, pset.cnode_log(0))
    assert (pset.work / "w.txt").read_text() == argv_marker       # written on the I/O node, shipped sealed
    content_marker = "FILE-CONTENT-MARKER-5be28f41"
    (pset.work / "r.txt").write_text(content_marker * 3)
    out, exits = pset.run(2, ["catfile", str(pset.work / "r.txt")], flags)
    assert out == 2 * (content_marker * 3) and len(exits) == 2
    assert pset.relay
    roles = sorted(ln.role for ln in pset.relay.links)
    # two node links; a process link for each rank of each job
    assert roles == [wire.ROLE_NODE] * 2 + [wire.ROLE_PROC] * 4, roles
    seen = pset.relay.wire_bytes()      # everything after the handshakes
    assert len(seen) > 4096
    for marker in (argv_marker, content_marker, "writefile", "catfile", str(pset.work)):
        assert marker.encode() not in seen, marker
    assert wire.MAGIC.to_bytes(4, "little") not in seen             # no frame header in clear either
    for ln in pset.relay.links:
        for way in ("up", "down"):
            for f in ln.sealed(way):
                assert len(f) == 4 + int.from_bytes(f[:4], "little") + wire.SEAL_TAG_BYTES
    # nothing on either compute host held a PMI connection of its own to a host away
    assert pset.status() == (2, 2, 0)


def flip_node1_output(link: Link, i: int, frame: bytes) -> list[bytes]:
    """On node 1's link, the first frame up after its hello (the job's output or exit)."""
    if link.role == wire.ROLE_NODE and link.node == 1 and i == 0:
        return [frame[:-3] + bytes([frame[-3] ^ 0x10]) + frame[-2:]]
    return [frame]


def test_a_frame_flipped_on_a_node_link_closes_that_link_only(tmp_path: Path, built: None) -> None:
    for ps in pset_with(tmp_path, up=flip_node1_output):
        out, exits = ps.run(1, ["writefile", str(ps.work / "w.txt"), "x"])
        # node 1's exit never arrived as it was sent: ciod refused it and lost that node
        wait_for("the RAS event", lambda: "failed authentication" in ps.rastext())
        (line,) = [ln for ln in ps.rastext().splitlines() if "failed authentication" in ln]
        assert "compute node R00-M0-N00-C:J01" in line and "sealed frame 0 " in line, line
        assert ps.ciod.poll() is None
        wait_for("node 1 gone", lambda: ps.status()[0] == 1)
        assert ps.cnodes[1].wait(120) != 0                  # its cnode lost the link and ended
        assert "connection to ciod lost" in ps.cnode_log(1)
        assert ps.cnodes[0].poll() is None


def inject_into_proc(link: Link, i: int, frame: bytes) -> list[bytes]:
    """Before a process's first call: a forged frame shaped like a sealed one."""
    if link.role == wire.ROLE_PROC and i == 0:
        forged = wire.header(wire.SYS_BASE, 0, 1)
        return [len(forged).to_bytes(4, "little") + forged + bytes(wire.SEAL_TAG_BYTES), frame]
    return [frame]


def test_a_frame_injected_on_a_process_link_is_refused(tmp_path: Path, built: None) -> None:
    for ps in pset_with(tmp_path, up=inject_into_proc):
        out, exits = ps.run(1, ["writefile", str(ps.work / "w.txt"), "never written"])
        assert not (ps.work / "w.txt").exists()
        wait_for("the RAS events", lambda: ps.rastext().count("failed authentication") >= 2)
        lines = [ln for ln in ps.rastext().splitlines() if "failed authentication" in ln]
        assert all("process connection of job 1 rank" in ln and "sealed frame 0 " in ln for ln in lines), lines
        # the I/O node and both compute nodes go on: the next job runs
        assert ps.ciod.poll() is None and ps.status() == (2, 2, 0)


def flip_down_to_proc(link: Link, i: int, frame: bytes) -> list[bytes]:
    """ciod's first reply to a process, altered: the relay in cnode refuses it."""
    if link.role == wire.ROLE_PROC and i == 0:
        return [frame[:8] + bytes([frame[8] ^ 0x01]) + frame[9:]]
    return [frame]


def test_a_reply_altered_on_the_way_to_a_process_is_refused_by_its_relay(tmp_path: Path, built: None) -> None:
    for ps in pset_with(tmp_path, down=flip_down_to_proc):
        ps.run(1, ["writefile", str(ps.work / "w.txt"), "x"])
        wait_for("the relay's word", lambda: "failed authentication" in ps.cnode_log(0) + ps.cnode_log(1))
        log = ps.cnode_log(0) + ps.cnode_log(1)
        assert "process connection relay: frame 0 from the I/O node failed authentication" in log
        assert ps.ciod.poll() is None and ps.status() == (2, 2, 0)
