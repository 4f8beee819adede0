#!/usr/bin/env python3
"""MPI one-sided atomics: `lattice run` (cnk and Linux mode) vs `mpiexec.hydra`, side by side in one run.

The job is bench/rma_bench.c (MPICH 4.0.2, ch4:ucx; one dynamic executable
for every launcher): rank 0 holds a window and waits in MPI_Barrier, every
other rank is an origin sending to it at once (all to one), for each of
  fop   MPI_Fetch_and_op(MPI_SUM) of one int64
  cas   MPI_Compare_and_swap of one int64
  gacc  MPI_Get_accumulate(MPI_SUM) of 4 int64
in two phases: lat, one op then MPI_Win_flush (microseconds per op, the
slowest origin's mean), and rate, ops back to back with a flush every 1000
(ops of all origins per second).  MPICH runs these atomics as active
messages (its UCX netmod has no native path for them), so every op needs
the target's progress: they measure how soon a waiting rank runs.

Configurations, interleaved round by round (each goes first in turn):
  hydra   mpiexec.hydra -n N rma_bench BUDGET          (all ranks on this host)
  cnk     lattice run --block bench -n N rma_bench BUDGET   (Lattice's defaults)
  linux   the same with --kernel linux                 (the node sandbox)
No flag or --env is added to `lattice run`: its defaults must be fast.
The machine is 2x2x4 (16 compute nodes, psets of 8, 256 MiB and 2 cores
each), booted once; N ranks in co mode are N compute nodes.

Then MPICH's own test rma/atomic_get_long_double_int (3 ranks; built by
scripts/mpich_tests.sh into build/mpich-tests/), the one issue 28 was filed
on, wall time of the command, the same three configurations interleaved.

Reading the output: per measure the median [min–max] of each configuration
and the ratios of medians (time over Hydra's: for rate, Hydra's rate over
Lattice's, so below 1.0 Lattice was faster everywhere); then the ratios
round by round (the configurations of a round run back to back), median
[min–max]: the goal, Lattice <= 1.0x Hydra, is judged on those.

    .venv/bin/python bench/rma.py [--ranks 2,4,8] [--repeat 5] [--budget 0.3]
                                  [--mpich-repeat 3] [--kernels cnk,linux] [--quick]
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

import benchlib as bl
from launch import Block

RMA = bl.BENCH / "rma_bench"
ATOMIC_GET = bl.BUILD / "mpich-tests" / "atomic_get_long_double_int"
OPS = ["fop", "cas", "gacc"]
PHASES = ["lat", "rate"]
LINE = re.compile(r"^(fop|cas|gacc) (lat|rate) ranks=(\d+) iters=(\d+) us=(\S+) rate=(\S+)$", re.M)
Measure = tuple[str, str, int]                  # op, phase, ranks
Rounds = dict[Measure, list[dict[str, float]]]  # per round: configuration -> time (us per op, or s per op for rate)


class Runner:
    def __init__(self, hydra: str, blk: Block, timeout: float) -> None:
        self.hydra, self.blk, self.timeout = hydra, blk, timeout

    def run(self, cfg: str, n: int, exe: str, *args: str) -> tuple[float, str]:
        """(wall seconds, stdout); raises RuntimeError on a failed run."""
        if cfg == "hydra":
            cmd, env = [self.hydra, "-n", str(n), exe, *args], None
        else:
            cmd, env = [*bl.lattice_cmd(), "run", "--block", "bench", "-n", str(n), "--kernel", cfg, exe, *args], self.blk.env
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=self.timeout)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"{cfg} -n {n} {os.path.basename(exe)}: timed out after {self.timeout:.0f} s") from None
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            tail = " | ".join((p.stderr or p.stdout).strip().splitlines()[-3:])
            raise RuntimeError(f"{cfg} -n {n} {os.path.basename(exe)}: exit {p.returncode}: {tail}")
        return wall, p.stdout


def ratio_rows(rounds: Rounds, measures: list[Measure], lattice: list[str]) -> list[str]:
    rows = ["| measure | " + " | ".join(f"{k}/hydra" for k in lattice) + " |", "| --- |" + " --- |" * len(lattice)]
    for m in measures:
        cells = []
        for k in lattice:
            r = [x[k] / x["hydra"] for x in rounds.get(m, []) if k in x and "hydra" in x]
            cells.append(f"{statistics.median(r):.3f} [{min(r):.3f}–{max(r):.3f}]" if r else "-")
        name = f"{m[0]} {m[1]} {m[2]} ranks" if m[1] else m[0]
        rows.append(f"| {name} | {' | '.join(cells)} |")
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="2,4,8", help="rank counts (2 or more each, at most 16)")
    ap.add_argument("--repeat", type=int, default=5, help="rounds of rma_bench")
    ap.add_argument("--budget", type=float, default=0.3, help="seconds each op and phase runs")
    ap.add_argument("--mpich-repeat", type=int, default=3, help="rounds of MPICH's atomic_get test (0: none)")
    ap.add_argument("--kernels", default="cnk,linux", help="Lattice's configurations: of cnk,linux")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per run")
    ap.add_argument("--quick", action="store_true", help="--ranks 2,4 --repeat 2 --budget 0.1 --mpich-repeat 0")
    a = ap.parse_args()
    if a.quick:
        a.ranks, a.repeat, a.budget, a.mpich_repeat = "2,4", 2, 0.1, 0
    bl.require_root("rma")
    ranks = [int(x) for x in a.ranks.split(",")]
    if any(n < 2 or n > 16 for n in ranks):
        sys.exit("rma: --ranks: each from 2 to 16 (the machine has 16 compute nodes)")
    lattice = [k for k in a.kernels.split(",") if k]
    if not lattice or set(lattice) - {"cnk", "linux"}:
        sys.exit("rma: --kernels: of cnk,linux")
    hydra = shutil.which("mpiexec.hydra")
    if not hydra:
        sys.exit("rma: mpiexec.hydra not found (apt-get install mpich)")
    bl.require_built(RMA, *([ATOMIC_GET] if a.mpich_repeat else []))
    configs = ["hydra", *lattice]

    print(f"rma: {time.strftime('%Y-%m-%d %H:%M')} on {os.uname().release}, {os.cpu_count()} CPUs, "
          f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"command: bench/rma.py {' '.join(sys.argv[1:])}")
    print(f"machine 2x2x4, psets of 8, 256M and 2 cores per node; lattice run with its defaults; hydra: {hydra}")
    measures: list[Measure] = [(op, ph, n) for n in ranks for op in OPS for ph in PHASES]
    data: dict[Measure, dict[str, list[float]]] = {m: {c: [] for c in configs} for m in measures}
    rounds: Rounds = {}
    mpich: dict[str, list[float]] = {c: [] for c in configs}
    mpich_rounds: list[dict[str, float]] = []
    failures: list[str] = []
    with Block("2x2x4", 8, "256M") as blk:
        runner = Runner(hydra, blk, a.timeout)
        for cfg in configs:         # untimed: page cache, the warm server, UCX's first start
            runner.run(cfg, 2, str(RMA), "0.01", "fop")
        for i in range(a.repeat):
            for n in ranks:
                got: dict[Measure, dict[str, float]] = {}
                for cfg in bl.rotations(configs, i):
                    try:
                        _, out = runner.run(cfg, n, str(RMA), str(a.budget))
                    except RuntimeError as e:
                        failures.append(f"round {i + 1}: {e}")
                        print(f"  round {i + 1} {n} ranks {cfg}: FAILED: {e}", flush=True)
                        continue
                    lines = LINE.findall(out)
                    if len(lines) != len(OPS) * len(PHASES) or "wrong window" in out:
                        failures.append(f"round {i + 1}: {cfg} -n {n}: unexpected output: {out.strip()}")
                        continue
                    for op, ph, _, _, us, rate in lines:
                        # rate as time too (s per op of all origins): one direction for every ratio
                        v = float(us) if ph == "lat" else 1e6 / float(rate)
                        data[(op, ph, n)][cfg].append(v)
                        got.setdefault((op, ph, n), {})[cfg] = v
                    summary = " ".join(f"{op}/{ph} {float(us):.1f}us {float(rate):.0f}/s" for op, ph, _, _, us, rate in lines)
                    print(f"  round {i + 1} {n} ranks {cfg:5s}: {summary}", flush=True)
                for m, per_cfg in got.items():
                    rounds.setdefault(m, []).append(per_cfg)
        for i in range(a.mpich_repeat):
            this: dict[str, float] = {}
            for cfg in bl.rotations(configs, i):
                try:
                    wall, out = runner.run(cfg, 3, str(ATOMIC_GET))
                except RuntimeError as e:
                    failures.append(f"atomic_get round {i + 1}: {e}")
                    print(f"  atomic_get round {i + 1} {cfg}: FAILED: {e}", flush=True)
                    continue
                if "No Errors" not in out:
                    failures.append(f"atomic_get round {i + 1} {cfg}: {out.strip()[-200:]}")
                    continue
                mpich[cfg].append(wall)
                this[cfg] = wall
                print(f"  atomic_get round {i + 1} {cfg:5s}: {wall:.1f} s, No Errors", flush=True)
            mpich_rounds.append(this)

    ratios = [(f"{k}/hydra", k, "hydra") for k in lattice]
    print()
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print()
    print(bl.table(f"Latency, microseconds per op (one op, then MPI_Win_flush), {a.repeat} rounds, median [min–max]",
                   configs, [(f"{op} {n} ranks", data[(op, 'lat', n)], ratios) for n in ranks for op in OPS]))
    print()
    rate_rows = [(f"{op} {n} ranks", {c: [1e6 / v for v in data[(op, 'rate', n)][c]] for c in configs},
                  [(f"hydra/{k} (rate)", "hydra", k) for k in lattice]) for n in ranks for op in OPS]
    print(bl.table(f"Rate, ops per second of all origins (flush every 1000), {a.repeat} rounds, median [min–max]; "
                   "ratio: Hydra's rate over Lattice's", configs, rate_rows))
    if a.mpich_repeat:
        print()
        print(bl.table(f"MPICH's rma/atomic_get_long_double_int, 3 ranks, wall time of the command in s, "
                       f"{a.mpich_repeat} rounds, median [min–max]", configs, [("atomic_get", mpich, ratios)]))
    print()
    print("time over Hydra's round by round (the configurations of a round back to back), median [min–max]")
    print()
    every = [*measures, *([("atomic_get", "", 3)] if a.mpich_repeat else [])]
    all_rounds = dict(rounds)
    if a.mpich_repeat:
        all_rounds[("atomic_get", "", 3)] = mpich_rounds
    print("\n".join(ratio_rows(all_rounds, every, lattice)))
    if failures:
        print("\nFAILED runs:\n" + "\n".join(failures))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
