"""The layout of a job's PMI fence tree (lattice.jobs.pmitree): every I/O node
has one parent, the service node at most k children, no node more than k,
every I/O node is reached, and the fan-out comes from LATTICE_PMI_FANOUT
or is refused with a clear message."""
from __future__ import annotations

import pytest

from lattice.jobs import pmitree
from lattice.errors import LatticeError


@pytest.mark.parametrize("n", [0, 1, 2, 7, 8, 9, 64, 73, 1024])
@pytest.mark.parametrize("k", [1, 2, 3, 8, 100])
def test_a_k_ary_tree_reaching_every_io_node(n: int, k: int) -> None:
    places = pmitree.layout(n, k)
    top = pmitree.top(n, k)
    assert len(top) == min(n, k)
    assert all(places[i].parent is None for i in top)
    assert all(len(p.children) <= k for p in places)
    # children and parents agree, and walking down from the top reaches each I/O node once
    for i, p in enumerate(places):
        for c in p.children:
            assert places[c].parent == i
    seen, todo, levels = [], list(top), 0
    while todo:
        levels += 1
        seen += todo
        todo = [c for i in todo for c in places[i].children]
    assert sorted(seen) == list(range(n))
    assert levels == pmitree.depth(n, k)


def test_one_io_node_is_a_tree_of_one() -> None:
    assert pmitree.layout(1, 8) == [pmitree.Place(parent=None, children=[])]


def test_1024_io_nodes_by_8_take_4_levels() -> None:
    assert pmitree.depth(1024, 8) == 4 and pmitree.depth(8, 8) == 1 and pmitree.depth(9, 8) == 2


def test_fanout_from_the_environment() -> None:
    assert pmitree.fanout({}) == pmitree.DEFAULT_FANOUT == 8
    assert pmitree.fanout({"LATTICE_PMI_FANOUT": "2"}) == 2
    for bad in ("0", "-1", "two", "1.5"):
        with pytest.raises(LatticeError, match="LATTICE_PMI_FANOUT=.*want a whole number of at least 1"):
            pmitree.fanout({"LATTICE_PMI_FANOUT": bad})
