"""Blocks: boxes of whole psets that never overlap."""
from __future__ import annotations

import re
from typing import NamedTuple

from lattice.state import db
from lattice.errors import LatticeError
from lattice.state.machine import Coord, Machine, shape_str

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class Block(NamedTuple):     # not a dataclass: see lattice.state.machine.Machine
    name: str
    corner: Coord
    shape: Coord
    state: str
    auto: bool
    message: str | None

    @property
    def size(self) -> int:
        return self.shape[0] * self.shape[1] * self.shape[2]

    def nodes(self, m: Machine) -> list[int]:
        """Compute node indices in rank order (x fastest)."""
        return list(m.box(self.corner, self.shape))

    def psets(self, m: Machine) -> list[int]:
        return sorted({m.pset_of(i) for i in self.nodes(m)})

    @classmethod
    def from_row(cls, r: db.Row) -> Block:
        return cls(r["name"], (r["x0"], r["y0"], r["z0"]), (r["sx"], r["sy"], r["sz"]), r["state"],
                   bool(r["auto"]), r["message"])


class NoRoom(LatticeError):
    """No free box of whole psets holds the nodes asked for now (blocks
    may free some later: `lattice run --wait` waits for them)."""


def get(con: db.Connection, name: str) -> Block:
    row = con.execute("SELECT * FROM blocks WHERE name = ?", (name,)).fetchone()
    if row is None:
        raise LatticeError(f"no block named {name!r} (see `lattice blocks`)")
    return Block.from_row(row)


def all_blocks(con: db.Connection) -> list[Block]:
    return [Block.from_row(r) for r in con.execute("SELECT * FROM blocks ORDER BY name")]


def check_box(m: Machine, corner: Coord, shape: Coord) -> str | None:
    """Why this box cannot be a block, or None."""
    for d in range(3):
        if corner[d] < 0 or shape[d] < 1 or corner[d] + shape[d] > m.shape[d]:
            return f"a {shape_str(shape)} block at {','.join(map(str, corner))} does not fit in the " \
                   f"{shape_str(m.shape)} torus"
    nodes = set(m.box(corner, shape))
    for p in {m.pset_of(i) for i in nodes}:
        if not set(m.pset_nodes(p)) <= nodes:
            return f"a {shape_str(shape)} block at {','.join(map(str, corner))} is not made of whole psets " \
                   f"(pset {p} of {m.pset_size} nodes is cut)"
    return None


def overlapping(con: db.Connection, m: Machine, corner: Coord, shape: Coord) -> str | None:
    nodes = set(m.box(corner, shape))
    for b in all_blocks(con):
        if nodes & set(b.nodes(m)):
            return b.name
    return None


def create(con: db.Connection, m: Machine, name: str, shape: Coord, corner: Coord | None,
           auto: bool = False) -> Block:
    """Create a block (at `corner`, else at the first place it fits)."""
    if not NAME.fullmatch(name):
        raise LatticeError(f"bad block name {name!r}: letters, digits, '_', '.', '-'")
    with db.transaction(con):
        if con.execute("SELECT 1 FROM blocks WHERE name = ?", (name,)).fetchone():
            raise LatticeError(f"block {name!r} already exists")
        if corner is None:
            corner = first_free_corner(con, m, shape)
        why = check_box(m, corner, shape)
        if why:
            raise LatticeError(why)
        other = overlapping(con, m, corner, shape)
        if other:
            raise LatticeError(f"a {shape_str(shape)} block at {','.join(map(str, corner))} overlaps block {other!r}")
        t = db.now()
        con.execute("INSERT INTO blocks (name, x0, y0, z0, sx, sy, sz, auto, created, changed) "
                    "VALUES (?,?,?,?,?,?,?,?,?,?)", (name, *corner, *shape, int(auto), t, t))
    return get(con, name)


def first_free_corner(con: db.Connection, m: Machine, shape: Coord) -> Coord:
    for z in range(m.shape[2] - shape[2] + 1):
        for y in range(m.shape[1] - shape[1] + 1):
            for x in range(m.shape[0] - shape[0] + 1):
                if check_box(m, (x, y, z), shape) is None and overlapping(con, m, (x, y, z), shape) is None:
                    return x, y, z
    why = check_box(m, (0, 0, 0), shape)
    raise LatticeError(why or f"no free place for a {shape_str(shape)} block")


def smallest_fit(con: db.Connection, m: Machine, n: int) -> tuple[Coord, Coord]:
    """The smallest free box of whole psets holding at least n compute nodes
    (ties: the lowest corner), as BG/L's mpirun chose a partition."""
    if n > m.nodes:
        raise LatticeError(f"{n} ranks do not fit in the {m.nodes} compute nodes of this machine")
    X, Y, Z = m.shape
    shapes = sorted(((sx, sy, sz) for sx in range(1, X + 1) for sy in range(1, Y + 1) for sz in range(1, Z + 1)
                     if sx * sy * sz >= n and (sx * sy * sz) % m.pset_size == 0),
                    key=lambda s: (s[0] * s[1] * s[2], s[2], s[1]))
    for shape in shapes:
        for z in range(Z - shape[2] + 1):
            for y in range(Y - shape[1] + 1):
                for x in range(X - shape[0] + 1):
                    if check_box(m, (x, y, z), shape) is None and overlapping(con, m, (x, y, z), shape) is None:
                        return (x, y, z), shape
    raise NoRoom(f"no free block of whole psets holds {n} compute nodes (see `lattice blocks`)")


def fit(con: db.Connection, m: Machine, n: int) -> Block:
    """Where `lattice run` without --block runs n compute nodes: a Free block
    the administrator made that holds them, unless a new box of fewer nodes
    would (the smallest such block; ties: the lowest name), else a new box
    (smallest_fit, auto: created for the run, deleted after it)."""
    held = {r[0] for r in con.execute("SELECT block FROM jobs WHERE block IS NOT NULL AND state IN "
                                      "('Queued', 'Starting', 'Running', 'Dying')")}     # a run boots it already
    made = sorted((b for b in all_blocks(con) if b.state == "Free" and not b.auto and b.size >= n
                   and b.name not in held), key=lambda b: (b.size, b.name))
    try:
        corner, shape = smallest_fit(con, m, n)
    except LatticeError:
        if made:
            return made[0]
        raise
    if made and made[0].size <= shape[0] * shape[1] * shape[2]:
        return made[0]
    return Block("", corner, shape, "Free", True, None)


def set_state(con: db.Connection, name: str, state: str, message: str | None = None,
              expect: tuple[str, ...] | None = None) -> None:
    """Move a block to `state`, checking it is in one of `expect` first."""
    with db.transaction(con):
        b = get(con, name)
        if expect is not None and b.state not in expect:
            raise LatticeError(f"block {name} is {b.state}, not {' or '.join(expect)}")
        con.execute("UPDATE blocks SET state = ?, message = ?, changed = ? WHERE name = ?",
                    (state, message, db.now(), name))


def delete(con: db.Connection, name: str) -> None:
    with db.transaction(con):
        b = get(con, name)
        if b.state != "Free":
            raise LatticeError(f"block {name} is {b.state}: free it first (`lattice free {name}`)")
        con.execute("DELETE FROM blocks WHERE name = ?", (name,))
