#!/usr/bin/env python3
"""MPI ping-pong between two ranks: Lattice (cnk and Linux mode) vs mpiexec.hydra.

The job is examples/mpi/pingpong (MPICH 4.0.2, ch4:ucx; one dynamic
executable for both sides): messages of 8 B .. 4 MiB, rank 0 prints the half
round-trip time and the one-way bandwidth of each size.  Configurations,
interleaved, each going first in turn:
  hydra        mpiexec.hydra -n 2 -env MPIR_CVAR_ASYNC_PROGRESS 0
               (both ranks on this host: MPICH's shared memory between them)
  cnk-vn       lattice run -n 2 --mode vn --mapping TXYZ --env MPIR_CVAR_ASYNC_PROGRESS=0
               (both ranks on one compute node: the same shared-memory path
               as Hydra, under the compute node kernel)
  cnk-co       lattice run -n 2 --mode co --env MPIR_CVAR_ASYNC_PROGRESS=0
               (one rank on each of two compute nodes: MPICH sees two nodes
               and talks through UCX, whose sysv/cma transports find the peer
               on the same host)
  linux-vn, linux-co   the same two with --kernel linux
  cnk-co-async  lattice run -n 2 --mode co, the mode's default:
               MPIR_CVAR_ASYNC_PROGRESS=1 (a progress thread per rank)
  hydra-async  mpiexec.hydra with MPIR_CVAR_ASYNC_PROGRESS=1: its like
The like-for-like comparison is hydra vs cnk-vn (same MPICH path, no progress
thread) and hydra vs cnk-co (BG/L's coprocessor mode, one rank per node); the goal is within 5%.  With the progress thread, four busy threads
share the host's two cores: those figures are erratic by nature.

The Lattice machine is 1x1x2 (a pset of 2), 256 MiB and 2 cores per node,
booted once; cnk's big memory is reserved on huge pages as `lattice run`
does by default (the pool is grown before the job starts, so not timed).

    .venv/bin/python bench/pingpong.py [--repeat 5] [--iters 1000] [--quick]
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys

import benchlib as bl
from launch import Block

PINGPONG = bl.BUILD / "examples" / "mpi" / "pingpong"
ALL = ["hydra", "cnk-vn", "cnk-co", "linux-vn", "linux-co", "cnk-co-async", "hydra-async"]
# cnk-vn is left out by default: both processes of a vn node end up on the
# node's first CPU under cnk (RESULTS.md), so every message waits for a
# scheduler tick (4 ms) and a full run takes minutes.  Ask for it by name.
DEFAULT = [c for c in ALL if c != "cnk-vn"]
SHOWN = [8, 64, 512, 4096, 32768, 262144, 2 << 20, 4 << 20]
BW_FROM = 32768


def lattice_opts(cfg: str) -> list[str]:
    kernel, mode = cfg.split("-")[:2]
    opts = ["--kernel", kernel, "--mode", mode]
    if mode == "vn":
        opts += ["--mapping", "TXYZ"]
    if not cfg.endswith("-async"):
        opts += ["--env", "MPIR_CVAR_ASYNC_PROGRESS=0"]
    return opts


def parse(out: str) -> dict[int, tuple[float, float]]:
    """bytes -> (half round trip in µs, MB/s) from pingpong's table."""
    res: dict[int, tuple[float, float]] = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) == 4 and f[0].isdigit():
            res[int(f[0])] = (float(f[2]), float(f[3]))
    return res


def size_name(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB" if n >= 1024 else f"{n} B"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--iters", type=int, default=1000, help="pingpong's iterations per size up to 64 KiB")
    ap.add_argument("--configs", default=",".join(DEFAULT), help=f"of {','.join(ALL)}")
    ap.add_argument("--all-sizes", action="store_true", help="a row for every size, not only powers of 8")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 repeat, 100 iterations, hydra cnk-co linux-vn")
    a = ap.parse_args()
    if a.quick:
        a.repeat, a.iters, a.configs = 1, 100, "hydra,cnk-co,linux-vn"
    bl.require_root("pingpong.py")
    bl.require_built(PINGPONG)
    hydra = shutil.which("mpiexec.hydra")
    if not hydra:
        sys.exit("pingpong.py: mpiexec.hydra not found (apt-get install mpich)")
    configs = [c for c in a.configs.split(",") if c]
    bad = [c for c in configs if c not in ALL]
    if bad:
        sys.exit(f"pingpong.py: unknown configuration {', '.join(bad)} (of {', '.join(ALL)})")
    lat: dict[int, dict[str, list[float]]] = {}
    bw: dict[int, dict[str, list[float]]] = {}
    failures: list[str] = []
    print(bl.header("pingpong", sys.argv))
    with Block("1x1x2", 2, "256M") as blk:
        print(f"machine 1x1x2, pset of 2, 256M and 2 cores per node; boot {blk.boot_s:.2f} s", flush=True)
        for i in range(a.repeat):
            for cfg in bl.rotations(configs, i):
                if cfg.startswith("hydra"):
                    prog = "1" if cfg.endswith("-async") else "0"
                    cmd = [hydra, "-n", "2", "-env", "MPIR_CVAR_ASYNC_PROGRESS", prog, str(PINGPONG), str(a.iters)]
                    env = None
                else:
                    cmd = [*bl.lattice_cmd(), "run", "--block", "bench", "-n", "2", *lattice_opts(cfg),
                           str(PINGPONG), str(a.iters)]
                    env = blk.env
                try:
                    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.timeout)
                    out, rc, err = p.stdout, p.returncode, p.stderr
                except subprocess.TimeoutExpired:
                    out, rc, err = "", -1, f"timed out after {a.timeout:.0f} s"
                res = parse(out)
                if rc != 0 or 4 << 20 not in res:
                    failures.append(f"{cfg} run {i + 1}: exit {rc}: {err.strip().splitlines()[-3:]}")
                    print(f"  run {i + 1}/{a.repeat} {cfg:13s}: FAILED (exit {rc})", flush=True)
                    continue
                for n, (us, mbs) in res.items():
                    lat.setdefault(n, {c: [] for c in configs})[cfg].append(us)
                    bw.setdefault(n, {c: [] for c in configs})[cfg].append(mbs)
                print(f"  run {i + 1}/{a.repeat} {cfg:13s}: 8 B {res[8][0]:.2f} µs, 4 KiB {res[4096][0]:.2f} µs, "
                      f"4 MiB {res[4 << 20][1]:.0f} MB/s", flush=True)
    sizes = sorted(lat) if a.all_sizes else [n for n in SHOWN if n in lat]
    ratios = [(f"{c}/hydra", c, "hydra") for c in configs if c != "hydra" and not c.endswith("-async")]
    if "cnk-co-async" in configs and "hydra-async" in configs:
        ratios.append(("cnk-co-async/hydra-async", "cnk-co-async", "hydra-async"))
    print()
    print(bl.table(f"{a.repeat} interleaved runs each, half round trip in µs, median [min–max]", configs,
                   [(size_name(n), lat[n], ratios) for n in sizes]))
    print()
    print(bl.table(f"{a.repeat} interleaved runs each, one-way bandwidth in MB/s, median [min–max]", configs,
                   [(size_name(n), bw[n], ratios) for n in sizes if n >= BW_FROM]))
    for k in ("cnk-vn", "cnk-co"):
        if k not in configs or "hydra" not in configs:
            continue
        worst = 0.0
        for n in lat:
            if lat[n][k] and lat[n]["hydra"]:
                r = statistics.median(lat[n][k]) / statistics.median(lat[n]["hydra"])
                worst = max(worst, abs(r - 1))
        print(f"goal {k} within 5% of hydra at every size: {'met' if worst <= 0.05 else 'NOT met'} "
              f"(largest difference of medians {worst * 100:.1f}%)")
    if failures:
        print("\nfailed runs:")
        for f in failures:
            print(f"  {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
