#!/usr/bin/env python3
"""Cold starts across simulated hosts: a `lattice run` that boots its block, runs and frees it,
against Hydra over ssh and srun, on the testbed (scripts/testbed.sh: hosts h1..h4 as network
namespaces with their own sshd and slurmd).

The job is bench/launch_hello.c (MPICH: MPI_Init, one allreduce, MPI_Finalize), RPH ranks on each of
H hosts, one rank a compute node, one pset of RPH nodes a host.  Timed is the whole command, start to
exit:

  lattice-cold      lattice run -n R (ssh placement; boots its own block, runs, frees it): agents
                    started as a tree (lattice.nodes.agenttree), the service node's ssh connections
                    shared and kept (lattice.nodes.placement.ssh_sharing)
  lattice-cold-1by1 the same with LATTICE_SSH_PERSIST=0: a new ssh connection to each host each time
  lattice-cold-nocache the same as lattice-cold with the machine's library caches on the hosts removed
                    before the run (untimed): what every cold run paid while the cache was the ciod's
                    and went with the block (ionode/ciod/libcache.c); lattice-cold finds the libraries
                    the previous run of the same user fetched
  hydra-ssh         mpiexec.hydra -launcher ssh -hosts h1,..,hH -ppn RPH (a new ssh connection each time)
  hydra-ssh-mux     the same, its ssh sharing connections as Lattice's does (ControlMaster, ControlPersist):
                    the fair comparison for lattice-cold
  srun-pmi2         salloc -N H --ntasks-per-node=RPH srun --mpi=pmi2 -n R

Configurations are interleaved (each goes first in turn) and sizes alternate; the table gives
median [min-max] seconds and the ratios of medians; below it, the median [min-max] of each round's
own ratio (the two commands of a round ran under the same load).  The testbed is brought up if it is
down (and taken down after); if it is up it is used as it is.

    .venv/bin/python bench/coldstart.py [--hosts 2,4] [--ranks-per-host 4] [--repeat 7]

With --fanouts 1,2,4 it measures the agents' tree instead: `lattice boot B` then `lattice free B` of a
block on all --hosts (the largest) for each fan-out (machine.toml [placement] fanout), every ssh
connection new (LATTICE_SSH_PERSIST=0), interleaved; the boot's time against the tree's depth gives the
cost of a hop (docs/scaling.md).
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import benchlib as bl
from hosts_launch import HELLO, Testbed, timed

CONFIGS = ["lattice-cold", "lattice-cold-1by1", "lattice-cold-nocache", "hydra-ssh", "hydra-ssh-mux", "srun-pmi2"]
PAIRS = [("cold/nocache", "lattice-cold", "lattice-cold-nocache"), ("cold/hydra", "lattice-cold", "hydra-ssh"), ("cold/hydra-mux", "lattice-cold", "hydra-ssh-mux"),
         ("cold/srun", "lattice-cold", "srun-pmi2"), ("1by1/hydra", "lattice-cold-1by1", "hydra-ssh")]


def libcaches(home: str) -> list[Path]:
    """The library caches of the machine at home on the testbed's hosts (one /dev/shm for all):
    protocol/lattice/libcache_name.h's key of its sockets' runtime directory, every user."""
    from lattice import safepath
    h = 14695981039346656037
    for c in safepath.runtime_dir(home).encode():
        h = ((h ^ c) * 1099511628211) % 2**64
    key = (h ^ (h >> 32)) & 0xFFFFFFFF or 1
    return list(Path("/dev/shm").glob(f"lattice-libcache-m{key:08x}-*"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", default="2,4")
    ap.add_argument("--ranks-per-host", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--fanouts", help="measure boots by the agents' fan-out (e.g. 1,2,4) instead")
    args = ap.parse_args()
    if args.fanouts:
        return tree(args)
    bl.require_root("coldstart")
    bl.require_built(HELLO)
    host_counts = [int(h) for h in args.hosts.split(",")]
    rph = args.ranks_per_host
    print(bl.header("coldstart", sys.argv))
    with Testbed(max(host_counts), "lattice-coldstart-") as bed:
        tb, tmp, all_hosts = bed.env, bed.tmp, bed.hosts
        config = tb["LATTICE_TESTBED_SSH_CONFIG"]
        mux = tmp / "mux"
        mux.mkdir(mode=0o700)
        for name, extra in (("ssh", ""), ("ssh-mux", f" -o ControlMaster=auto -o ControlPath={mux}/%C "
                                                     "-o ControlPersist=120")):
            f = tmp / name      # hydra's -launcher-exec takes one program: ssh with the testbed's config
            f.write_text(f"#!/bin/sh\nexec ssh -F {config}{extra} \"$@\"\n")
            f.chmod(0o755)
        for h in host_counts:
            hostfile = tmp / f"hosts{h}"
            hostfile.write_text("\n".join(all_hosts[:h]) + "\n")
            env = dict(tb, LATTICE_HOME=str(tmp / f"ssh{h}"), PYTHONPATH=str(bl.ROOT / "service"))
            subprocess.run([*bl.lattice_cmd(), "init", "--shape", f"{rph}x1x{h}", "--pset-size", str(rph),
                            "--memory", "128M", "--placement", "ssh", "--hostfile", str(hostfile), "--ssh-command",
                            tb["LATTICE_TESTBED_SSH"]], env=env, check=True, capture_output=True)
            bed.homes["ssh", h] = env
        data: dict[int, dict[str, list[float]]] = {h: {c: [] for c in CONFIGS} for h in host_counts}
        for i in range(args.repeat):
            for h in bl.rotations(host_counts, i):
                n, names = h * rph, ",".join(all_hosts[:h])
                home = bed.homes["ssh", h]
                hydra = ["mpiexec.hydra", "-launcher", "ssh", "-iface", "ltb0", "-hosts", names, "-ppn", str(rph),
                         "-n", str(n), str(HELLO)]
                run = [*bl.lattice_cmd(), "run", "-n", str(n), str(HELLO)]
                cmds = {
                    "lattice-cold": (run, home),
                    "lattice-cold-1by1": (run, dict(home, LATTICE_SSH_PERSIST="0")),
                    "lattice-cold-nocache": (run, home),
                    "hydra-ssh": ([*hydra[:3], "-launcher-exec", str(tmp / "ssh"), *hydra[3:]], tb),
                    "hydra-ssh-mux": ([*hydra[:3], "-launcher-exec", str(tmp / "ssh-mux"), *hydra[3:]], tb),
                    "srun-pmi2": (["salloc", "-N", str(h), f"--ntasks-per-node={rph}", "srun", "--mpi=pmi2",
                                   "-n", str(n), str(HELLO)], tb),
                }
                for c in bl.rotations(CONFIGS, i):
                    cmd, env = cmds[c]
                    if c == "lattice-cold-nocache":
                        for d in libcaches(home["LATTICE_HOME"]):
                            shutil.rmtree(d)
                    data[h][c].append(timed(cmd, env, f"launch_hello: ranks={n} "))
                print(f"  round {i + 1}, {h} hosts: " + ", ".join(f"{c} {data[h][c][-1]:.2f} s" for c in CONFIGS),
                      flush=True)
        # the shared connections, Hydra's and Lattice's (lattice.nodes.placement.ssh_sharing), closed
        from lattice import safepath
        paths = [f"{mux}/%C", *(f"{safepath.runtime_dir(e['LATTICE_HOME'])}/ssh-%C" for e in bed.homes.values())]
        for path in paths:
            for host in all_hosts:
                subprocess.run(["ssh", "-F", config, "-o", f"ControlPath={path}", "-O", "exit", host],
                               capture_output=True)
        rows = [(f"{h} hosts, {h * rph} ranks", data[h], PAIRS) for h in host_counts]
        print()
        print(bl.table("Cold start: boot + run + free vs Hydra and srun across testbed hosts (s)", CONFIGS, rows))
        print()
        print("Each round's own ratio, median [min-max]:")
        print()
        print("| measure | " + " | ".join(p[0] for p in PAIRS) + " |")
        print("| --- | " + " | ".join("---" for _ in PAIRS) + " |")
        for h in host_counts:
            cells = []
            for _, a, b in PAIRS:
                r = [x / y for x, y in zip(data[h][a], data[h][b])]
                cells.append(f"{statistics.median(r):.3f} [{min(r):.3f}–{max(r):.3f}]")
            print(f"| {h} hosts, {h * rph} ranks | " + " | ".join(cells) + " |")
    return 0


def tree(args: argparse.Namespace) -> int:
    """Boot and free times of one block over H hosts by fan-out (see the module's doc)."""
    import time
    sys.path.insert(0, str(bl.ROOT / "service"))
    from lattice.nodes import agenttree
    bl.require_root("coldstart")
    h, rph = max(int(x) for x in args.hosts.split(",")), args.ranks_per_host
    fanouts = [int(k) for k in args.fanouts.split(",")]
    print(bl.header("coldstart", sys.argv))
    with Testbed(h, "lattice-coldstart-") as bed:
        hostfile = bed.tmp / "hosts"
        hostfile.write_text("\n".join(bed.hosts[:h]) + "\n")
        homes = {}
        for k in fanouts:
            env = dict(bed.env, LATTICE_HOME=str(bed.tmp / f"k{k}"), PYTHONPATH=str(bl.ROOT / "service"),
                       LATTICE_SSH_PERSIST="0")
            subprocess.run([*bl.lattice_cmd(), "init", "--shape", f"{rph}x1x{h}", "--pset-size", str(rph),
                            "--memory", "128M", "--placement", "ssh", "--hostfile", str(hostfile), "--ssh-command",
                            bed.env["LATTICE_TESTBED_SSH"]], env=env, check=True, capture_output=True)
            toml = bed.tmp / f"k{k}" / "machine.toml"
            toml.write_text(toml.read_text().replace('hosts = "ssh"\n', f'hosts = "ssh"\nfanout = {k}\n'))
            subprocess.run([*bl.lattice_cmd(), "block", "create", "B", "--shape", f"{rph}x1x{h}"], env=env,
                           check=True, capture_output=True)
            homes[k] = bed.homes["ssh", k] = env
        names = [f"fan-out {k} (depth {agenttree.depth(h, k)})" for k in fanouts]
        data: dict[str, list[float]] = {n: [] for n in names}
        for i in range(args.repeat):
            for n in bl.rotations(names, i):
                k = fanouts[names.index(n)]
                t0 = time.monotonic()
                subprocess.run([*bl.lattice_cmd(), "boot", "B"], env=homes[k], check=True, capture_output=True)
                data[n].append(time.monotonic() - t0)
                subprocess.run([*bl.lattice_cmd(), "free", "B"], env=homes[k], check=True, capture_output=True)
            print(f"  round {i + 1}: " + ", ".join(f"{n} {data[n][-1]:.2f} s" for n in names), flush=True)
        print()
        print(bl.table(f"Boot of {h * rph} compute nodes on {h} hosts by the agents' fan-out (s)", names,
                       [("lattice boot", data, [(f"{b}/{a}", b, a) for a, b in zip(names, names[1:])])]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
