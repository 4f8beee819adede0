#!/usr/bin/env python3
"""TCP throughput of a shipped socket vs the same program run directly.

bench/sock_tput.c connects to a server this driver runs on 127.0.0.1
(outside the block: the socket rule ships it to the I/O node) and either
sends MIB MiB in send() calls of 4 KiB, 64 KiB, 1 MiB and 4 MiB to a sink,
shuts down and waits for its count, or (--dirs recv) receives MIB MiB from a
source in recv() calls of those sizes.  The same dynamic executable runs,
interleaved, REPEAT times each:
  native  plain Linux
  linux   a one-rank job with `lattice run --kernel linux` (preload client)
  cnk     a one-rank job with `lattice run --kernel cnk`
on a 1x1x2 machine (psets of 2, --memory 256M, --hugepages reserve: cnk's
big memory is hugetlb pages, which it shares with ciod, so its large sends
and receives are copied once; outside the timed span).  The table
gives MB/s, median [min–max], and each mode's ratio to native.

    .venv/bin/python bench/sockets.py [--repeat 5] [--mib 256] [--dirs send,recv] [--quick]
"""
from __future__ import annotations

import argparse
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import benchlib as bl

TPUT = bl.BENCH / "sock_tput"
SIZES = {"4 KiB": 4096, "64 KiB": 65536, "1 MiB": 1 << 20, "4 MiB": 4 << 20}


class Sink:
    """A TCP server on 127.0.0.1 that reads each connection to EOF and
    answers the byte count (8 bytes, native endian)."""

    def __init__(self) -> None:
        self.lsn = socket.create_server(("127.0.0.1", 0), backlog=16)
        self.port = self.lsn.getsockname()[1]
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                c, _ = self.lsn.accept()
            except OSError:
                return
            threading.Thread(target=self.drain, args=(c,), daemon=True).start()

    @staticmethod
    def drain(c: socket.socket) -> None:
        buf = memoryview(bytearray(4 << 20))
        n = 0
        with c:
            while (r := c.recv_into(buf)) > 0:
                n += r
            c.sendall(struct.pack("=Q", n))

    def close(self) -> None:
        self.lsn.close()


class Source(Sink):
    """A TCP server on 127.0.0.1 that reads an 8-byte count (native endian)
    from each connection, sends that many bytes and closes it."""

    @staticmethod
    def drain(c: socket.socket) -> None:
        buf = memoryview(bytes(4 << 20))
        with c:
            want = c.recv(8, socket.MSG_WAITALL)
            (left,) = struct.unpack("=Q", want)
            while left:
                n = min(left, len(buf))
                c.sendall(buf[:n])
                left -= n


class Machine:
    """A 1x1x2 machine (psets of 2) in a temporary LATTICE_HOME, block `bench` booted."""

    def __init__(self, memory: str) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="lattice-bench-sock-"))
        self.env = dict(os.environ, LATTICE_HOME=str(self.home), PYTHONPATH=str(bl.ROOT / "service"))
        self.memory = memory

    def lattice(self, *args: str, check: bool = True) -> str:
        p = subprocess.run([*bl.lattice_cmd(), *args], env=self.env, capture_output=True, text=True)
        if check and p.returncode != 0:
            raise RuntimeError(f"lattice {' '.join(args)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
        return p.stdout

    def __enter__(self) -> "Machine":
        self.lattice("init", "--shape", "1x1x2", "--pset-size", "2", "--memory", self.memory)
        self.lattice("block", "create", "bench", "--shape", "1x1x2")
        self.lattice("boot", "bench")
        return self

    def run(self, kernel: str, *args: str) -> str:
        return self.lattice("run", "--block", "bench", "-n", "1", "--kernel", kernel, "--hugepages", "reserve",
                            "--cwd", "/tmp", str(TPUT), *args)

    def __exit__(self, *exc: object) -> None:
        self.lattice("free", "bench", check=False)
        shutil.rmtree(self.home, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--mib", type=int, default=256, help="MiB sent per run")
    ap.add_argument("--kernels", default="linux,cnk", help="lattice kernels to run beside native")
    ap.add_argument("--dirs", default="send,recv", help="send (to a sink), recv (from a source) or both")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 repeat, 16 MiB, 4 KiB and 1 MiB messages")
    a = ap.parse_args()
    sizes = dict(SIZES)
    if a.quick:
        a.repeat, a.mib = 1, 16
        sizes = {k: v for k, v in SIZES.items() if k in ("4 KiB", "1 MiB")}
    bl.require_root("sockets.py")
    bl.require_built(TPUT)
    kernels = [k for k in a.kernels.split(",") if k]
    dirs = [d for d in a.dirs.split(",") if d in ("send", "recv")]
    configs = ["native", *kernels]
    rows = [(d, name) for d in dirs for name in sizes]
    data: dict[tuple[str, str], dict[str, list[float]]] = {r: {c: [] for c in configs} for r in rows}
    print(bl.header("sockets", sys.argv))
    servers = {"send": Sink(), "recv": Source()}
    try:
        with Machine("256M") as m:
            for i in range(a.repeat):
                for cfg in bl.rotations(configs, i):
                    for d, name in rows:
                        args = (str(servers[d].port), str(sizes[name]), str(a.mib), d)
                        out = bl.native(TPUT, *args) if cfg == "native" else m.run(cfg, *args)
                        data[(d, name)][cfg].append(float(bl.parse_kv(out)["MBps"]))
                    print(f"  run {i + 1}/{a.repeat} {cfg}: " +
                          ", ".join(f"{d} {n} {data[(d, n)][cfg][-1]:.0f} MB/s" for d, n in rows), flush=True)
    finally:
        for srv in servers.values():
            srv.close()
    ratios = [(f"{k}/native", k, "native") for k in kernels]
    print()
    print(bl.table(f"{a.repeat} interleaved runs each, {a.mib} MiB over TCP with 127.0.0.1, MB/s, "
                   "median [min–max]", configs,
                   [(f"{d}() of {n}", data[(d, n)], ratios) for d, n in rows]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
