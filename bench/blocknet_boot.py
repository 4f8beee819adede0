#!/usr/bin/env python3
"""What the block network (lattice.nodes.blocknet) adds to a boot and a free, on one host.

For each size N (default 8 and 128 compute nodes, psets of 8), a machine of N nodes with one block
over all of it, booted and freed with the block network (the default, as root) and without it
(LATTICE_BLOCKNET=off), interleaved (each goes first in turn):
  boot      `lattice boot B`, from the command's start until the block is Initialized
  free      `lattice free B`
  network   the agent's own figure (its "ready" report's seconds.network): the allocation, the
            nft tables, the two `ip -batch` runs, every node's address and route, the tmpfs
The table gives median [min-max] seconds and on/off; then the network's cost per node.

    sudo .venv/bin/python bench/blocknet_boot.py [--sizes 8,128] [--repeat 5]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchlib as bl

SHAPES = {8: "1x2x4", 16: "2x2x4", 32: "2x4x4", 64: "4x4x4", 128: "4x4x8", 256: "4x8x8"}


def lattice(home: Path, *args: str, net: bool = True) -> float:
    env = dict(os.environ, LATTICE_HOME=str(home), LATTICE_WARM="0")
    if not net:
        env["LATTICE_BLOCKNET"] = "off"
    t0 = time.monotonic()
    p = subprocess.run([*bl.lattice_cmd(), *args], env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    dt = time.monotonic() - t0
    if p.returncode != 0:
        raise RuntimeError(f"lattice {' '.join(args)}: {p.stderr.strip()}")
    return dt


def network_seconds(home: Path) -> float | None:
    """The last "ready" report's seconds.network in the block's agent log."""
    found = None
    for line in (home / "blocks" / "B" / "log" / "agent.log").read_text().splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("event") == "ready":
            found = r.get("seconds", {}).get("network")
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="8,128")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--pset-size", type=int, default=8)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    for n in sizes:
        if n not in SHAPES:
            sys.exit(f"size {n}: one of {', '.join(map(str, SHAPES))}")
    bl.require_root("blocknet_boot")
    bl.require_built(bl.BUILD / "bin" / "ciod", bl.BUILD / "bin" / "cnode")
    print(bl.header("blocknet_boot", sys.argv))
    data: dict[int, dict[str, list[float]]] = {n: {"boot on": [], "boot off": [], "free on": [], "free off": [],
                                                   "network": []} for n in sizes}
    with tempfile.TemporaryDirectory(prefix="lattice-blocknet-bench-") as tmp:
        homes = {}
        for n in sizes:
            homes[n] = Path(tmp) / str(n)
            lattice(homes[n], "init", "--shape", SHAPES[n], "--pset-size", str(args.pset_size), "--memory", "64M")
            lattice(homes[n], "block", "create", "B", "--shape", SHAPES[n])
        for i in range(args.repeat):
            for n in sizes:
                for mode in bl.rotations(["on", "off"], i):
                    data[n][f"boot {mode}"].append(lattice(homes[n], "boot", "B", net=mode == "on"))
                    if mode == "on":
                        s = network_seconds(homes[n])
                        if s is None:
                            raise RuntimeError("no block network was made: not root, or no ip/nft? see the agent log")
                        data[n]["network"].append(s)
                    data[n][f"free {mode}"].append(lattice(homes[n], "free", "B", net=mode == "on"))
                print(f"  round {i + 1}: {n} nodes boot on {data[n]['boot on'][-1]:.3f} s, off "
                      f"{data[n]['boot off'][-1]:.3f} s, network {data[n]['network'][-1] * 1000:.1f} ms", flush=True)
    rows = []
    for n in sizes:
        d = data[n]
        rows.append((f"{n} nodes (s)", d, [("boot on/off", "boot on", "boot off"),
                                            ("free on/off", "free on", "free off")]))
    print()
    print(bl.table(f"The block network's cost on one host, psets of {args.pset_size}",
                   ["boot off", "boot on", "free off", "free on", "network"], rows))
    print()
    for n in sizes:
        d = data[n]
        added = statistics.median(d["boot on"]) - statistics.median(d["boot off"])
        print(f"  N={n}: network {statistics.median(d['network']) * 1000:.1f} ms "
              f"({statistics.median(d['network']) * 1e6 / n:.0f} us per node); boot on - off {added * 1000:+.0f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
