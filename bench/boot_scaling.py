#!/usr/bin/env python3
"""Boot time against the number of compute nodes, on one host.

For each size N (default 1,024, 2,048, 4,096, 8,192 compute nodes, psets of
8: N/8 I/O nodes), a machine of N nodes with one block over all of it:
  boot    `lattice boot B`: from the command's start until every ciod has
          all its compute nodes connected and the block is Initialized
  free    `lattice free B`
  floor   the same number of processes (N cnodes + N/8 ciods) started with
          posix_spawn and reaped, each a `sleep` that is killed at once: what
          any launcher pays the host for that many processes
Sizes and repetitions are interleaved (each size goes first in turn).  The
table gives median [min-max] seconds, milliseconds per node (flat when boot
is linear in N), and boot/floor.  Then a least-squares fit of the medians,
t = a + b N (+ c N^2), and each size's residual: the quadratic term, which
was 0.61 us N^2 before the host agents (lattice.nodes.agent) took over boot, should
be nothing.

8,192 nodes need about 19,000 tasks (each ciod keeps a thread per compute
node): kernel.pid_max must be above that (Debian's 32,768 is).

    .venv/bin/python bench/boot_scaling.py [--sizes 1024,2048,4096,8192] [--repeat 3] [--pset-size 8]
"""
from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchlib as bl

SHAPES = {256: "4x8x8", 512: "8x8x8", 1024: "8x8x16", 2048: "8x16x16", 4096: "16x16x16", 8192: "16x16x32",
          16384: "16x32x32"}


def lattice(home: Path, *args: str) -> float:
    env = dict(os.environ, LATTICE_HOME=str(home))
    t0 = time.monotonic()
    p = subprocess.run([*bl.lattice_cmd(), *args], env=env, capture_output=True, text=True,
                       stdin=subprocess.DEVNULL)
    dt = time.monotonic() - t0
    if p.returncode != 0:
        raise RuntimeError(f"lattice {' '.join(args)}: {p.stderr.strip()}")
    return dt


def floor(n: int) -> float:
    """posix_spawn n sleeping processes, then kill and reap them."""
    t0 = time.monotonic()
    pids = [os.posix_spawn("/bin/sleep", ["sleep", "60"], os.environ) for _ in range(n)]
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    for pid in pids:
        os.waitpid(pid, 0)
    return time.monotonic() - t0


def fit(xs: list[float], ys: list[float], degree: int) -> list[float]:
    """Least squares polynomial coefficients, lowest power first (normal equations)."""
    k = degree + 1
    a = [[sum(x ** (i + j) for x in xs) for j in range(k)] for i in range(k)]
    b = [sum(y * x ** i for x, y in zip(xs, ys)) for i in range(k)]
    for c in range(k):                      # Gauss-Jordan
        piv = max(range(c, k), key=lambda r: abs(a[r][c]))
        a[c], a[piv], b[c], b[piv] = a[piv], a[c], b[piv], b[c]
        for r in range(k):
            if r != c and a[c][c]:
                f = a[r][c] / a[c][c]
                a[r] = [u - f * v for u, v in zip(a[r], a[c])]
                b[r] -= f * b[c]
    return [b[i] / a[i][i] for i in range(k)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1024,2048,4096,8192")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--pset-size", type=int, default=8)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    for n in sizes:
        if n not in SHAPES:
            sys.exit(f"size {n}: one of {', '.join(map(str, SHAPES))}")
    bl.require_built(bl.BUILD / "bin" / "ciod", bl.BUILD / "bin" / "cnode")
    print(bl.header("boot_scaling", sys.argv))
    data: dict[int, dict[str, list[float]]] = {n: {"boot": [], "free": [], "floor": []} for n in sizes}
    with tempfile.TemporaryDirectory(prefix="lattice-boot-bench-") as tmp:
        homes = {}
        for n in sizes:
            homes[n] = Path(tmp) / str(n)
            lattice(homes[n], "init", "--shape", SHAPES[n], "--pset-size", str(args.pset_size), "--memory", "64M")
            lattice(homes[n], "block", "create", "B", "--shape", SHAPES[n])
        for i in range(args.repeat):
            for n in bl.rotations(sizes, i):
                data[n]["floor"].append(floor(n + n // args.pset_size))
                data[n]["boot"].append(lattice(homes[n], "boot", "B"))
                data[n]["free"].append(lattice(homes[n], "free", "B"))
                print(f"  round {i + 1}: {n} nodes boot {data[n]['boot'][-1]:.2f} s, free {data[n]['free'][-1]:.2f} s, "
                      f"floor {data[n]['floor'][-1]:.2f} s", flush=True)
    rows = []
    for n in sizes:
        d = data[n]
        per = {"boot": [1000 * t / n for t in d["boot"]], "floor": [1000 * t / n for t in d["floor"]]}
        rows.append((f"{n} nodes (s)", d, [("boot/floor", "boot", "floor")]))
        rows.append((f"{n} nodes (ms per node)", per, []))
    print()
    print(bl.table(f"Boot on one host, psets of {args.pset_size}", ["boot", "free", "floor"], rows))
    xs = [float(n) for n in sizes]
    ys = [statistics.median(data[n]["boot"]) for n in sizes]
    lin = fit(xs, ys, 1)
    print(f"\nlinear fit: boot = {lin[0]:.3f} s + {lin[1] * 1000:.3f} ms x N")
    for n, y in zip(sizes, ys):
        pred = lin[0] + lin[1] * n
        print(f"  N={n}: measured {y:.2f} s, linear fit {pred:.2f} s ({100 * (y - pred) / y:+.1f} %)")
    if len(sizes) >= 3:
        q = fit(xs, ys, 2)
        print(f"quadratic fit: boot = {q[0]:.3f} s + {q[1] * 1000:.3f} ms x N + {q[2] * 1e6:.4f} us x N^2"
              f" (N^2 term at N={sizes[-1]}: {q[2] * sizes[-1] ** 2:.2f} s of {ys[-1]:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
