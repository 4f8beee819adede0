from __future__ import annotations

import argparse
import sys

from lattice.state import blocks, machine, reclaim
from lattice.nodes import boot
from lattice.state.busy import active_job, describe
from lattice.errors import LatticeError
from lattice.text import printable

description = ("shut a block's nodes down and return it to Free (also recovers a block in Error); "
               "a block running a job is refused unless --force")


def setup_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", nargs="?", help="the block (or --all)")
    p.add_argument("--all", action="store_true", help="every block that is not Free")
    p.add_argument("--force", action="store_true",
                   help="free a block even while a job runs there: the job is cancelled (its lattice run "
                        "says its block was freed)")


def free(args: argparse.Namespace) -> int:
    if args.all == (args.name is not None):
        raise LatticeError("name one block, or give --all")
    m = machine.load()
    con = reclaim.connect()
    names = [b.name for b in blocks.all_blocks(con) if b.state != "Free"] if args.all else [args.name]
    refused = []
    for name in names:
        b = blocks.get(con, name)
        job = active_job(con, name)
        if job is not None and not args.force:
            refused.append(f"block {name} is busy: {describe(job)}; `lattice free --force {name}` cancels it")
            continue
        if job is not None:
            why = "freed by `lattice free --force`"
            # said before anything is killed: the job's run reads it when its ranks die
            con.execute("UPDATE jobs SET state = 'Dying', message = ? WHERE id = ?",
                        (f"cancelled: its block {name} was {why}", job["id"]))
            boot.free(con, m, name, why=why)
            print(f"lattice: block {name} freed; job {job['id']} ({printable(job['user'])}: {printable(job['args'])}) "
                  "cancelled")
        else:
            boot.free(con, m, name)
            if args.all:
                print(f"lattice: block {name} freed")
    if len(refused) == 1 and not args.all:
        raise LatticeError(refused[0])
    for line in refused:
        print(f"lattice: error: {line}", file=sys.stderr)
    return 1 if refused else 0
