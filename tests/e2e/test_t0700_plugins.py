"""The LOFAR-style plug-in (plugins/lofar/) on a booted 1x1x2 block (one pset
of two): ciod loads build/plugins/liblofar_ciod.so from machine.toml's
[ionode] plugins, its thread takes a UDP stream sent by this test into a
ring, two compute processes take the datagrams round-robin through the
generated stubs, and the gathered sum arrives here by UDP, under cnk and in
Linux mode."""
from __future__ import annotations

import re
import secrets
import signal
import socket
import struct
from pathlib import Path
from typing import Iterator

import pytest

from conftest import BUILD, Machine, make_machine, wait_for

PRELOAD = {"cnk": (), "linux": ("--no-sandbox",)}   # Linux mode's plugin calls are the preload client's (issue 25)

N = 20          # datagrams per job; each of the 2 ranks takes N / 2


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def lofar(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Machine, int, socket.socket]]:
    assert (BUILD / "plugins" / "liblofar_ciod.so").exists(), "build/plugins missing: run make"
    m = make_machine(tmp_path_factory.mktemp("lofar"), "--shape", "1x1x2", "--pset-size", "2",
                     "--memory", "256M")
    collector = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    collector.bind(("127.0.0.1", 0))
    collector.settimeout(600)          # a hang guard: the gather is the event
    port = free_udp_port()
    spec = f"build/plugins/liblofar_ciod.so:64K;port={port} dest=127.0.0.1:{collector.getsockname()[1]} slots=8"
    with open(m.home / "machine.toml", "a") as f:
        f.write(f'\n[ionode]\nplugins = ["{spec}"]\n')
    m.run("block", "create", "L", "--shape", "1x1x2")
    m.run("boot", "L")
    yield m, port, collector
    m.run("free", "L", check=False)
    collector.close()


@pytest.mark.parametrize("kernel", ["cnk", "linux"])
def test_scatter_round_robin_and_gather(lofar: tuple[Machine, int, socket.socket], kernel: str) -> None:
    m, port, collector = lofar
    tag = secrets.token_hex(4)
    payloads = [f"datagram {i:03d} {tag} " + "x" * (i * 37 % 300) for i in range(N)]
    # sent before the job starts: the ring (8 slots) fills and the rest waits in the socket
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for p in payloads:
            s.sendto(p.encode(), ("127.0.0.1", port))
    r = m.run("run", "--block", "L", "-n", "2", "--kernel", kernel, *PRELOAD[kernel], "--hugepages", "keep",
              "--cwd", "/tmp", str(BUILD / "plugins" / "lofar_test"), str(N // 2), check=False)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    got: dict[str, tuple[int, int]] = {}
    for rank, piece, text in re.findall(r"^rank (\d+) piece (\d+): (.*)$", r.stdout, re.M):
        assert text not in got, f"{text!r} reached two processes\n{out}"
        got[text] = (int(rank), int(piece))
    assert sorted(got) == sorted(payloads), out
    for i, p in enumerate(payloads):
        rank, piece = got[p]
        assert piece == i and rank == i % 2, (p, rank, piece, out)
    data, _ = collector.recvfrom(4096)
    assert struct.unpack("<3q", data) == (sum(len(p) for p in payloads), 1 + 2, N), out
    assert "gathered in round 0" in out


def ciod_threads(m: Machine) -> int:
    pids = m.processes("ciod", "L")
    assert len(pids) == 1, pids
    return len(list(Path(f"/proc/{pids[0]}/task").iterdir()))


def test_killed_job_leaves_no_waiting_call(lofar: tuple[Machine, int, socket.socket]) -> None:
    """No datagram comes: both processes wait in lofar_next on the I/O node.
    Interrupting the run ends the job; the calls notice their callers are
    gone and the serving threads end, and the block runs the next job."""
    m, _, _ = lofar
    before = ciod_threads(m)
    run = m.popen("run", "--block", "L", "-n", "2", "--kernel", "cnk", "--hugepages", "keep",
                  "--cwd", "/tmp", str(BUILD / "plugins" / "lofar_test"), "3")
    # the event: both calls have their serving thread (a hang guard of 600 s, not a window)
    wait_for(lambda: ciod_threads(m) >= before + 2 or run.poll() is not None)
    assert ciod_threads(m) >= before + 2 and run.poll() is None
    run.send_signal(signal.SIGINT)
    run.wait(timeout=600)       # a hang guard
    wait_for(lambda: ciod_threads(m) <= before)
    r = m.run("run", "--block", "L", "-n", "2", "--cwd", "/tmp", str(BUILD / "examples" / "hello"))
    assert "hello from rank 1 of 2" in r.stdout


def test_plugin_loaded_with_ras_event(lofar: tuple[Machine, int, socket.socket]) -> None:
    m, port, _ = lofar
    ras = m.run("ras").stdout
    assert "plug-in lofar (id 2, 2 functions, 65536 bytes per call)" in ras, ras
    assert f"lofar: stream on udp 127.0.0.1:{port} (unauthenticated: any local user may send into a job's stream" \
        in ras, ras             # and a WARNING: UDP names no sender (docs/plugins.md)
    assert re.search(rf"WARNING .*lofar: stream on udp 127.0.0.1:{port} ", ras), ras


def test_bad_plugin_config_fails_the_boot(built: Path, tmp_path: Path) -> None:
    m = make_machine(tmp_path, "--shape", "1x1x2", "--pset-size", "2", "--memory", "256M")
    with open(m.home / "machine.toml", "a") as f:
        f.write('\n[ionode]\nplugins = ["build/plugins/liblofar_ciod.so;port=0"]\n')
    m.run("block", "create", "B", "--shape", "1x1x2")
    r = m.run("boot", "B", check=False)
    m.run("free", "B", check=False)
    assert r.returncode != 0 and "exited during boot" in r.stderr, r.stderr
    log = (m.home / "blocks" / "B" / "log" / "ciod-0.log").read_text()
    assert "(lofar): init failed: Invalid argument" in log, log
    assert 'lofar: bad configuration "port=0": want one of port=P and unix=@NAME' in log, log
