"""Links between hosts are sealed, end to end (issue 24; docs/security.md
"Links between hosts"): on the testbed, with the I/O nodes on h1 and the
compute nodes on h2..h4 (hostfile `role=io`), a job's argv, the executable
pushed to its nodes, a file it writes and one it reads and its output all
cross h1's link, and none of it is in what a capture on that link sees."""
from __future__ import annotations

import os
import shutil
import socket
import threading
from pathlib import Path
from typing import Iterator

import pytest

from conftest import ROOT, Machine, make_machine
from testbed import Cluster, cluster_up

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the testbed's namespaces and daemons")

SHAPE = ("--shape", "2x2x2", "--pset-size", "2")       # 4 psets of 2
EXAMPLES = ROOT / "build" / "examples"


@pytest.fixture(scope="module")
def tb() -> Iterator[Cluster]:
    with cluster_up(4) as t:
        yield t


class Capture:
    """Every frame through an interface (a raw AF_PACKET socket, both
    directions), kept in memory while the block is used."""

    def __init__(self, ifname: str) -> None:
        self.s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))   # ETH_P_ALL
        self.s.bind((ifname, 0))
        self.s.settimeout(0.2)
        self.chunks: list[bytes] = []
        self.stop = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self.chunks.append(self.s.recv(1 << 16))
            except TimeoutError:
                continue
            except OSError:
                return

    def close(self) -> bytes:
        self.stop.set()
        self.t.join(30)
        self.s.close()
        return b"".join(self.chunks)


def test_a_jobs_data_does_not_cross_hosts_in_clear(tb: Cluster, tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("h1 role=io\nh2\nh3\nh4\n")
    m: Machine = make_machine(tmp_path, *SHAPE, "--placement", "ssh", "--hostfile", str(hostfile),
                              "--ssh-command", tb.env["LATTICE_TESTBED_SSH"])
    m.env.update({k: v for k, v in tb.env.items() if k.startswith(("SLURM_CONF", "LATTICE_TESTBED"))})
    argv_marker = "ARGV-MARKER-0c5e9d1b77"
    content_marker = "FILE-CONTENT-MARKER-a41f06e2d3"
    (m.work / "in.txt").write_text(content_marker * 40)
    os.chmod(m.work / "in.txt", 0o644)
    try:
        m.run("block", "create", "all", "--shape", "2x2x2")
        m.run("boot", "all")
        cap = Capture("ltb-h1")                 # h1's end of the testbed's bridge: all its traffic
        probe = b"CAPTURE-PROBE-7d3b"           # plaintext that does cross: the capture sees the link
        h1_addr = tb.run("getent", "hosts", "h1").stdout.split()[0]
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as u:
                u.sendto(probe, (h1_addr, 9))
            m.run("run", "-n", "8", "--block", "all", str(EXAMPLES / "writefile"), str(m.work / "out.txt"),
                  argv_marker)
            r = m.run("run", "-n", "8", "--block", "all", str(EXAMPLES / "catfile"), str(m.work / "in.txt"))
        finally:
            seen = cap.close()
        # the job ran, through the I/O nodes on h1
        assert (m.work / "out.txt").read_text() == argv_marker
        assert r.stdout.count(content_marker * 40) == 8, r.stdout
        # and the link carried it all: the images, argv, both files, the output
        assert probe in seen and len(seen) > 2 * (EXAMPLES / "catfile").stat().st_size
        for marker in (argv_marker, content_marker, "usage: writefile PATH TEXT", "usage: catfile PATH",
                       str(m.work)):
            assert marker.encode() not in seen, marker
    finally:
        m.run("free", "all", check=False)
        shutil.rmtree(m.work, ignore_errors=True)
