#!/usr/bin/env python3
"""The cost of sealed links between hosts (issue 24), side by side with a
plaintext baseline, interleaved and repeated.

A compute node (cnode) and its I/O node (ciod) talk over TCP on loopback,
as they do when they are on different hosts (hostfile `role=io`): the node
link and each process's PROC link are sealed (the process's through cnode's
relay).  The baseline is a build of the commit before sealing (plaintext
frames): there is no switch that turns sealing off in the sealed build, by
design.  Each round runs, in both builds, alternating which goes first:
  * rtt     one 8-byte pwrite shipped to the I/O node and answered (bench/fwd_io rtt): ns per call
  * write/read  MIB MiB in 1 MiB blocks through the I/O node (fwd_io seq): MB/s
  * control a CTL_STATUS round trip of the service node's client over TCP: us
and prints median [min-max] of each, and sealed/baseline.

    git worktree add --detach /tmp/lattice-base 6371811 && make -C /tmp/lattice-base
    .venv/bin/python bench/seal_link.py --baseline /tmp/lattice-base/build [--rounds 7] [--mib 256]
"""
from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import os
import re
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "service"))
from lattice.transport import wire  # noqa: E402

FWD_IO = ROOT / "build" / "bench" / "fwd_io"
IO_LOC = "R00-M0-N00-I:J00"


def build_version(build: Path) -> int:
    """The wire version a build speaks (its checkout's wire.h)."""
    text = (build.parent / "protocol" / "lattice" / "wire.h").read_text()
    m = re.search(r"#define LAT_VERSION (\d+)", text)
    assert m, "no LAT_VERSION in wire.h"
    return int(m.group(1))


class Link:
    """A control connection speaking the build's version: sealed if the
    build seals (version 6 on) and the link is TCP."""

    def __init__(self, addr: str, key: bytes, version: int) -> None:
        kind, _, where = addr.partition(":")
        if kind == "unix":
            self.s = socket.socket(socket.AF_UNIX)
            self.s.connect(where)
        else:
            host, _, port = where.rpartition(":")
            self.s = socket.create_connection((host, int(port)))
            self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.version, self.seq, self.sealer = version, 0, None
        typ, challenge = self._plain()
        assert typ == wire.CHALLENGE
        nonce = os.urandom(32)
        mac = hmac.new(key, wire.HELLO_LABEL + challenge + nonce + struct.pack("<IIQ", wire.ROLE_CONTROL, 0, 0),
                       hashlib.sha256).digest()
        self.s.sendall(self._hdr(wire.HELLO, 80, 1) + struct.pack("<IIQ", wire.ROLE_CONTROL, 0, 0) + nonce + mac)
        self.seq = 1
        typ, ack = self._plain()
        assert typ == wire.HELLO | wire.REPLY and struct.unpack_from("<i", ack)[0] == 0, "refused"
        if version >= 6 and kind == "tcp":
            self.sealer = wire.Sealer(*wire.seal_keys(key, challenge, nonce, wire.ROLE_CONTROL))
        self.buf = b""

    def _hdr(self, typ: int, length: int, seq: int) -> bytes:
        return struct.pack("<IBBHII", wire.MAGIC, self.version, 0, typ, length, seq)

    def _exact(self, n: int) -> bytes:
        b = b""
        while len(b) < n:
            c = self.s.recv(n - len(b))
            assert c, "closed"
            b += c
        return b

    def _plain(self) -> tuple[int, bytes]:
        _, _, _, typ, length, _ = struct.unpack("<IBBHII", self._exact(16))
        return typ, self._exact(length)

    def send(self, typ: int, payload: bytes = b"") -> None:
        self.seq += 1
        frame = self._hdr(typ, len(payload), self.seq) + payload
        self.s.sendall(self.sealer.seal(frame) if self.sealer else frame)

    def recv(self) -> tuple[int, bytes]:
        if not self.sealer:
            return self._plain()
        lb = self._exact(4)
        opened = self.sealer.open(lb + self._exact(struct.unpack("<I", lb)[0] + 16))
        assert opened
        return struct.unpack_from("<H", opened[0], 6)[0], opened[0][16:]

    def close(self) -> None:
        self.s.close()


class Pset:
    """One build's ciod (unix for our jobs, TCP for the node) and one cnode over TCP."""

    def __init__(self, build: Path, tmp: Path) -> None:
        self.build, self.tmp, self.version = build, tmp, build_version(build)
        self.key = os.urandom(32)
        (tmp / "key").write_text(self.key.hex())
        (tmp / "key").chmod(0o600)
        self.work = tmp / "work"
        self.work.mkdir()
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.tcp = f"tcp:127.0.0.1:{probe.getsockname()[1]}"
        self.unix = f"unix:{tmp / 'ciod.sock'}"
        self.procs = [subprocess.Popen(
            [str(build / "bin/ciod"), "--block", "B", "--pset", "0", "--pset-size", "1", "--listen", self.unix,
             "--listen", self.tcp, "--key-file", str(tmp / "key"), "--ras", str(tmp / "ras"), "--location", IO_LOC],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
        self.wait(lambda: self.status() is not None, "ciod")
        pf = tmp / "p.json"
        pf.write_text(json.dumps({
            "block": "B", "key": self.key.hex(), "ciod": self.tcp, "node": 0, "pset": 0, "pset_size": 1,
            "coords": [0, 0, 0], "torus": [1, 1, 1], "memory": 1 << 30, "mode": "co",
            "location": "R00-M0-N00-C:J00", "ionode_location": IO_LOC, "hide": []}))
        self.procs.append(subprocess.Popen(
            [str(build / "bin/cnode"), "--personality", str(pf), "--client", str(build / "lib/libcnclient.so")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        self.wait(lambda: (self.status() or (0,))[0] == 1, "the compute node")
        self.job = 0

    def wait(self, cond, what: str) -> None:  # type: ignore[no-untyped-def]
        end = time.monotonic() + 120
        while not cond():
            if time.monotonic() > end or any(p.poll() is not None for p in self.procs):
                raise SystemExit(f"{self.build}: {what} did not come up")
            time.sleep(0.05)

    def status(self) -> tuple[int, ...] | None:
        try:
            c = Link(self.unix, self.key, self.version)
        except OSError:
            return None
        c.send(wire.CTL_STATUS)
        st = struct.unpack("<IIQ", c.recv()[1])
        c.close()
        return st

    def run(self, *args: str) -> dict[str, float]:
        """fwd_io ARGS as a one-rank job: its key=value line."""
        self.job += 1
        c = Link(self.unix, self.key, self.version)
        c.send(wire.CTL_JOB, wire.job_payload(self.job, os.getuid(), os.getgid(), [], [0], 1, str(FWD_IO),
                                              str(self.work), ["fwd_io", *args], []))
        out = ""
        while True:
            typ, body = c.recv()
            if typ == wire.CTL_OUTPUT:
                out += body[wire.OUTPUT.size:].decode()
            elif typ == wire.CTL_JOB_END:
                break
            elif typ == wire.ERROR | wire.REPLY:
                raise SystemExit(f"job refused: {body[16:]!r}")
        c.close()
        line = [ln for ln in out.splitlines() if "=" in ln]
        assert line, out
        return {k: float(v) for k, v in (kv.split("=") for kv in line[-1].split())}

    def control_rtt_us(self, count: int) -> float:
        """CTL_STATUS round trips of a control link over TCP."""
        c = Link(self.tcp, self.key, self.version)
        for _ in range(count // 10):
            c.send(wire.CTL_STATUS)
            c.recv()
        t0 = time.perf_counter()
        for _ in range(count):
            c.send(wire.CTL_STATUS)
            c.recv()
        t = time.perf_counter() - t0
        c.close()
        return t / count * 1e6

    def close(self) -> None:
        for p in reversed(self.procs):
            p.terminate()
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", type=Path, required=True, help="build/ of the commit before sealing")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20000, help="shipped pwrites per rtt run")
    ap.add_argument("--mib", type=int, default=256, help="MiB written then read per throughput run")
    ap.add_argument("--control", type=int, default=2000, help="control round trips per run")
    a = ap.parse_args()
    builds = {"baseline": a.baseline.resolve(), "sealed": ROOT / "build"}
    for b in builds.values():
        for p in ("bin/ciod", "bin/cnode", "lib/libcnclient.so"):
            if not (b / p).exists():
                ap.error(f"{b / p} not built")
    if not FWD_IO.exists():
        ap.error(f"{FWD_IO} not built (make -f bench/bench.mk)")
    if build_version(builds["baseline"]) >= 6:
        ap.error(f"{builds['baseline']} seals its links already: give a build of the commit before")
    tmp = Path(tempfile.mkdtemp(prefix="seal-bench-", dir="/tmp"))
    os.chmod(tmp, 0o755)
    psets: dict[str, Pset] = {}
    res: dict[str, dict[str, list[float]]] = {n: {} for n in builds}
    try:
        for name, b in builds.items():
            (tmp / name).mkdir()
            psets[name] = Pset(b, tmp / name)
        print(f"seal_link: {a.rounds} rounds, rtt {a.calls} calls, seq {a.mib} MiB, control {a.control} "
              f"round trips; node and I/O node on tcp:127.0.0.1; cpus {os.cpu_count()}", flush=True)
        for r in range(a.rounds):
            order = list(builds) if r % 2 == 0 else list(reversed(builds))
            for name in order:
                p = psets[name]
                got = {"rtt_ns": p.run("rtt", str(a.calls))["rtt_ns"]}
                got.update(p.run("seq", str(p.work / "seq.dat"), str(a.mib)))
                got["control_us"] = p.control_rtt_us(a.control)
                for k, v in got.items():
                    res[name].setdefault(k, []).append(v)
                print(f"round {r + 1} {name:8} " + " ".join(f"{k}={v:.1f}" for k, v in got.items()), flush=True)
    finally:
        for p in psets.values():
            p.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    for k, better in (("rtt_ns", "lower"), ("write_MBps", "higher"), ("read_MBps", "higher"), ("control_us", "lower")):
        base, seal = res["baseline"][k], res["sealed"][k]
        mb, ms = statistics.median(base), statistics.median(seal)
        print(f"{k:<11} baseline {mb:9.1f} [{min(base):.1f}-{max(base):.1f}]   sealed {ms:9.1f} "
              f"[{min(seal):.1f}-{max(seal):.1f}]   sealed/baseline {ms / mb:6.3f} ({better} is better)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
