"""Mapping a job's ranks onto a block's nodes and cores, as BG/L's mpirun did.

The mode says how many processes a node runs (`ppn`): coprocessor mode
(`co`) one per node, the second core left to MPICH's asynchronous progress
thread where the node has a real core to spare for it (lattice.nodes.cores);
virtual node mode (`vn`) one per core.  The mapping says which rank
goes where, exactly as BGLMPI_MAPPING:

- an ORDER, a permutation of X, Y, Z, T whose first letter varies fastest
  (XYZT: rank = x + X*(y + Y*(z + Z*t)); TXYZ fills a node's cores first);
- a FILE of one `x y z t` line per rank (`#` comments and blank lines
  allowed).

Coordinates are relative to the block's corner: x, y, z within its shape and
t (the core) within ppn.  Everything here is checked before a block boots or
a job starts, so a bad mapping costs nothing.
"""
from __future__ import annotations

import re
from typing import NamedTuple

from lattice.state.blocks import Block
from lattice.errors import LatticeError
from lattice.state.machine import Coord, Machine, shape_str
from lattice.state.personality import MODES as MODES   # one list of modes, re-exported

DEFAULT_MODE = "co"
DEFAULT_MAPPING = "XYZT"
ASYNC_PROGRESS = "MPIR_CVAR_ASYNC_PROGRESS"

Coord4 = tuple[int, int, int, int]        # x, y, z, t relative to the block
ORDER = re.compile(r"[XYZT]+", re.I)      # what is read as an order, not a file name


# NamedTuples, not dataclasses, here and in the modules `lattice run` loads
# (lattice.state.machine says why).
class Slot(NamedTuple):
    rank: int
    node: int       # the machine's compute node index (an element of Block.nodes(m))
    t: int          # the core within the node, 0..ppn-1
    app: int        # MPMD application number (PMI appnum)


class App(NamedTuple):
    exe: str
    args: list[str]
    nranks: int


class RankMapping(NamedTuple):
    mode: str
    ppn: int
    slots: list[Slot]                      # indexed by rank
    apps: list[App]
    env: dict[str, str]                    # added to every rank's environment

    @property
    def nranks(self) -> int:
        return len(self.slots)

    def nodes(self) -> list[int]:
        """The compute nodes the job uses, in order of first appearance by rank."""
        return list(dict.fromkeys(s.node for s in self.slots))


def ppn_of(m: Machine, mode: str) -> int:
    """Processes per node: one in coprocessor mode, one per core in virtual node mode."""
    if mode not in MODES:
        raise LatticeError(f"bad mode {mode!r}: co (coprocessor) or vn (virtual node)")
    return 1 if mode == "co" else m.cores


def nodes_needed(m: Machine, mode: str, nranks: int) -> int:
    """Compute nodes a job of nranks needs at the least."""
    ppn = ppn_of(m, mode)
    return -(-nranks // ppn)


def is_order(mapping: str) -> bool:
    """Whether --mapping names an order (letters X, Y, Z, T only) rather than a file."""
    return ORDER.fullmatch(mapping) is not None


def check_order(order: str) -> str:
    """The order in upper case, or a clear error."""
    up = order.upper()
    if len(up) != 4 or set(up) != set("XYZT"):
        raise LatticeError(f"bad mapping order {order!r}: a permutation of X, Y, Z and T "
                           f"(first letter fastest), e.g. XYZT or TXYZ")
    return up


def order_coords(order: str, shape: Coord, ppn: int, nranks: int) -> list[Coord4]:
    """Each rank's (x, y, z, t) under an order: the rank's digits in mixed
    radix, the first letter the least significant."""
    size = {"X": shape[0], "Y": shape[1], "Z": shape[2], "T": ppn}
    letters = check_order(order)
    out = []
    for rank in range(nranks):
        c, r = {}, rank
        for letter in letters:
            c[letter] = r % size[letter]
            r //= size[letter]
        out.append((c["X"], c["Y"], c["Z"], c["T"]))
    return out


def spread_coords(shape: Coord, nodes: int, ppn: int, nranks: int) -> list[Coord4]:
    """Each rank's (x, y, z, t) on the block's first `nodes` nodes (x fastest),
    srun's block distribution: consecutive ranks share a node, the first
    nranks mod nodes nodes take one rank more."""
    size = shape[0] * shape[1] * shape[2]
    if nodes > size:
        raise LatticeError(f"{nodes} nodes: the {shape_str(shape)} block has {size}")
    base, extra = divmod(nranks, nodes)
    if base + (extra > 0) > ppn:
        raise LatticeError(f"{nranks} ranks on {nodes} nodes need {base + (extra > 0)} per node; "
                           f"a node runs {ppn} in this mode")
    out = []
    for i in range(nodes):
        x, y, z = i % shape[0], i // shape[0] % shape[1], i // (shape[0] * shape[1])
        out += [(x, y, z, t) for t in range(base + (i < extra))]
    return out


def read_map(path: str, shape: Coord, ppn: int, nranks: int) -> list[Coord4]:
    """Each rank's (x, y, z, t) from a map file: line i (not counting
    comments and blank lines) is rank i.  Every line must be a coordinate in
    the block and none may repeat; the file must cover every rank (lines for
    ranks beyond the job are checked, then unused)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise LatticeError(f"cannot read map file {path}: {getattr(e, 'strerror', None) or e}",
                           "--mapping takes an order (a permutation of X, Y, Z, T such as XYZT) "
                           "or a map file of `x y z t` lines") from e
    limits = (*shape, ppn)
    coords: list[Coord4] = []
    seen: dict[Coord4, int] = {}
    for lineno, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        where = f"map file {path} line {lineno}"
        if len(words) != 4 or not all(w.isdigit() for w in words):
            raise LatticeError(f"{where}: expected `x y z t` (four numbers), got {line.strip()!r}")
        c = (int(words[0]), int(words[1]), int(words[2]), int(words[3]))
        for d, name in enumerate("xyzt"):
            if c[d] >= limits[d]:
                what = f"{ppn} process{'es' if ppn > 1 else ''} per node" if d == 3 else \
                       f"the {shape_str(shape)} block"
                raise LatticeError(f"{where}: {name}={c[d]} is outside {what} "
                                   f"({name} must be below {limits[d]})")
        if c in seen:
            raise LatticeError(f"{where}: {' '.join(map(str, c))} repeats line {seen[c]} "
                               f"(each coordinate holds one rank)")
        seen[c] = lineno
        coords.append(c)
    if len(coords) < nranks:
        raise LatticeError(f"map file {path} places {len(coords)} rank{'s' if len(coords) != 1 else ''} "
                           f"but the job has {nranks}: every rank needs a line `x y z t`")
    return coords[:nranks]


def map_ranks(m: Machine, b: Block, apps: list[App], mode: str, mapping: str | None,
              nodes: int | None = None) -> RankMapping:
    """Where each rank of the job runs on block b, or a LatticeError saying
    why it cannot (bad mode or mapping, more ranks than the block holds).
    nodes (-N): the ranks on exactly that many nodes (spread_coords), or at
    most that many with a mapping."""
    ppn = ppn_of(m, mode)
    if not apps:
        raise LatticeError("no program to run")
    for a in apps:
        if a.nranks < 1:
            raise LatticeError(f"{a.exe}: -n must be at least 1")
    nranks = sum(a.nranks for a in apps)
    capacity = b.size * ppn
    if nranks > capacity:
        raise LatticeError(f"{nranks} ranks do not fit in block {b.name}: {b.size} nodes x {ppn} "
                           f"process{'es' if ppn > 1 else ''} per node ({mode} mode) hold {capacity}")
    if nodes is not None and mapping is None:
        coords = spread_coords(b.shape, nodes, ppn, nranks)
    elif is_order(mapping := mapping or DEFAULT_MAPPING):
        coords = order_coords(mapping, b.shape, ppn, nranks)
    else:
        coords = read_map(mapping, b.shape, ppn, nranks)
    app_of = [i for i, a in enumerate(apps) for _ in range(a.nranks)]
    slots = [Slot(rank=r, node=m.index((b.corner[0] + x, b.corner[1] + y, b.corner[2] + z)), t=t, app=app_of[r])
             for r, (x, y, z, t) in enumerate(coords)]
    used = len({s.node for s in slots})
    if nodes is not None and used > nodes:
        raise LatticeError(f"the mapping puts the ranks on {used} nodes, more than -N {nodes}")
    # MPICH's progress thread is decided per node, on real cores (lattice.nodes.cores)
    return RankMapping(mode=mode, ppn=ppn, slots=slots, apps=list(apps), env={})


def process_mapping(p: RankMapping) -> str:
    """PMI_process_mapping: which ranks share a node, in MPICH's vector
    format `(vector,(nodeid,nnodes,ppn),...)`.  Each triple gives the next
    nnodes*ppn ranks, ppn at a time on nodes nodeid, nodeid+1, ...; node ids
    count nodes in order of first appearance by rank."""
    ids: dict[int, int] = {}
    seq = [ids.setdefault(s.node, len(ids)) for s in p.slots]
    triples: list[Coord] = []
    r = 0
    while r < len(seq):
        run = _run(seq, r)
        start, count = seq[r], 1
        # extend while the next node id follows with a run of the same length
        while r + count * run < len(seq) and seq[r + count * run] == start + count \
                and _run(seq, r + count * run) == run:
            count += 1
        triples.append((start, count, run))
        r += count * run
    return "(vector," + ",".join(f"({a},{n},{k})" for a, n, k in triples) + ")"


def _run(seq: list[int], i: int) -> int:
    """How many consecutive entries from i equal seq[i]."""
    j = i
    while j < len(seq) and seq[j] == seq[i]:
        j += 1
    return j - i


def map_lines(m: Machine, p: RankMapping, host: str, cpus: list[str] | None = None) -> list[str]:
    """`lattice run --print-map`: rank, application, torus coordinates and
    core, node location and host, one line per rank; with cpus (each rank's
    real CPUs, lattice.nodes.cores) a last column of them."""
    rows = [("rank", "app", "x", "y", "z", "t", "location", "host", *(("cpus",) if cpus else ()))]
    for s in p.slots:
        x, y, z = m.coord(s.node)
        rows.append((str(s.rank), str(s.app), str(x), str(y), str(z), str(s.t), m.compute_location(s.node), host,
                     *((cpus[s.rank],) if cpus else ())))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
