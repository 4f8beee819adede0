#!/usr/bin/env python3
"""HPC Challenge (Debian's hpcc, built against Open MPI) under Lattice vs mpiexec.

hpcc reads hpccinf.txt in its working directory and writes hpccoutf.txt
there.  Each run gets a fresh directory holding a small hpccinf.txt (HPL
N=--n, NB=--nb, a P x Q grid of the ranks, one PTRANS size of its own; the
other tests size themselves from HPL's memory), and is timed from the
command's start to its exit:
  mpiexec      mpiexec.openmpi -n R --oversubscribe --allow-run-as-root hpcc
               (Open MPI's defaults: ob1 and the vader shared-memory BTL)
  cnk, linux   lattice run --block bench -n R --kernel cnk|linux --cwd DIR hpcc
               with Lattice's defaults: Open MPI bootstraps through Lattice's
               PMI and its ranks talk through vader too (docs/openmpi.md)
  mpiexec-tcp  (--tcp only) mpiexec with --mca pml ob1 --mca btl self,tcp,
               what Lattice gave Open MPI before it had shared memory
Configurations are interleaved, each going first in turn.  Compared are hpcc's
own verification (every `PASSED` / `FAILED` line of hpccoutf.txt, and the
summary's failure flags), the time of the whole run, and the main figures
of the summary section (HPL, STREAM, RandomAccess, PTRANS, FFT, ring
latency and bandwidth): median [min-max] per configuration, the ratio of
medians, and for wall time and the ring figures the ratio of each Lattice
run to the mpiexec run of the same repetition, median [min-max].

The Lattice machine is 1x1xR (a pset of R), --mem per node (default 1G), 2
cores per node, booted once; --mode co (the default) runs one rank per
node, vn two (on R/2 nodes), their ranks sharing memory across nodes either
way.  If a Lattice configuration cannot start hpcc the script says what
happened and exits 1; the baseline still runs.

2 ranks and N=3000 take about 20 s under mpiexec here (4 ranks on 2 cores
spend most of their time yielding to each other).

    .venv/bin/python bench/hpcc.py [--repeat 3] [--ranks 2] [--n 3000] [--mode co|vn] [--tcp] [--quick]
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchlib as bl
from launch import Block

HPCC = Path("/usr/bin/hpcc")
RING = [("wall", "wall time"), ("RandomlyOrderedRingLatency_usec", "random ring latency"),
        ("RandomlyOrderedRingBandwidth_GBytes", "random ring bandwidth"),
        ("NaturallyOrderedRingLatency_usec", "natural ring latency"),
        ("NaturallyOrderedRingBandwidth_GBytes", "natural ring bandwidth")]
# summary keys shown, with their unit
FIGURES = [
    ("HPL_Tflops", "HPL, Gflop/s", 1000.0),
    ("StarSTREAM_Triad", "StarSTREAM triad, GB/s", 1.0),
    ("MPIRandomAccess_GUPs", "MPI RandomAccess, GUP/s", 1.0),
    ("StarRandomAccess_GUPs", "StarRandomAccess, GUP/s", 1.0),
    ("PTRANS_GBs", "PTRANS, GB/s", 1.0),
    ("MPIFFT_Gflops", "MPI FFT, Gflop/s", 1.0),
    ("StarFFT_Gflops", "StarFFT, Gflop/s", 1.0),
    ("RandomlyOrderedRingLatency_usec", "random ring latency, µs", 1.0),
    ("RandomlyOrderedRingBandwidth_GBytes", "random ring bandwidth, GB/s", 1.0),
]
FAIL_FLAGS = ("HPL_failure", "MPIRandomAccess_ErrorsFraction", "StarRandomAccess_Errors",
              "SingleRandomAccess_Errors", "MPIRandomAccess_LCG_ErrorsFraction", "PTRANS_residual",
              "MPIFFT_maxErr", "StarFFT_maxErr", "StarSTREAM_Triad")


def grid(r: int) -> tuple[int, int]:
    """P x Q = r with P <= Q as square as possible."""
    p = int(r ** 0.5)
    while r % p:
        p -= 1
    return p, r // p


def hpccinf(n: int, nb: int, ranks: int) -> str:
    p, q = grid(ranks)
    return f"""HPLinpack benchmark input file
Innovative Computing Laboratory, University of Tennessee
HPL.out      output file name (if any)
8            device out (6=stdout,7=stderr,file)
1            # of problems sizes (N)
{n}         Ns
1            # of NBs
{nb}           NBs
0            PMAP process mapping (0=Row-,1=Column-major)
1            # of process grids (P x Q)
{p}            Ps
{q}            Qs
16.0         threshold
1            # of panel fact
2            PFACTs (0=left, 1=Crout, 2=Right)
1            # of recursive stopping criterium
4            NBMINs (>= 1)
1            # of panels in recursion
2            NDIVs
1            # of recursive panel fact.
1            RFACTs (0=left, 1=Crout, 2=Right)
1            # of broadcast
1            BCASTs (0=1rg,1=1rM,2=2rg,3=2rM,4=Lng,5=LnM)
1            # of lookahead depth
1            DEPTHs (>=0)
2            SWAP (0=bin-exch,1=long,2=mix)
64           swapping threshold
0            L1 in (0=transposed,1=no-transposed) form
0            U  in (0=transposed,1=no-transposed) form
1            Equilibration (0=no,1=yes)
8            memory alignment in double (> 0)
##### This line (no. 32) is ignored (it serves as a separator). ######
0                      		Number of additional problem sizes for PTRANS
{n}        	values of N
0                       	number of additional blocking sizes for PTRANS
{nb}       	values of NB
"""


class Result:
    def __init__(self, wall: float, out: Path, rc: int, stdout: str, stderr: str) -> None:
        self.wall = wall
        self.rep = -1           # the repetition it belongs to
        self.rc = rc
        self.stdout = stdout
        self.stderr = stderr
        self.text = out.read_text(errors="replace") if out.exists() else ""
        # HPL's residual check and PTRANS's five timed runs end in PASSED or FAILED;
        # RandomAccess says "Found N errors in M locations (passed)"
        self.verdicts = re.findall(r"\b(PASSED|FAILED)\b", self.text)
        self.ra_errors = sum(int(x) for x in re.findall(r"Found (\d+) errors in", self.text))
        self.summary: dict[str, str] = {}
        m = re.search(r"Begin of Summary section\.(.*?)End of Summary section", self.text, re.S)
        if m:
            for line in m.group(1).splitlines():
                if "=" in line:
                    k, v = line.split("=", 1)
                    self.summary[k.strip()] = v.strip()

    @property
    def complete(self) -> bool:
        return self.rc == 0 and "End of HPC Challenge tests" in self.text and bool(self.summary)

    def verified(self) -> str:
        """PASSED/FAILED lines and the failure flags, as one comparable string."""
        p, f = self.verdicts.count("PASSED"), self.verdicts.count("FAILED")
        flags = []
        if self.summary.get("HPL_failure") not in (None, "0"):
            flags.append(f"HPL_failure={self.summary['HPL_failure']}")
        for k in ("StarRandomAccess_Errors", "SingleRandomAccess_Errors"):
            if self.summary.get(k) not in (None, "0"):
                flags.append(f"{k}={self.summary[k]}")
        return f"{p} PASSED, {f} FAILED, RandomAccess {self.ra_errors} errors" + \
            (f" ({', '.join(flags)})" if flags else "")

    def why(self) -> str:
        tail = (self.stderr.strip() or self.stdout.strip()).splitlines()[-6:]
        return f"exit {self.rc}; " + " | ".join(tail)


def figure(r: Result, key: str) -> float | None:
    if key == "wall":
        return r.wall
    try:
        return float(r.summary[key])
    except (KeyError, ValueError):
        return None


def paired(num: list[Result], den: list[Result], key: str) -> str:
    """num/den of one figure over the repetitions both completed, as median [min–max]."""
    by_rep = {r.rep: figure(r, key) for r in den}
    q = []
    for r in num:
        a, b = figure(r, key), by_rep.get(r.rep)
        if a is not None and b:
            q.append(a / b)
    if not q:
        return "-"
    return f"{statistics.median(q):.3f} [{min(q):.3f}–{max(q):.3f}]"


def run_one(cmd: list[str], env: dict[str, str] | None, work: Path, timeout: float) -> Result:
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, env=env, cwd=work, capture_output=True, text=True, timeout=timeout)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        rc = -1
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        err = (e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")) + \
            f"\ntimed out after {timeout:.0f} s"
    return Result(time.perf_counter() - t0, work / "hpccoutf.txt", rc, out, err)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--n", type=int, default=3000, help="HPL (and PTRANS) matrix order")
    ap.add_argument("--nb", type=int, default=80)
    ap.add_argument("--mem", default="1G", help="memory per compute node")
    ap.add_argument("--kernels", default="cnk,linux", help="lattice kernels to run beside mpiexec")
    ap.add_argument("--mode", choices=("co", "vn"), default="co", help="Lattice's mode (vn: two ranks per node)")
    ap.add_argument("--tcp", action="store_true", help="also run mpiexec over TCP (btl self,tcp)")
    ap.add_argument("--lattice-env", action="append", default=[], metavar="K=V",
                    help="extra --env for the Lattice runs (repeatable)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    ap.add_argument("--keep", action="store_true", help="keep the run directories (printed)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 repeat, 2 ranks, N=500")
    a = ap.parse_args()
    if a.quick:
        a.repeat, a.ranks, a.n = 1, 2, 500
    bl.require_root("hpcc.py")
    bl.require_built(HPCC)
    mpiexec = shutil.which("mpiexec.openmpi") or shutil.which("orterun")
    if not mpiexec:
        sys.exit("hpcc.py: mpiexec.openmpi not found (apt-get install openmpi-bin)")
    kernels = [k for k in a.kernels.split(",") if k]
    configs = ["mpiexec", *kernels, *(["mpiexec-tcp"] if a.tcp else [])]
    bases = ["mpiexec", *(["mpiexec-tcp"] if a.tcp else [])]
    nodes = a.ranks if a.mode == "co" else (a.ranks + 1) // 2
    top = Path(tempfile.mkdtemp(prefix="lattice-bench-hpcc-"))
    os.chmod(top, 0o777)
    results: dict[str, list[Result]] = {c: [] for c in configs}
    doc = bl.ROOT / "docs" / "openmpi.md"
    print(bl.header("hpcc", sys.argv))
    p, q = grid(a.ranks)
    print(f"hpcc {a.ranks} ranks ({p}x{q}), N={a.n}, NB={a.nb}; mpiexec: {mpiexec}; "
          f"Lattice 1x1x{nodes} in {a.mode} mode, {a.mem} per node; docs/openmpi.md {'present' if doc.exists() else 'ABSENT'}",
          flush=True)
    dead: dict[str, str] = {}
    try:
        with Block(f"1x1x{nodes}", nodes, a.mem) as blk:
            for i in range(a.repeat):
                for cfg in bl.rotations(configs, i):
                    if cfg in dead:
                        continue
                    work = top / f"{cfg}-{i + 1}"
                    work.mkdir()
                    os.chmod(work, 0o777)
                    (work / "hpccinf.txt").write_text(hpccinf(a.n, a.nb, a.ranks))
                    if cfg.startswith("mpiexec"):
                        tcp = ["--mca", "pml", "ob1", "--mca", "btl", "self,tcp"] if cfg == "mpiexec-tcp" else []
                        cmd = [mpiexec, "-n", str(a.ranks), "--oversubscribe", "--allow-run-as-root", *tcp, str(HPCC)]
                        r = run_one(cmd, None, work, a.timeout)
                    else:
                        envs = [x for kv in a.lattice_env for x in ("--env", kv)]
                        cmd = [*bl.lattice_cmd(), "run", "--block", "bench", "-n", str(a.ranks), "--kernel", cfg,
                               "--mode", a.mode, "--cwd", str(work), *envs, str(HPCC)]
                        r = run_one(cmd, blk.env, work, a.timeout)
                    if not r.complete:
                        print(f"  run {i + 1}/{a.repeat} {cfg:7s}: FAILED after {r.wall:.1f} s: {r.why()}", flush=True)
                        if not cfg.startswith("mpiexec"):
                            dead[cfg] = r.why()     # do not repeat a start that cannot work
                        continue
                    r.rep = i
                    results[cfg].append(r)
                    print(f"  run {i + 1}/{a.repeat} {cfg:7s}: {r.wall:6.2f} s, {r.verified()}, "
                          f"HPL {float(r.summary.get('HPL_Tflops', 'nan')) * 1000:.2f} Gflop/s", flush=True)
    finally:
        if a.keep:
            print(f"run directories kept in {top}")
        else:
            shutil.rmtree(top, ignore_errors=True)
    print()
    ok = [c for c in configs if results[c]]
    ratios = [(f"{k}/{b}", k, b) for b in bases for k in kernels]
    rows: list[tuple[str, dict[str, list[float]], list[tuple[str, str, str]]]] = [
        ("wall time of the run, s", {c: [r.wall for r in results[c]] for c in ok}, ratios)]
    for key, name, scale in FIGURES:
        data = {c: [float(r.summary[key]) * scale for r in results[c] if key in r.summary] for c in ok}
        if any(data.values()):
            rows.append((name, data, ratios))
    print(bl.table(f"{a.repeat} interleaved runs each, median [min–max]", configs, rows))
    print()
    verdict = {c: sorted({r.verified() for r in results[c]}) for c in ok}
    for c in configs:
        if c in dead:
            print(f"verification {c}: did not run: {dead[c]}")
        elif c in verdict:
            print(f"verification {c}: {' / '.join(verdict[c])} in {len(results[c])} runs")
    for k in kernels:
        for b in bases:
            if k in verdict and b in verdict:
                same = verdict[k] == verdict[b]
                t = statistics.median(r.wall for r in results[k]) / statistics.median(r.wall for r in results[b])
                print(f"{k} vs {b}: same verified results: {'yes' if same else 'NO'}; time ratio {t:.3f}")
    print()
    print("ratios run by run (each Lattice run over the mpiexec run of its repetition), median [min–max]:")
    for k in kernels:
        for b in bases:
            cells = [f"{name} {paired(results[k], results[b], key)}" for key, name in RING]
            print(f"  {k}/{b}: " + "; ".join(cells))
    return 0 if not dead and all(results[c] for c in configs) else 1


if __name__ == "__main__":
    sys.exit(main())
