#!/usr/bin/env python3
"""What a system call costs: native vs the preload client vs the compute node kernel.

bench/syscall_cost.c times three calls, in ns per call:
  getppid  a call done on the node as it is: under cnk the seccomp filter
           lets it through by number, untrapped (compute/cnk/README.md)
  getaffinity  sched_getaffinity, a local call cnk answers itself (the
           node's CPUs): under cnk trapped (seccomp SIGSYS) and dispatched
  pwrite   pwrite64 of 8 bytes to a file in the working directory: native a
           plain call; under `--kernel linux` (preload client) and cnk it is
           shipped to the I/O node and back
Each is reported twice: the total time over the calls (what a program
sees, preemptions included) and the median of the calls timed one by one
(rdtsc around each: the cost of one call when nothing else gets in the
way, which a busy machine moves much less).
The same dynamic executable runs, interleaved, REPEAT times each:
  native  plain Linux, in a temporary directory
  linux   a one-rank job with `lattice run --kernel linux` (preload client)
  cnk     a one-rank job with `lattice run --kernel cnk`
The table gives median [min–max] and each mode's ratio to native.
REFERENCE.md section 4 measured on this kind of machine: native getppid
90–130 ns, a seccomp RET_TRAP round trip about 1,490 ns.

    .venv/bin/python bench/syscall_cost.py [--repeat 5] [--calls 100000] [--quick]
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

import benchlib as bl

COST = bl.BENCH / "syscall_cost"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--calls", type=int, default=100000, help="getppid calls per run")
    ap.add_argument("--writes", type=int, default=20000, help="pwrite calls per run")
    ap.add_argument("--kernels", default="linux,cnk", help="lattice kernels to run beside native")
    ap.add_argument("--cpu", type=int, default=-1, help="pin native runs and the compute node here (default: none)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 repeat, 10000 calls, 2000 writes")
    a = ap.parse_args()
    if a.quick:
        a.repeat, a.calls, a.writes = 1, 10000, 2000
    bl.require_root("syscall_cost.py")
    bl.require_built(COST)
    cpu = None if a.cpu < 0 else a.cpu
    kernels = [k for k in a.kernels.split(",") if k]
    configs = ["native", *kernels]
    work = Path(tempfile.mkdtemp(prefix="lattice-bench-syscall-"))
    os.chmod(work, 0o777)
    calls = {"getppid": a.calls, "getaffinity": a.calls, "pwrite": a.writes}
    data: dict[str, dict[str, list[float]]] = {c: {k: [] for k in configs} for c in calls}
    p50: dict[str, dict[str, list[float]]] = {c: {k: [] for k in configs} for c in calls}
    print(bl.header("syscall_cost", sys.argv))
    try:
        with bl.OneNode(memory="256M", cpu=cpu, boot=bool(kernels)) as node:
            for i in range(a.repeat):
                for cfg in bl.rotations(configs, i):
                    for call, n in calls.items():
                        if cfg == "native":
                            out = bl.native(COST, call, str(n), cpu=cpu, cwd=work)
                        else:
                            out, _ = node.run(COST, call, str(n), kernel=cfg, cwd=work, verbose=False)
                        kv = bl.parse_kv(out)
                        data[call][cfg].append(float(kv["ns_per_call"]))
                        p50[call][cfg].append(float(kv["ns_p50"]))
                    print(f"  run {i + 1}/{a.repeat} {cfg}: " + ", ".join(
                          f"{c} {data[c][cfg][-1]:.0f} ns (p50 {p50[c][cfg][-1]:.0f})" for c in calls), flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    ratios = [(f"{k}/native", k, "native") for k in kernels]
    print()
    print(bl.table(f"{a.repeat} interleaved runs each, ns per call, median [min–max]", configs, [
        ("getppid (local, as it is; untrapped under cnk)", data["getppid"], ratios),
        ("sched_getaffinity (local, cnk's answer; trapped under cnk)", data["getaffinity"], ratios),
        ("pwrite 8 B to a file in the cwd (shipped)", data["pwrite"], ratios),
        ("getppid, median of single calls", p50["getppid"], ratios),
        ("sched_getaffinity, median of single calls", p50["getaffinity"], ratios),
        ("pwrite 8 B, median of single calls", p50["pwrite"], ratios),
    ]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
