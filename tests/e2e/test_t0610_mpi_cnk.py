"""Unmodified MPICH programs (Debian MPICH 4.0.2, ch4:ucx; examples/mpi/)
under the compute node kernel, on more than one rank and over two psets:
they bootstrap through Lattice's PMI, give correct results, write a shared
MPI-IO file through the I/O nodes byte for byte, and MPI_Abort(..., 7) ends
`lattice run` with 7.  What the MPI library needs to talk between ranks
(its /dev/shm files, SysV segments, cross-memory attach, sockets, eventfds,
netlink, /proc and /sys) stays on the compute node: the trace and the
per-class counts show no socket call and no node-local file shipped.

One 1x1x4 machine (two psets of 2, 2 cores and 256 MiB per node) with block
P booted over all of it serves the whole file.
"""
from __future__ import annotations

import os
import re
import shutil
from collections import Counter
from pathlib import Path
from typing import Iterator

import pytest

from conftest import EXAMPLES, Machine, make_machine
from cnk_helpers import by_rank, class_counts, last_job, trace_lines

MPI_EX = EXAMPLES / "mpi"
N = 4               # ranks: one per compute node, two per pset

# the file calls cnk may ship (README "shipped" row)
FILE_CALLS = {
    "open", "openat", "creat", "close", "close_range", "read", "write", "pread64", "pwrite64", "readv",
    "writev", "preadv", "pwritev", "preadv2", "pwritev2", "lseek", "stat", "lstat", "fstat", "newfstatat",
    "statx", "access", "faccessat", "faccessat2", "unlink", "unlinkat", "rename", "renameat", "renameat2",
    "mkdir", "mkdirat", "rmdir", "getdents64", "readlink", "readlinkat", "truncate", "ftruncate", "fsync",
    "fdatasync", "dup", "dup2", "dup3", "fcntl", "chdir", "fchdir", "getcwd", "umask", "chmod", "fchmod",
    "fchmodat", "utimensat", "statfs", "fstatfs", "ioctl", "flock", "fadvise64", "link", "linkat",
    "symlink", "symlinkat", "chown", "fchown", "lchown", "fchownat", "mknod", "mknodat", "fallocate",
    "sendfile", "copy_file_range",
}
SOCKET_CALLS = {
    "socket", "socketpair", "bind", "listen", "accept", "accept4", "connect", "getsockname", "getpeername",
    "sendto", "recvfrom", "sendmsg", "recvmsg", "sendmmsg", "recvmmsg", "setsockopt", "getsockopt", "shutdown",
}
NODE_LOCAL = re.compile(r'"/(dev/shm|proc|sys)(/|")')


@pytest.fixture(scope="module")
def mpi_machine(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    assert shutil.which("mpicc.mpich"), "MPICH is not installed (apt-get install mpich libmpich-dev)"
    for p in ("hello", "ring", "allreduce", "collectives", "mpiio", "abort", "hello_f", "ring_f"):
        assert (MPI_EX / p).exists(), f"{MPI_EX / p} missing: run make"
    m = make_machine(tmp_path_factory.mktemp("mpicnk"), "--shape", "1x1x4", "--pset-size", "2",
                     "--memory", "256M", "--cores", "2")
    m.run("block", "create", "P", "--shape", "1x1x4")
    m.run("boot", "P")
    yield m
    m.run("free", "P", check=False)


def run_mpi(m: Machine, *args: str, n: int = N, kernel: str = "cnk", check: bool = True):
    return m.run("run", "--block", "P", "-n", str(n), "--label", "--kernel", kernel, "--cwd", str(m.work),
                 *args, check=check, timeout=180)


def test_hello_reports_rank_size_and_personality(mpi_machine: Machine) -> None:
    m = mpi_machine
    p = run_mpi(m, str(MPI_EX / "hello"))
    out = by_rank(p.stdout)
    for r in range(N):
        lines = [l for l in out.get(r, []) if l.startswith("hello from")]
        assert len(lines) == 1, p.stdout
        mm = re.match(r"hello from rank (\d+) of (\d+): coords (\d+),(\d+),(\d+) t (\d+) pset (\d+) mode (\w+) "
                      r"node (\S+)$", lines[0])
        assert mm, lines[0]
        assert (int(mm.group(1)), int(mm.group(2))) == (r, N)
        # one rank per node in order along z: node r at (0,0,r), psets of 2
        assert (int(mm.group(3)), int(mm.group(4)), int(mm.group(5))) == (0, 0, r), lines[0]
        assert int(mm.group(6)) == 0 and mm.group(8) == "co", lines[0]
        assert int(mm.group(7)) == r // 2, lines[0]
    assert f"hello: allreduce ok ({N * (N + 1) // 2})" in out.get(0, []), p.stdout


@pytest.mark.parametrize("prog,expect", [
    ("ring", f"ring: {N} ranks, 10 rounds, token {N * (N + 1) // 2} ok"),
    ("allreduce", "allreduce: ok"),
    ("collectives", f"collectives: {N} ranks: bcast reduce allgather alltoall scan gather scatter "
                    "reduce_scatter barrier: ok"),
    ("hello_f", f"hello_f: allreduce ok ({N * (N + 1) // 2})"),
    ("ring_f", f"ring_f: {N} ranks, token {N * (N + 1) // 2} ok"),
])
def test_programs_give_correct_results(mpi_machine: Machine, prog: str, expect: str) -> None:
    p = run_mpi(mpi_machine, str(MPI_EX / prog))
    assert expect in by_rank(p.stdout).get(0, []), p.stdout + p.stderr
    if prog == "allreduce":
        want = f"allreduce: size {N} sum {N * (N - 1) // 2} max {N - 1} min 0 prod {2 ** (N // 2)} land 1 vector ok"
        assert want in by_rank(p.stdout)[0], p.stdout


@pytest.mark.parametrize("prog,expect", [
    ("ring", f"ring: {N} ranks, 10 rounds, token {N * (N + 1) // 2} ok"),
    ("collectives", f"collectives: {N} ranks: bcast reduce allgather alltoall scan gather scatter "
                    "reduce_scatter barrier: ok"),
])
def test_virtual_node_mode_shares_nodes(mpi_machine: Machine, prog: str, expect: str) -> None:
    """Two ranks per node (--mode vn, T fastest): MPICH and UCX see ranks of
    one node and use their shared memory between them, under cnk."""
    m = mpi_machine
    p = run_mpi(m, "--mode", "vn", "--mapping", "TXYZ", "--trace", str(MPI_EX / prog))
    assert expect in by_rank(p.stdout).get(0, []), p.stdout[-3000:] + p.stderr[-3000:]
    lines = trace_lines(p.stdout + "\n" + p.stderr)
    # the node's shared memory is used, and locally
    shm = [t for t in lines if t.group(2) in ("shmat", "process_vm_readv", "process_vm_writev")
           or (t.group(2) == "openat" and '"/dev/shm/' in t.group(3))]
    assert shm and all(t.group(5) == "local" for t in shm), [t.group(0) for t in shm][:20]


def test_mpiio_shared_file_is_byte_exact(mpi_machine: Machine) -> None:
    m = mpi_machine
    d = m.work / "mpiio"
    d.mkdir(exist_ok=True)
    os.chmod(d, 0o777)
    f = d / "shared.dat"
    block = 100_000             # not a multiple of any page or stripe
    p = run_mpi(m, str(MPI_EX / "mpiio"), str(f), str(block))
    assert f"mpiio: {N} ranks wrote {N * block} bytes to {f}: verified" in by_rank(p.stdout).get(0, []), p.stdout
    data = f.read_bytes()
    assert len(data) == N * block
    want = b"".join(bytes((r * 31 + i * 7 + 1) & 0xFF for i in range(block)) for r in range(N))
    assert data == want


def test_mpi_abort_ends_the_job_with_its_code(mpi_machine: Machine) -> None:
    p = run_mpi(mpi_machine, str(MPI_EX / "abort"), "2", check=False)
    assert p.returncode == 7, (p.returncode, p.stdout, p.stderr)
    text = p.stdout + p.stderr
    assert "rank 2 of 4 calls MPI_Abort(MPI_COMM_WORLD, 7)" in text, text
    assert "passed the barrier" not in text, text


def test_mpi_traffic_is_never_shipped(mpi_machine: Machine) -> None:
    """--trace of a 2-pset ring: every socket call is local, nothing of
    /dev/shm, /proc or /sys is shipped, shipped calls are file calls only,
    and the counts cnk kept agree with the trace."""
    m = mpi_machine
    p = run_mpi(m, "--trace", str(MPI_EX / "ring"))
    assert f"ring: {N} ranks, 10 rounds, token {N * (N + 1) // 2} ok" in by_rank(p.stdout).get(0, []), p.stdout
    lines = trace_lines(p.stdout + "\n" + p.stderr)
    counts = class_counts(m, last_job(m))
    for r in range(N):
        mine = [t for t in lines if int(t.group(1)) == r]
        assert mine, f"no trace of rank {r}"
        calls = Counter((t.group(2), t.group(5)) for t in mine)
        # MPI talks: sockets, shared memory, cross-memory attach, all local.  The only
        # socket calls shipped are hwloc's X11 probes of 127.0.0.1:6000+ (refused): the
        # socket rule (compute/cnk/README.md "Sockets") ships loopback like any outside address
        probe = [t for t in mine if t.group(2) == "connect" and "ECONNREFUSED" in t.group(0)]
        mine = [t for t in mine if t not in probe]
        assert not [t.group(0) for t in mine if t.group(2) in SOCKET_CALLS and t.group(5) != "local"]
        assert any(name in SOCKET_CALLS for name, _ in calls), sorted(calls)
        assert not [t.group(0) for t in mine if t.group(5) == "shipped" and t.group(2) not in FILE_CALLS]
        assert not [t.group(0) for t in mine if t.group(5) == "shipped" and NODE_LOCAL.search(t.group(3))]
        assert not [t.group(0) for t in mine if t.group(2) in ("shmget", "shmat", "process_vm_readv",
                                                               "process_vm_writev", "sched_setaffinity",
                                                               "eventfd2", "epoll_ctl") and t.group(5) != "local"]
        traced = Counter(t.group(5) for t in mine + probe)
        assert counts[r] == {c: traced.get(c, 0) for c in ("local", "shipped", "unsupported")}, (r, counts, traced)


def test_counts_show_mpi_mostly_local(mpi_machine: Machine) -> None:
    """Without --trace: the per-class counts of a collective-heavy job have
    far more local calls than shipped ones (loading the libraries is the
    shipped part)."""
    m = mpi_machine
    run_mpi(m, str(MPI_EX / "collectives"))
    counts = class_counts(m, last_job(m))
    assert set(counts) == set(range(N)), counts
    for r, c in counts.items():
        assert c["local"] > c["shipped"] > 0, (r, c)


@pytest.mark.parametrize("sandbox", [[], ["--no-sandbox"]], ids=["sandbox", "preload"])
def test_linux_mode_runs_the_same_programs(mpi_machine: Machine, sandbox: list[str]) -> None:
    """--kernel linux runs them too: in the node sandbox (its default) and
    with the preload client (--no-sandbox)."""
    p = run_mpi(mpi_machine, *sandbox, str(MPI_EX / "collectives"), kernel="linux")
    assert f"collectives: {N} ranks: bcast reduce allgather alltoall scan gather scatter " \
           "reduce_scatter barrier: ok" in by_rank(p.stdout).get(0, []), p.stdout + p.stderr
