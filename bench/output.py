"""Output and input at pipe speed (issue 27): a job's stdout to a pipe, and
a pipe to rank 0's stdin, through `lattice run` (cnk and --kernel linux)
beside mpiexec.hydra on this host.

Cases: binary output (writes of 1 MiB) and line output (100-byte lines in
writes of 4000 bytes), 64 MiB and 1 GiB in all, from 1 and from 16 ranks
(each rank writes its share); stdin of 64 MiB and 1 GiB to rank 0, which
reads it to its end.  The reader of the output is this script (reads of 1
MiB, the bytes counted: a run that lost a byte is an error), the writer of
the input `head -c N /dev/zero`.  Rounds are interleaved, each system going
first in turn; the table gives median [min-max] MB/s and the ratio of
Lattice's median throughput to Hydra's.

mpiexec.hydra of Debian's MPICH 4.0.2 fails to forward more than about
64 KiB of stdin (an assertion in pmiserv_cb.c, control_cb): its stdin
cells then say so, and the stdin ratio is taken against a plain pipe
(`head -c N /dev/zero | out_writer sink`, no launcher).

    .venv/bin/python bench/output.py            # 3 rounds, every case
    .venv/bin/python bench/output.py --quick    # 1 round, 64 MiB only
    .venv/bin/python bench/output.py --sizes 1024 --rounds 1
    .venv/bin/python bench/output.py --quick --rounds 5 --only lines --before /tmp/base-build

--before PREFIX adds the columns cnk@before and linux@before: the same
cases on a second machine whose node programs (ciod, cnk, cnode...) are an
older build's (LATTICE_PREFIX=PREFIX, a copy of that tree's build/), in the
same interleaved rounds, so a change is measured before and after in one
run.  --only keeps the cases whose name contains one of its words.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import BENCH, ROOT, cell, header, lattice_cmd, require_built, rotations

WRITER = BENCH / "out_writer"
MIB = 1 << 20
SYSTEMS = ["hydra", "cnk", "linux"]
BEFORE = "@before"                      # a system's name on the --before machine


class Machine:
    """A 2x2x4 machine (16 compute nodes, psets of 8: two I/O nodes) with block `out` booted."""

    def __init__(self, prefix: str | None = None) -> None:
        self.home = Path(tempfile.mkdtemp(prefix="lattice-bench-out-"))
        self.env = dict(os.environ, LATTICE_HOME=str(self.home), PYTHONPATH=str(ROOT / "service"))
        if prefix:                      # node programs of another build (--before)
            self.env["LATTICE_PREFIX"] = prefix

    def lattice(self, *args: str) -> None:
        p = subprocess.run([*lattice_cmd(), *args], env=self.env, capture_output=True, text=True)
        if p.returncode != 0:
            raise RuntimeError(f"lattice {' '.join(args)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")

    def __enter__(self) -> "Machine":
        self.lattice("init", "--shape", "2x2x4", "--pset-size", "8", "--memory", "256M")
        self.lattice("block", "create", "out", "--shape", "2x2x4")
        self.lattice("boot", "out")
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run([*lattice_cmd(), "free", "out"], env=self.env, capture_output=True)
        shutil.rmtree(self.home, ignore_errors=True)


def launcher(system: str, nranks: int, m: Machine) -> tuple[list[str], dict[str, str]]:
    if system == "hydra":
        return ["mpiexec.hydra", "-n", str(nranks)], dict(os.environ)
    kernel = system.removesuffix(BEFORE)
    return [*lattice_cmd(), "run", "--block", "out", "--kernel", kernel, "-n", str(nranks)], m.env


def time_output(system: str, kind: str, nranks: int, total: int, m: Machine) -> float | None:
    """Seconds to move total bytes of output to this script; None if the launcher failed."""
    cmd, env = launcher(system, nranks, m)
    t0 = time.perf_counter()
    p = subprocess.Popen([*cmd, str(WRITER), kind, str(total // nranks)], env=env, stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    got = 0
    while chunk := os.read(p.stdout.fileno(), MIB):
        got += len(chunk)
    err = p.stderr.read()
    p.wait()
    dt = time.perf_counter() - t0
    if p.returncode != 0 or got != total // nranks * nranks:
        print(f"  {system} {kind} x{nranks}: exit {p.returncode}, {got} of {total} bytes: "
              f"{err.decode(errors='replace').strip()[-200:]}", file=sys.stderr)
        return None
    return dt


def time_input(system: str, total: int, m: Machine) -> float | None:
    """Seconds to move total bytes from a pipe into rank 0's stdin; None if it failed."""
    cmd: list[str] = []
    env = dict(os.environ)
    if system != "pipe":
        cmd, env = launcher(system, 1, m)
    t0 = time.perf_counter()
    feed = subprocess.Popen(["head", "-c", str(total), "/dev/zero"], stdout=subprocess.PIPE)
    p = subprocess.run([*cmd, str(WRITER), "sink"], env=env, stdin=feed.stdout, capture_output=True, text=True)
    assert feed.stdout is not None
    feed.stdout.close()
    feed.wait()
    dt = time.perf_counter() - t0
    if p.returncode != 0 or f"bytes={total}" not in p.stdout:
        print(f"  {system} stdin: exit {p.returncode}, {p.stdout.strip()} {p.stderr.strip()[-200:]}", file=sys.stderr)
        return None
    return dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="64 MiB cases only, one round unless --rounds")
    ap.add_argument("--rounds", type=int, help="rounds (default 3, with --quick 1)")
    ap.add_argument("--sizes", help="total MiB of each case, comma-separated (default 64,1024; --quick 64)")
    ap.add_argument("--only", help="cases whose name contains one of these comma-separated words (e.g. lines,x1)")
    ap.add_argument("--before", metavar="PREFIX", help="also the node programs built in PREFIX (another tree's build/)")
    args = ap.parse_args()
    require_built(WRITER)
    if shutil.which("mpiexec.hydra") is None:
        sys.exit("output.py: mpiexec.hydra missing (Debian package mpich)")
    rounds = args.rounds or (1 if args.quick else 3)
    sizes = [int(x) * MIB for x in (args.sizes or ("64" if args.quick else "64,1024")).split(",")]
    cases: list[tuple[str, str, int, int]] = []     # (name, kind, ranks, bytes)
    for size in sizes:
        for kind in ("bin", "lines"):
            for n in (1, 16):
                cases.append((f"{kind} {size // MIB} MiB x{n}", kind, n, size))
        cases.append((f"stdin {size // MIB} MiB", "stdin", 1, size))
    if args.only:
        words = args.only.split(",")
        cases = [c for c in cases if any(w in c[0] for w in words)]
    systems = SYSTEMS + ([s + BEFORE for s in SYSTEMS[1:]] if args.before else [])
    print(header("output", sys.argv))
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    secs: dict[str, dict[str, list[float]]] = {name: {} for name, *_ in cases}
    failed: dict[str, set[str]] = {name: set() for name, *_ in cases}
    with Machine() as now, (Machine(args.before) if args.before else contextlib.nullcontext(now)) as before:
        for r in range(rounds):
            for name, kind, n, size in cases:
                for system in rotations(systems + (["pipe"] if kind == "stdin" else []), r):
                    m = before if system.endswith(BEFORE) else now
                    dt = time_input(system, size, m) if kind == "stdin" else time_output(system, kind, n, size, m)
                    if dt is None:
                        failed[name].add(system)
                    else:
                        secs[name].setdefault(system, []).append(dt)
                        print(f"round {r + 1}: {name} {system}: {dt:.3f} s, {size / 1e6 / dt:.1f} MB/s",
                              file=sys.stderr, flush=True)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    cols = ["hydra", *systems[1:], "pipe"]
    kernels = systems[1:]
    print(f"\nMB/s (10^6 bytes/s), median [min-max] of {rounds} round(s); ratio: Lattice / baseline "
          "(Hydra, or the plain pipe where Hydra failed)\n")
    print("| case | " + " | ".join(cols) + " | " + " | ".join(f"{k} / base" for k in kernels) + " |")
    print("|" + "---|" * (len(cols) + 1 + len(kernels)))
    for name, kind, n, size in cases:
        mbs = {s: [size / 1e6 / t for t in v] for s, v in secs[name].items()}
        cells = ["failed" if s in failed[name] and s not in mbs else cell(mbs.get(s, [])) for s in cols]
        base = "hydra" if mbs.get("hydra") else "pipe"
        note = "" if base == "hydra" else " (pipe)"
        ratios = [f"{statistics.median(mbs[s]) / statistics.median(mbs[base]):.2f}{note}"
                  if mbs.get(s) and mbs.get(base) else "-" for s in kernels]
        print(f"| {name} | " + " | ".join(cells) + " | " + " | ".join(ratios) + " |")


if __name__ == "__main__":
    main()
