"""Unmodified Open MPI programs (Debian Open MPI 4.1.4, examples/openmpi/)
start through Lattice's PMI (the pmix/flux component over build/lib/libpmi.so,
docs/openmpi.md) with no Open MPI daemon: `lattice run` gives them that
environment by itself; correct results under cnk and Linux, in co and vn
mode, over two psets; MPI_Abort(..., 7) ends `lattice run` with 7.

Ranks of different compute nodes talk through shared memory (Open MPI's
vader BTL, the only one besides `self`) under cnk and Linux mode's preload
client (--no-sandbox): a shared window spans the nodes, messages between
nodes arrive with `btl self,vader`, a ping-pong makes no system call per
message under cnk, two jobs on two blocks run at once, and no job leaves its
directory in /dev/shm behind.  In the node sandbox (--kernel linux) a node's
ranks share memory and nodes talk over TCP (`btl self,vader,tcp`): each node
is a pid namespace, and Open MPI keys its segments by pid (mpienv.mpi_env).
"""
from __future__ import annotations

import re
import subprocess
import shutil
import time
from pathlib import Path
from typing import Iterator

import pytest

from conftest import EXAMPLES, booted_block, Machine, make_machine

OMPI_EX = EXAMPLES / "openmpi"


@pytest.fixture(scope="module")
def ompi_machine(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    assert shutil.which("mpicc.openmpi"), "Open MPI is not installed (apt-get install openmpi-bin libopenmpi-dev)"
    for p in ("hello", "ring", "abort", "shm"):
        assert (OMPI_EX / p).exists(), f"{OMPI_EX / p} not built"
    assert (built / "lib" / "libpmi.so").exists(), "build/lib/libpmi.so not built"
    yield from booted_block(tmp_path_factory.mktemp("ompi"), "P", "1x1x4", "--pset-size", "2", "--memory", "256M")


def run(m: Machine, *args: str, check: bool = True) -> "subprocess.CompletedProcess[str]":
    return m.run("run", "--block", "P", "--hugepages", "keep", "--cwd", "/tmp", *args, check=check, timeout=180)


# where shared memory reaches: every rank of the host, or (the sandbox) of rank 0's node
KERNELS = {"cnk": ["--kernel", "cnk"], "linux": ["--kernel", "linux"],
           "preload": ["--kernel", "linux", "--no-sandbox"]}


def group(kernel: str, mode: str, n: int) -> int:
    """How many ranks share memory with rank 0 (one host here)."""
    return (1 if mode == "co" else 2) if kernel == "linux" else n


def transport(kernel: str) -> str:
    """What `lattice run -v` says of the job's transport."""
    if kernel == "linux":
        return (r"btl self,vader,tcp \(vader: shared memory between the ranks of a node\); "
                r"its files in the job's /dev/shm in the sandbox")
    return r"btl self,vader \(vader: shared memory between the ranks of a host\); its files in /dev/shm/lattice-ompi-\d+"


@pytest.mark.parametrize("kernel", ["cnk", "linux"])
@pytest.mark.parametrize("mode,n", [("co", 4), ("vn", 8)])
def test_hello_allreduce(ompi_machine: Machine, kernel: str, mode: str, n: int) -> None:
    p = run(ompi_machine, "-n", str(n), "--mode", mode, "--kernel", kernel, str(OMPI_EX / "hello"))
    ranks = sorted(int(r) for r in re.findall(r"^hello from rank (\d+) of %d" % n, p.stdout, re.M))
    assert ranks == list(range(n)), p.stdout
    want = n * (n + 1) // 2
    assert f"allreduce sum={want} (want {want}) max={10 * (n - 1)} (want {10 * (n - 1)}): ok" in p.stdout, p.stdout


@pytest.mark.parametrize("kernel", ["cnk", "linux"])
@pytest.mark.parametrize("mode,n", [("co", 4), ("vn", 8)])
def test_ring(ompi_machine: Machine, kernel: str, mode: str, n: int) -> None:
    p = run(ompi_machine, "-n", str(n), "--mode", mode, "--kernel", kernel, str(OMPI_EX / "ring"))
    assert f"ring of {n} ranks, 3 laps: token {3 * n * (n - 1) // 2}" in p.stdout and p.returncode == 0, p.stderr


def ompi_dirs() -> set[str]:
    """The Open MPI job directories on this host (docs/openmpi.md)."""
    return {d.name for d in Path("/dev/shm").glob("lattice-ompi-*")}


@pytest.mark.parametrize("kernel", ["cnk", "linux"])
def test_abort_exits_7(ompi_machine: Machine, kernel: str) -> None:
    before = ompi_dirs()
    p = run(ompi_machine, "-n", "4", "--kernel", kernel, str(OMPI_EX / "abort"), check=False)
    assert p.returncode == 7, (p.returncode, p.stderr)
    assert re.search(r"rank 3 \(R00-M0-N00-C:J03\) called abort with code 7", p.stderr), p.stderr
    # the killed ranks could not remove their vader segments: lattice run removed their directory
    assert ompi_dirs() <= before


def test_print_map_shows_the_open_mpi_environment(ompi_machine: Machine) -> None:
    p = ompi_machine.run("run", "--block", "P", "-n", "8", "--mode", "vn", "--print-map", "-v",
                         str(OMPI_EX / "hello"))
    assert "OMPI_MCA_pmix=flux" in p.stdout and "FLUX_PMI_LIBRARY_PATH=" in p.stdout, p.stdout
    # four nodes, one host: one clique of 8 ranks, and no transport but vader between ranks
    assert "# PMI_process_mapping (vector,(0,4,1),(0,4,1))" in p.stdout, p.stdout
    assert "# env LATTICE_HOST_MAPPING=(vector,(0,1,8))" in p.stdout, p.stdout
    assert "# env OMPI_MCA_btl=self,vader\n" in p.stdout, p.stdout


def test_print_map_in_the_sandbox_makes_each_node_a_clique(ompi_machine: Machine) -> None:
    """In the node sandbox the same job's cliques are its four nodes (ranks
    r and r + 4 on node r, as PMI_process_mapping says), and TCP joins the
    nodes (mpienv.mpi_env)."""
    p = ompi_machine.run("run", "--block", "P", "-n", "8", "--mode", "vn", "--kernel", "linux", "--print-map", "-v",
                         str(OMPI_EX / "hello"))
    assert "# PMI_process_mapping (vector,(0,4,1),(0,4,1))" in p.stdout, p.stdout
    assert "# env LATTICE_HOST_MAPPING=(vector,(0,4,1),(0,4,1))" in p.stdout, p.stdout
    assert "# env OMPI_MCA_btl=self,vader,tcp\n" in p.stdout, p.stdout


@pytest.mark.parametrize("kernel", list(KERNELS))
@pytest.mark.parametrize("mode,n", [("co", 4), ("vn", 8)])
def test_shared_memory_between_nodes(ompi_machine: Machine, kernel: str, mode: str, n: int) -> None:
    """Every rank is on another node than rank 0's or shares it (vn), and all
    ranks of the host (in the sandbox: of rank 0's node) form one
    shared-memory group: a window in it carries stores of every rank of it
    to rank 0's plain loads.  With `btl self,vader` the ping-pong and the
    4 MiB messages between nodes (vader's single copy, process_vm_readv) can
    only have gone through shared memory; in the sandbox they cross the
    block network over TCP."""
    before = ompi_dirs()
    p = run(ompi_machine, "-n", str(n), "--mode", mode, *KERNELS[kernel], "-v", str(OMPI_EX / "shm"), "2000")
    g = group(kernel, mode, n)
    assert f"shared-memory group of rank 0: {g} of {n} ranks: ok" in p.stdout, p.stdout
    assert f"shared window: {g} of {g} stores seen by plain loads: ok" in p.stdout, p.stdout
    assert f"pingpong 0<->{n - 1}: 2000 round trips: ok" in p.stdout, p.stdout
    assert f"4 MiB each way 0<->{n - 1}: 0 bytes wrong: ok" in p.stdout, p.stdout
    assert re.search(r"lattice: Open MPI job \d+: " + transport(kernel), p.stderr), p.stderr
    assert ompi_dirs() <= before, "the job's directory in /dev/shm was left behind"


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_shared_memory_as_another_user(ompi_machine: Machine, kernel: str) -> None:
    """The job's directory is its user's (made by root, handed over), and
    vader's single copy (process_vm_readv) passes the kernel's ptrace check
    between that user's ranks (in the sandbox: the job's /dev/shm is the
    user's to write, single copy is off)."""
    p = run(ompi_machine, "-n", "8", "--mode", "vn", *KERNELS[kernel], "--user", "nobody", str(OMPI_EX / "shm"), "100")
    g = group(kernel, "vn", 8)
    assert f"shared window: {g} of {g} stores seen by plain loads: ok" in p.stdout, p.stdout
    assert "4 MiB each way 0<->7: 0 bytes wrong: ok" in p.stdout, p.stdout


def syscalls(p: "subprocess.CompletedProcess[str]") -> int:
    m = re.search(r"system calls \(all ranks\): (\d+) local, (\d+) shipped, (\d+) unsupported", p.stderr)
    assert m, p.stderr
    return sum(int(x) for x in m.groups())


def test_no_system_call_per_message_under_cnk(ompi_machine: Machine) -> None:
    """20,000 round trips (40,000 messages between two nodes) add fewer than
    one system call per 40 messages to the same job without them: the fast
    path is shared memory, not a trapped send/recv/poll (over TCP the same
    ping-pong costs several calls per message)."""
    calls = {}
    for trips in (0, 20000):
        p = run(ompi_machine, "-n", "4", "-v", str(OMPI_EX / "shm"), str(trips))
        assert f"pingpong 0<->3: {trips} round trips: ok" in p.stdout, p.stdout
        calls[trips] = syscalls(p)
    assert calls[20000] - calls[0] < 1000, calls


@pytest.fixture(scope="module")
def two_blocks(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    m = make_machine(tmp_path_factory.mktemp("ompi2"), "--shape", "1x1x4", "--pset-size", "2", "--memory", "256M")
    m.run("block", "create", "A", "--shape", "1x1x2", "--corner", "0,0,0")
    m.run("block", "create", "B", "--shape", "1x1x2", "--corner", "0,0,2")
    m.run("boot", "A")
    m.run("boot", "B")
    yield m
    m.run("free", "A", check=False)
    m.run("free", "B", check=False)


@pytest.mark.parametrize("kernel", list(KERNELS))
def test_two_jobs_at_once_on_two_blocks(two_blocks: Machine, kernel: str) -> None:
    """Two Open MPI jobs in vn mode on two blocks of one machine, at once:
    each has its own job id and directory (their local ranks 0..3 would
    otherwise name the same vader segments), both give correct results,
    and neither directory is left behind."""
    before = ompi_dirs()
    procs = [two_blocks.popen("run", "--block", b, "--hugepages", "keep", "--cwd", "/tmp", "--mode", "vn",
                              "-n", "4", *KERNELS[kernel], str(OMPI_EX / "shm"), "20000") for b in "AB"]
    seen: set[str] = set()
    both = False
    deadline = time.monotonic() + 180
    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
        now = ompi_dirs() - before
        seen |= now
        both |= len(now) >= 2
        time.sleep(0.02)
    outs = [p.communicate(timeout=max(1.0, deadline - time.monotonic())) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert f"shared-memory group of rank 0: {group(kernel, 'vn', 4)} of 4 ranks: ok" in out, out
        assert "pingpong 0<->3: 20000 round trips: ok" in out and "0 bytes wrong: ok" in out, out
    assert both, f"the two jobs never ran at once (directories seen: {seen})"
    assert ompi_dirs() <= before, "a job's directory in /dev/shm was left behind"
