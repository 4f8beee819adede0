"""Blocks: boxes of whole psets inside the torus that never overlap.

`lattice block create/delete` and `lattice blocks`, in-process through the
CLI's error boundary, each test in its own LATTICE_HOME; nothing is booted.
"""
from __future__ import annotations

import itertools

import pytest

from lattice.state import blocks, db
from lattice.errors import LatticeError
from lattice.state.machine import Machine
from test_service_machine import Home, assert_clean_error, home  # noqa: F401 - home is a fixture

# The default machine: 2x2x4, psets of 8 = two 2x2x2 boxes, z 0..1 and z 2..3.


@pytest.fixture
def m(home: Home) -> Home:
    home.ok("init")
    return home


@pytest.fixture
def wide(home: Home) -> Home:
    """4x2x2 in psets of 2: eight 2x1x1 psets, so blocks can sit side by side in x and y."""
    home.ok("init", "--shape", "4x2x2", "--pset-size", "2")
    return home


def block_rows(h: Home) -> dict[str, tuple[tuple[int, int, int], tuple[int, int, int], str]]:
    return {r["name"]: ((r["x0"], r["y0"], r["z0"]), (r["sx"], r["sy"], r["sz"]), r["state"])
            for r in h.db().execute("SELECT * FROM blocks")}


def nodes_of(h: Home, name: str) -> set[int]:
    mach = h.machine()
    corner, shape, _ = block_rows(h)[name]
    return set(mach.box(corner, shape))


# --- create: what is accepted ---------------------------------------------------

def test_create_with_corner(m: Home) -> None:
    r = m.ok("block", "create", "B", "--shape", "2x2x2", "--corner", "0,0,2")
    assert block_rows(m) == {"B": ((0, 0, 2), (2, 2, 2), "Free")}
    mach = m.machine()
    # z 2..3 is pset 1 exactly: nodes 8..15, behind I/O node J01
    assert nodes_of(m, "B") == set(range(8, 16)) == set(mach.pset_nodes(1))
    assert "8 compute nodes" in r.out and mach.io_location(1) in r.out and mach.io_location(0) not in r.out


def test_create_whole_machine(m: Home) -> None:
    r = m.ok("block", "create", "ALL", "--shape", "2x2x4")
    assert block_rows(m)["ALL"][:2] == ((0, 0, 0), (2, 2, 4))
    assert "16 compute nodes" in r.out and "I:J00" in r.out and "I:J01" in r.out


def test_default_corner_is_first_free_place(wide: Home) -> None:
    """Without --corner a block goes to the first place it fits, x fastest then y then z."""
    wide.ok("block", "create", "a", "--shape", "2x1x1")
    wide.ok("block", "create", "b", "--shape", "2x1x1")
    wide.ok("block", "create", "c", "--shape", "4x2x1")      # z = 0 now only has x 0..3 at y 1: no room
    rows = block_rows(wide)
    assert rows["a"][0] == (0, 0, 0)
    assert rows["b"][0] == (2, 0, 0)
    assert rows["c"][0] == (0, 0, 1)
    # skips past a block with an explicit corner
    wide.ok("block", "create", "d", "--shape", "2x1x1", "--corner", "0,1,0")
    wide.ok("block", "create", "e", "--shape", "2x1x1")
    assert block_rows(wide)["e"][0] == (2, 1, 0)


def test_blocks_side_by_side_do_not_overlap(wide: Home) -> None:
    wide.ok("block", "create", "L", "--shape", "2x2x2", "--corner", "0,0,0")
    wide.ok("block", "create", "R", "--shape", "2x2x2", "--corner", "2,0,0")
    assert nodes_of(wide, "L").isdisjoint(nodes_of(wide, "R"))
    assert nodes_of(wide, "L") | nodes_of(wide, "R") == set(range(16))


def test_every_accepted_box_is_whole_psets_inside_the_torus() -> None:
    """Brute force with the API: check_box accepts exactly the boxes inside the
    torus whose psets are all wholly inside them."""
    for shape, p in [((2, 2, 4), 8), ((4, 2, 2), 2), ((1, 2, 4), 2), ((2, 3, 2), 6)]:
        mach = Machine(shape=shape, pset_size=p)
        accepted = 0
        for corner in itertools.product(*(range(-1, d + 1) for d in shape)):
            for size in itertools.product(*(range(0, d + 2) for d in shape)):
                inside = all(corner[d] >= 0 and size[d] >= 1 and corner[d] + size[d] <= shape[d] for d in range(3))
                if inside:
                    nodes = set(mach.box(corner, size))
                    whole = all(set(mach.pset_nodes(mach.pset_of(i))) <= nodes for i in nodes)
                else:
                    whole = False
                why = blocks.check_box(mach, corner, size)
                assert (why is None) == whole, (shape, p, corner, size, why)
                accepted += why is None
                if not inside:
                    assert why and "does not fit" in why
                elif not whole:
                    assert why and "whole psets" in why
        assert accepted >= mach.psets


# --- create: what is refused ------------------------------------------------------

@pytest.mark.parametrize("args, why", [
    (["--shape", "2x2x2", "--corner", "0,0,3"], "does not fit"),     # z 3..4 runs off the end
    (["--shape", "2x2x2", "--corner", "1,0,0"], "does not fit"),     # x
    (["--shape", "2x2x2", "--corner", "0,1,0"], "does not fit"),     # y
    (["--shape", "2x2x8"], "does not fit"),                          # bigger than the torus, no corner
    (["--shape", "4x1x1"], "does not fit"),
    (["--shape", "2x2x1"], "whole psets"),                           # half of pset 0
    (["--shape", "2x2x2", "--corner", "0,0,1"], "whole psets"),      # halves of psets 0 and 1
    (["--shape", "1x2x4"], "whole psets"),
    (["--shape", "2x2x2", "--corner", "0,0"], "bad coordinates"),
    (["--shape", "2x2x2", "--corner=-1,0,0"], "bad coordinates"),
    (["--shape", "2x2"], "bad shape"),
    (["--shape", "0x2x2"], "bad shape"),
])
def test_create_refused(m: Home, args: list[str], why: str) -> None:
    assert_clean_error(m.call("block", "create", "X", *args), why, status=1)
    assert block_rows(m) == {}


@pytest.mark.parametrize("name", ["-x", ".hidden", "a b", "a/b", "..", "", "x" * 65, "é"])
def test_bad_names(m: Home, name: str) -> None:
    assert_clean_error(m.call("block", "create", "--shape", "2x2x2", "--", name), "bad block name")
    assert block_rows(m) == {}
    assert not (m.path / "blocks").exists()


def test_longest_name_is_fine(m: Home) -> None:
    m.ok("block", "create", "x" * 64, "--shape", "2x2x2")
    assert list(block_rows(m)) == ["x" * 64]


def test_overlap_refused(m: Home) -> None:
    m.ok("block", "create", "A", "--shape", "2x2x2", "--corner", "0,0,0")
    r = m.call("block", "create", "B", "--shape", "2x2x4", "--corner", "0,0,0")
    assert_clean_error(r, "overlaps block 'A'")
    r = m.call("block", "create", "C", "--shape", "2x2x2", "--corner", "0,0,0")
    assert_clean_error(r, "overlaps block 'A'")
    assert list(block_rows(m)) == ["A"]
    # the free half is still there for the taking
    m.ok("block", "create", "D", "--shape", "2x2x2")
    assert block_rows(m)["D"][0] == (0, 0, 2)


def test_full_machine_refuses_more(m: Home) -> None:
    m.ok("block", "create", "ALL", "--shape", "2x2x4")
    assert_clean_error(m.call("block", "create", "B", "--shape", "2x2x2"), "no free place")
    assert list(block_rows(m)) == ["ALL"]


def test_duplicate_name_refused(m: Home) -> None:
    m.ok("block", "create", "A", "--shape", "2x2x2")
    assert_clean_error(m.call("block", "create", "A", "--shape", "2x2x2"), "already exists")
    assert list(block_rows(m)) == ["A"]


# --- delete ------------------------------------------------------------------------

def test_delete_frees_the_nodes(m: Home) -> None:
    m.ok("block", "create", "A", "--shape", "2x2x4")
    m.ok("block", "delete", "A")
    assert block_rows(m) == {}
    m.ok("block", "create", "B", "--shape", "2x2x2", "--corner", "0,0,2")    # was A's
    m.ok("block", "create", "A", "--shape", "2x2x2")                         # and so is the name
    assert set(block_rows(m)) == {"A", "B"}


def test_delete_unknown(m: Home) -> None:
    m.ok("block", "create", "A", "--shape", "2x2x2")
    assert_clean_error(m.call("block", "delete", "nope"), "no block named 'nope'")
    assert list(block_rows(m)) == ["A"]


@pytest.mark.parametrize("state", ["Allocated", "Booting", "Initialized", "Terminating", "Error"])
def test_delete_refuses_a_block_in_use(m: Home, state: str) -> None:
    m.ok("block", "create", "A", "--shape", "2x2x2")
    with m.db() as con:
        con.execute("UPDATE blocks SET state = ? WHERE name = 'A'", (state,))
    assert_clean_error(m.call("block", "delete", "A"), state, "lattice free A")
    assert block_rows(m)["A"][2] == state


def test_block_needs_an_action(m: Home) -> None:
    r = m.call("block")
    assert r.status == 2 and "ACTION" in r.err


# --- lattice blocks ------------------------------------------------------------------

def test_blocks_listing(wide: Home) -> None:
    assert wide.ok("blocks").out.splitlines()[1:] == []                   # just the heading
    wide.ok("block", "create", "zeta", "--shape", "2x1x1", "--corner", "2,1,1")
    wide.ok("block", "create", "alpha", "--shape", "4x2x1")
    with wide.db() as con:
        con.execute("UPDATE blocks SET state = 'Error', message = 'node lost' WHERE name = 'zeta'")
    lines = wide.ok("blocks").out.splitlines()
    head = lines[0].split()
    assert head[:6] == ["name", "state", "shape", "corner", "nodes", "I/O"]
    rows = [line.split(None, 6) for line in lines[1:]]
    assert [r[0] for r in rows] == ["alpha", "zeta"]                        # sorted by name
    assert rows[0][:6] == ["alpha", "Free", "4x2x1", "0,0,0", "8", "4"]    # 8 nodes = 4 psets of 2
    assert rows[1][:6] == ["zeta", "Error", "2x1x1", "2,1,1", "2", "1"]
    assert rows[1][6] == "node lost"


def test_blocks_api_state_checks(m: Home) -> None:
    with m.active():
        con = db.connect()
        mach = m.machine()
        b = blocks.create(con, mach, "A", (2, 2, 2), None)
        assert (b.corner, b.state, b.auto, b.size, b.psets(mach)) == ((0, 0, 0), "Free", False, 8, [0])
        blocks.set_state(con, "A", "Allocated", expect=("Free",))
        with pytest.raises(LatticeError, match="Allocated, not Free"):
            blocks.set_state(con, "A", "Allocated", expect=("Free",))
        assert blocks.get(con, "A").state == "Allocated"


def test_smallest_fit(wide: Home) -> None:
    """What `lattice run -n N` picks: the smallest free box of whole psets, then the lowest corner."""
    with wide.active():
        con = db.connect()
        mach = wide.machine()
        assert blocks.smallest_fit(con, mach, 1) == ((0, 0, 0), (2, 1, 1))
        assert blocks.smallest_fit(con, mach, 3)[1] in {(2, 2, 1), (4, 1, 1)}
        blocks.create(con, mach, "a", (2, 1, 1), (0, 0, 0))
        assert blocks.smallest_fit(con, mach, 2) == ((2, 0, 0), (2, 1, 1))
        corner, shape = blocks.smallest_fit(con, mach, 5)
        assert shape[0] * shape[1] * shape[2] == 8
        assert blocks.check_box(mach, corner, shape) is None and blocks.overlapping(con, mach, corner, shape) is None
        with pytest.raises(LatticeError, match="do not fit"):
            blocks.smallest_fit(con, mach, 17)
        blocks.create(con, mach, "b", (4, 2, 1), (0, 0, 1))
        with pytest.raises(LatticeError, match="no free block"):
            blocks.smallest_fit(con, mach, 7)


def test_a_run_without_block_takes_a_free_block_that_fits(m: Home) -> None:
    """lattice run without --block: the smallest Free block made by hand that holds the job, unless
    a new box of fewer nodes would; never a booted or auto block; a new box when none fits."""
    con, mach = m.db(), m.machine()
    fit, create = (lambda n: blocks.fit(con, mach, n)), (lambda *a, **k: blocks.create(con, mach, *a, **k))
    create("BIG", (2, 2, 4), (0, 0, 0))
    assert fit(8).name == "BIG"              # no room for a new box: the made block
    blocks.delete(con, "BIG")
    create("HALF", (2, 2, 2), (0, 0, 0))
    assert fit(8).name == "HALF"             # as small as a new box would be
    assert fit(3).name == "HALF"             # psets of 8: a new box is no smaller
    blocks.set_state(con, "HALF", "Initialized")
    new = fit(8)                               # a booted block is not taken
    assert new.auto and new.corner == (0, 0, 2) and new.shape[0] * new.shape[1] * new.shape[2] == 8
    blocks.set_state(con, "HALF", "Free")
    create("auto-1", (2, 2, 2), (0, 0, 2), auto=True)
    assert fit(8).name == "HALF"               # an auto block is another run's
    blocks.delete(con, "HALF")
    with pytest.raises(LatticeError, match="no free block"):
        fit(9)
