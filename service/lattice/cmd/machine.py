from __future__ import annotations

import argparse

import sqlite3

from lattice import blocks, placement, reclaim
from lattice import machine as model
from lattice.errors import LatticeError

description = "show the machine's nodes: location, coordinates, pset, I/O node, block"


def setup_parser(p: argparse.ArgumentParser) -> None:
    pass


def machine(args: argparse.Namespace) -> int:
    m = model.load()
    con = reclaim.connect()
    owner = {i: b.name + (" (Error)" if b.state == "Error" else "") for b in blocks.all_blocks(con) for i in b.nodes(m)}
    lost = {loc for b in blocks.all_blocks(con) if b.state != "Free" for loc in reclaim.lost_daemons(con, m, b.name)}
    print(f"{model.shape_str(m.shape)} torus, {m.nodes} compute nodes, {m.psets} I/O nodes "
          f"(psets of {m.pset_size}), {m.memory >> 20} MiB and {m.cores} cores per node, placement {m.placement}")
    hosts = booted_hosts(con)
    try:
        planned = placement.pset_hosts(con, m)
    except LatticeError:
        planned = {}                # slurm outside an allocation: hosts come at boot
    print(f"{'location':<18} {'kind':<8} {'x,y,z':<8} {'pset':>4}  {'I/O node':<18} {'host':<12} block")
    for p in range(m.psets):
        io = m.io_location(p)
        host = hosts.get(p) or planned.get(p) or ("local" if m.placement == "local" else "-")  # slurm: hosts at boot
        print(f"{io:<18} {'io':<8} {'-':<8} {p:>4}  {'-':<18} {host:<12} " + (" LOST (ciod gone)" if io in lost else ""))
        for i in m.pset_nodes(p):
            c = ",".join(map(str, m.coord(i)))
            print(f"{m.compute_location(i):<18} {'compute':<8} {c:<8} {p:>4}  {m.io_location(p):<18} {host:<12} "
                  f"{owner.get(i, '')}" + (" LOST (cnode gone)" if m.compute_location(i) in lost else ""))
    return 0


def booted_hosts(con: sqlite3.Connection) -> dict[int, str]:
    """The host each booted pset runs on (another than this one)."""
    return {r["node"]: r["host"] for r in con.execute("SELECT node, host FROM daemons WHERE kind = 'ciod' "
                                                      "AND host IS NOT NULL")}
