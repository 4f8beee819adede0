"""A compute node's personality as a job sees it.

At boot each compute node gets a personality file (boot.py: JSON, with the
block's key, mode 0600).  The node passes the job its public part in the
environment variable LATTICE_PERSONALITY, one line of `key=value` fields
joined by `;` (`env()`); programs read it with the C API
(compute/include/lattice/personality.h), whose `lattice_personality_print`
prints `text()`, which `lattice personality LOCATION` prints too.

The mode (co or vn) is the job's and `t` is the process's core on the node
(0 in coprocessor mode, 0..cores-1 in virtual node mode, where each process
gets memory/cores, the memory field says); `t=N` is the last
field, optional for readers (absent means 0) so older values still parse.
"""
from __future__ import annotations

from typing import NamedTuple

from lattice.state import blocks, db
from lattice.errors import LatticeError
from lattice.state.machine import Coord, Machine

MODES = ("co", "vn")


class Personality(NamedTuple):     # not a dataclass: see lattice.state.machine.Machine
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
    t: int = 0                  # the process's core within the node

    def env(self) -> str:
        """The LATTICE_PERSONALITY value (what cnode builds from the JSON file)."""
        return ";".join(f"{k}={v}" for k, v in (
            ("block", self.block), ("location", self.location), ("coords", ",".join(map(str, self.coords))),
            ("torus", ",".join(map(str, self.torus))), ("pset", self.pset), ("pset_size", self.pset_size),
            ("rank_in_pset", self.rank_in_pset), ("ionode", self.ionode), ("memory", self.memory),
            ("cores", self.cores), ("mode", self.mode), ("t", self.t)))

    def text(self) -> str:
        """The canonical text, as lattice_personality_print() prints it."""
        return "".join(f"{k}: {v}\n" for k, v in (
            ("block", self.block), ("location", self.location), ("coords", ",".join(map(str, self.coords))),
            ("torus", "x".join(map(str, self.torus))), ("pset", self.pset), ("pset_size", self.pset_size),
            ("rank_in_pset", self.rank_in_pset), ("ionode", self.ionode), ("memory", self.memory),
            ("cores", self.cores), ("mode", self.mode), ("t", self.t)))


def check_mode_t(m: Machine, mode: str, t: int) -> None:
    """A process's core must exist in the mode: t=0 in coprocessor mode,
    below the node's cores in virtual node mode."""
    if mode not in MODES:
        raise LatticeError(f"bad mode {mode!r}: co (coprocessor) or vn (virtual node)")
    ppn = 1 if mode == "co" else m.cores
    if not 0 <= t < ppn:
        raise LatticeError(f"t={t} is not a core of a {mode} process: t must be "
                           + ("0 in coprocessor mode (one process per node)" if mode == "co"
                              else f"0..{ppn - 1} (the node has {ppn} cores)"))


def of_node(m: Machine, block: str, index: int, mode: str = "co", t: int = 0) -> Personality:
    """Compute node `index` of machine m, in block `block`, as process t of a
    job in `mode` sees it."""
    check_mode_t(m, mode, t)
    share = 1 if mode == "co" else m.cores      # vn: each process gets its share of the node's memory
    p = m.pset_of(index)
    return Personality(block=block, location=m.compute_location(index), coords=m.coord(index), torus=m.shape,
                       pset=p, pset_size=m.pset_size, rank_in_pset=index - p * m.pset_size,
                       ionode=m.io_location(p), memory=m.memory // share, cores=m.cores, mode=mode, t=t)


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


def lookup(con: db.Connection, m: Machine, location: str, mode: str = "co", t: int = 0) -> Personality:
    """The personality process t of a job in `mode` gets on the node at
    `location`, in the block that holds the node (booted or not)."""
    check_mode_t(m, mode, t)
    i = node_index(m, location)
    for b in blocks.all_blocks(con):
        if i in b.nodes(m):
            return of_node(m, b.name, i, mode, t)
    raise LatticeError(f"compute node {m.compute_location(i)} is in no block: its personality is given at boot",
                       "create a block that holds it (`lattice block create`)")
