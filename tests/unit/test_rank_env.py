"""The job's nodes numbered for LATTICE_NODEID / LATTICE_NNODES (lattice.jobs.jobenv.node_vars)."""
from __future__ import annotations

from lattice.jobs import jobenv


def test_nodes_are_numbered_in_machine_order_per_pset() -> None:
    nnodes, psets = jobenv.node_vars([5, 2, 2, 7, 5], pset_size=4)
    assert nnodes == "LATTICE_NNODES=3"
    assert psets == {0: "LATTICE_PSET_NODEIDS=-,-,0,-", 1: "LATTICE_PSET_NODEIDS=-,1,-,2"}


def test_the_table_is_never_taken_from_the_caller() -> None:
    assert not jobenv.exportable(jobenv.NODEIDS) and not jobenv.exportable("LATTICE_NODEID")
