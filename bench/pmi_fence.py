#!/usr/bin/env python3
"""PMI fence time vs ranks: the fence spread by the I/O nodes as a tree vs
the old star (issue 15).

The job is bench/pmi_fence.c: each rank speaks PMI-1 itself over its PMI_FD
(no MPI library), and per fence puts one 452-byte value (an MPICH ch4:ucx
business card), enters the fence, and gets the next rank's value.  Rank 0
times each fence from its barrier_in to its barrier_out; the first fence is
left out (it also waits for the slowest rank to start).  A fence's data is
~452 B x ranks: with the star (`LATTICE_PMI_FANOUT` past the number of I/O
nodes) `lattice run` gets every I/O node's part and sends all of it back to
every I/O node; with a tree of fan-out k it talks to k of them, which merge
and pass on (docs/protocol.md section 10).

Configurations, interleaved, each going first in turn:
  star    LATTICE_PMI_FANOUT=100000 (the service node sends to every I/O node)
  tree8   the default fan-out, 8
  tree2   fan-out 2 (the deepest tree that still fans out)

The machine (4x4x8 = 128 compute nodes in psets of 8: 16 I/O nodes, 2
cores per node) runs the ranks in virtual node mode, XYZT: up to 128 ranks
one per node, 256 two per node; 8 ranks use 1 I/O node, 64 use 8, 128 and
256 all 16.  Linux mode (the fence does not involve the kernel).

    .venv/bin/python bench/pmi_fence.py [--repeat 5] [--sizes 8,32,64,128,256] [--fences 20]
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

import benchlib as bl
from launch import Block

PROGRAM = bl.BENCH / "pmi_fence"
CONFIGS = {"star": "100000", "tree8": "8", "tree2": "2"}


SENT = re.compile(r"PMI: (\d+) fence\(s\); the service node sent (\d+) bytes of FENCE_OUT to (\d+) of (\d+)")


def one_run(b: Block, n: int, fanout: str, fences: int) -> tuple[list[float], float, float, str]:
    """Fence times (s, after the first) as rank 0 saw them, the wall time of
    the run, the FENCE_OUT bytes the service node sent per fence (its -v
    line) and to how many of the job's I/O nodes."""
    env = dict(b.env, LATTICE_PMI_FANOUT=fanout)
    t0 = time.perf_counter()
    p = subprocess.run(b.run_cmd(n, PROGRAM, str(fences), kernel="linux", opts=("--mode", "vn", "-v")), env=env,
                       capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t0
    sent = SENT.search(p.stderr)
    if p.returncode != 0 or not p.stdout.rstrip().endswith("ok") or not sent:
        raise RuntimeError(f"{n} ranks, fan-out {fanout}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    times = [float(line.split()[2]) for line in p.stdout.splitlines() if line.startswith("fence ")]
    return times[1:], wall, int(sent[2]) / int(sent[1]), f"{sent[3]} of {sent[4]}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--sizes", default="8,32,64,128,256")
    ap.add_argument("--fences", type=int, default=20)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    bl.require_built(PROGRAM)
    print(bl.header("pmi_fence", sys.argv))
    names = list(CONFIGS)
    fence_ms: dict[int, dict[str, list[float]]] = {n: {c: [] for c in names} for n in sizes}
    wall_s: dict[int, dict[str, list[float]]] = {n: {c: [] for c in names} for n in sizes}
    sent_kb: dict[int, dict[str, list[float]]] = {n: {c: [] for c in names} for n in sizes}
    fan: dict[tuple[int, str], str] = {}
    with Block("4x4x8", 8, "128M", cores=2) as b:
        print(f"machine 4x4x8, psets of 8 (16 I/O nodes), booted in {b.boot_s:.2f} s", flush=True)
        for rep in range(args.repeat):
            for n in sizes:
                for c in bl.rotations(names, rep):
                    times, wall, sent, to = one_run(b, n, CONFIGS[c], args.fences)
                    # one number per run: the median fence of that run
                    fence_ms[n][c].append(1000 * statistics.median(times))
                    wall_s[n][c].append(wall)
                    sent_kb[n][c].append(sent / 1000)
                    fan[(n, c)] = to
                    print(f"  rep {rep} n {n} {c}: fence {1000 * statistics.median(times):.2f} ms, "
                          f"run {wall:.2f} s, service node sent {sent / 1000:.1f} kB/fence to {to} I/O nodes",
                          flush=True)
    rows = [(f"{n} ranks: fence (ms)", fence_ms[n], [("tree8/star", "tree8", "star"), ("tree2/star", "tree2", "star")])
            for n in sizes]
    rows += [(f"{n} ranks: whole run (s)", wall_s[n], [("tree8/star", "tree8", "star"), ("tree2/star", "tree2", "star")])
             for n in sizes]
    rows += [(f"{n} ranks: service node sends per fence (kB; to {', '.join(fan[(n, c)] for c in names)} "
              "I/O nodes)", sent_kb[n], [("tree8/star", "tree8", "star"), ("tree2/star", "tree2", "star")])
             for n in sizes]
    print()
    print(bl.table(f"PMI fence time vs ranks, median [min–max] of {args.repeat} runs (each run: the median of "
                   f"{args.fences - 1} fences)", names, rows))
    return 0


if __name__ == "__main__":
    os.nice(0)
    sys.exit(main())
