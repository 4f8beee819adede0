from __future__ import annotations

import argparse

from lattice import blocks, boot, db, machine

description = "show the calls each I/O node of a booted block has executed"


def setup_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="block")


def counters(args: argparse.Namespace) -> int:
    m = machine.load()
    con = db.connect()
    for c in boot.ciods(con, blocks.get(con, args.name), m):
        with c:
            for call, n in c.counters().items():
                print(f"{c.location:<18} {call:<12} {n}")
    return 0
