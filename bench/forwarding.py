#!/usr/bin/env python3
"""Forwarded vs direct I/O, side by side in one run.

Runs bench/fwd_io directly on Linux (the baseline) and as a one-node Lattice
job whose calls are shipped to the I/O node, interleaved, REPEAT times each:
  * round trip of an 8-byte pwrite to a file on the tmpfs (ns per call; a file:
    the node's devices, /dev/null too, stay on the compute node)
  * sequential write then read of 256 MiB in 1 MiB blocks on a tmpfs
Prints median and spread (min-max) of each and the Lattice/direct ratios.

    .venv/bin/python bench/forwarding.py [--repeat 5] [--mib 256]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FWD_IO = ROOT / "build" / "bench" / "fwd_io"
LATTICE = ROOT / ".venv" / "bin" / "lattice"


def parse(out: str) -> dict[str, float]:
    line = [l for l in out.splitlines() if "=" in l][-1]
    line = line.split(": ", 1)[-1]  # drop a rank label if any
    return {k: float(v) for k, v in (kv.split("=") for kv in line.split())}


def direct(args: list[str], cwd: Path) -> dict[str, float]:
    out = subprocess.run([str(FWD_IO), *args], cwd=cwd, check=True, capture_output=True, text=True)
    return parse(out.stdout)


def lattice(env: dict[str, str], *args: str, capture: bool = False) -> str:
    out = subprocess.run([str(LATTICE), *args], env=env, check=True,
                         capture_output=capture, text=True)
    return out.stdout if capture else ""


def forwarded(env: dict[str, str], args: list[str], cwd: Path) -> dict[str, float]:
    return parse(lattice(env, "run", "--block", "bench", "-n", "1", "--cwd", str(cwd),
                         str(FWD_IO), *args, capture=True))


def summary(name: str, base: list[float], cand: list[float], higher_is_better: bool) -> None:
    mb, mc = statistics.median(base), statistics.median(cand)
    ratio = mc / mb
    print(f"{name:<22} direct {mb:10.1f} [{min(base):.1f}-{max(base):.1f}]   "
          f"lattice {mc:10.1f} [{min(cand):.1f}-{max(cand):.1f}]   "
          f"lattice/direct {ratio:6.3f}" + ("" if higher_is_better else "  (lower is better)"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--calls", type=int, default=20000)
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("forwarding.py: run as root (it mounts a tmpfs for the data runs)", file=sys.stderr)
        return 1

    home = Path(tempfile.mkdtemp(prefix="lattice-bench-"))
    tmpfs = Path(tempfile.mkdtemp(prefix="lattice-bench-tmpfs-"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={a.mib * 2 + 64}m", "tmpfs", str(tmpfs)], check=True)
    env = dict(os.environ, LATTICE_HOME=str(home))
    try:
        lattice(env, "init", "--shape", "1x1x1", "--pset-size", "1")
        lattice(env, "block", "create", "bench", "--shape", "1x1x1")
        lattice(env, "boot", "bench")
        rtt: dict[str, list[float]] = {"direct": [], "lattice": []}
        wr: dict[str, list[float]] = {"direct": [], "lattice": []}
        rd: dict[str, list[float]] = {"direct": [], "lattice": []}
        for i in range(a.repeat):
            # interleave baseline and candidate so drifting load hits both
            for kind in (("direct", "lattice") if i % 2 == 0 else ("lattice", "direct")):
                run = direct if kind == "direct" else (lambda args, cwd: forwarded(env, args, cwd))
                rtt[kind].append(run(["rtt", str(a.calls)], tmpfs)["rtt_ns"])
                r = run(["seq", "data", str(a.mib)], tmpfs)
                wr[kind].append(r["write_MBps"])
                rd[kind].append(r["read_MBps"])
        print(f"forwarding benchmark: {a.repeat} interleaved runs each, median [min-max]")
        summary("8 B pwrite rtt (ns)", rtt["direct"], rtt["lattice"], higher_is_better=False)
        summary(f"{a.mib} MiB write (MB/s)", wr["direct"], wr["lattice"], higher_is_better=True)
        summary(f"{a.mib} MiB read (MB/s)", rd["direct"], rd["lattice"], higher_is_better=True)
    finally:
        subprocess.run([str(LATTICE), "free", "bench"], env=env, capture_output=True)
        subprocess.run(["umount", str(tmpfs)])
        os.rmdir(tmpfs)
        shutil.rmtree(home, ignore_errors=True)     # the machine's database and logs
    return 0


if __name__ == "__main__":
    sys.exit(main())
