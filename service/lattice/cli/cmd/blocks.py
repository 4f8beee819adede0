from __future__ import annotations

import argparse

from lattice.state import blocks as model
from lattice.state import machine, reclaim
from lattice.text import printable

description = "list blocks and their states"


def setup_parser(p: argparse.ArgumentParser) -> None:
    pass


def blocks(args: argparse.Namespace) -> int:
    m = machine.load()
    con = reclaim.connect()
    print(f"{'name':<16} {'state':<12} {'shape':<8} {'corner':<8} {'nodes':>5} {'I/O':>3}  message")
    for b in model.all_blocks(con):
        print(f"{b.name:<16} {b.state:<12} {machine.shape_str(b.shape):<8} {','.join(map(str, b.corner)):<8} "
              f"{b.size:>5} {len(b.psets(m)):>3}  {printable(b.message or '')}")
    return 0
