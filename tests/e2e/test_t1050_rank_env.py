"""The rank's place in its environment, as srun, Hydra and mpirun tell it
(issue 26 item 5): its index among the job's ranks on its node
(LATTICE_LOCALID, MPI_LOCALRANKID, MPI_LOCALNRANKS), its node's index and the
job's node count (LATTICE_NODEID, LATTICE_NNODES), and for an Open MPI
program Open MPI's own names (OMPI_COMM_WORLD_*, PMIX_RANK), under cnk, in
the node sandbox and with the preload client.  One booted 1x1x4 block in
psets of 2: a job of four nodes spans both I/O nodes."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from conftest import LATTICE, Machine, booted_block

KERNELS = {"cnk": ["--kernel", "cnk"], "linux": ["--kernel", "linux"],
           "preload": ["--kernel", "linux", "--no-sandbox"]}
PROBE = Path(__file__).with_name("rankenv_probe.c")


@pytest.fixture(scope="module")
def em(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    yield from booted_block(tmp_path_factory.mktemp("rankenv"), "E", "1x1x4", "--pset-size", "2", "--memory", "256M")


def build(m: Machine, name: str, cc: str, *flags: str) -> str:
    exe = m.work / name
    subprocess.run([cc, "-O2", "-Wall", "-Wextra", "-Werror", *flags, "-o", str(exe), str(PROBE)], check=True)
    os.chmod(exe, 0o755)
    return str(exe)


@pytest.fixture(scope="module")
def probe(em: Machine) -> str:
    return build(em, "rankenv_probe", "gcc")


def places(out: str) -> dict[int, dict[str, str]]:
    """Each rank's line of the probe, as name -> value, by rank."""
    rows = [dict(w.split("=", 1) for w in line.split()) for line in out.splitlines() if line.startswith("rank=")]
    return {int(r["rank"]): r for r in rows}


@pytest.mark.parametrize("kernel", KERNELS)
def test_two_ranks_on_each_of_two_nodes_know_their_place(em: Machine, probe: str, kernel: str) -> None:
    """--ntasks-per-node 2: virtual node mode, two ranks a node."""
    p = em.run("run", "--block", "E", *KERNELS[kernel], "-N", "2", "--ntasks-per-node", "2", probe)
    got = places(p.stdout)
    assert sorted(got) == [0, 1, 2, 3], p.stdout
    for r, row in got.items():
        assert (row["localid"], row["mpi_localrankid"]) == (str(r % 2), str(r % 2)), row
        assert (row["nodeid"], row["nnodes"], row["mpi_localnranks"]) == (str(r // 2), "2", "2"), row
        assert row["ompi_rank"] == row["pmix_rank"] == "unset", row       # not an Open MPI program
        assert row["nodeids"] == "unset", row      # the node's table is read by the node, never passed on


def test_node_index_counts_across_io_nodes(em: Machine, probe: str) -> None:
    """Four nodes over two psets: the second I/O node's nodes are 2 and 3."""
    got = places(em.run("run", "--block", "E", "-n", "4", probe).stdout)
    assert {r: (row["nodeid"], row["nnodes"], row["localid"], row["mpi_localnranks"]) for r, row in got.items()} \
        == {r: (str(r), "4", "0", "1") for r in range(4)}, got


def test_the_callers_own_place_is_not_passed_on(em: Machine, probe: str) -> None:
    env = dict(em.env, LATTICE_NODEID="9", LATTICE_NNODES="9", LATTICE_PSET_NODEIDS="7,7")
    p = subprocess.run([*LATTICE, "run", "--block", "E", "-n", "2", probe], env=env, capture_output=True,
                       text=True, timeout=600, stdin=subprocess.DEVNULL)
    got = places(p.stdout)
    assert p.returncode == 0 and {r: (row["nodeid"], row["nnodes"]) for r, row in got.items()} == \
        {0: ("0", "2"), 1: ("1", "2")}, (p.stdout, p.stderr)


@pytest.mark.parametrize("kernel", KERNELS)
def test_an_open_mpi_program_sees_open_mpis_names(em: Machine, kernel: str) -> None:
    assert shutil.which("mpicc.openmpi"), "Open MPI is not installed (apt-get install openmpi-bin libopenmpi-dev)"
    exe = build(em, "rankenv_ompi", "mpicc.openmpi", "-DWITH_MPI")
    p = em.run("run", "--block", "E", "--hugepages", "keep", "--cwd", "/tmp", *KERNELS[kernel],
               "-N", "2", "--ntasks-per-node", "2", exe, timeout=300)
    got = places(p.stdout)
    assert sorted(got) == [0, 1, 2, 3], (p.stdout, p.stderr)
    for r, row in got.items():
        assert row["mpi_rank"] == row["ompi_rank"] == row["pmix_rank"] == str(r), row
        assert (row["ompi_size"], row["ompi_local_rank"], row["ompi_local_size"], row["ompi_node_rank"]) == \
            ("4", str(r % 2), "2", str(r // 2)), row
