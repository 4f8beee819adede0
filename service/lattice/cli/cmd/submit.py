"""`lattice submit`: queue a job and return at once, as sbatch does."""
from __future__ import annotations

import argparse

from lattice.cli.cmd import run as run_cmd
from lattice.errors import LatticeError
from lattice.jobs import queue
from lattice.jobs.request import RunRequest

description = ("queue a job (lattice run's options) and print its id at once; it starts when its turn comes "
               "and a block is free (first come, first served, with backfill), its output in files")


def setup_parser(p: argparse.ArgumentParser) -> None:
    run_cmd.setup_parser(p)
    p.epilog = (f"Output: -o/-e as for lattice run; without -o, {queue.DEFAULT_OUTPUT} in the working directory "
                "(standard output and error, and lattice's own lines). The job is run later as `lattice run` "
                "would have run it now: this directory, this environment (--export), this owner. "
                "`lattice jobs` shows why a queued job waits; `lattice cancel JOB` takes it out of the queue.")


def submit(args: argparse.Namespace) -> int:
    req = RunRequest.from_args(args)
    if req.print_map:
        raise LatticeError("--print-map queues nothing: use `lattice run --print-map`")
    print(queue.submit(req))
    return 0
