from __future__ import annotations

import argparse

from lattice import blocks, db
from lattice import machine as model

description = "show the machine's nodes: location, coordinates, pset, I/O node, block"


def setup_parser(p: argparse.ArgumentParser) -> None:
    pass


def machine(args: argparse.Namespace) -> int:
    m = model.load()
    con = db.connect()
    owner = {i: b.name for b in blocks.all_blocks(con) for i in b.nodes(m)}
    print(f"{model.shape_str(m.shape)} torus, {m.nodes} compute nodes, {m.psets} I/O nodes "
          f"(psets of {m.pset_size}), {m.memory >> 20} MiB and {m.cores} cores per node, placement {m.placement}")
    print(f"{'location':<18} {'kind':<8} {'x,y,z':<8} {'pset':>4}  {'I/O node':<18} block")
    for p in range(m.psets):
        print(f"{m.io_location(p):<18} {'io':<8} {'-':<8} {p:>4}  {'-':<18}")
        for i in m.pset_nodes(p):
            c = ",".join(map(str, m.coord(i)))
            print(f"{m.compute_location(i):<18} {'compute':<8} {c:<8} {p:>4}  {m.io_location(p):<18} "
                  f"{owner.get(i, '')}")
    return 0
