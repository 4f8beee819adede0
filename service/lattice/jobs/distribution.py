"""How many ranks run on how many nodes: srun's -n, -N and --ntasks-per-node
over Lattice's modes.

A node runs one process in coprocessor mode (co) and one per core in
virtual node mode (vn), so more than one task per node means vn; without
--mode the layout picks it.  With -N the ranks go on exactly that many
nodes, srun's block distribution: consecutive ranks share a node, the first
n mod N nodes one rank more (lattice.jobs.mapping.spread_coords).  Without -N
BG/L's mapping orders apply (lattice.jobs.mapping).
"""
from __future__ import annotations

from typing import NamedTuple

from lattice.jobs import mapping
from lattice.errors import LatticeError
from lattice.state.machine import Machine


class Layout(NamedTuple):
    mode: str
    nodes: int | None       # -N: the ranks on exactly this many nodes
    n: int | None           # ranks of the (first) program; None: the default


def layout(m: Machine, mode: str | None, n: int | None, nodes: int | None, per_node: int | None,
           block_size: int | None) -> Layout:
    """The mode, node count and rank count these options give, or why they cannot."""
    for value, opt in ((n, "-n"), (nodes, "-N"), (per_node, "--ntasks-per-node")):
        if value is not None and value < 1:
            raise LatticeError(f"{opt} must be at least 1")
    if nodes is None and per_node is None:
        return Layout(mode or mapping.DEFAULT_MODE, None, n)
    if per_node is not None:
        if nodes is None:
            nodes = -(-n // per_node) if n is not None else block_size or 1
        if n is None:
            n = nodes * per_node
        if n > nodes * per_node:
            raise LatticeError(f"-n {n} ranks do not fit on {nodes} node{'s' if nodes > 1 else ''} x "
                               f"{per_node} per node")
    assert nodes is not None
    n = nodes if n is None else n
    if n < nodes:
        raise LatticeError(f"-n {n} rank{'s' if n > 1 else ''} cannot use -N {nodes} nodes: each node runs "
                           f"at least one")
    if block_size is not None and nodes > block_size:
        raise LatticeError(f"-N {nodes} nodes: the block has {block_size}")
    per = per_node or -(-n // nodes)
    if per > 1:
        if mode == "co":
            raise LatticeError(f"{per} tasks per node need virtual node mode (--mode vn): "
                               f"a node runs one process in coprocessor mode")
        if per > m.cores:
            raise LatticeError(f"{per} tasks per node: this machine's nodes have {m.cores} cores, "
                               f"so at most {m.cores} (one per core, --mode vn)")
        mode = "vn"
    return Layout(mode or mapping.DEFAULT_MODE, nodes, n)
