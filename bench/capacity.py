#!/usr/bin/env python3
"""What the capacity check costs `lattice run` (issue 15).

Before it boots anything or sends LAT_CTL_JOB, `lattice run` checks that the
host can hold the job (service/lattice/nodes/capacity.py): it imports the module
(lazily, on the run path only), reads the host's limits (a few /proc and
/sys files) and does the arithmetic.  Each round is a fresh interpreter
that has already imported what `lattice run` imports (lattice.cli.cmd.run,
lattice.jobs.job), as the check finds it, and times:
  import  `from lattice import capacity`, compiled module cached
  check   read_host (with MemAvailable and the huge pages, as a cnk job)
          + job() + check(), the first call in the process
  again   the same, the second time (warm)
The table gives median [min–max] in microseconds over REPEAT rounds.

    .venv/bin/python bench/capacity.py [--repeat 30]
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

import benchlib as bl

PROBE = r"""
import json, time, lattice.cli.cmd.run, lattice.jobs.job, sys
assert "lattice.nodes.capacity" not in sys.modules
t0 = time.perf_counter()
from lattice.nodes import capacity
t1 = time.perf_counter()
need = capacity.job(16, [8, 8], 0, 16 << 29, 0, 0, 16, 0)
capacity.check(capacity.read_host(memory=True), [need])
t2 = time.perf_counter()
capacity.check(capacity.read_host(memory=True), [need])
t3 = time.perf_counter()
print(json.dumps({"import": (t1 - t0) * 1e6, "check": (t2 - t1) * 1e6, "again": (t3 - t2) * 1e6}))
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=30)
    a = ap.parse_args()
    py = str(bl.ROOT / ".venv" / "bin" / "python")
    # the compiled module, as an installed lattice has it (PYTHONDONTWRITEBYTECODE may be set)
    subprocess.run([py, "-m", "compileall", "-q", str(bl.ROOT / "service" / "lattice")], check=True,
                   capture_output=True)
    print(bl.header("capacity", sys.argv))
    rows: dict[str, list[float]] = {"import": [], "check": [], "again": []}
    for _ in range(a.repeat):
        out = subprocess.run([py, "-c", PROBE], check=True, capture_output=True, text=True).stdout
        for k, v in json.loads(out).items():
            rows[k].append(v)
    totals = [i + c for i, c in zip(rows["import"], rows["check"])]
    print(f"{'µs':8s} {'median':>8s} {'min':>8s} {'max':>8s}")
    for k, vals in [*rows.items(), ("import+check", totals)]:
        print(f"{k:12s} {statistics.median(vals):8.0f} {min(vals):8.0f} {max(vals):8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
