"""A real MPICH program bootstraps through Lattice's PMI on 2 psets (Linux
mode): correct allreduce results in coprocessor and virtual node mode,
MPI_Abort(MPI_COMM_WORLD, 7) ends `lattice run` with 7 and a clear message,
and the I/O nodes' counters show that MPI traffic is not shipped."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from tests.conftest import Machine, make_machine

SRC = Path(__file__).resolve().parent / "mpi" / "pmi_allreduce.c"
pytestmark = pytest.mark.skipif(not shutil.which("mpicc.mpich"), reason="MPICH (mpicc.mpich) not installed")


@pytest.fixture(scope="module")
def machine(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    m = make_machine(tmp_path_factory.mktemp("t0600"), "--shape", "1x1x4", "--pset-size", "2", "--memory", "256M")
    m.run("block", "create", "S", "--shape", "1x1x4")
    m.run("boot", "S")
    yield m
    m.run("free", "S", check=False)


@pytest.fixture(scope="module")
def program(machine: Machine) -> Path:
    out = machine.work / "pmi_allreduce"
    subprocess.run(["mpicc.mpich", "-O2", "-o", str(out), str(SRC)], check=True)
    return out


def counters(m: Machine) -> dict[tuple[str, str], int]:
    out = {}
    for line in m.run("counters", "S").stdout.splitlines():
        loc, name, n = line.split()
        out[(loc, name)] = int(n)
    return out


@pytest.mark.parametrize("mode,n", [("co", 4), ("vn", 8)])
def test_allreduce(machine: Machine, program: Path, mode: str, n: int) -> None:
    before = counters(machine)
    p = machine.run("run", "--block", "S", "-n", str(n), "--mode", mode, "--kernel", "linux", str(program),
                    timeout=180)
    lines = sorted(p.stdout.splitlines())
    want = sum(1000 + r for r in range(n))
    assert lines == sorted(f"rank {r} of {n} app 0: sum {want} max {1000 + n - 1}" for r in range(n)), p.stdout
    after = counters(machine)
    delta = {k: after[k] - before.get(k, 0) for k in after}
    # what the I/O nodes did is library loading and output: writes are the n lines
    # printed, nothing that grows with MPI traffic (there is no socket call to ship)
    writes = sum(v for (_, name), v in delta.items() if name in ("write", "pwrite"))
    assert writes <= 2 * n, delta


def test_mpi_abort_exits_7(machine: Machine, program: Path) -> None:
    p = machine.run("run", "--block", "S", "-n", "4", "--kernel", "linux", str(program), "abort",
                    check=False, timeout=180)
    assert p.returncode == 7, p.stderr
    assert "rank 1 (R00-M0-N00-C:J01) called abort with code 7" in p.stderr
    job = machine.run("jobs").stdout.splitlines()[-1].split()[0]
    ranks = machine.run("jobs", "--ranks", job).stdout
    assert "called abort: code 7" in ranks
    assert "ended by lattice because rank 1 called abort with code 7" in ranks
    assert "called abort with code 7" in machine.run("ras", "--job", job).stdout


def test_rank_exiting_without_finalize_ends_the_job(machine: Machine, program: Path) -> None:
    """Rank 1 returns from main without MPI_Finalize while the others wait for
    it: the job ends with a message naming it instead of hanging."""
    p = machine.run("run", "--block", "S", "-n", "4", "--kernel", "linux", str(program), "vanish",
                    check=False, timeout=120)
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert "rank 1 (R00-M0-N00-C:J01) called abort with code 1: exited without PMI finalize" in p.stderr, p.stderr
    # the block is ready for the next job
    p = machine.run("run", "--block", "S", "-n", "4", "--kernel", "linux", str(program), timeout=180)
    assert p.stdout.count("sum 4006") == 4, p.stdout
