"""cnk's thread limit said clearly (issue 26 item 5): an OpenMP program
asking for more threads than its rank may run gets one line on its stderr
naming the limit and how to change it, and a RAS WARNING of the job; within
the limit nothing is said.  A rank may run its cores' threads (the node's in
co mode, its share in vn mode) and 2 more for an MPI library; a job may set
its own limit instead (`lattice run --threads N`, issue 28 item 3)."""
from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from conftest import Machine, booted_block


@pytest.fixture(scope="module")
def tm(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    yield from booted_block(tmp_path_factory.mktemp("threads"), "T", "1x1x2", "--pset-size", "2", "--memory", "256M")


@pytest.fixture(scope="module")
def omp(tm: Machine) -> str:
    exe = tm.work / "omp_probe"
    subprocess.run(["gcc", "-fopenmp", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(exe),
                    str(Path(__file__).with_name("omp_probe.c"))], check=True)
    os.chmod(exe, 0o755)
    return str(exe)


def last_job(m: Machine) -> str:
    return m.run("jobs").stdout.splitlines()[-1].split()[0]


@pytest.mark.parametrize("mode,limit,cores", [("co", 4, 2), ("vn", 3, 1)])
def test_too_many_openmp_threads_are_said_with_the_limit(tm: Machine, omp: str, mode: str, limit: int,
                                                         cores: int) -> None:
    n = 1 if mode == "co" else 2
    p = tm.run("run", "--block", "T", "--mode", mode, "-N", "1", "-n", str(n), "--env", "OMP_NUM_THREADS=8", omp,
               check=False)
    assert p.returncode != 0, (p.stdout, p.stderr)
    # cnk's stream and the program's reach `lattice run` apart: libgomp's "libgomp: " may come between
    said = re.findall(r"cnk: thread limit: [^\n]*", p.stderr)
    assert len(said) == n, p.stderr         # once per rank, however many clones failed
    assert f"may run {limit} threads (its {cores} cores and 2 for its MPI library)" in said[0], said
    assert "--mode co" in said[0] and "lattice init --cores" in said[0] and f"OMP_NUM_THREADS={cores}" in said[0]
    assert "lattice run --threads N" in said[0], said
    ras = tm.run("ras", "--job", last_job(tm), "--severity", "WARNING").stdout
    assert ras.count(f"at its limit of {limit}") == n and "KERNEL" in ras, ras


def test_threads_within_the_limit_say_nothing(tm: Machine, omp: str) -> None:
    p = tm.run("run", "--block", "T", "-n", "1", "--env", "OMP_NUM_THREADS=4", omp)
    assert p.stdout.strip() == "threads=4 max=4" and "thread limit" not in p.stderr, (p.stdout, p.stderr)
    assert "limit of" not in tm.run("ras", "--job", last_job(tm)).stdout


def test_threads_raises_the_limit(tm: Machine, omp: str) -> None:
    p = tm.run("run", "--block", "T", "-n", "1", "--threads", "8", "--env", "OMP_NUM_THREADS=8", omp)
    assert p.stdout.strip() == "threads=8 max=8" and "thread limit" not in p.stderr, (p.stdout, p.stderr)
    assert "limit of" not in tm.run("ras", "--job", last_job(tm)).stdout


def test_threads_lowers_the_limit_and_the_line_says_so(tm: Machine, omp: str) -> None:
    p = tm.run("run", "--block", "T", "-n", "1", "--threads", "1", "--env", "OMP_NUM_THREADS=4", omp, check=False)
    assert p.returncode != 0, (p.stdout, p.stderr)
    said = re.findall(r"cnk: thread limit: [^\n]*", p.stderr)
    assert len(said) == 1, p.stderr
    assert "may run 3 threads (the job's --threads 1 and 2 for its MPI library)" in said[0], said
    assert "OMP_NUM_THREADS=1" in said[0] and "lattice run --threads N, at most 4096" in said[0], said
    assert "at its limit of 3" in tm.run("ras", "--job", last_job(tm), "--severity", "WARNING").stdout


def test_bad_threads_is_one_line_before_anything_runs(tm: Machine, omp: str) -> None:
    p = tm.run("run", "--block", "T", "-n", "1", "--threads", "many", omp, check=False)
    assert p.returncode != 0 and p.stdout == "", (p.stdout, p.stderr)
    assert p.stderr.strip().splitlines() == ["lattice: error: bad --threads 'many': a rank's thread limit is a whole "
                                             "number from 1 to 4096 (the main thread included; an MPI rank has 2 "
                                             "more for its library)"], p.stderr
