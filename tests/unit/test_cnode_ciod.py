"""cnode and libcnclient with the real ciod (build/), driven by a bare control
connection: a 2-node pset runs the examples through function shipping."""
from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from lattice.transport import wire

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / "build"
MAGIC, VERSION = wire.MAGIC, wire.VERSION


def _rx(s: socket.socket, n: int) -> bytes:
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        assert c, "closed"
        b += c
    return b


def _recv(s: socket.socket) -> tuple[int, bytes]:
    _, _, _, t, ln, _ = wire.HDR.unpack(_rx(s, 16))
    return t, _rx(s, ln)


def _send(s: socket.socket, t: int, p: bytes, seq: int = 2) -> None:
    """One message; seq 2: the one request after the hello on each connection here."""
    s.sendall(wire.HDR.pack(MAGIC, VERSION, 0, t, len(p), seq) + p)


class Pset:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.key = os.urandom(32)
        kf = tmp / "key"
        kf.write_text(self.key.hex())
        kf.chmod(0o600)
        self.work = tmp / "work"
        self.work.mkdir()
        self.sock = tmp / "ciod.sock"
        self.ciod = subprocess.Popen(
            [str(BUILD / "bin/ciod"), "--block", "U", "--pset", "0", "--pset-size", "2", "--listen",
             f"unix:{self.sock}", "--key-file", str(kf), "--ras", str(tmp / "ras"), "--location",
             "R00-M0-N00-I:J00"], stderr=subprocess.DEVNULL)
        self.cnodes = []
        for n in range(2):
            pf = tmp / f"p{n}.json"
            pf.write_text(json.dumps({
                "block": "U", "key": self.key.hex(), "ciod": f"unix:{self.sock}", "node": n, "pset": 0,
                "pset_size": 2, "coords": [0, 0, n], "torus": [1, 1, 2], "memory": 1 << 30, "mode": "co",
                "location": f"R00-M0-N00-C:J0{n}", "ionode_location": "R00-M0-N00-I:J00",
                "hide": [str(self.work)]}))
            self.cnodes.append(subprocess.Popen(
                [str(BUILD / "bin/cnode"), "--personality", str(pf), "--client", str(BUILD / "lib/libcnclient.so")]))
        for _ in range(100):
            if self.status()[0] == 2:
                break
            time.sleep(0.1)

    def ctl(self) -> socket.socket:
        s = socket.socket(socket.AF_UNIX)
        for _ in range(100):
            try:
                s.connect(str(self.sock))
                break
            except OSError:
                time.sleep(0.1)
        s.settimeout(60)
        t, challenge = _recv(s)
        assert t == wire.CHALLENGE
        hello, nonce = wire.hello_payload(self.key, challenge, wire.ROLE_CONTROL)
        _send(s, wire.HELLO, hello, 1)
        _, b = _recv(s)
        assert struct.unpack("<i", b[:4])[0] == 0 and wire.ack_ok(self.key, challenge, nonce, b)
        return s

    def status(self) -> tuple[int, int, int]:
        with self.ctl() as s:
            _send(s, 0x100, b"")
            return struct.unpack("<IIQ", _recv(s)[1])  # type: ignore[return-value]

    def run(self, jid: int, exe: str, argv: list[str], cwd: str) -> tuple[dict[int, str], list[tuple[int, ...]], list[str]]:
        with self.ctl() as s:
            p = struct.pack("<QIIIIIIII", jid, os.getuid(), os.getgid(), 0, len(argv), 0, 2, 2, 0)
            p += struct.pack("<2i", 0, 1) + b"".join(x.encode() + b"\0" for x in [exe, cwd, *argv])
            _send(s, 0x101, p)
            _, b = _recv(s)
            assert struct.unpack("<q", b[:8])[0] == 0, b
            out = {0: "", 1: ""}
            exits, texts = [], []
            while True:
                t, b = _recv(s)
                if t == 0x180:
                    out[struct.unpack("<I", b[:4])[0]] += b[8:].decode()
                elif t == 0x181:
                    exits.append(struct.unpack("<QIIIi", b[:24]))
                    texts.append(b[24:].decode())
                elif t == 0x182:
                    return out, sorted(exits, key=lambda e: e[1]), texts

    def shutdown(self) -> None:
        with self.ctl() as s:
            _send(s, 0x103, b"")
            _recv(s)
        for c in self.cnodes:
            assert c.wait(10) == 0
        assert self.ciod.wait(10) == 0


@pytest.fixture(scope="module")
def pset(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pset]:
    for p in ("bin/ciod", "bin/cnode", "lib/libcnclient.so", "examples/fileops", "examples/fortran_io"):
        if not (BUILD / p).exists():
            pytest.skip(f"{BUILD / p} not built")
    tmp = tmp_path_factory.mktemp("pset")
    tmp.chmod(0o755)
    ps = Pset(tmp)
    yield ps
    try:
        ps.shutdown()
    finally:
        for c in [*ps.cnodes, ps.ciod]:
            if c.poll() is None:
                c.kill()


def test_fileops_and_fortran(pset: Pset) -> None:
    out, exits, _ = pset.run(1, str(BUILD / "examples/fileops"), ["fileops"], str(pset.work))
    assert [e[3:] for e in exits] == [(1, 0), (1, 0)], (out, exits)
    assert out[0] == "rank 0: ok (12 bytes, 2 entries listed)\n"
    assert (pset.work / "rank-1" / "result.txt").read_text() == "rank 1 of 2\n" * 2
    out, exits, _ = pset.run(2, str(BUILD / "examples/fortran_io"), ["fortran_io"], str(pset.work))
    assert out == {0: "rank 0: fortran ok\n", 1: "rank 1: fortran ok\n"}, (out, exits)
    if os.geteuid() == 0:  # the work directory is hidden on the compute nodes
        for c in pset.cnodes:
            assert not Path(f"/proc/{c.pid}/root{pset.work}/rank-0.dat").exists()


def test_bad_image_and_signal(pset: Pset) -> None:
    bogus = pset.tmp / "bogus"
    bogus.write_bytes(b"\x7fELF garbage")
    bogus.chmod(0o755)
    out, exits, texts = pset.run(3, str(bogus), [str(bogus)], "/tmp")
    assert [e[3:] for e in exits] == [(3, 8), (3, 8)]
    assert texts[0] == f"cannot execute {bogus}: Exec format error"
    out, exits, texts = pset.run(4, str(BUILD / "examples/exit_code"), ["exit_code", "1", "-9"], "/tmp")
    assert [e[3:] for e in exits] == [(1, 0), (2, 9)], (out, exits, texts)
    assert out[1] == "rank 1: ending with -9\n"


# ---- LAT_JOB_CPUS: each process bound to the CPUs the job names ----

def placed(pset: Pset, jid: int, exe: str, cpus: list[tuple[tuple[int, ...], int]] | None, flags: int = 0,
           env: list[str] | None = None) -> bytes:
    """A placed job of two ranks, one on each node, with these CPUs."""
    return wire.placed_job_payload(jid, os.getuid(), os.getgid(), [], [0, 1], 2, "/tmp", env or [], flags, 1,
                                   [(0, 0, 0, 0), (1, 1, 0, 0)], [(exe, [exe])], "", cpus)


def run_placed(pset: Pset, payload: bytes) -> tuple[int, str, dict[int, str], list[str]]:
    """(err, refusal text, output per rank, exit texts) of one placed job."""
    with pset.ctl() as s:
        _send(s, wire.CTL_JOB, payload)
        _, b = _recv(s)
        ret, err, _ = wire.SYSRET.unpack_from(b)
        if ret < 0:
            return err, b[wire.SYSRET.size:].decode(errors="replace").rstrip("\0"), {}, []
        out, texts = {0: "", 1: ""}, []
        while True:
            t, b = _recv(s)
            if t == wire.CTL_OUTPUT:
                out[struct.unpack("<I", b[:4])[0]] += b[8:].decode()
            elif t == wire.CTL_EXIT:
                texts.append(b[24:].decode())
            elif t == wire.CTL_JOB_END:
                return 0, "", out, texts


@pytest.fixture(scope="module")
def cpus_probe(tmp_path_factory: pytest.TempPathFactory) -> str:
    exe = tmp_path_factory.mktemp("probe") / "cpus_probe"
    subprocess.run(["gcc", "-O2", "-Wall", "-Werror", "-o", str(exe), str(ROOT / "tests/e2e/cpus_probe.c")],
                   check=True)
    exe.parent.chmod(0o755)
    return str(exe)


def test_cpus_bind_each_process_and_set_its_progress_thread(pset: Pset, cpus_probe: str) -> None:
    first, last = min(os.sched_getaffinity(0)), max(os.sched_getaffinity(0))
    err, why, out, texts = run_placed(pset, placed(pset, 10, cpus_probe, [((first,), 1), ((last,), 0)]))
    assert err == 0, why
    assert out[0] == f"rank=0 allowed={first} affinity={first} async=1\n", (out, texts)
    assert out[1] == f"rank=1 allowed={last} affinity={last} async=0\n", (out, texts)
    # the job's own MPIR_CVAR_ASYNC_PROGRESS wins; PROGRESS_UNSET adds none
    err, why, out, _ = run_placed(pset, placed(pset, 11, cpus_probe, [((first,), 1), ((last,), wire.PROGRESS_UNSET)],
                                               env=["MPIR_CVAR_ASYNC_PROGRESS=7"]))
    assert out[0].endswith("async=7\n") and out[1].endswith("async=7\n"), out
    err, why, out, _ = run_placed(pset, placed(pset, 12, cpus_probe, [((first,), wire.PROGRESS_UNSET)] * 2))
    assert out[0].endswith("async=-\n") and out[1].endswith("async=-\n"), out
    # without LAT_JOB_CPUS nothing is bound or set
    err, why, out, _ = run_placed(pset, placed(pset, 13, cpus_probe, None))
    assert "async=-" in out[0] and f"allowed={pset_affinity()}" in out[0], out


def pset_affinity() -> str:
    from lattice.nodes import host
    return host.cpulist(os.sched_getaffinity(0))


def test_a_cpu_the_host_lacks_fails_the_launch_clearly(pset: Pset, cpus_probe: str) -> None:
    err, why, out, texts = run_placed(pset, placed(pset, 14, cpus_probe, [((4000,), 0), ((4000, 4001), 0)]))
    assert err == 0, why
    assert texts[0].startswith("cannot bind the process to CPUs 4000") and "Invalid argument" in texts[0], texts


@pytest.mark.parametrize("cpus, flags, error", [
    ([((), 0), ((0,), 0)], 0, "slot 0 has 0 CPUs"),
    ([((0,), 2), ((0,), 0)], 0, "slot 0: progress 2 is not 0, 1 or -1"),
    ([((0,), 0), ((wire.CPU_LIMIT,), 0)], 0, f"CPU {wire.CPU_LIMIT} out of range"),
])
def test_bad_cpus_are_refused(pset: Pset, cpus_probe: str, cpus: list[tuple[tuple[int, ...], int]], flags: int,
                              error: str) -> None:
    err, why, _, _ = run_placed(pset, placed(pset, 15, cpus_probe, cpus, flags))
    assert err == 22 and error in why, why


def test_cpus_must_fit_and_need_placed(pset: Pset, cpus_probe: str) -> None:
    good = placed(pset, 16, cpus_probe, [((0,), 0), ((0,), 0)])
    # claim many more CPUs than the payload holds: the count at the first lat_cpus
    at = wire.JOB.size + 2 * 4 + wire.JOB_EXT.size + 2 * wire.SLOT.size + 4
    assert good[at:at + wire.CPUS.size] == wire.CPUS.pack(1, 0)
    bad = good[:at] + wire.CPUS.pack(60000, 0) + good[at + wire.CPUS.size:]
    err, why, _, _ = run_placed(pset, bad)
    assert err == 22 and "cannot hold" in why, why
    p = wire.job_payload(17, os.getuid(), os.getgid(), [], [0, 1], 2, cpus_probe, "/tmp", [cpus_probe], [],
                         wire.JOB_CPUS)
    err, why, _, _ = run_placed(pset, p)
    assert err == 22 and "CPUS needs flag PLACED" in why, why
