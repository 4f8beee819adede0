from __future__ import annotations

import argparse


from lattice.state import blocks, db, reclaim
from lattice.nodes import placement
from lattice.state import machine as model
from lattice.errors import LatticeError

description = "show the machine's nodes: location, coordinates, pset, I/O node, block"


def setup_parser(p: argparse.ArgumentParser) -> None:
    pass


def machine(args: argparse.Namespace) -> int:
    m = model.load()
    con = reclaim.connect()
    owner = {i: b.name + (" (Error)" if b.state == "Error" else "") for b in blocks.all_blocks(con) for i in b.nodes(m)}
    lost = {loc for b in blocks.all_blocks(con) if b.state != "Free" for loc in reclaim.lost_daemons(con, m, b.name)}
    holder = "the block" if m.block_holds_pages() else "the job"
    print(f"{model.shape_str(m.shape)} torus, {m.nodes} compute nodes, {m.psets} I/O nodes "
          f"(psets of {m.pset_size}), {m.memory >> 20} MiB and {m.cores} cores per node, placement {m.placement}, "
          f"huge pages a job touched held by {holder} (--hold-pages {m.hold_pages})")
    booted = booted_hosts(con)
    try:
        planned = placement.of(con, m)
    except LatticeError:            # slurm outside an allocation: hosts come at boot
        planned = placement.Where({}, {})

    def host_of(kind: str, n: int) -> str:
        p = n if kind == "ciod" else m.pset_of(n)
        return (booted.get((kind, n)) or (planned.io if kind == "ciod" else planned.compute).get(p)
                or ("local" if m.placement == "local" else "-"))    # slurm: hosts at boot

    print(f"{'location':<18} {'kind':<8} {'x,y,z':<8} {'pset':>4}  {'I/O node':<18} {'host':<12} block")
    for p in range(m.psets):
        io = m.io_location(p)
        print(f"{io:<18} {'io':<8} {'-':<8} {p:>4}  {'-':<18} {host_of('ciod', p):<12} "
              + (" LOST (ciod gone)" if io in lost else ""))
        for i in m.pset_nodes(p):
            c = ",".join(map(str, m.coord(i)))
            print(f"{m.compute_location(i):<18} {'compute':<8} {c:<8} {p:>4}  {m.io_location(p):<18} "
                  f"{host_of('cnode', i):<12} "
                  f"{owner.get(i, '')}" + (" LOST (cnode gone)" if m.compute_location(i) in lost else ""))
    return 0


def booted_hosts(con: db.Connection) -> dict[tuple[str, int], str]:
    """The host each booted daemon runs on (another than this one), by (kind, node)."""
    return {(r["kind"], r["node"]): r["host"] for r in con.execute("SELECT kind, node, host FROM daemons "
                                                                   "WHERE host IS NOT NULL")}
