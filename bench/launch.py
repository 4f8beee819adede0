#!/usr/bin/env python3
"""MPI launch time: `lattice run` on a booted block vs `mpiexec.hydra`.

The job is bench/launch_hello.c (MPICH 4.0.2, ch4:ucx; one dynamic
executable for both sides): MPI_Init, one allreduce, MPI_Finalize.  Timed
is the wall time of the whole command, from its start to its exit:
  hydra   mpiexec.hydra -n N launch_hello               (all ranks on this host)
  cnk     lattice run --block B -n N --kernel cnk   ... launch_hello  (Lattice's defaults)
  cnk-copy  the same with --env LATTICE_LIBCACHE=0: libraries copied into each
          rank's big memory instead of mapped from the host's library cache
          (compute/cnk/README.md "Library cache"); ask for it with --kernels
  linux   lattice run --block B -n N --kernel linux ... launch_hello   (in the node sandbox: the default)
  linux-preload  the same with --no-sandbox: the LD_PRELOAD client; ask for it with --kernels
Lattice runs with its defaults and no flag (issue 12: the defaults must be
fast): the progress thread only on a node with a real core to spare, huge
pages sized to the node; --no-progress and --keep-pages give the old forced
settings for comparison.  The block is booted once before any run
(boot time is reported separately) and stays up; one untimed run of each
configuration warms the page cache and Lattice's warm server; then sizes and
configurations are interleaved, each configuration going first in turn.  The
goal (no slower than Hydra) is judged on the ratio round by round (the runs
of a round are back to back, so a host whose speed drifts moves them together).

launch_hello's allreduce also says where the time went: the table of phases
gives, from the command's start, when the first and the last rank entered
main() and when the last MPI_Init returned (the rest is the allreduce,
MPI_Finalize and the launcher's shutdown).  The memory table gives how far
MemAvailable fell below its value at the command's start (sampled every 20
ms while it runs): the host memory a job of that size costs.

The machine (default 8x8x4 = 256 compute nodes, psets of 64 so 4 I/O nodes,
128 MiB and 2 cores per node, --mode co: one rank per node) holds the biggest
size.  By default 128 MiB nodes take 2 MiB surplus huge pages as each rank
starts; 256 ranks x 128 MiB (32 GiB) is more than this host holds, so that
size runs with pages taken at first touch (--env LATTICE_BIGMEM_RESERVE=0:
without it the run refuses nodes that ask more memory than the host has) and
one warning (docs/architecture.md "Huge pages", "Capacity of a host").  REFERENCE.md
section 7 measured Hydra here at 0.8 s (16), 3.8 s (64), 18.6 s (256).

    .venv/bin/python bench/launch.py [--repeat 3] [--sizes 16,64,256] [--quick]
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import TracebackType

import benchlib as bl

HELLO = bl.BENCH / "launch_hello"
NO_PROGRESS = "MPIR_CVAR_ASYNC_PROGRESS=0"
# Under cnk-copy every rank gets its own copy of each shared library in its
# big memory (cnk fills a file mapping with shipped preads): MemAvailable drops
# by about 100 MiB per rank of launch_hello (measured with 64 ranks: 6.4 GiB).
# With the library cache the ranks of a pset share one copy (MemAvailable fell
# by about 20 MiB per rank: big memory the ranks touch, thread stacks, UCX).
# Linux-mode and Hydra ranks share the page cache.  A cnk size that would leave
# less than MARGIN_MIB is skipped rather than run into the OOM killer of a
# shared host.
CNK_RANK_MIB = {"cnk": 20, "cnk-copy": 100}
MARGIN_MIB = 3072
COPY_ENV = "LATTICE_LIBCACHE=0"
FIRST_TOUCH = "LATTICE_BIGMEM_RESERVE=0"


def mem_available_mib() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) // 1024
    return 0


def size_mib(text: str) -> int:
    """lattice init's --memory (512M, 2G, 1T) in MiB."""
    units = {"K": -10, "M": 0, "G": 10, "T": 20}
    n, unit = int(text[:-1]), text[-1].upper()
    return n << units[unit] if units[unit] >= 0 else n >> -units[unit]


class Block:
    """A Lattice machine in a temporary LATTICE_HOME with one block, `bench`,
    over all of it, booted for the duration of a `with` and freed after."""

    def __init__(self, shape: str, pset_size: int, memory: str, cores: int = 2) -> None:
        self.shape = shape
        self.pset_size = pset_size
        self.memory = memory
        self.cores = cores
        self.home = Path(tempfile.mkdtemp(prefix="lattice-bench-mpi-"))
        self.env = dict(os.environ, LATTICE_HOME=str(self.home), PYTHONPATH=str(bl.ROOT / "service"))
        self.booted = False
        self.boot_s = 0.0

    def lattice(self, *args: str, check: bool = True, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
        p = subprocess.run([*bl.lattice_cmd(), *args], env=self.env, capture_output=True, text=True,
                           timeout=timeout)
        if check and p.returncode != 0:
            raise RuntimeError(f"lattice {' '.join(args)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
        return p

    def __enter__(self) -> "Block":
        self.lattice("init", "--shape", self.shape, "--pset-size", str(self.pset_size),
                     "--memory", self.memory, "--cores", str(self.cores))
        self.lattice("block", "create", "bench", "--shape", self.shape)
        t0 = time.perf_counter()
        self.booted = True
        self.lattice("boot", "bench")
        self.boot_s = time.perf_counter() - t0
        return self

    def run_cmd(self, n: int, exe: Path, *args: str, kernel: str = "cnk", opts: tuple[str, ...] = ()) -> list[str]:
        """The `lattice run` command line of a job on the block (to run with self.env)."""
        mode = ("--no-sandbox",) if kernel == "linux-preload" else ()
        return [*bl.lattice_cmd(), "run", "--block", "bench", "-n", str(n), "--kernel", kernel.removesuffix("-preload"),
                *mode, *opts, str(exe), *args]

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.booted:
            self.lattice("free", "bench", check=False)
        shutil.rmtree(self.home, ignore_errors=True)


class MemDrop:
    """How far MemAvailable falls below its starting value while a `with` runs."""

    def __init__(self) -> None:
        self.start = self.low = mem_available_mib()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)

    def sample(self) -> None:
        while not self.done.wait(0.02):
            self.low = min(self.low, mem_available_mib())

    def __enter__(self) -> "MemDrop":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join()

    @property
    def mib(self) -> int:
        return self.start - self.low


def timed(cmd: list[str], env: dict[str, str] | None, timeout: float) -> tuple[float, float, str, str, int, int]:
    """Run cmd; (wall seconds, start in epoch seconds, stdout, stderr, exit
    status, MiB MemAvailable fell by)."""
    start = time.time()
    t0 = time.perf_counter()
    with MemDrop() as mem:
        try:
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
            out, err, rc = p.stdout, p.stderr, p.returncode
        except subprocess.TimeoutExpired as e:
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
            rc = -1
    return time.perf_counter() - t0, start, out, err, rc, mem.mib


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sizes", default="16,64,256", help="rank counts")
    ap.add_argument("--kernels", default="cnk,linux",
                    help="lattice configurations to run beside hydra: cnk, cnk-copy, linux, linux-preload")
    ap.add_argument("--shape", default="8x8x4", help="the machine and its one block")
    ap.add_argument("--pset-size", type=int, default=64)
    ap.add_argument("--memory", default="128M", help="per compute node")
    ap.add_argument("--mode", default="co", choices=("co", "vn"))
    ap.add_argument("--no-progress", action="store_true",
                    help="force MPIR_CVAR_ASYNC_PROGRESS=0 for Lattice (default: Lattice's own choice, "
                         "on only for a node with a core to spare)")
    ap.add_argument("--keep-pages", action="store_true",
                    help="--hugepages keep for Lattice (default: Lattice's default, huge pages sized to the node)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 repeat, 16 ranks, a 4x4x1 machine")
    a = ap.parse_args()
    if a.quick:
        a.repeat, a.sizes, a.shape, a.pset_size = 1, "16", "4x4x1", 8
    bl.require_root("launch.py")
    bl.require_built(HELLO)
    hydra = shutil.which("mpiexec.hydra")
    if not hydra:
        sys.exit("launch.py: mpiexec.hydra not found (apt-get install mpich)")
    sizes = [int(s) for s in a.sizes.split(",") if s]
    kernels = [k for k in a.kernels.split(",") if k]
    configs = ["hydra", *kernels]
    opts: tuple[str, ...] = ("--mode", a.mode)
    if a.no_progress:
        opts += ("--env", NO_PROGRESS)
    if a.keep_pages:
        opts += ("--hugepages", "keep")
    walls: dict[int, dict[str, list[float]]] = {n: {c: [] for c in configs} for n in sizes}
    rounds: dict[int, list[dict[str, float]]] = {n: [] for n in sizes}     # each round's walls, for pairs
    phases: dict[tuple[int, str], dict[str, list[float]]] = {}
    drops: dict[int, dict[str, list[float]]] = {n: {c: [] for c in configs} for n in sizes}
    failures: list[str] = []
    print(bl.header("launch", sys.argv))
    print(f"machine {a.shape}, psets of {a.pset_size}, {a.memory} per node, --mode {a.mode}, "
          f"lattice run {' '.join(opts)}; hydra: {hydra}", flush=True)
    with Block(a.shape, a.pset_size, a.memory) as blk:
        print(f"boot of the block: {blk.boot_s:.2f} s", flush=True)
        for cfg in configs:     # one untimed run each first: page cache, Lattice's warm server
            cmd = ([hydra, "-n", str(sizes[0]), str(HELLO)] if cfg == "hydra" else
                   blk.run_cmd(sizes[0], HELLO, kernel=cfg.removesuffix("-copy"), opts=opts))
            timed(cmd, None if cfg == "hydra" else blk.env, a.timeout)
        for i in range(a.repeat):
            for n in sizes:
                rounds[n].append({})
                for cfg in bl.rotations(configs, i):
                    need = n * CNK_RANK_MIB.get(cfg, 0) + MARGIN_MIB
                    if cfg in CNK_RANK_MIB and mem_available_mib() < need:
                        failures.append(f"{n} ranks {cfg} run {i + 1}: skipped: needs ~{need} MiB available "
                                        f"({n} x {CNK_RANK_MIB[cfg]} MiB per rank + "
                                        f"{MARGIN_MIB} MiB margin), the host has {mem_available_mib()} MiB")
                        print(f"  run {i + 1}/{a.repeat} {n:4d} ranks {cfg:6s}: skipped (memory: needs ~{need} MiB, "
                              f"{mem_available_mib()} MiB available)", flush=True)
                        continue
                    if cfg == "hydra":
                        cmd = [hydra, "-n", str(n), "-env", *NO_PROGRESS.split("="), str(HELLO)]
                        wall, start, out, err, rc, drop = timed(cmd, None, a.timeout)
                    else:
                        copy = ("--env", COPY_ENV) if cfg == "cnk-copy" else ()
                        # nodes asking more than the host has: the run refuses them unless
                        # their pages are taken at first touch (docs/architecture.md "Capacity of a host")
                        if n * size_mib(a.memory) > mem_available_mib():
                            copy += ("--env", FIRST_TOUCH)
                        cmd = blk.run_cmd(n, HELLO, kernel=cfg.removesuffix("-copy"), opts=opts + copy)
                        wall, start, out, err, rc, drop = timed(cmd, blk.env, a.timeout)
                    kv = {}
                    for line in out.splitlines():
                        if line.startswith("launch_hello:"):
                            kv = bl.kv_line(line)
                    if rc != 0 or kv.get("allreduce") != "ok":
                        why = "timed out" if rc == -1 else f"exit {rc}"
                        failures.append(f"{n} ranks {cfg} run {i + 1}: {why} after {wall:.1f} s: "
                                        f"{(err or out).strip().splitlines()[-3:]}")
                        print(f"  run {i + 1}/{a.repeat} {n:4d} ranks {cfg:6s}: FAILED ({why}, {wall:.1f} s)",
                              flush=True)
                        continue
                    walls[n][cfg].append(wall)
                    rounds[n][-1][cfg] = wall
                    drops[n][cfg].append(float(drop))
                    ph = phases.setdefault((n, cfg), {"first main": [], "last main": [], "MPI_Init done": []})
                    ph["first main"].append(float(kv["first_main"]) - start)
                    ph["last main"].append(float(kv["last_main"]) - start)
                    ph["MPI_Init done"].append(float(kv["last_init"]) - start)
                    print(f"  run {i + 1}/{a.repeat} {n:4d} ranks {cfg:6s}: {wall:7.2f} s "
                          f"(mains {ph['first main'][-1]:.2f}–{ph['last main'][-1]:.2f} s, "
                          f"MPI_Init done {ph['MPI_Init done'][-1]:.2f} s, MemAvailable -{drop} MiB)", flush=True)
        boot = blk.boot_s
    ratios = [(f"{k}/hydra", k, "hydra") for k in kernels]
    print()
    print(f"boot of the {a.shape} block (once, before the runs): {boot:.2f} s")
    print()
    print(bl.table(f"{a.repeat} interleaved runs each, wall time of the launcher in s, median [min–max]",
                   configs, [(f"{n} ranks", walls[n], ratios) for n in sizes]))
    print()
    rows: list[tuple[str, dict[str, list[float]], list[tuple[str, str, str]]]] = []
    for n in sizes:
        for phase in ("first main", "last main", "MPI_Init done"):
            data = {c: phases[(n, c)][phase] for c in configs if (n, c) in phases}
            rows.append((f"{n} ranks: {phase}", data, []))
    print(bl.table("where the time went: s from the command's start, median [min–max]", configs, rows))
    print()
    print(bl.table("host memory: MiB MemAvailable fell by during the run, median [min–max]", configs,
                   [(f"{n} ranks", drops[n], []) for n in sizes]))
    print()
    print("wall time over Hydra's, round by round (the runs of a round are back to back), median [min–max]")
    print()
    print("| measure | " + " | ".join(f"{k}/hydra" for k in kernels) + " |")
    print("| --- | " + " | ".join("---" for _ in kernels) + " |")
    paired = {(n, k): [r[k] / r["hydra"] for r in rounds[n] if k in r and "hydra" in r] for n in sizes for k in kernels}
    for n in sizes:
        cells = [f"{statistics.median(v):.3f} [{min(v):.3f}–{max(v):.3f}]" if (v := paired[(n, k)]) else "-"
                 for k in kernels]
        print(f"| {n} ranks | " + " | ".join(cells) + " |")
    print()
    for n in sizes:
        for k in kernels:
            if paired[(n, k)]:
                med = statistics.median(paired[(n, k)])
                print(f"goal {n} ranks {k}: {'met' if med <= 1.0 else 'NOT met'} (no slower than hydra: "
                      f"{med:.3f} round by round)")
    if failures:
        print("\nfailed runs:")
        for f in failures:
            print(f"  {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
