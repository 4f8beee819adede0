"""Lattice's torus collectives (compute/libtorus, `lattice run --collectives
torus`), end to end on a booted 2x2x2 block: an unmodified MPICH program
(tests/e2e/mpi/torus_coll.c) checks MPI_Bcast, MPI_Reduce, MPI_Allreduce and
MPI_Barrier for many datatypes (derived ones too), ops (user,
non-commutative), sizes, roots, MPI_IN_PLACE, sub-communicators and an
intercommunicator, with the library preloaded, under cnk and in Linux mode,
one rank per node and one per core.  The library's own line
(LATTICE_TORUS_VERBOSE=1) shows it took the torus path with the box the
mapping gives.  Which library answers MPI_Bcast shows the default (mpi),
the option and the machine's default; an Open MPI program with torus, and a
bad machine default, get one error line.

One 2x2x2 machine (two psets of 4, 2 cores per node, 256 MiB) with block T
booted over all of it serves the whole file.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from conftest import BUILD, ROOT, Machine, make_machine

SRC = Path(__file__).resolve().parent / "mpi" / "torus_coll.c"
LIB = BUILD / "lib" / "libtorus.so"
VERBOSE = "LATTICE_TORUS_VERBOSE=1"
ALL_SIZES = "LATTICE_TORUS_BCAST_MIN=0"    # small broadcasts too by the torus (by default they go to MPICH)


@pytest.fixture(scope="module")
def tm(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    assert shutil.which("mpicc.mpich"), "MPICH is not installed (apt-get install mpich libmpich-dev)"
    assert LIB.exists(), f"{LIB} missing: run make"
    m = make_machine(tmp_path_factory.mktemp("coll"), "--shape", "2x2x2", "--pset-size", "4",
                     "--memory", "256M", "--cores", "2")
    m.run("block", "create", "T", "--shape", "2x2x2")
    m.run("boot", "T")
    yield m
    m.run("free", "T", check=False)
    shutil.rmtree(m.work, ignore_errors=True)


@pytest.fixture(scope="module")
def prog(tm: Machine) -> str:
    exe = tm.work / "torus_coll"
    subprocess.run(["mpicc.mpich", "-std=c11", "-D_GNU_SOURCE", "-O2", "-Wall", "-Wextra", "-Werror",
                    "-o", str(exe), str(SRC)], check=True)
    os.chmod(exe, 0o755)
    return str(exe)


def run(m: Machine, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return m.run("run", "--block", "T", "--cwd", str(m.work), *args, check=check, timeout=900)


def torus_lines(p: subprocess.CompletedProcess[str]) -> list[str]:
    return [l for l in p.stderr.splitlines() if l.startswith("libtorus: ")]


@pytest.mark.parametrize("kernel", ["cnk", "linux"])
def test_collectives_correct_with_the_torus_library_one_rank_per_node(tm: Machine, prog: str, kernel: str) -> None:
    p = run(tm, "-n", "8", "--kernel", kernel, "--collectives", "torus", "--env", VERBOSE, "--env", ALL_SIZES, prog)
    assert re.search(r"^torus_coll: \d+ checks ok on 8 ranks$", p.stdout, re.M), p.stdout + p.stderr
    lines = torus_lines(p)
    # the whole block, XYZT: a 2x2x2 torus (the machine's whole torus), two colours per dimension
    assert "libtorus: 8 ranks on 8 hosts: box 2x2x2 torus, 6 colours" in lines, p.stderr
    # the halves are 2x2 planes of it
    assert "libtorus: 4 ranks on 4 hosts: box 2x2 torus, 4 colours" in lines, p.stderr


def test_collectives_correct_one_rank_per_core_with_a_mapping(tm: Machine, prog: str) -> None:
    p = run(tm, "-n", "16", "--mode", "vn", "--mapping", "TXYZ", "--collectives", "torus", "--env", VERBOSE,
            "--env", ALL_SIZES, prog, "quick")
    assert re.search(r"^torus_coll: \d+ checks ok on 16 ranks$", p.stdout, re.M), p.stdout + p.stderr
    # the cores are a fourth dimension of the box (never wrapped): a mesh of 4 colours
    assert "libtorus: 16 ranks on 8 hosts: box 2x2x2x2 mesh, 4 colours" in torus_lines(p), p.stderr


def which(m: Machine, prog: str, *opts: str) -> str:
    p = run(m, "-n", "2", *opts, prog, "which")
    found = re.findall(r"^MPI_Bcast from (\S+)$", p.stdout, re.M)
    assert len(found) == 1, p.stdout + p.stderr
    return found[0]


def test_mpi_by_default_torus_by_option_or_machine_default(tm: Machine, prog: str) -> None:
    assert which(tm, prog).startswith("libmpich.so")
    assert which(tm, prog, "--collectives", "torus") == "libtorus.so"
    assert which(tm, prog, "--collectives", "torus", "--kernel", "linux") == "libtorus.so"
    # a job's own LD_PRELOAD keeps working, after the library
    p = run(tm, "-n", "2", "--collectives", "torus", "--env", "LD_PRELOAD=libm.so.6", prog, "which")
    assert "MPI_Bcast from libtorus.so" in p.stdout, p.stdout + p.stderr
    toml = tm.home / "machine.toml"
    before = toml.read_text()
    try:
        toml.write_text(before + '\n[mpi]\ncollectives = "torus"\n')
        assert which(tm, prog) == "libtorus.so"
        assert which(tm, prog, "--collectives", "mpi").startswith("libmpich.so")
        toml.write_text(before + '\n[mpi]\ncollectives = "fast"\n')
        p = run(tm, "-n", "2", prog, "which", check=False)
        assert p.returncode in (1, 2) and "Traceback" not in p.stderr, p.stderr
        assert p.stderr.startswith("lattice: error: ") and "mpi.collectives 'fast' is not mpi or torus" in p.stderr
    finally:
        toml.write_text(before)


def test_open_mpi_program_with_torus_is_one_error_line(tm: Machine) -> None:
    ompi = BUILD / "examples" / "openmpi" / "hello"
    if not ompi.exists():
        pytest.skip("Open MPI examples not built (mpicc.openmpi missing)")
    p = run(tm, "-n", "2", "--collectives", "torus", str(ompi), check=False)
    assert p.returncode in (1, 2) and "Traceback" not in p.stderr, p.stderr
    assert p.stderr.splitlines()[0] == (f"lattice: error: --collectives torus works with MPICH programs only: "
                                        f"{ompi} is an Open MPI program"), p.stderr
