#!/usr/bin/env python3
"""MPI_Bcast and MPI_Allreduce: Lattice's torus collectives vs MPICH's own,
under Lattice and under mpiexec.hydra, in one run.

The job is build/bench/coll_bench (MPICH 4.0.2, ch4:ucx; one dynamic
executable for all): for each message size it times the collective over
MPI_COMM_WORLD (the slowest rank's mean of up to --max-iters calls, a
byte budget per size) and rank 0 prints it.  Configurations, interleaved round by round
(each going first in turn):
  hydra    mpiexec.hydra -n N coll_bench ...            (MPICH's algorithms)
  mpi      lattice run -n N --collectives mpi ...       (the same, under Lattice)
  torus    lattice run -n N --collectives torus ...     (libtorus preloaded:
           the pipelined rectangle broadcast, host-first reduction trees)
Sizes: bcast 8 B .. 16 MiB and allreduce 8 B .. 1 MiB (powers of 8 and the
ends), at 16, 64 and 256 ranks: one machine of 4x4x4 nodes (4 cores, 128 MiB
each; psets of 16) and its one block booted once; 16 ranks fill the z=0
plane (a 4x4 torus), 64 the whole 4x4x4 torus one per node (coprocessor
mode), 256 every core (virtual node mode, a 4x4x4x4 box).  At 256 ranks a
rank has 32 MiB, so sizes stop at 4 MiB there.  --quick: 16 ranks, a few
sizes, one round.

--hosts H: the same across H hosts of the testbed (scripts/testbed.sh; used
only while `scripts/testbed.sh status` says it is up: this driver never
brings it up or down): a 4x4xH machine by ssh placement, psets of 16 (one
z plane, one host each), booted once; ranks mapped ZXYT so that even 16
ranks span every host (a 4x1xH box, z being the host); hydra is
`mpiexec.hydra -launcher ssh -hosts h1,..,hH -ppn N/H` over the testbed's ssh.

    .venv/bin/python bench/collectives.py [--repeat 3] [--ranks 16,64,256] [--kernel cnk|linux] [--quick]
                                          [--hosts H]
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

import benchlib as bl
from launch import Block

PROG = bl.BUILD / "bench" / "coll_bench"
LIB = bl.BUILD / "lib" / "libtorus.so"
CONFIGS = ["hydra", "mpi", "torus"]
BCAST = [8, 512, 4 << 10, 32 << 10, 256 << 10, 2 << 20, 16 << 20]
ALLRED = [8, 512, 32 << 10, 256 << 10, 1 << 20]
QUICK_BCAST = [8, 32 << 10, 1 << 20]
QUICK_ALLRED = [8, 32 << 10]
BUDGET = 64 << 20           # bytes moved per size and run (iterations = BUDGET / (size * ranks), 1..--max-iters)
MAX_AT_256 = 4 << 20


TESTBED = bl.ROOT / "scripts" / "testbed.sh"
TESTBED_ENV = Path("/run/lattice-testbed/testbed.env")


class HostsBlock:
    """A 4x4xH machine over the testbed's first H hosts (ssh placement) with
    one block, `bench`, booted for a `with` and freed after; the testbed
    itself is left as it was."""

    def __init__(self, hosts: int) -> None:
        if subprocess.run([str(TESTBED), "status"], capture_output=True).returncode != 0:
            sys.exit("collectives.py: --hosts needs the testbed up (scripts/testbed.sh status); "
                     "it is shared: this driver never brings it up")
        out = subprocess.run(["bash", "-c", '. "$1" && env -0', "-", str(TESTBED_ENV)], check=True,
                             capture_output=True, text=True).stdout
        self.tb = dict(kv.split("=", 1) for kv in out.split("\0") if "=" in kv)
        self.hosts = self.tb["LATTICE_TESTBED_HOSTS"].split()[:hosts]
        if len(self.hosts) < hosts:
            sys.exit(f"collectives.py: the testbed has {len(self.hosts)} hosts, not {hosts}")
        self.tmp = Path(tempfile.mkdtemp(prefix="lattice-bench-coll-"))
        self.env = dict(self.tb, LATTICE_HOME=str(self.tmp / "home"), PYTHONPATH=str(bl.ROOT / "service"))
        self.shape = f"4x4x{hosts}"
        self.booted = False
        self.boot_s = 0.0
        self.ssh = self.tmp / "ssh"     # hydra's -launcher-exec takes one program
        self.ssh.write_text(f"#!/bin/sh\nexec ssh -F {self.tb['LATTICE_TESTBED_SSH_CONFIG']} \"$@\"\n")
        self.ssh.chmod(0o755)

    def lattice(self, *args: str) -> None:
        subprocess.run([*bl.lattice_cmd(), *args], env=self.env, check=True, capture_output=True)

    def __enter__(self) -> "HostsBlock":
        hostfile = self.tmp / "hosts"
        hostfile.write_text("\n".join(self.hosts) + "\n")
        self.lattice("init", "--shape", self.shape, "--pset-size", "16", "--memory", "128M", "--cores", "4",
                     "--placement", "ssh", "--hostfile", str(hostfile), "--ssh-command", self.tb["LATTICE_TESTBED_SSH"])
        self.lattice("block", "create", "bench", "--shape", self.shape)
        t0 = time.perf_counter()
        self.booted = True
        self.lattice("boot", "bench")
        self.boot_s = time.perf_counter() - t0
        return self

    def run_cmd(self, n: int, exe: Path, *args: str, kernel: str = "cnk", opts: tuple[str, ...] = ()) -> list[str]:
        return [*bl.lattice_cmd(), "run", "--block", "bench", "-n", str(n), "--kernel", kernel, "--mapping", "ZXYT",
                *opts, str(exe), *args]

    def hydra_cmd(self, n: int, args: list[str]) -> list[str]:
        return ["mpiexec.hydra", "-launcher", "ssh", "-launcher-exec", str(self.ssh), "-iface", "ltb0",
                "-hosts", ",".join(self.hosts), "-ppn", str(max(1, n // len(self.hosts))), "-n", str(n),
                str(PROG), *args]

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self.booted:
            subprocess.run([*bl.lattice_cmd(), "free", "--all"], env=self.env, capture_output=True)
        shutil.rmtree(self.tmp, ignore_errors=True)


def size_name(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n >> 10} KiB" if n >= 1024 else f"{n} B"


def parse(out: str) -> dict[int, float]:
    """size -> µs per call from coll_bench's lines."""
    res: dict[int, float] = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) == 4 and f[1].isdigit():
            res[int(f[1])] = float(f[3])
    return res


def command(cfg: str, blk: Block | HostsBlock, n: int, kernel: str,
            args: list[str]) -> tuple[list[str], dict[str, str] | None]:
    if cfg == "hydra" and isinstance(blk, HostsBlock):
        return blk.hydra_cmd(n, args), blk.tb
    if cfg == "hydra":
        hydra = shutil.which("mpiexec.hydra") or "mpiexec.hydra"
        return [hydra, "-n", str(n), str(PROG), *args], None
    opts = ["--collectives", cfg]
    if n > 64:
        opts += ["--mode", "vn"]
    return blk.run_cmd(n, PROG, *args, kernel=kernel, opts=tuple(opts)), blk.env


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--ranks", default="16,64,256")
    ap.add_argument("--ops", default="bcast,allreduce")
    ap.add_argument("--kernel", choices=("cnk", "linux"), default="cnk")
    ap.add_argument("--max-iters", type=int, default=50, help="calls per size and run at most")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    ap.add_argument("--quick", action="store_true", help="16 ranks, a few sizes, one round")
    ap.add_argument("--hosts", type=int, default=0, help="across this many testbed hosts (2-4; the testbed must be up)")
    a = ap.parse_args()
    ranks = [16] if a.quick else [int(r) for r in a.ranks.split(",") if r]
    if a.quick:
        a.repeat = 1
    bl.require_root("collectives.py")
    bl.require_built(PROG, LIB)
    if not shutil.which("mpiexec.hydra"):
        sys.exit("collectives.py: mpiexec.hydra not found (apt-get install mpich)")
    data: dict[tuple[str, int, int], dict[str, list[float]]] = {}
    failures: list[str] = []
    print(bl.header("collectives", sys.argv))
    with (HostsBlock(a.hosts) if a.hosts else Block("4x4x4", 16, "128M", cores=4)) as blk:
        where = f"{a.hosts} testbed hosts by ssh" if a.hosts else "this host"
        print(f"machine {'4x4x' + str(a.hosts) if a.hosts else '4x4x4'} on {where}, psets of 16, 128M and 4 cores "
              f"per node, kernel {a.kernel}; boot {blk.boot_s:.2f} s", flush=True)
        for i in range(a.repeat):
            for n in ranks:
                for op in a.ops.split(","):
                    sizes = (QUICK_BCAST if a.quick else BCAST) if op == "bcast" else \
                            (QUICK_ALLRED if a.quick else ALLRED)
                    sizes = [s for s in sizes if n <= 64 or s <= MAX_AT_256]
                    args = [op, str(BUDGET), str(a.max_iters), *map(str, sizes)]
                    for cfg in bl.rotations(CONFIGS, i):
                        cmd, env = command(cfg, blk, n, a.kernel, args)
                        try:
                            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.timeout)
                            out, rc, err = p.stdout, p.returncode, p.stderr
                        except subprocess.TimeoutExpired:
                            out, rc, err = "", -1, f"timed out after {a.timeout:.0f} s"
                        res = parse(out)
                        if rc != 0 or set(res) != set(sizes):
                            failures.append(f"{op} {n} ranks {cfg} round {i + 1}: exit {rc}: "
                                            f"{err.strip().splitlines()[-3:]}")
                            print(f"  round {i + 1} {op} {n:3d} ranks {cfg:5s}: FAILED (exit {rc})", flush=True)
                            continue
                        for s, us in res.items():
                            data.setdefault((op, n, s), {c: [] for c in CONFIGS})[cfg].append(us)
                        print(f"  round {i + 1} {op} {n:3d} ranks {cfg:5s}: "
                              + ", ".join(f"{size_name(s)} {us:.0f} µs" for s, us in sorted(res.items())), flush=True)
    ratios = [("torus/hydra", "torus", "hydra"), ("mpi/hydra", "mpi", "hydra"), ("torus/mpi", "torus", "mpi")]
    for op in a.ops.split(","):
        rows = [(f"{size_name(s)} @ {n}", v, ratios) for (o, n, s), v in sorted(data.items()) if o == op]
        if rows:
            print()
            print(bl.table(f"{op}: {a.repeat} interleaved round(s), µs per call (slowest rank), median [min–max]",
                           CONFIGS, rows))
    if failures:
        print("\nfailed runs:")
        for f in failures:
            print(f"  {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
