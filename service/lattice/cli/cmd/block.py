from __future__ import annotations

import argparse

from lattice.state import blocks, machine, reclaim
from lattice.errors import LatticeError

description = "create or delete a block (a box of whole psets)"


def setup_parser(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    c = sub.add_parser("create", help="create a block")
    c.add_argument("name")
    c.add_argument("--shape", required=True, help="XxYxZ compute nodes")
    c.add_argument("--corner", help="x,y,z of its lowest node (default: first place it fits)")
    d = sub.add_parser("delete", help="delete a Free block")
    d.add_argument("name")


def block(args: argparse.Namespace) -> int:
    m = machine.load()
    con = reclaim.connect()
    if args.action == "create":
        corner = machine.parse_coord(args.corner) if args.corner else None
        b = blocks.create(con, m, args.name, machine.parse_shape(args.shape), corner)
        print(f"block {b.name}: {machine.shape_str(b.shape)} at {','.join(map(str, b.corner))}, "
              f"{b.size} compute nodes, I/O nodes {', '.join(m.io_location(p) for p in b.psets(m))}")
    elif args.action == "delete":
        blocks.delete(con, args.name)
    else:  # pragma: no cover - argparse rejects it
        raise LatticeError(f"unknown action {args.action}")
    return 0
