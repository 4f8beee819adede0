#!/usr/bin/env python3
"""Boot time against the number of hosts: what fanning out to a host costs.

On the testbed (scripts/testbed.sh, brought up for the run if it is not up),
a machine of H psets of 2 compute nodes, one pset a host, for H = 1..4:
  ssh          lattice boot over ssh placement (one ssh per host), then free
  ssh-floor    `ssh HOST true` to the same H hosts at once: the launcher's own cost
  slurm        salloc -N H sh -c 'lattice boot B && lattice free B' (one srun for all hosts)
  slurm-floor  salloc -N H true
Rounds interleave the sizes and configurations; median [min-max] seconds.
The service node's part per host is the slope of boot against H
(docs/scaling.md fits it).

    .venv/bin/python bench/hosts_boot.py [--hosts 1,2,3,4] [--repeat 5]
"""
from __future__ import annotations

import argparse
import subprocess
import sys

import benchlib as bl
from hosts_launch import Testbed, timed

CONFIGS = ["ssh", "ssh-floor", "slurm", "slurm-floor"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hosts", default="1,2,3,4")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    bl.require_root("hosts_boot")
    counts = [int(h) for h in args.hosts.split(",")]
    print(bl.header("hosts_boot", sys.argv))
    with Testbed(max(counts), "lattice-hosts-boot-") as bed:
        tb, tmp, names, envs = bed.env, bed.tmp, bed.hosts, bed.homes
        lat = bl.lattice_cmd()
        for h in counts:
            hostfile = tmp / f"hosts{h}"
            hostfile.write_text("\n".join(names[:h]) + "\n")
            for kind, place in (("ssh", ["--placement", "ssh", "--hostfile", str(hostfile), "--ssh-command",
                                         tb["LATTICE_TESTBED_SSH"]]), ("slurm", ["--placement", "slurm"])):
                env = dict(tb, LATTICE_HOME=str(tmp / f"{kind}{h}"), PYTHONPATH=str(bl.ROOT / "service"))
                for a in (["init", "--shape", f"2x1x{h}", "--pset-size", "2", "--memory", "64M", *place],
                          ["block", "create", "B", "--shape", f"2x1x{h}"]):
                    subprocess.run([*lat, *a], env=env, check=True, capture_output=True)
                envs[kind, h] = env
        ssh = tb["LATTICE_TESTBED_SSH"].split()
        data: dict[int, dict[str, list[float]]] = {h: {c: [] for c in CONFIGS} for h in counts}
        for i in range(args.repeat):
            for h in bl.rotations(counts, i):
                for c in bl.rotations(CONFIGS, i):
                    if c == "ssh":
                        t = timed([*lat, "boot", "B"], envs["ssh", h], "")
                        timed([*lat, "free", "B"], envs["ssh", h], "")
                    elif c == "ssh-floor":
                        script = " & ".join(f"{' '.join(ssh)} {n} true" for n in names[:h]) + " & wait"
                        t = timed(["sh", "-c", script], tb, "")
                    elif c == "slurm":
                        t = timed(["salloc", "-N", str(h), "sh", "-c",
                                   f"{' '.join(lat)} boot B && {' '.join(lat)} free B"], envs["slurm", h], "")
                    else:
                        t = timed(["salloc", "-N", str(h), "true"], tb, "")
                    data[h][c].append(t)
                print(f"  round {i + 1}, {h} hosts: " + ", ".join(f"{c} {data[h][c][-1]:.3f} s" for c in CONFIGS),
                      flush=True)
        rows = [(f"{h} host{'s' if h > 1 else ''}", data[h], [("ssh/floor", "ssh", "ssh-floor"),
                                                             ("slurm/floor", "slurm", "slurm-floor")])
                for h in counts]
        print()
        print(bl.table("Boot of one pset of 2 nodes a host (s)", CONFIGS, rows))
    return 0

if __name__ == "__main__":
    sys.exit(main())
