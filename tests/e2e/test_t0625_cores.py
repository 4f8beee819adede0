"""Nodes on cores, end to end: a booted machine runs tests/e2e/cpus_probe.c,
which prints the CPUs the kernel lets each rank use (Cpus_allowed_list of
/proc/self/status), the CPUs sched_getaffinity shows it and its
MPIR_CVAR_ASYNC_PROGRESS, under cnk and in Linux mode.

Expectations follow the rule of docs/architecture.md ("Nodes on cores") on
this host's usable cores, learnt here from hwloc directly: with C cores, one
rank gets all of them and the progress thread (C >= 2); two ranks get
different cores and the thread only with two cores each to spare; more
ranks than cores (2C, and C+1) are pinned to none: each may use every core,
with no thread; the user's --env wins.  An MPICH job still
gives right answers.  One 2x2x2 machine (2 cores per node) serves the file.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from conftest import EXAMPLES, booted_block, Machine
from lattice.nodes import host

LINE = re.compile(r"rank=(\d+) allowed=(\S+) affinity=(\S*) async=(\S+)")
KERNELS = ["cnk", "linux"]


@pytest.fixture(scope="module")
def cm(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    yield from booted_block(tmp_path_factory.mktemp("cores"), "C", "2x2x2", "--pset-size", "4", "--memory", "256M", "--cores", "2")


@pytest.fixture(scope="module")
def probe(cm: Machine) -> Path:
    exe = cm.work / "cpus_probe"
    subprocess.run(["gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(exe),
                    str(Path(__file__).with_name("cpus_probe.c"))], check=True)
    exe.chmod(0o755)
    return exe


@pytest.fixture(scope="module")
def cores() -> list[set[int]]:
    """This host's usable cores, each as its set of CPUs (hwloc, not the cache)."""
    return [set(c.pus) for c in host.learn().cores]


def probe_run(m: Machine, probe: Path, kernel: str, *opts: str) -> tuple[dict[int, tuple[set[int], set[int], str]], str]:
    """rank -> (allowed CPUs, CPUs sched_getaffinity shows, MPIR_CVAR_ASYNC_PROGRESS), and stderr."""
    p = m.run("run", "--block", "C", "--kernel", kernel, "--hugepages", "keep", "--cwd", "/tmp", *opts, str(probe),
              check=False, timeout=120)
    assert p.returncode == 0, f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    out = {}
    for line in p.stdout.splitlines():
        g = LINE.fullmatch(line)
        assert g, line
        allowed, shown = host.parse_cpulist(g[2]), host.parse_cpulist(g[3])
        assert shown and shown <= allowed, f"sched_getaffinity shows CPUs it may not use: {line}"
        out[int(g[1])] = (allowed, shown, g[4])
    return out, p.stderr


@pytest.mark.parametrize("kernel", KERNELS)
def test_one_rank_gets_every_core_and_the_progress_thread(cm: Machine, probe: Path, cores: list[set[int]],
                                                         kernel: str) -> None:
    got, err = probe_run(cm, probe, kernel, "-n", "1", "-v")
    every = set().union(*cores)
    assert got[0][0] == every, (got, cores)
    assert got[0][2] == ("1" if len(cores) >= 2 else "0"), got
    node = [l for l in err.splitlines() if l.startswith("lattice: node ")]
    assert len(node) == 1 and f"CPUs {host.cpulist(every)}" in node[0], err
    assert ("progress thread on" if len(cores) >= 2 else "progress thread off") in node[0], node


@pytest.mark.parametrize("kernel", KERNELS)
def test_two_ranks_get_cores_of_their_own(cm: Machine, probe: Path, cores: list[set[int]], kernel: str) -> None:
    if len(cores) < 2:
        pytest.skip("one usable core")
    got, err = probe_run(cm, probe, kernel, "-n", "2", "-v")
    assert sorted(got) == [0, 1]
    assert not got[0][0] & got[1][0], f"two ranks share a CPU while others sit idle: {got}"
    assert got[0][0] | got[1][0] == set().union(*cores), "every core is used"
    want = "1" if len(cores) >= 4 else "0"     # a node needs two cores of its own for the thread
    assert got[0][2] == got[1][2] == want, got
    lines = [l for l in err.splitlines() if l.startswith("lattice: node ")]
    assert len(lines) == 2 and all(("progress thread on" if want == "1" else "progress thread off") in l
                                   for l in lines), err


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("extra", ["one", "twice"])
def test_more_ranks_than_cores_are_pinned_to_none(cm: Machine, probe: Path, cores: list[set[int]],
                                                  kernel: str, extra: str) -> None:
    """Pinned two to a core, a rank spinning on its peer's answer kept the
    peer off the core (issue 28: MPICH's one-sided atomics 16x slower)."""
    n = len(cores) + 1 if extra == "one" else 2 * len(cores)
    if n > 8:
        pytest.skip(f"{len(cores)} cores: the 8-node machine cannot hold {n} ranks")
    got, err = probe_run(cm, probe, kernel, "-n", str(n), "-v")
    assert sorted(got) == list(range(n))
    every = set().union(*cores)
    assert all(got[r][0] == every for r in range(n)), f"a rank pinned while ranks outnumber cores: {got}"
    assert all(got[r][2] == "0" for r in range(n)), got
    assert "more ranks than cores: none pinned" in err, err


@pytest.mark.parametrize("kernel", KERNELS)
def test_the_user_s_async_progress_wins(cm: Machine, probe: Path, kernel: str) -> None:
    got, _ = probe_run(cm, probe, kernel, "-n", "2", "--env", "MPIR_CVAR_ASYNC_PROGRESS=1")
    assert [got[r][2] for r in (0, 1)] == ["1", "1"], got
    got, _ = probe_run(cm, probe, kernel, "-n", "1", "--env", "MPIR_CVAR_ASYNC_PROGRESS=0")
    assert got[0][2] == "0", got


@pytest.mark.parametrize("kernel", KERNELS)
def test_vn_ranks_of_a_node_share_its_cores(cm: Machine, probe: Path, cores: list[set[int]], kernel: str) -> None:
    """Two ranks on one node (vn, TXYZ) share out the node's cores; vn mode
    sets no progress thread."""
    got, _ = probe_run(cm, probe, kernel, "-n", "2", "--mode", "vn", "--mapping", "TXYZ")
    assert [got[r][2] for r in (0, 1)] == ["-", "-"], got
    if len(cores) >= 2:
        assert not got[0][0] & got[1][0], got


def test_print_map_shows_each_rank_s_cpus(cm: Machine, cores: list[set[int]]) -> None:
    out = cm.run("run", "--block", "C", "--print-map", "-n", "2").stdout.splitlines()
    assert out[1].split()[-1] == "cpus", out
    shown = [host.parse_cpulist(l.split()[-1]) for l in out[2:]]
    assert len(shown) == 2 and all(s <= set().union(*cores) for s in shown), out


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("n", [2, 4])
def test_mpich_still_gives_right_answers(cm: Machine, kernel: str, n: int) -> None:
    assert shutil.which("mpicc.mpich"), "MPICH is not installed"
    hello = EXAMPLES / "mpi" / "hello"
    assert hello.exists(), f"{hello} missing: run make"
    p = cm.run("run", "--block", "C", "-n", str(n), "--kernel", kernel, "--hugepages", "keep", "--cwd", "/tmp",
               str(hello), check=False, timeout=180)
    assert p.returncode == 0 and f"hello: allreduce ok ({n * (n + 1) // 2})" in p.stdout, p.stdout + p.stderr
