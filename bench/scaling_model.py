#!/usr/bin/env python3
"""The scaling model of docs/scaling.md: fits to measured points, the error on
points held out of each fit, and the prediction for a big machine.

The measured points are the medians recorded in bench/RESULTS.md, each with
the command that gives them (MEASURED below: re-run those commands and put
their medians here to refit).  Nothing here is measured by this script; it
only fits and predicts, and says which is which.

    python3 bench/scaling_model.py [--nodes 65536 --ionodes 1024 --hosts 1024]
"""
from __future__ import annotations

import argparse
import math
import sys

from boot_scaling import fit

# (x, seconds) medians, from bench/RESULTS.md "Issue 15: ..." sections
MEASURED = {
    # bench/boot_scaling.py --sizes 1024,2048,4096,8192 --repeat 3: `lattice boot`, one host, psets of 8
    "boot_one_host": [(1024, 3.17), (2048, 7.16), (4096, 13.51), (8192, 30.65)],
    # bench/hosts_boot.py --repeat 5: boot of one pset of 2 nodes per host, H testbed hosts
    "boot_ssh_hosts": [(1, 0.488), (2, 0.605), (3, 0.737), (4, 0.914)],
    "boot_slurm_hosts": [(1, 0.361), (2, 0.474), (3, 0.500), (4, 0.560)],
    # bench/coldstart.py --hosts 4 --fanouts 1,2,4 --repeat 7 (issue 27): boot of a pset of 4 on each of
    # 4 hosts, agents as a tree; x = its depth (fan-out 4, 2, 1), every ssh connection new
    "boot_tree_depth": [(1, 1.92), (2, 2.32), (4, 3.77)],
    # bench/launch_scaling.py --repeat 3: the `lattice run` process's own cpu, R ranks on a booted block
    "run_cpu_ranks": [(128, 0.220), (256, 0.220), (512, 0.230), (1024, 0.300)],
    # bench/pmi_fence.py --repeat 7 --sizes 8,32,64,128,256 --fences 20: one fence, tree of fan-out 8
    "fence_ranks": [(32, 0.00589), (64, 0.01257), (128, 0.02009), (256, 0.03029)],
}
# bench/forwarding.py --repeat 3 --mib 128 (RESULTS.md, "Issue 13 ... before and after"): one I/O node
FORWARD_WRITE_MBS = 1678.0
FORWARD_READ_MBS = 2508.0
FENCE_BYTES_PER_RANK = 470          # a 452-byte business card and its key, as the fence carries it
NETWORK_MBS = 1250.0                # assumed, not measured: one 10 Gb/s link per I/O node


def line(points: list[tuple[float, float]]) -> tuple[float, float]:
    a, b = fit([float(x) for x, _ in points], [y for _, y in points], 1)
    return a, b


def held_out(name: str, points: list[tuple[float, float]], unit: str = "s") -> tuple[float, float]:
    """Fit on all but the last point, say the error there, then fit on all."""
    a, b = line(points[:-1])
    x, y = points[-1]
    pred = a + b * x
    print(f"  {name}: fit on x = {', '.join(str(p[0]) for p in points[:-1])}: {a:.4g} {unit} + {b:.4g} {unit} * x; "
          f"held out x = {x}: measured {y:.4g}, predicted {pred:.4g} ({100 * (pred - y) / y:+.1f} %)")
    return line(points)


def tree_depth(hosts: int, k: int) -> int:
    """Levels of agents for hosts with fan-out k (lattice.nodes.agenttree.depth)."""
    levels, reached, width = 0, 0, 1
    while reached < hosts:
        width *= k
        reached += width
        levels += 1
    return levels


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, default=65536)
    ap.add_argument("--ionodes", type=int, default=1024)
    ap.add_argument("--hosts", type=int, default=1024)
    args = ap.parse_args()
    n, io, hosts = args.nodes, args.ionodes, args.hosts
    per_host = n // hosts
    print("Fits (measured points, one held out of each fit):")
    ba, bb = held_out("boot, one host, x = compute nodes", MEASURED["boot_one_host"])
    sa, sb = held_out("boot over ssh, x = hosts", MEASURED["boot_ssh_hosts"])
    la, lb = held_out("boot through one srun, x = hosts", MEASURED["boot_slurm_hosts"])
    ca, cb = held_out("lattice run's own cpu, x = ranks", MEASURED["run_cpu_ranks"])
    fa, fb = held_out("one PMI fence (tree, fan-out 8), x = ranks", MEASURED["fence_ranks"])
    _, hop = held_out("boot over ssh as a tree of agents, x = depth", MEASURED["boot_tree_depth"])

    print(f"\nPrediction for {n:,} compute nodes, {io:,} I/O nodes ({n // io} a pset), {hosts:,} hosts "
          f"({per_host} nodes a host), one rank a node:")
    # the fan-out lines were measured with 2 nodes a host: a host's other nodes cost the one-host slope each
    more_nodes = bb * (per_host - 2)
    for name, a, b in (("ssh", sa, sb), ("slurm", la, lb)):
        fan = a + b * hosts
        print(f"  boot, {name}: {fan:.1f} s to reach {hosts:,} hosts and start 2 nodes on each (per host "
              f"{b * 1000:.0f} ms, measured with every host on the same two cores: an upper bound), + "
              f"{more_nodes:.2f} s for each host's other {per_host - 2} nodes ({bb * 1000:.2f} ms a node, the "
              f"hosts at once) = {fan + more_nodes:.1f} s")
    for k, s in ((16, sb), (4, sb), (16, 0.010)):
        d = tree_depth(hosts, k)
        print(f"  boot, ssh, agents as a tree of fan-out {k}: depth {d}, {d} x ({hop:.2f} s a hop + {k} x "
              f"{s * 1000:.0f} ms to start a child) = {d * (hop + k * s):.1f} s, + {sa:.2f} s + {more_nodes:.2f} s = "
              f"{sa + d * (hop + k * s) + more_nodes:.1f} s" + (" (a real client's ssh cost, assumed)" if s < sb else ""))
    run_cpu = ca + cb * n
    print(f"  lattice run's own cpu for {n:,} ranks: {run_cpu:.1f} s (the line through 128..1,024 ranks)")
    levels = math.ceil(math.log(io, 8)) if io > 1 else 1
    data = FENCE_BYTES_PER_RANK * n / 1e6
    per_level = 8 * data / NETWORK_MBS
    print(f"  one PMI fence: {data:.1f} MB of keys; the tree has {levels} levels of I/O nodes, each sending at "
          f"most 8 copies: {levels} x {per_level:.2f} s down + {levels} x {data / NETWORK_MBS:.3f} s up = "
          f"{levels * (per_level + data / NETWORK_MBS):.1f} s at {NETWORK_MBS:.0f} MB/s a link (assumed); "
          f"the one-host line would say {fa + fb * n:.1f} s, which is the ranks' own work on two shared cores")
    fence = levels * (per_level + data / NETWORK_MBS)
    print(f"  a job's launch, then: {run_cpu:.1f} s of the service node + each host starting its {per_host} ranks "
          f"at once + MPI_Init's fences (MPICH makes 2 or 3: {2 * fence:.1f}-{3 * fence:.1f} s)")
    print(f"  the star it replaced: the service node sends {io} x {data:.1f} MB = {io * data / 1000:.1f} GB a fence "
          f"({io * data / NETWORK_MBS:.0f} s on one link)")
    print(f"  I/O: {io:,} I/O nodes forwarding {FORWARD_WRITE_MBS:.0f} MB/s written, {FORWARD_READ_MBS:.0f} MB/s read "
          f"each (one measured alone): {io * FORWARD_WRITE_MBS / 1e6:.2f} TB/s and {io * FORWARD_READ_MBS / 1e6:.2f} "
          f"TB/s offered, {FORWARD_WRITE_MBS / (n // io):.0f} MB/s a compute node when all {n // io} of a pset write; "
          f"the file system behind them bounds the total")
    return 0


if __name__ == "__main__":
    sys.exit(main())
