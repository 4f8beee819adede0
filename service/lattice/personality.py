"""A compute node's personality as a job sees it.

At boot each compute node gets a personality file (boot.py: JSON, with the
block's key, mode 0600).  The node passes the job its public part in the
environment variable LATTICE_PERSONALITY, one line of `key=value` fields
joined by `;` (`env()`); programs read it with the C API
(compute/include/lattice/personality.h), whose `lattice_personality_print`
prints `text()`, which `lattice personality LOCATION` prints too.
"""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from lattice import blocks
from lattice.errors import LatticeError
from lattice.machine import Coord, Machine

MODES = ("co", "vn")


@dataclass(frozen=True)
class Personality:
    block: str
    location: str
    coords: Coord
    torus: Coord
    pset: int
    pset_size: int
    rank_in_pset: int
    ionode: str
    memory: int
    cores: int
    mode: str = "co"

    def env(self) -> str:
        """The LATTICE_PERSONALITY value (what cnode builds from the JSON file)."""
        return ";".join(f"{k}={v}" for k, v in (
            ("block", self.block), ("location", self.location), ("coords", ",".join(map(str, self.coords))),
            ("torus", ",".join(map(str, self.torus))), ("pset", self.pset), ("pset_size", self.pset_size),
            ("rank_in_pset", self.rank_in_pset), ("ionode", self.ionode), ("memory", self.memory),
            ("cores", self.cores), ("mode", self.mode)))

    def text(self) -> str:
        """The canonical text, as lattice_personality_print() prints it."""
        return "".join(f"{k}: {v}\n" for k, v in (
            ("block", self.block), ("location", self.location), ("coords", ",".join(map(str, self.coords))),
            ("torus", "x".join(map(str, self.torus))), ("pset", self.pset), ("pset_size", self.pset_size),
            ("rank_in_pset", self.rank_in_pset), ("ionode", self.ionode), ("memory", self.memory),
            ("cores", self.cores), ("mode", self.mode)))


def of_node(m: Machine, block: str, index: int, mode: str = "co") -> Personality:
    """Compute node `index` of machine m, in block `block`."""
    p = m.pset_of(index)
    return Personality(block=block, location=m.compute_location(index), coords=m.coord(index), torus=m.shape,
                       pset=p, pset_size=m.pset_size, rank_in_pset=index - p * m.pset_size,
                       ionode=m.io_location(p), memory=m.memory, cores=m.cores, mode=mode)


def node_index(m: Machine, location: str) -> int:
    """The compute node named by a location such as R00-M0-N00-C:J05."""
    want = location.strip().upper()
    for i in range(m.nodes):
        if m.compute_location(i) == want:
            return i
    for p in range(m.psets):
        if m.io_location(p) == want:
            raise LatticeError(f"{location} is an I/O node: only compute nodes have a personality")
    raise LatticeError(f"no compute node {location!r} in this machine",
                       f"compute nodes are {m.compute_location(0)} .. {m.compute_location(m.nodes - 1)} "
                       f"(see `lattice machine`)")


def lookup(con: sqlite3.Connection, m: Machine, location: str) -> Personality:
    """The personality the node at `location` has (booted block) or would
    have (unbooted block) in the block that holds it."""
    i = node_index(m, location)
    for b in blocks.all_blocks(con):
        if i in b.nodes(m):
            return of_node(m, b.name, i)
    raise LatticeError(f"compute node {m.compute_location(i)} is in no block: its personality is given at boot",
                       "create a block that holds it (`lattice block create`)")
