from __future__ import annotations

import argparse

from lattice import boot, db, machine

description = "shut a block's nodes down and return it to Free (also recovers a block in Error)"


def setup_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("name")


def free(args: argparse.Namespace) -> int:
    con = db.connect()
    boot.free(con, machine.load(), args.name)
    return 0
