#!/usr/bin/env python3
"""What the service node spends launching a job, against the number of ranks.

A block of 1,024 compute nodes (8x8x16, psets of 8: 128 I/O nodes) is
booted once; then `lattice run --kernel linux -n R /bin/true` for R = 128,
256, 512, 1,024 ranks (one a node), interleaved, repeated.  Measured:
  wall     the command, start to exit (on this 2-core host the ranks' own
           start-up, all sharing two cores, is most of it)
  cpu      the user + system seconds of the `lattice run` process itself:
           the service node's own cost (the ranks are the compute nodes'
           children, not its own; run with LATTICE_WARM=0, so the command is
           that process and not a warm server's child)
  boot-cpu the same for `lattice boot` of the block (its agent outlives it
           and is not counted: the agent is the host's cost)
Then least-squares lines through the medians, t = a + b R, for docs/scaling.md.
Beside it, the baseline: `mpiexec.hydra -n R /bin/true` on this host, same R.

    .venv/bin/python bench/launch_scaling.py [--sizes 128,256,512,1024] [--repeat 3]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchlib as bl
from boot_scaling import fit


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, user + system of the command and what it waited for)."""
    before = os.times()
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=600)
    wall = time.monotonic() - t0
    after = os.times()
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}: {p.stderr[-2000:]}")
    return wall, (after.children_user - before.children_user) + (after.children_system - before.children_system)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="128,256,512,1024")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    if max(sizes) > 1024:
        sys.exit("sizes up to 1024 (the block's nodes)")
    print(bl.header("launch_scaling", sys.argv))
    tmp = Path(tempfile.mkdtemp(prefix="lattice-launch-scaling-"))
    # LATTICE_WARM=0: the cpu counted is the run's own process's (a warm server's child is not ours)
    env = dict(os.environ, LATTICE_HOME=str(tmp), PYTHONPATH=str(bl.ROOT / "service"), LATTICE_WARM="0")
    lat = bl.lattice_cmd()
    booted = False
    try:
        for a in (["init", "--shape", "8x8x16", "--pset-size", "8", "--memory", "64M"],
                  ["block", "create", "B", "--shape", "8x8x16"]):
            subprocess.run([*lat, *a], env=env, check=True, capture_output=True)
        _, boot_cpu = timed([*lat, "boot", "B"], env)
        booted = True
        data: dict[int, dict[str, list[float]]] = {n: {"lattice": [], "cpu": [], "hydra": []} for n in sizes}
        for i in range(args.repeat):
            for n in bl.rotations(sizes, i):
                for c in bl.rotations(["lattice", "hydra"], i):
                    if c == "lattice":
                        wall, cpu = timed([*lat, "run", "--block", "B", "--kernel", "linux", "-n", str(n), "/bin/true"], env)
                        data[n]["lattice"].append(wall)
                        data[n]["cpu"].append(cpu)
                    else:
                        wall, _ = timed(["mpiexec.hydra", "-n", str(n), "/bin/true"], env)
                        data[n]["hydra"].append(wall)
                print(f"  round {i + 1}, {n} ranks: lattice {data[n]['lattice'][-1]:.2f} s (its own cpu "
                      f"{data[n]['cpu'][-1]:.3f} s), hydra {data[n]['hydra'][-1]:.2f} s", flush=True)
        print(f"\nboot of the 1,024-node block: `lattice boot`'s own cpu {boot_cpu:.3f} s\n")
        rows = [(f"{n} ranks", data[n], [("lattice/hydra", "lattice", "hydra")]) for n in sizes]
        print(bl.table("`lattice run --kernel linux -n R /bin/true` on a booted 1,024-node block (s)",
                       ["lattice", "cpu", "hydra"], rows))
        xs = [float(n) for n in sizes]
        for what in ("lattice", "cpu", "hydra"):
            a, b = fit(xs, [statistics.median(data[n][what]) for n in sizes], 1)
            print(f"\n{what}: t = {a:.3f} s + {b * 1000:.3f} ms x R")
    finally:
        if booted:
            subprocess.run([*lat, "free", "B"], env=env, capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
