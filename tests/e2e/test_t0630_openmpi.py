"""Unmodified Open MPI programs (Debian Open MPI 4.1.4, examples/openmpi/)
start through Lattice's PMI (the pmix/flux component over build/lib/libpmi.so,
docs/openmpi.md) with no Open MPI daemon: `lattice run` gives them that
environment by itself; correct results under cnk and Linux, in co and vn
mode, over two psets; MPI_Abort(..., 7) ends `lattice run` with 7."""
from __future__ import annotations

import re
import subprocess
import shutil
from pathlib import Path
from typing import Iterator

import pytest

from conftest import EXAMPLES, Machine, make_machine

OMPI_EX = EXAMPLES / "openmpi"


@pytest.fixture(scope="module")
def ompi_machine(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    assert shutil.which("mpicc.openmpi"), "Open MPI is not installed (apt-get install openmpi-bin libopenmpi-dev)"
    for p in ("hello", "ring", "abort"):
        assert (OMPI_EX / p).exists(), f"{OMPI_EX / p} not built"
    assert (built / "lib" / "libpmi.so").exists(), "build/lib/libpmi.so not built"
    m = make_machine(tmp_path_factory.mktemp("ompi"), "--shape", "1x1x4", "--pset-size", "2", "--memory", "256M")
    m.run("block", "create", "P", "--shape", "1x1x4")
    m.run("boot", "P")
    yield m
    m.run("free", "P", check=False)


def run(m: Machine, *args: str, check: bool = True) -> "subprocess.CompletedProcess[str]":
    return m.run("run", "--block", "P", "--hugepages", "keep", "--cwd", "/tmp", *args, check=check, timeout=180)


@pytest.mark.parametrize("kernel", ["cnk", "linux"])
@pytest.mark.parametrize("mode,n", [("co", 4), ("vn", 8)])
def test_hello_allreduce(ompi_machine: Machine, kernel: str, mode: str, n: int) -> None:
    p = run(ompi_machine, "-n", str(n), "--mode", mode, "--kernel", kernel, str(OMPI_EX / "hello"))
    ranks = sorted(int(r) for r in re.findall(r"^hello from rank (\d+) of %d" % n, p.stdout, re.M))
    assert ranks == list(range(n)), p.stdout
    want = n * (n + 1) // 2
    assert f"allreduce sum={want} (want {want}) max={10 * (n - 1)} (want {10 * (n - 1)}): ok" in p.stdout, p.stdout


@pytest.mark.parametrize("kernel", ["cnk", "linux"])
def test_ring(ompi_machine: Machine, kernel: str) -> None:
    p = run(ompi_machine, "-n", "4", "--kernel", kernel, str(OMPI_EX / "ring"))
    assert p.returncode == 0, p.stderr


@pytest.mark.parametrize("kernel", ["cnk", "linux"])
def test_abort_exits_7(ompi_machine: Machine, kernel: str) -> None:
    p = run(ompi_machine, "-n", "4", "--kernel", kernel, str(OMPI_EX / "abort"), check=False)
    assert p.returncode == 7, (p.returncode, p.stderr)
    assert re.search(r"rank 3 \(R00-M0-N00-C:J03\) called abort with code 7", p.stderr), p.stderr


def test_print_map_shows_the_open_mpi_environment(ompi_machine: Machine) -> None:
    p = ompi_machine.run("run", "--block", "P", "-n", "2", "--print-map", "-v", str(OMPI_EX / "hello"))
    assert "OMPI_MCA_pmix=flux" in p.stdout and "FLUX_PMI_LIBRARY_PATH=" in p.stdout, p.stdout
