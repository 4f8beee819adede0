from __future__ import annotations

import argparse

from lattice import boot as booting
from lattice import db, host, machine

description = "boot a block: one ciod per pset, one compute node process per compute node"


def setup_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")


def boot(args: argparse.Namespace) -> int:
    m = machine.load()
    con = db.connect()
    b = booting.boot(con, m, args.name)
    host.local(refresh=True)        # learn the host's cores again: jobs on the block map onto them
    print(f"block {b.name} {b.state}: {b.size} compute nodes, {len(b.psets(m))} I/O nodes")
    return 0
