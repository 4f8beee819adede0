"""The PMI fence tree of a job (docs/protocol.md section 10), as Blue Gene
spread its collectives: the I/O nodes that run ranks form a k-ary tree
under `lattice run`, which talks to its k children only.  Each I/O node
merges its pset's puts with its children's and sends one fence to its
parent; the merged keys come back down the same way.  So no process sends
a fence to more than k others, and the service node sends ~k copies, not
one per I/O node.

The I/O nodes are taken in pset order and laid out as a heap: position i
(0-based) has the children k*(i+1) .. k*(i+1)+k-1; positions 0..k-1 are the
root's.  `LATTICE_PMI_FANOUT` (default 8) sets k: tests and benchmarks
lower it to make deep trees, or raise it past the I/O node count for the
old star (everything to everyone from the service node).
"""
from __future__ import annotations

import os
from typing import NamedTuple

from lattice.errors import LatticeError

DEFAULT_FANOUT = 8
FANOUT_ENV = "LATTICE_PMI_FANOUT"


class Place(NamedTuple):
    parent: int | None          # position of the parent, None: the service node
    children: list[int]         # positions below


def fanout(env: dict[str, str] | os._Environ[str] = os.environ) -> int:
    """k, from LATTICE_PMI_FANOUT; a clear error if it is not a number >= 1."""
    text = env.get(FANOUT_ENV, "")
    if not text:
        return DEFAULT_FANOUT
    if not text.isdigit() or int(text) < 1:
        raise LatticeError(f"{FANOUT_ENV}={text!r}: want a whole number of at least 1 (the PMI fence tree's "
                           "fan-out)")
    return int(text)


def layout(n: int, k: int) -> list[Place]:
    """Where each of n I/O nodes sits in a k-ary tree under the service node."""
    if k < 1:
        raise ValueError(f"fan-out {k} < 1")
    return [Place(parent=None if i < k else i // k - 1,
                  children=list(range(k * (i + 1), min(n, k * (i + 1) + k))))
            for i in range(n)]


def top(n: int, k: int) -> list[int]:
    """The positions the service node talks to."""
    return list(range(min(n, k)))


def depth(n: int, k: int) -> int:
    """Levels of I/O nodes below the service node (0 for none)."""
    levels, reach, width = 0, 0, 1
    while reach < n:
        width *= k
        reach += width
        levels += 1
    return levels
