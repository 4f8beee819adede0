#!/usr/bin/env python3
"""OS noise (selfish detour): plain Linux vs the compute node kernel.

bench/noise.c spins on the time-stamp counter for SECONDS and records every
gap longer than THRESHOLD x the shortest loop (a detour: something else had
the CPU).  The same static executable runs, interleaved, REPEAT times each,
pinned to the same CPU:
  linux   `taskset -c CPU build/bench/noise`
  cnk     a one-rank job under cnk on a booted 1-node block whose compute
          node process is pinned to CPU (the job's process inherits it)
Reported: % CPU lost, detours per second, the largest detour and the 99th
percentile, median [min–max] over the runs, and the cnk/linux ratios.  The
goal is no measurable added noise: cnk adds no threads or timers, and the
spinning program makes no system call.  The seeds' figure: Linux on BG/P
lost 0.027% (seeds/004).

    .venv/bin/python bench/noise.py [--repeat 5] [--seconds 5] [--cpu N] [--quick]
"""
from __future__ import annotations

import argparse
import sys

import benchlib as bl

NOISE = bl.BENCH / "noise"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--threshold", type=float, default=10.0)
    ap.add_argument("--cpu", type=int, default=bl.default_cpu(), help="the CPU both runs are pinned to")
    ap.add_argument("--no-cnk", action="store_true", help="Linux column only")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 repeat of 1 s")
    a = ap.parse_args()
    if a.quick:
        a.repeat, a.seconds = 1, 1.0
    bl.require_root("noise.py")
    bl.require_built(NOISE)
    configs = ["linux"] + ([] if a.no_cnk else ["cnk"])
    keys = {"lost_pct": "CPU lost (%)", "per_s": "detours per second", "max_us": "largest detour (µs)",
            "p99_us": "99th percentile detour (µs)"}
    data: dict[str, dict[str, list[float]]] = {k: {c: [] for c in configs} for k in keys}
    tops: dict[str, list[str]] = {c: [] for c in configs}
    print(bl.header("noise", sys.argv))
    print(f"pinned to CPU {a.cpu}; threshold {a.threshold}x the shortest loop")
    args = [str(a.seconds), str(a.threshold)]
    with bl.OneNode(memory="256M", cpu=a.cpu, boot="cnk" in configs) as node:
        for i in range(a.repeat):
            for cfg in bl.rotations(configs, i):
                if cfg == "linux":
                    out = bl.native(NOISE, *args, cpu=a.cpu)
                else:
                    out, _ = node.run(NOISE, *args, verbose=False)
                lines = [l for l in out.splitlines() if "lost_pct=" in l]
                r = bl.kv_line(lines[-1])
                for k in keys:
                    data[k][cfg].append(float(r[k]))
                top = [l for l in out.splitlines() if "top_us=" in l]
                tops[cfg].append(top[-1].split("top_us=", 1)[1] if top else "")
                print(f"  run {i + 1}/{a.repeat} {cfg}: lost {r['lost_pct']}%, {r['detours']} detours, "
                      f"max {r['max_us']} µs", flush=True)
    ratios = [("cnk/linux", "cnk", "linux")] if "cnk" in configs else []
    print()
    print(bl.table(f"{a.repeat} interleaved runs of {a.seconds:g} s each, median [min–max]", configs,
                   [(keys[k], data[k], ratios) for k in keys]))
    print()
    for c in configs:
        print(f"largest detours {c} (µs), per run: " + " / ".join(tops[c]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
