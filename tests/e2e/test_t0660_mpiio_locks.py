"""MPI-IO that takes file locks (issue 14, item 5): examples/mpi/mpiio_locks
writes a strided file with MPI_File_write_all (ROMIO's data sieving locks
the ranges it reads, modifies and writes), appends through the shared file
pointer (a hidden file ROMIO updates under a lock) and writes overlapping
ranges in atomic mode.  Its record locks are held on the I/O nodes
(docs/protocol.md 6.6), and the block has two of them: ranks 0-1 behind
one, 2-3 behind the other, so they exclude each other only because both
I/O nodes lock the same host file.  Under both kernels the program prints
what it prints under mpiexec.hydra, and the test reads the files' bytes
itself.  Before the locks were shipped, ROMIO aborted with
"ADIOI_GEN_SetLock: No locks available".  examples/lockwait shows the
blocking wait itself: F_SETLKW across the two I/O nodes, ended by the
holder, with signals and another thread's calls going through meanwhile.

One 1x1x4 machine (two psets of 2, 256 MiB per node) with block L.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from conftest import EXAMPLES, Machine, booted_block
from cnk_helpers import unlabelled

PROG = EXAMPLES / "mpi" / "mpiio_locks"
N = 4                   # one rank per compute node, two per I/O node
BLK, NBLK = 1000, 16    # as in the program
KERNELS = ["cnk", "linux"]


def kernel_opts(kernel: str) -> list[str]:
    """cnk, or Linux mode's preload client (--no-sandbox): the locks shipped
    by the client itself.  The node sandbox's locks (through lattice-fs) are
    tests/e2e/test_t0820_fuse.py's."""
    return ["--kernel", kernel, *(["--no-sandbox"] if kernel == "linux" else [])]


@pytest.fixture(scope="module")
def two_ionodes(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    assert PROG.exists(), f"{PROG} missing: run make"
    yield from booted_block(tmp_path_factory.mktemp("mpiiolk"), "L", "1x1x4", "--pset-size", "2", "--memory", "256M")


def check_files(d: Path) -> None:
    """The bytes the three writes must leave, read here, not by the program."""
    def byte_of(r: int, i: int) -> int:
        return ord("A") + (r * 7 + i) % 26

    data = (d / "interleaved.dat").read_bytes()
    assert len(data) == BLK * NBLK * N
    want = bytes(byte_of((i // BLK) % N, (i // BLK // N) * BLK + i % BLK) for i in range(len(data)))
    assert data == want, "interleaved.dat: a block of one rank was lost or overwritten"
    recs = (d / "shared.dat").read_bytes()
    assert sorted(recs[i:i + 20] for i in range(0, len(recs), 20)) == \
        [b"record of rank %4d\n" % r for r in range(N)], recs
    atomic = (d / "atomic.dat").read_bytes()
    assert len(atomic) == 4 * BLK and atomic in {bytes([ord("a") + r]) * 4 * BLK for r in range(N)}
    assert not [p.name for p in d.iterdir() if p.name.startswith(".")], "ROMIO's shared-pointer file is left"


def scratch(d: Path) -> Path:
    d.mkdir()
    os.chmod(d, 0o777)      # the job's user writes here through the I/O nodes
    return d


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    assert shutil.which("mpiexec.hydra"), "MPICH is not installed (apt-get install mpich libmpich-dev)"
    d = scratch(tmp_path_factory.mktemp("native") / "files")
    p = subprocess.run(["mpiexec.hydra", "-n", str(N), str(PROG), str(d)], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    check_files(d)
    return unlabelled(p.stdout)


@pytest.mark.parametrize("kernel", KERNELS)
def test_mpiio_locks_exclude_ranks_behind_two_ionodes(two_ionodes: Machine, native: list[str], kernel: str) -> None:
    d = scratch(two_ionodes.work / f"files-{kernel}")
    p = two_ionodes.run("run", "--block", "L", "-n", str(N), "--label", *kernel_opts(kernel), str(PROG), str(d),
                        timeout=300)
    assert "No locks available" not in p.stdout + p.stderr
    got = unlabelled(p.stdout)
    assert got == native, (got, native, p.stderr)
    assert got == ["atomic: ok (4000 bytes of one rank, atomicity 1)", "interleaved: ok (64000 bytes)",
                   "shared: ok (80 bytes)"]
    check_files(d)


LOCKWAIT = EXAMPLES / "lockwait"
WAITED = ["last rank: F_GETLK = 0 F_WRLCK",
          "last rank: F_SETLK while rank 0 holds it = EAGAIN",
          "last rank: F_SETLKW = 0, after rank 0 let go = yes, handler ran = yes",
          "rank 0: the waiting rank handled a signal while it waited = yes"]


def test_lockwait_native(tmp_path: Path) -> None:
    """The program's lines natively, two processes on one host."""
    d = scratch(tmp_path / "native")
    env = dict(os.environ, LATTICE_SIZE="2")
    ps = [subprocess.Popen([str(LOCKWAIT), str(d)], env=dict(env, LATTICE_RANK=str(r)), stdout=subprocess.PIPE,
                           text=True) for r in (0, 1)]
    outs = [p.communicate(timeout=180)[0] for p in ps]
    assert [p.returncode for p in ps] == [0, 0], outs
    assert unlabelled("".join(outs)) == WAITED


@pytest.mark.parametrize("kernel", KERNELS)
def test_setlkw_waits_across_ionodes_and_takes_signals(two_ionodes: Machine, kernel: str) -> None:
    """Rank 0 (first I/O node) holds a write lock until rank 3 (second I/O
    node), blocked in F_SETLKW, has run a SIGALRM handler and, from a second
    thread, made a file: the wait goes in slices, so signals are delivered
    and the connection is free between them; the wait ends when the holder
    lets go."""
    d = scratch(two_ionodes.work / f"wait-{kernel}")
    p = two_ionodes.run("run", "--block", "L", "-n", str(N), "--label", *kernel_opts(kernel), str(LOCKWAIT),
                        str(d), timeout=300)
    assert unlabelled(p.stdout) == WAITED, (p.stdout, p.stderr)
    assert {l.split(":")[0] for l in p.stdout.splitlines() if "last rank" in l} == {str(N - 1)}
