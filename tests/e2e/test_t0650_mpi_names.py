"""MPI name publishing (MPI_Publish_name / Lookup_name / Unpublish_name) through Lattice's PMI server:
the job's names live at the top of the PMI tree, so ranks behind another I/O node see them, and the
answers are those of mpiexec.hydra on this host, under both kernels."""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from conftest import EXAMPLES, Machine, booted_block
from cnk_helpers import unlabelled

NAMES = EXAMPLES / "mpi" / "names"


@pytest.fixture(scope="module")
def two_psets(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    assert NAMES.exists(), f"{NAMES} missing: run make"
    yield from booted_block(tmp_path_factory.mktemp("names"), "P", "1x1x4", "--pset-size", "2", "--memory", "256M")


@pytest.fixture(scope="module")
def native() -> list[str]:
    p = subprocess.run(["mpiexec.hydra", "-n", "4", str(NAMES)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return unlabelled(p.stdout)


@pytest.mark.parametrize("kernel", ["cnk", "linux"])
def test_names_are_the_jobs_and_answer_as_under_hydra(two_psets: Machine, native: list[str], kernel: str) -> None:
    p = two_psets.run("run", "--block", "P", "-n", "4", "--label", "--kernel", kernel, str(NAMES), timeout=180)
    got = unlabelled(p.stdout)
    assert got == native, (got, native)
    # what that means: every rank, on both I/O nodes, found rank 0's port; a name is taken once
    assert got.count("lookup: ok same port") == 4
    assert got.count("lookup after unpublish: MPI_ERR_NAME") == 4
    assert "publish again: MPI_ERR_NAME" in got and "unpublish: ok" in got
    assert {l.split(":")[0] for l in p.stdout.splitlines() if "lookup: ok" in l} == {"0", "1", "2", "3"}
