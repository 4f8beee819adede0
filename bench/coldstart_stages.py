#!/usr/bin/env python3
"""Where a cold `lattice run` spends its time: the stages of one run, timed in its own process.

Runs `lattice run ARGS` in this process (no warm server: LATTICE_WARM is ignored here) with the
functions that bound each stage wrapped to note when they start and end, and prints, per stage, the
median [min-max] seconds over --repeat runs:

  before boot     the command's start to boot.boot (parse, place, map, reserve)
  agents started  placement.launch: the launchers (ssh, srun) spawned and their orders written
  ready           until every host's agent reported "ready" (ssh, the agent's start, its daemons)
  after ready     peering the block network's parts, the daemons' rows, "commit"
  job start       job.Run.start: the job sent to every I/O node
  job             job.Run.wait: the ranks' own life (cnk's start, MPI_Init, the program, exits)
  free            launch.free_owned: shutting the block down, the agents gone, in parts:
    free: shutdown  boot.free until boot.kill_daemons: each pset's ciod told LAT_CTL_SHUTDOWN
    free: agents    boot.kill_daemons: until every agent left (its daemons ended, its containers
                    swept, its part of the block network removed, its ssh gone)
    free: rest      the rest: the service node's sweep, rows, RAS
  after free      the rest until the command returns

Use a machine (LATTICE_HOME) with ssh or Slurm placement and no booted block of the job's size, so
each run boots its own, e.g. on the testbed:

    LATTICE_HOME=... .venv/bin/python bench/coldstart_stages.py --repeat 5 -- -n 12 build/bench/launch_hello
"""
from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "service"))

from lattice.cli import main as cli                      # noqa: E402
from lattice.jobs import job, launch                      # noqa: E402
from lattice.nodes import boot, placement                 # noqa: E402

MARKS: dict[str, float] = {}


def mark(owner: Any, name: str, label: str) -> None:
    """Wrap owner.name to note when it is first entered (label>) and last left (label<)."""
    f: Callable[..., Any] = getattr(owner, name)

    @functools.wraps(f)
    def wrapped(*a: Any, **k: Any) -> Any:
        MARKS.setdefault(f"{label}>", time.monotonic())
        try:
            return f(*a, **k)
        finally:
            MARKS[f"{label}<"] = time.monotonic()
    setattr(owner, name, wrapped)


def waits(owner: Any) -> None:
    """Reports.wait: note the end of the wait for "ready" apart from the others."""
    f = owner.wait

    @functools.wraps(f)
    def wrapped(self: Any, event: str, *a: Any, **k: Any) -> Any:
        try:
            return f(self, event, *a, **k)
        finally:
            MARKS[f"wait-{event}<"] = time.monotonic()
    owner.wait = wrapped


STAGES = [("before boot", "start", "boot>"), ("agents started", "boot>", "launch<"),
          ("ready", "launch<", "wait-ready<"), ("after ready", "wait-ready<", "boot<"),
          ("job start", "boot<", "start<"), ("job", "start<", "wait<"), ("free", "wait<", "free<"),
          ("free: shutdown", "wait<", "kill>"), ("free: agents", "kill>", "kill<"), ("free: rest", "kill<", "free<"),
          ("after free", "free<", "end")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("run", nargs=argparse.REMAINDER, help="-- then lattice run's arguments")
    args = ap.parse_args()
    run_args = args.run[1:] if args.run[:1] == ["--"] else args.run
    mark(boot, "boot", "boot")
    mark(placement, "launch", "launch")
    waits(placement.Reports)
    mark(job.Run, "start", "start")
    mark(job.Run, "wait", "wait")
    mark(launch, "free_owned", "free")
    mark(boot, "kill_daemons", "kill")
    data: dict[str, list[float]] = {s: [] for s, _, _ in STAGES}
    totals: list[float] = []
    for i in range(args.repeat):
        MARKS.clear()
        MARKS["start"] = time.monotonic()
        sys.stdout.flush()
        saved = os.dup(1)           # the ranks' output, written to descriptor 1, is not the table's
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)
        try:
            status = cli.main(["run", *run_args])
        finally:
            sys.stdout.flush()
            os.dup2(saved, 1)
            os.close(saved)
        MARKS["end"] = time.monotonic()
        if status != 0:
            print(f"run {i + 1} exited {status}", file=sys.stderr)
            return 1
        for s, a, b in STAGES:
            if a in MARKS and b in MARKS:
                data[s].append(MARKS[b] - MARKS[a])
        totals.append(MARKS["end"] - MARKS["start"])
        print(f"  run {i + 1}: " + ", ".join(f"{s} {data[s][-1]:.3f}" for s, _, _ in STAGES if data[s]),
              file=sys.stderr, flush=True)
    print("| stage | median [min-max] s |")
    print("| --- | --- |")
    for s, _, _ in STAGES:
        v = data[s]
        if v:
            print(f"| {s} | {statistics.median(v):.3f} [{min(v):.3f}–{max(v):.3f}] |")
    print(f"| whole run | {statistics.median(totals):.3f} [{min(totals):.3f}–{max(totals):.3f}] |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
