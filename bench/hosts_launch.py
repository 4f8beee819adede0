#!/usr/bin/env python3
"""MPI launch across simulated hosts: Lattice over ssh and Slurm vs Hydra and srun.

The testbed (scripts/testbed.sh: hosts h1..h4 as network namespaces with
their own sshd and slurmd) is brought up for the run if it is not up, and
taken down after.  The job is bench/launch_hello.c (MPICH 4.0.2: MPI_Init,
one allreduce, MPI_Finalize), RPH ranks on each of H hosts (default 2 and
4 hosts, 2 ranks a host), one rank a compute node, psets of RPH nodes so each
host runs one pset.  Timed is the whole command, start to exit:

  hydra-ssh      mpiexec.hydra -launcher ssh -hosts h1,..,hH -ppn RPH (proxies over ssh each time)
  lattice-ssh    lattice run --block B (ssh placement; the block booted once before, as a booted
                 Blue Gene partition is: the daemons stay up across jobs)
  lattice-ssh-cold  lattice run (ssh placement) that boots its block, runs, frees it
  srun-pmi2      salloc -N H --ntasks-per-node=RPH srun --mpi=pmi2 -n R (an allocation and a step each time)
  lattice-slurm  salloc -N H --ntasks-per-node=RPH lattice run -n R (slurm placement: boots with one
                 srun, runs, frees)

Configurations and sizes are interleaved (each goes first in turn); the table
gives median [min-max] seconds and ratios to the baselines.

    .venv/bin/python bench/hosts_launch.py [--hosts 2,4] [--ranks-per-host 2] [--repeat 5]
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchlib as bl

TESTBED = bl.ROOT / "scripts" / "testbed.sh"
STATE = Path("/run/lattice-testbed")
HELLO = bl.BENCH / "launch_hello"
CONFIGS = ["hydra-ssh", "lattice-ssh", "lattice-ssh-cold", "srun-pmi2", "lattice-slurm"]


def source_env(path: Path) -> dict[str, str]:
    out = subprocess.run(["bash", "-c", '. "$1" && env -0', "-", str(path)], check=True,
                         capture_output=True, text=True).stdout
    return dict(kv.split("=", 1) for kv in out.split("\0") if "=" in kv)


class Testbed:
    """The testbed for a `with`: brought up (max_hosts hosts) unless it is up,
    with a scratch directory; afterwards every ssh-placed machine registered
    in `homes` is freed, the directory removed, and what was brought up taken
    down."""

    def __init__(self, max_hosts: int, prefix: str) -> None:
        self.max_hosts, self.prefix = max_hosts, prefix
        self.homes: dict[tuple[str, int], dict[str, str]] = {}     # (placement, hosts) -> its environment

    def __enter__(self) -> "Testbed":
        self.brought_up = subprocess.run([str(TESTBED), "status"], capture_output=True).returncode != 0
        if self.brought_up:
            subprocess.run([str(TESTBED), "up", str(self.max_hosts)], check=True, capture_output=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=self.prefix))
        self.env = source_env(STATE / "testbed.env")
        self.hosts = self.env["LATTICE_TESTBED_HOSTS"].split()
        return self

    def __exit__(self, *exc: object) -> None:
        for (kind, _), env in self.homes.items():
            if kind == "ssh":
                subprocess.run([*bl.lattice_cmd(), "free", "--all"], env=env, capture_output=True)
        shutil.rmtree(self.tmp, ignore_errors=True)
        if self.brought_up:
            subprocess.run([str(TESTBED), "down"], capture_output=True)


def timed(cmd: list[str], env: dict[str, str], expect: str) -> float:
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)
    dt = time.monotonic() - t0
    if p.returncode != 0 or expect not in p.stdout:
        raise RuntimeError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return dt


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", default="2,4")
    ap.add_argument("--ranks-per-host", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    bl.require_root("hosts_launch")
    bl.require_built(HELLO)
    host_counts = [int(h) for h in args.hosts.split(",")]
    rph = args.ranks_per_host
    print(bl.header("hosts_launch", sys.argv))
    with Testbed(max(host_counts), "lattice-hosts-bench-") as bed:
        tb, tmp, all_hosts, homes = bed.env, bed.tmp, bed.hosts, bed.homes
        ssh_exec = tmp / "ssh"     # hydra's -launcher-exec takes one program: ssh with the testbed's config
        ssh_exec.write_text(f"#!/bin/sh\nexec ssh -F {tb['LATTICE_TESTBED_SSH_CONFIG']} \"$@\"\n")
        ssh_exec.chmod(0o755)
        for h in host_counts:
            hostfile = tmp / f"hosts{h}"
            hostfile.write_text("\n".join(all_hosts[:h]) + "\n")
            shape = f"{rph}x1x{h}"
            for kind in ("ssh", "slurm"):
                env = dict(tb, LATTICE_HOME=str(tmp / f"{kind}{h}"), PYTHONPATH=str(bl.ROOT / "service"))
                place = (["--placement", "ssh", "--hostfile", str(hostfile), "--ssh-command",
                          tb["LATTICE_TESTBED_SSH"]] if kind == "ssh" else ["--placement", "slurm"])
                subprocess.run([*bl.lattice_cmd(), "init", "--shape", shape, "--pset-size", str(rph),
                                "--memory", "128M", *place], env=env, check=True, capture_output=True)
                homes[kind, h] = env
            env = homes["ssh", h]
            subprocess.run([*bl.lattice_cmd(), "block", "create", "B", "--shape", shape], env=env, check=True,
                           capture_output=True)
            subprocess.run([*bl.lattice_cmd(), "boot", "B"], env=env, check=True, capture_output=True)
        data: dict[int, dict[str, list[float]]] = {h: {c: [] for c in CONFIGS} for h in host_counts}
        for i in range(args.repeat):
            for h in bl.rotations(host_counts, i):
                n = h * rph
                names = ",".join(all_hosts[:h])
                expect = f"launch_hello: ranks={n} "
                cmds = {
                    "hydra-ssh": (["mpiexec.hydra", "-launcher", "ssh", "-launcher-exec", str(ssh_exec), "-iface", "ltb0",
                                   "-hosts", names, "-ppn", str(rph), "-n", str(n), str(HELLO)], tb),
                    "lattice-ssh": ([*bl.lattice_cmd(), "run", "--block", "B", "-n", str(n), str(HELLO)],
                                    homes["ssh", h]),
                    "lattice-ssh-cold": ([*bl.lattice_cmd(), "run", "-n", str(n), str(HELLO)], homes["ssh", h]),
                    "srun-pmi2": (["salloc", "-N", str(h), f"--ntasks-per-node={rph}", "srun", "--mpi=pmi2",
                                   "-n", str(n), str(HELLO)], tb),
                    "lattice-slurm": (["salloc", "-N", str(h), f"--ntasks-per-node={rph}", *bl.lattice_cmd(), "run",
                                       "-n", str(n), str(HELLO)], homes["slurm", h]),
                }
                for c in bl.rotations(CONFIGS, i):
                    if c == "lattice-ssh-cold":
                        subprocess.run([*bl.lattice_cmd(), "free", "B"], env=homes["ssh", h], capture_output=True)
                    cmd, env = cmds[c]
                    data[h][c].append(timed(cmd, env, expect))
                    if c == "lattice-ssh-cold":
                        subprocess.run([*bl.lattice_cmd(), "boot", "B"], env=homes["ssh", h], check=True,
                                       capture_output=True)
                print(f"  round {i + 1}, {h} hosts: " + ", ".join(f"{c} {data[h][c][-1]:.2f} s" for c in CONFIGS),
                      flush=True)
        rows = [(f"{h} hosts, {h * rph} ranks", data[h],
                 [("lattice-ssh/hydra", "lattice-ssh", "hydra-ssh"),
                  ("cold/hydra", "lattice-ssh-cold", "hydra-ssh"),
                  ("lattice-slurm/srun", "lattice-slurm", "srun-pmi2")]) for h in host_counts]
        print()
        print(bl.table("Launch of launch_hello across testbed hosts (s)", CONFIGS, rows))
    return 0

if __name__ == "__main__":
    sys.exit(main())
