from __future__ import annotations

import argparse
import sys

from lattice import views
from lattice.cli.jsonout import emit
from lattice.state import db, machine
from lattice.state import personality as model

description = "print a compute node's personality, as a program on it reads it (lattice/personality.h)"


def setup_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("location", metavar="LOCATION", help="a compute node, e.g. R00-M0-N00-C:J05")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--env", action="store_true",
                     help="print the LATTICE_PERSONALITY value the node gives its jobs instead")
    out.add_argument("--json", action="store_true", help="one JSON document (docs/cli.md, JSON output)")
    p.add_argument("--mode", choices=model.MODES, default="co",
                   help="the job's mode: co (coprocessor, the default) or vn (virtual node)")
    p.add_argument("--t", type=int, default=0, metavar="N",
                   help="the process's core on the node (0, the default; 0..cores-1 in vn mode)")


def personality(args: argparse.Namespace) -> int:
    m = machine.load()
    con = db.connect()
    p = model.lookup(con, m, args.location, args.mode, args.t)
    if args.json:
        emit(views.personality_document(p))
    else:
        sys.stdout.write(p.env() + "\n" if args.env else p.text())
    return 0
