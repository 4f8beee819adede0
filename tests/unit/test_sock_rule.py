"""The socket rule (compute/include/lattice/sock_rule.h), which cnk and the
Linux-mode client both include: loopback ships, this host's addresses (the
compute nodes') stay local, IPv4-mapped IPv6 is judged as IPv4; a socket
connected here, listening, or not AF_INET/AF_INET6 is local for good; what
a shipped socket carries to the I/O node.  The e2e side is
tests/e2e/test_t0710_sockets.py (both kernels)."""
from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    exe = tmp_path_factory.mktemp("rule") / "sock_rule_harness"
    subprocess.run(["gcc", "-std=c11", "-O1", "-Wall", "-Wextra", "-Werror", "-Iprotocol", "-Icompute/include",
                    "-o", str(exe), "tests/unit/sock_rule_harness.c"], cwd=ROOT, check=True)
    return exe


def host_address() -> str | None:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))      # no packet: picks the source address
            a = s.getsockname()[0]
    except OSError:
        return None
    return None if a.startswith("127.") else a


def run(harness: Path, host: str | None) -> dict[str, str]:
    p = subprocess.run([str(harness), host or "-"], capture_output=True, text=True, check=True)
    out = {}
    for line in p.stdout.splitlines():
        k, _, v = line.partition(" ")
        out[k] = v
    return out


def test_destinations(harness: Path) -> None:
    host = host_address()
    r = run(harness, host)
    assert r["node.loopback"] == "0" and r["node.loopback6"] == "0" and r["node.mapped_loopback"] == "0"
    assert r["node.short"] == "1"            # no family: the kernel judges, on the node
    if host:
        assert r["node.host"] == "1" and r["node.mapped_host"] == "1", (host, r)


def test_sockets_decided_and_carried(harness: Path) -> None:
    r = run(harness, host_address())
    assert r["ships.udp_loopback"] == "1"
    assert r["carry.domain"] == str(int(socket.AF_INET))
    assert r["carry.type"] == str(int(socket.SOCK_DGRAM) | 0o4000)     # O_NONBLOCK as SOCK_NONBLOCK
    assert r["carry.nopt"] == "1" and r["carry.opt0"] == f"{socket.SOL_SOCKET},{socket.SO_BROADCAST},1"
    assert r["carry.bound_port"] != "0"
    for kind in ("connected", "listening", "unix"):
        assert r[f"ships.{kind}"] == "0 pinned 1", (kind, r)
    assert r["ships.file"] == "0 pinned 0"   # not a socket: nothing decided
    assert r["unpinned"] == "0"
