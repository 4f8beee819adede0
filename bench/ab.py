#!/usr/bin/env python3
"""Runs one of the benchmarks in two checkouts, alternately: before and after a change.

    .venv/bin/python bench/ab.py --before /path/to/old/checkout --rounds 3 -- syscall_cost.py --repeat 2

Each round runs the benchmark first in the --before checkout (its own
.venv and build, so an older wire protocol is no obstacle), then in this
one, and prints both outputs labelled; the benchmark itself already runs
its baseline beside Lattice and prints the ratio.  Alternating the two
over several rounds keeps a busy machine's drift out of the comparison.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent


def run(checkout: Path, args: list[str]) -> str:
    env_py = checkout / ".venv" / "bin" / "python"
    p = subprocess.run([str(env_py), str(checkout / "bench" / args[0]), *args[1:]], cwd=checkout,
                       capture_output=True, text=True)
    return p.stdout + (p.stderr if p.returncode else "") + (f"(exit {p.returncode})\n" if p.returncode else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--before", type=Path, required=True, help="the other checkout, set up (scripts/setup.sh)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("bench", nargs=argparse.REMAINDER, help="-- BENCHMARK.py [its arguments]")
    a = ap.parse_args()
    args = a.bench[1:] if a.bench[:1] == ["--"] else a.bench
    if not args or not (HERE / "bench" / args[0]).exists():
        ap.error("name a benchmark of bench/ after --")
    if not (a.before / ".venv" / "bin" / "python").exists():
        ap.error(f"{a.before}: no .venv (run its scripts/setup.sh)")
    for r in range(1, a.rounds + 1):
        for label, checkout in (("before", a.before.resolve()), ("after", HERE)):
            print(f"=== round {r} {label}: {checkout} ({' '.join(args)})", flush=True)
            print(run(checkout, args), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
