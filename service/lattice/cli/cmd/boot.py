from __future__ import annotations

import argparse

from lattice.nodes import boot as booting
from lattice.nodes import host
from lattice.state import machine, reclaim

description = "boot a block: one ciod per pset, one compute node process per compute node"


def setup_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")


def boot(args: argparse.Namespace) -> int:
    m = machine.load()
    con = reclaim.connect()
    b = booting.boot(con, m, args.name)
    host.local(refresh=True)        # learn the host's cores again: jobs on the block map onto them
    print(f"block {b.name} {b.state}: {b.size} compute nodes, {len(b.psets(m))} I/O nodes")
    return 0
