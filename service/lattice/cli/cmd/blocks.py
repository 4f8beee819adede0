from __future__ import annotations

import argparse

from lattice import views
from lattice.cli.jsonout import emit
from lattice.state import machine, reclaim
from lattice.text import printable

description = "list blocks and their states"


def setup_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="one JSON document (docs/cli.md, JSON output)")


def blocks(args: argparse.Namespace) -> int:
    m = machine.load()
    con = reclaim.connect()
    rows = views.blocks_view(con, m)
    if args.json:
        emit(views.document("blocks", rows))
        return 0
    print(f"{'name':<16} {'state':<12} {'shape':<8} {'corner':<8} {'nodes':>5} {'I/O':>3}  message")
    for b in rows:
        print(f"{b['name']:<16} {b['state']:<12} {'x'.join(map(str, b['shape'])):<8} "
              f"{','.join(map(str, b['corner'])):<8} {b['nodes']:>5} {b['io_nodes']:>3}  {printable(b['message'] or '')}")
    return 0
