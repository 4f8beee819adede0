#!/usr/bin/env python3
"""MPI application kernels: `lattice run` with its defaults vs `mpiexec.hydra`, side by side in one run.

The jobs are bench/apps/ (cg, mg, ft, is, ep): NPB-like kernels written for
this benchmark, dynamic MPICH executables (the same file for every launcher),
each verifying its own result and printing one line that ends in VERIFIED or
FAILED (see the head of each .c for the problem and the check):
  cg  conjugate gradient, random sparse SPD matrix: SpMV with MPI_Allgatherv,
      2 MPI_Allreduce per iteration
  mg  V-cycles, 3-D Poisson: halo exchange (MPI_Sendrecv) on every sweep
  ft  3-D FFT (FFTW plans) with MPI_Alltoallv transposes
  is  integer bucket sort: MPI_Alltoallv of the keys, random counting
  ep  Gaussian pairs: compute only, one gather at the end
Sizes: S (about 1-3 s at 2 ranks on an idle 2-core host) and A (5-15 s);
T is a tiny test size (--quick), B the big-memory size of is, mg and ft
(NPB's class B grids for mg and ft, with fewer steps: 1-2 GiB a rank at 2
ranks).

For each kernel x size x rank count (default 2, 4, 16: 2 is one rank per
core, 4 and 16 share the cores) three configurations run, interleaved, each
going first in turn, --repeat times:
  hydra   mpiexec.hydra -n N PROG CLASS                (all ranks on this host)
  cnk     lattice run --block apps -n N PROG CLASS     (the defaults: cnk, co mode)
  linux   lattice run --block apps -n N --kernel linux PROG CLASS   (the node sandbox: the default)
  preload lattice run --block apps -n N --kernel linux --no-sandbox PROG CLASS   (with --preload)
No flag or --env is added to `lattice run`: the point is that its defaults
are fast.  The machine (1x1xN for the largest N, one rank per node in co
mode, --memory per node) is booted once in a temporary LATTICE_HOME before
the runs and freed after.

Reading the output: per configuration the median [min–max] of the wall time
of the whole command (launch, MPI_Init, the kernel, its checks, exit) and of
the kernel's own timed section (`time_s`, printed by the program: after
set-up, before the checks), and the ratios of medians cnk/hydra and
linux/hydra: below 1.0 Lattice was faster.  Then the same ratios round by
round (the three configurations of a round run back to back, so a host whose
speed drifts moves them together), median [min–max]: the goal of issue 12,
Lattice <= 1.0x Hydra's wall time on every kernel, is judged on that median.  Every run must print
VERIFIED and exit 0: any other run is reported at once and at the end, and
the script exits 1.

Big memory: `is`, `mg` and `ft` at class B at 2 ranks on a second machine
(1x1x2, --bigmem-memory per node, 3 GiB by default: the 512 MiB default node
holds none of them): `is` counts each rank's 2^25 keys at random in a 1 GiB
array, `mg` sweeps 1.8 GiB a rank of 511^3 grids, `ft` transposes 1 GiB a
rank of 512 x 256 x 256 complex fields, where TLB misses and page faults on
4 KiB pages matter and cnk's big memory on huge pages should win (goal of
issue 27: <= 0.9x Hydra's time) (THP on this host is shown in the header: with
`madvise`, Hydra's and Linux mode's ranks get 4 KiB pages).  is prints the
pages that back its count array (from /proc/self/smaps), shown below that
table.  --bigmem-pool runs it over a kept pool of 2 MiB pages, as an
administrator reserves for big memory, after one untimed run of each
configuration: on this VM a 2 MiB page fresh from the kernel is slow to
touch first (bench/RESULTS.md, "Big memory's pages, fresh and kept").

By default it runs class S at 2 and 4 ranks, class A at 2 and class T at 16
(PLAN below: about 45 minutes here); --sizes and --ranks run every
combination of the two lists instead.

    .venv/bin/python bench/apps.py [--kernels cg,mg,ft,is,ep] [--sizes S,A] [--ranks 2,4,16]
                                   [--repeat 3] [--no-bigmem] [--quick]
"""
from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import time

import benchlib as bl
from lattice.state.machine import parse_size
from launch import Block

APPS = bl.BENCH / "apps"
KERNELS = ["cg", "mg", "ft", "is", "ep"]
CLASSES = {"cg": "TSA", "mg": "TSAB", "ft": "TSAB", "is": "TSAB", "ep": "TSA"}
BIG = ["is", "mg", "ft"]              # the kernels of the big-memory run (class B)
BIG_GOAL = 0.9                        # issue 27: big memory should win on B
CONFIGS = ["hydra", "cnk", "linux"]
# sizes and rank counts run by default: both sizes at one rank a core, S with
# two ranks a core, and 16 ranks (eight a core) at T: cg at S or A with ranks
# sharing cores takes minutes a run under every launcher
PLAN = [("S", 2), ("S", 4), ("A", 2), ("T", 16)]
Job = tuple[str, str, int]            # kernel, class, ranks
Series = dict[Job, dict[str, list[float]]]
Rounds = dict[Job, list[dict[str, float]]]     # each round's wall time per configuration (pairs under drift)
RESULT = re.compile(r"^(CG|MG|FT|IS|EP) class=\S+ ranks=\d+ .*$", re.M)


def shape_of(n: int) -> str:
    return f"1x1x{n}"


def pset_of(n: int, want: int) -> int:
    return want if n % want == 0 else n


class Runner:
    """Runs one configuration of one job and checks its verdict."""

    def __init__(self, hydra: str, blk: Block, timeout: float) -> None:
        self.hydra = hydra
        self.blk = blk
        self.timeout = timeout

    def cmd(self, cfg: str, n: int, prog: str, cls: str) -> tuple[list[str], dict[str, str] | None]:
        exe = str(APPS / prog)
        if cfg == "hydra":
            return [self.hydra, "-n", str(n), exe, cls], None
        kernel = {"linux": ["--kernel", "linux"], "preload": ["--kernel", "linux", "--no-sandbox"]}.get(cfg, [])
        return [*bl.lattice_cmd(), "run", "--block", "bench", "-n", str(n), *kernel, exe, cls], self.blk.env

    def run(self, cfg: str, n: int, prog: str, cls: str) -> tuple[float, dict[str, str] | None, str]:
        """(wall seconds, the result line's key=values if VERIFIED, why not)"""
        cmd, env = self.cmd(cfg, n, prog, cls)
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=self.timeout)
            out, err, rc = p.stdout, p.stderr, p.returncode
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            err, rc = f"timed out after {self.timeout:.0f} s", -1
        wall = time.perf_counter() - t0
        m = RESULT.search(out)
        if rc == 0 and m and m.group(0).rstrip().endswith(" VERIFIED"):
            return wall, bl.kv_line(m.group(0)), ""
        line = m.group(0) if m else "(no result line)"
        tail = " | ".join((err or out).strip().splitlines()[-3:])
        return wall, None, f"exit {rc}: {line} {tail}".strip()


def sweep(runner: Runner, jobs: list[Job], repeat: int, tag: str, walls: Series, inner: Series,
          failures: list[str], pages: dict[tuple[Job, str], set[str]], rounds: Rounds) -> None:
    for i in range(repeat):
        for prog, cls, n in jobs:
            this: dict[str, float] = {}
            rounds.setdefault((prog, cls, n), []).append(this)
            for cfg in bl.rotations(CONFIGS, i):
                wall, kv, why = runner.run(cfg, n, prog, cls)
                label = f"{prog} {cls} {n:2d} ranks {cfg:5s}"
                if kv is None:
                    failures.append(f"{tag}{label} run {i + 1}: {why}")
                    print(f"  run {i + 1}/{repeat} {label}: VERIFICATION FAILED ({wall:.1f} s): {why}", flush=True)
                    continue
                walls[(prog, cls, n)][cfg].append(wall)
                this[cfg] = wall
                inner[(prog, cls, n)][cfg].append(float(kv["time_s"]))
                if "page" in kv:
                    pages.setdefault(((prog, cls, n), cfg), set()).add(f"page={kv['page']} thp={kv.get('thp', '?')}")
                print(f"  run {i + 1}/{repeat} {label}: {wall:7.2f} s (kernel {float(kv['time_s']):.2f} s) VERIFIED",
                      flush=True)


def tables(title: str, jobs: list[Job], walls: Series, inner: Series, repeat: int) -> str:
    ratios = [(f"{k}/hydra", k, "hydra") for k in CONFIGS if k != "hydra"]
    rows = [(f"{p} {c} {n} ranks", walls[(p, c, n)], ratios) for p, c, n in jobs]
    irows = [(f"{p} {c} {n} ranks", inner[(p, c, n)], ratios) for p, c, n in jobs]
    return (bl.table(f"{title}: {repeat} interleaved runs each, wall time of the command in s, median [min–max]",
                     CONFIGS, rows) + "\n\n" +
            bl.table(f"{title}: the kernel's own timed section (time_s) in s, median [min–max]", CONFIGS, irows))


def paired(job: Job, k: str, rounds: Rounds) -> list[float]:
    """k's wall time over Hydra's in each round both ran in: what the host's
    drifting speed does not move (the runs of a round are back to back)."""
    return [r[k] / r["hydra"] for r in rounds.get(job, []) if k in r and "hydra" in r]


def paired_table(jobs: list[Job], rounds: Rounds) -> str:
    lattice = [c for c in CONFIGS if c != "hydra"]
    rows = ["| measure | " + " | ".join(f"{k}/hydra" for k in lattice) + " |", "| --- |" + " --- |" * len(lattice)]
    for job in jobs:
        cells = []
        for k in lattice:
            r = paired(job, k, rounds)
            cells.append(f"{statistics.median(r):.3f} [{min(r):.3f}–{max(r):.3f}]" if r else "-")
        rows.append(f"| {job[0]} {job[1]} {job[2]} ranks | {' | '.join(cells)} |")
    return ("wall time over Hydra's, round by round (the configurations of a round run back to back), "
            "median [min–max]\n\n" + "\n".join(rows))


def goals(jobs: list[Job], rounds: Rounds) -> list[str]:
    out = []
    for job in jobs:
        for k in (c for c in CONFIGS if c != "hydra"):
            r = paired(job, k, rounds)
            if r:
                med, goal = statistics.median(r), BIG_GOAL if job[1] == "B" else 1.0
                out.append(f"{job[0]} {job[1]} {job[2]} ranks {k}: {med:.2f}x hydra (round by round, "
                           f"{min(r):.2f}–{max(r):.2f}), goal <= {goal} {'met' if med <= goal else 'NOT met'}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kernels", default=",".join(KERNELS), help="of cg,mg,ft,is,ep")
    ap.add_argument("--sizes", help="classes: T (tiny), S, A (default: S at 2 and 4 ranks, A at 2, T at 16)")
    ap.add_argument("--ranks", help="rank counts (default: see --sizes)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--memory", default="768M", help="per compute node of the main machine")
    ap.add_argument("--pset-size", type=int, default=8)
    ap.add_argument("--no-bigmem", action="store_true", help="skip the big-memory run (is, mg, ft class B, 2 ranks)")
    ap.add_argument("--bigmem-memory", default="3G", help="per compute node of the big-memory machine")
    ap.add_argument("--bigmem-class", default="B", choices=list(CLASSES["is"]),
                    help="class of the big-memory run (default B)")
    ap.add_argument("--bigmem-kernels", default=",".join(BIG), help=f"of {','.join(BIG)}: the big-memory run's kernels")
    ap.add_argument("--bigmem-only", action="store_true", help="only the big-memory run")
    ap.add_argument("--bigmem-pool", action="store_true",
                    help="run the big-memory machine over a kept pool of 2 MiB pages covering its nodes (what an "
                         "administrator reserves for big memory), after one untimed run of each configuration")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    ap.add_argument("--preload", action="store_true",
                    help="also Linux mode's preload client (--kernel linux --no-sandbox) beside the sandbox")
    ap.add_argument("--no-cnk", action="store_true", help="leave cnk out (Linux mode against Hydra only)")
    ap.add_argument("--quick", action="store_true",
                    help="functional run: 1 repeat, class T, 2 ranks, no big-memory run")
    a = ap.parse_args()
    if a.quick:
        a.repeat, a.sizes, a.ranks, a.no_bigmem = 1, "T", "2", True
    kernels = [k for k in a.kernels.split(",") if k]
    if a.preload:
        CONFIGS.append("preload")
    if a.no_cnk:
        CONFIGS.remove("cnk")
    if a.sizes is None and a.ranks is None:
        plan = PLAN
    else:
        sizes = [s for s in (a.sizes or "S").split(",") if s]
        plan = [(s, int(r)) for s in sizes for r in (a.ranks or "2").split(",") if r]
    bigk = [k for k in a.bigmem_kernels.split(",") if k]
    bad = ([k for k in kernels if k not in KERNELS] + [s for s, _ in plan if len(s) != 1 or s not in "TSA"]
           + [k for k in bigk if k not in BIG])
    if bad or not plan or min(n for _, n in plan) < 1 or a.repeat < 1:
        ap.error(f"bad --kernels/--sizes/--ranks/--repeat ({', '.join(bad) or a.ranks})")
    ranks = [n for _, n in plan]
    bl.require_root("apps.py")
    bl.require_built(*(APPS / k for k in set(kernels) | set(bigk)))
    hydra = shutil.which("mpiexec.hydra")
    if not hydra:
        sys.exit("apps.py: mpiexec.hydra not found (apt-get install mpich)")

    jobs = [] if a.bigmem_only else [(k, s, n) for k in kernels for s, n in plan]
    walls: Series = {j: {c: [] for c in CONFIGS} for j in jobs}
    inner: Series = {j: {c: [] for c in CONFIGS} for j in jobs}
    failures: list[str] = []
    pages: dict[tuple[Job, str], set[str]] = {}
    rounds: Rounds = {}
    nmax = max(ranks)
    print(bl.header("apps", sys.argv))
    if jobs:
        print(f"machine {shape_of(nmax)}, psets of {pset_of(nmax, a.pset_size)}, {a.memory} per node; "
              f"lattice run with its defaults (cnk, co mode); hydra: {hydra}", flush=True)
        with Block(shape_of(nmax), pset_of(nmax, a.pset_size), a.memory) as blk:
            print(f"boot of the block: {blk.boot_s:.2f} s", flush=True)
            sweep(Runner(hydra, blk, a.timeout), jobs, a.repeat, "", walls, inner, failures, pages, rounds)
        print()
        print(tables("MPI application kernels", jobs, walls, inner, a.repeat))
        print()
        print(paired_table(jobs, rounds))

    big: list[Job] = [] if a.no_bigmem else [(k, a.bigmem_class, 2) for k in bigk]
    if big:
        bwalls: Series = {j: {c: [] for c in CONFIGS} for j in big}
        binner: Series = {j: {c: [] for c in CONFIGS} for j in big}
        print(f"\nbig memory: machine 1x1x2, {a.bigmem_memory} per node", flush=True)
        want = {2048: 2 * (parse_size(a.bigmem_memory) >> 21)} if a.bigmem_pool else {}
        with bl.HugePages(want) as pool, Block("1x1x2", 2, a.bigmem_memory) as blk:
            runner = Runner(hydra, blk, a.timeout)
            if a.bigmem_pool:
                print(f"kept pool: {pool.got.get(2048, 0)} of {want[2048]} 2 MiB pages added; one untimed run of "
                      "each configuration first", flush=True)
                sweep(runner, big, 1, "big memory, untimed: ", {j: {c: [] for c in CONFIGS} for j in big},
                      {j: {c: [] for c in CONFIGS} for j in big}, failures, {}, {})
            sweep(runner, big, a.repeat, "big memory: ", bwalls, binner, failures, pages, rounds)
        print()
        print(tables(f"Big memory, class {a.bigmem_class}, 2 ranks", big, bwalls, binner, a.repeat))
        print()
        print(paired_table(big, rounds))
        for cfg in (CONFIGS if ("is", a.bigmem_class, 2) in big else []):
            got = ", ".join(sorted(pages.get((("is", a.bigmem_class, 2), cfg), set()))) or "?"
            print(f"pages of is's rank 0 count array, {cfg}: {got}")
        walls.update(bwalls)
        jobs = jobs + big
    print()
    for g in goals(jobs, rounds):
        print(f"goal {g}")
    if failures:
        print(f"\nVERIFICATION FAILED in {len(failures)} run(s):")
        for f in failures:
            print(f"  {f}")
        return 1
    print("\nevery run VERIFIED")
    return 0


if __name__ == "__main__":
    sys.exit(main())
