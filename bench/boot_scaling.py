#!/usr/bin/env python3
"""Boot time against the number of compute nodes, on one host, quiet and busy.

For each size N (default 1,024, 2,048, 4,096, 8,192 compute nodes, psets of
8: N/8 I/O nodes), a machine of N nodes with one block over all of it:
  quiet   `lattice boot B`: from the command's start until every ciod has
          all its compute nodes connected and the block is Initialized
  busy    the same boot with the host busy: 4 spinning processes per core
          (--spin), started before the boot and stopped after it by this
          bench; they run at the boot's own priority
  free    `lattice free B` (after the quiet boot)
  cpu     the cpu the block's cnodes and ciods used to boot
          (after the quiet boot; per node in the second row): the cost the
          host pays whatever else runs
  floor   the same number of processes (N cnodes + N/8 ciods) started with
          posix_spawn and reaped, each a `sleep` that is killed at once: what
          any launcher pays the host for that many processes (quiet)
Sizes, conditions and repetitions are interleaved (each goes first in turn).
The table gives median [min-max] seconds and milliseconds per node (flat when
boot is linear in N), boot/floor and busy/quiet.  Then a least-squares fit of
the quiet medians, t = a + b N (+ c N^2), and each size's residual.

Each boot runs with the default stall window ($LATTICE_BOOT_STALL, 60 s): a
boot fails only when nothing moved for that long, so a busy host's boot is
slower, never cut off.  8,192 nodes need about 19,000 tasks (each ciod keeps
a thread per compute node): kernel.pid_max must be above that with the rest
of the host's (Debian's 32,768 is).

    .venv/bin/python bench/boot_scaling.py [--sizes 1024,2048,4096,8192] [--repeat 3] [--pset-size 8]
                                           [--spin 4] [--no-busy]
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


class Spinners:
    """per_core spinning processes per core for the duration of a `with`
    (each in a session of its own, killed and reaped after)."""

    def __init__(self, per_core: int) -> None:
        self.n = per_core * (os.cpu_count() or 1)
        self.pids: list[int] = []

    def __enter__(self) -> Spinners:
        for _ in range(self.n):
            self.pids.append(os.posix_spawn("/bin/sh", ["sh", "-c", "while :; do :; done"], os.environ, setsid=True))
        return self

    def __exit__(self, *exc: object) -> None:
        for pid in self.pids:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in self.pids:
            os.waitpid(pid, 0)
        self.pids = []


def block_cpu(home: Path) -> float:
    """Seconds of cpu the booted block's daemons (its cnodes and ciods, every
    thread: those whose command line names the machine) have used so far
    (/proc/PID/task/TID/schedstat: exact, where utime and stime are sampled
    at the tick).  The host agent, a fork of `lattice boot`, is not counted."""
    mark = str(home).encode()
    total = 0
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                argv = f.read()
            if mark not in argv or b"lattice.cli.warm" in argv:      # the warm server is the CLI's, not the block's
                continue
            for t in os.listdir(f"/proc/{d}/task"):
                with open(f"/proc/{d}/task/{t}/schedstat") as f:
                    total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return total / 1e9


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
    ap.add_argument("--spin", type=int, default=4, help="spinning processes per core while the busy boot runs")
    ap.add_argument("--no-busy", action="store_true", help="quiet boots only")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    for n in sizes:
        if n not in SHAPES:
            sys.exit(f"size {n}: one of {', '.join(map(str, SHAPES))}")
    bl.require_built(bl.BUILD / "bin" / "ciod", bl.BUILD / "bin" / "cnode")
    print(bl.header("boot_scaling", sys.argv))
    conds = ["quiet"] + ([] if args.no_busy else ["busy"])
    data: dict[int, dict[str, list[float]]] = {n: {"quiet": [], "busy": [], "free": [], "floor": [], "cpu": []}
                                             for n in sizes}
    with tempfile.TemporaryDirectory(prefix="lattice-boot-bench-") as tmp:
        homes = {}
        for n in sizes:
            homes[n] = Path(tmp) / str(n)
            lattice(homes[n], "init", "--shape", SHAPES[n], "--pset-size", str(args.pset_size), "--memory", "64M")
            lattice(homes[n], "block", "create", "B", "--shape", SHAPES[n])
        for i in range(args.repeat):
            for n in bl.rotations(sizes, i):
                data[n]["floor"].append(floor(n + n // args.pset_size))
                for c in bl.rotations(conds, i):
                    if c == "busy":
                        with Spinners(args.spin):
                            load = os.getloadavg()[0]
                            data[n]["busy"].append(lattice(homes[n], "boot", "B"))
                    else:
                        load = os.getloadavg()[0]
                        data[n]["quiet"].append(lattice(homes[n], "boot", "B"))
                        data[n]["cpu"].append(block_cpu(homes[n]))
                    t = lattice(homes[n], "free", "B")
                    if c == "quiet":
                        data[n]["free"].append(t)
                    print(f"  round {i + 1}: {n} nodes {c} boot {data[n][c][-1]:.2f} s (load {load:.1f}), "
                          f"free {t:.2f} s", flush=True)
    rows = []
    for n in sizes:
        d = data[n]
        per = {c: [1000 * t / n for t in d[c]] for c in ("quiet", "busy", "floor", "cpu")}
        rows.append((f"{n} nodes (s)", d, [("boot/floor", "quiet", "floor")]
                     + ([("busy/quiet", "busy", "quiet")] if d["busy"] else [])))
        rows.append((f"{n} nodes (ms per node)", per, []))
    print()
    print(bl.table(f"Boot on one host, psets of {args.pset_size}; busy: {args.spin} spinning processes per core",
                   ["quiet", "busy", "free", "floor", "cpu"], rows))
    xs = [float(n) for n in sizes]
    for c in conds:
        ys = [statistics.median(data[n][c]) for n in sizes]
        if len(sizes) < 2:
            break
        lin = fit(xs, ys, 1)
        print(f"\n{c}: linear fit: boot = {lin[0]:.3f} s + {lin[1] * 1000:.3f} ms x N")
        for n, y in zip(sizes, ys):
            pred = lin[0] + lin[1] * n
            print(f"  N={n}: measured {y:.2f} s ({1000 * y / n:.2f} ms a node), linear fit {pred:.2f} s "
                  f"({100 * (y - pred) / y:+.1f} %)")
        if len(sizes) >= 3:
            q = fit(xs, ys, 2)
            print(f"{c}: quadratic fit: boot = {q[0]:.3f} s + {q[1] * 1000:.3f} ms x N + {q[2] * 1e6:.4f} us x N^2"
                  f" (N^2 term at N={sizes[-1]}: {q[2] * sizes[-1] ** 2:.2f} s of {ys[-1]:.2f} s)")
    return 0

if __name__ == "__main__":
    sys.exit(main())
