"""lattice.nodes.capacity: reading a host's limits from /proc and /sys (a fake tree
passed as root) and the arithmetic that says which limit a boot or a job
breaks, with the number used and how to raise it."""
from __future__ import annotations

import json
import os
import resource
from pathlib import Path

import pytest

from lattice.nodes import capacity
from lattice.nodes.capacity import Host
from lattice.errors import LatticeError

GIB = 1 << 30
LIMITS = """Limit                     Soft Limit           Hard Limit           Units
Max cpu time              unlimited            unlimited            seconds
Max processes             {nproc}                {hard}                processes
Max open files            1024                 1048576              files
"""


def fake_host(root: Path, *, pid: str = "self", nproc: str = "4096", pid_max: int = 32768,
              threads_max: int = 192730, tasks: int = 160, avail_kb: int = 8 << 20,
              cgroup: str = "8:pids:/\n0::/\n", huge: dict[int, tuple[int, int]] | None = None) -> Path:
    """A /proc and /sys tree with these limits."""
    proc = root / "proc"
    (proc / "sys/kernel").mkdir(parents=True, exist_ok=True)
    (proc / "sys/kernel/pid_max").write_text(f"{pid_max}\n")
    (proc / "sys/kernel/threads-max").write_text(f"{threads_max}\n")
    (proc / "loadavg").write_text(f"0.74 0.38 0.15 3/{tasks} 8172\n")
    (proc / "meminfo").write_text(f"MemTotal:  {avail_kb * 2} kB\nMemFree: 1000 kB\nMemAvailable:  {avail_kb} kB\n")
    (proc / pid).mkdir(exist_ok=True)
    (proc / pid / "limits").write_text(LIMITS.format(nproc=nproc, hard=nproc))
    (proc / pid / "cgroup").write_text(cgroup)
    for kb, (free, resv) in (huge or {}).items():
        d = root / f"sys/kernel/mm/hugepages/hugepages-{kb}kB"
        d.mkdir(parents=True)
        (d / "free_hugepages").write_text(f"{free}\n")
        (d / "resv_hugepages").write_text(f"{resv}\n")
    (root / "sys/fs/cgroup/pids").mkdir(parents=True, exist_ok=True)
    return root


def pids_cgroup(root: Path, path: str, limit: str, current: int, mount: str = "pids") -> None:
    d = root / "sys/fs/cgroup" / mount / path
    d.mkdir(parents=True, exist_ok=True)
    (d / "pids.max").write_text(f"{limit}\n")
    (d / "pids.current").write_text(f"{current}\n")


# --- reading the host ------------------------------------------------------------

def test_reads_every_limit_from_the_tree(tmp_path: Path) -> None:
    root = fake_host(tmp_path, nproc="512", pid_max=40000, threads_max=9000, tasks=321, avail_kb=3 << 20,
                     huge={2048: (10, 4), 1048576: (1, 0)})
    h = capacity.read_host(root, name="h1")
    assert h == Host(name="h1", pid_max=40000, threads_max=9000, tasks=321, nproc=512, cgroups=(),
                     mem_available=3 * GIB, huge_free=6 * (2 << 20) + GIB)


def test_unlimited_nproc_and_skipping_memory(tmp_path: Path) -> None:
    root = fake_host(tmp_path, nproc="unlimited", huge={2048: (10, 0)})
    h = capacity.read_host(root, memory=False)
    assert h.nproc is None
    assert (h.mem_available, h.huge_free) == (0, 0)


def test_cgroup_v1_every_limited_level_from_the_process_up(tmp_path: Path) -> None:
    root = fake_host(tmp_path, cgroup="9:name=systemd:/\n8:pids:/a/b\n4:memory:/x\n0::/\n")
    pids_cgroup(root, "a", "100", 40)
    pids_cgroup(root, "a/b", "max", 7)         # no limit of its own: not listed
    h = capacity.read_host(root)
    assert h.cgroups == ((str(root / "sys/fs/cgroup/pids/a"), 100, 40),)


def test_cgroup_v2_unified_mount(tmp_path: Path) -> None:
    root = fake_host(tmp_path, cgroup="0::/user.slice/job\n")
    (root / "sys/fs/cgroup/cgroup.controllers").write_text("cpu pids\n")
    pids_cgroup(root, "user.slice/job", "50", 3, mount="")
    pids_cgroup(root, "user.slice", "1000", 600, mount="")
    h = capacity.read_host(root)
    assert [c[1:] for c in h.cgroups] == [(50, 3), (1000, 600)]


def test_a_gone_daemon_falls_back_to_our_own_limits(tmp_path: Path) -> None:
    root = fake_host(tmp_path, nproc="77")
    assert capacity.read_host(root, pid=999999).nproc == 77


def test_this_host_reads_and_round_trips_through_json() -> None:
    h = capacity.read_host()
    soft = resource.getrlimit(resource.RLIMIT_NPROC)[0]
    assert h.nproc == (None if soft == resource.RLIM_INFINITY else soft)
    assert h.pid_max == int(Path("/proc/sys/kernel/pid_max").read_text())
    assert 0 < h.tasks and 0 < h.mem_available
    assert Host.from_json(h.to_json()) == h
    json.loads(h.to_json())         # plain JSON for a per-host agent


# --- the arithmetic ---------------------------------------------------------------

def host(**kw: object) -> Host:
    base = dict(name="h1", pid_max=32768, threads_max=192730, tasks=160, nproc=None, cgroups=(),
                mem_available=24 * GIB, huge_free=0)
    base.update(kw)
    return Host(**base)     # type: ignore[arg-type]


def test_counts_from_the_code() -> None:
    d = capacity.daemons("block B", 16, 2, 8, 0)
    assert d.tasks == 1 + 16 * 1 + 2 * (2 + 8)     # the host agent, the cnodes, the ciods
    j = capacity.job(16, [8, 8], 1000, 0)
    # a process per rank, two I/O workers of 3 + 8, and per I/O node a control and a stdin thread + 2 per rank
    assert j.tasks == 16 + 2 * (3 + 8) + (2 * 2 + 2 * 16)
    assert j.user_tasks == 16 + 2 * (3 + 8)     # the connection threads are the daemons' user's
    mpi = capacity.job(16, [8, 8], 1000, 0, mpi_ranks=10, progress_ranks=3)    # UCX's thread, MPICH's progress
    assert mpi.tasks == j.tasks + 10 + 3
    assert "2 per MPI rank, 3 progress threads" in mpi.counted
    idle = capacity.job(1, [1, 0], 1000, 0)
    assert idle.tasks == 1 + (3 + 1) + (2 * 2 + 2)  # a pset without ranks has no worker
    relayed = capacity.job(16, [8, 8], 1000, 0, relayed_ranks=8)    # I/O nodes on another host (role=io)
    assert relayed.tasks == j.tasks + 8 * 2         # cnode's relay of each: its two threads, root's
    assert relayed.user_tasks == j.user_tasks and "8 relays of 2" in relayed.counted


def test_an_8192_rank_job_breaks_pid_max_with_the_numbers_and_the_fix() -> None:
    needs = [capacity.daemons("block B", 8192, 64, 128, 0), capacity.job(8192, [128] * 64, 0, 0, mpi_ranks=8192)]
    found = capacity.problems(host(), needs)
    assert len(found) == 1
    msg = found[0]
    total = sum(n.tasks for n in needs)
    assert msg.startswith("host h1 cannot hold the daemons of block B (8,192 compute nodes, 64 I/O nodes) and 8,192 ranks")
    assert f"about {total:,} processes and threads" in msg
    assert "kernel.pid_max (32,768)" in msg
    assert f"sysctl -w kernel.pid_max={2 * (total + 160)}" in msg


def test_fits_exactly_and_one_more_does_not() -> None:
    need = capacity.job(10, [10], 0, 0)
    assert capacity.problems(host(pid_max=160 + need.tasks), [need]) == []
    assert len(capacity.problems(host(pid_max=159 + need.tasks), [need])) == 1
    assert "kernel.threads-max (100)" in capacity.problems(host(threads_max=100), [need])[0]


def test_pid_max_beyond_what_the_kernel_allows_says_use_more_hosts() -> None:
    need = capacity.job(2_000_000, [2_000_000], 0, 0)
    assert "use more hosts" in capacity.problems(host(), [need])[0]


def test_nproc_counts_the_job_user_and_exempts_root() -> None:
    need = capacity.job(16, [8, 8], 1000, 0, daemon_uid=0)
    assert capacity.problems(host(nproc=need.user_tasks), [need]) == []
    msg = capacity.problems(host(nproc=need.user_tasks - 1), [need])[0]
    assert f"{need.user_tasks:,} of them run as uid 1000" in msg
    assert f"is {need.user_tasks - 1:,}" in msg and "ulimit -u" in msg
    root_job = capacity.job(16, [8, 8], 0, 0, daemon_uid=0)
    assert capacity.problems(host(nproc=1), [root_job]) == []


def test_nproc_counts_the_daemons_when_they_run_as_the_job_user() -> None:
    d = capacity.daemons("block B", 16, 2, 8, 1000)
    booted = capacity.job(4, [4, 0], 1000, 0, daemon_uid=1000, daemon_tasks=d.tasks)
    assert booted.user_tasks == booted.tasks + d.tasks
    # booting now: the daemons are a need of their own, summed per user
    fresh = capacity.job(4, [4, 0], 1000, 0, daemon_uid=1000)
    assert capacity.problems(host(nproc=d.tasks + fresh.user_tasks), [d, fresh]) == []
    assert capacity.problems(host(nproc=d.tasks + fresh.user_tasks - 1), [d, fresh]) != []


def test_every_limited_cgroup_level_counts_what_it_already_holds() -> None:
    need = capacity.job(4, [4], 0, 0)
    inner, outer = ("/sys/fs/cgroup/pids/a/b", 1000, 10), ("/sys/fs/cgroup/pids/a", 200, 200 - need.tasks + 1)
    found = capacity.problems(host(cgroups=(inner, outer)), [need])
    assert len(found) == 1
    assert "the pids cgroup /sys/fs/cgroup/pids/a allows 200 (pids.max)" in found[0]
    assert f"echo {outer[2] + need.tasks} > /sys/fs/cgroup/pids/a/pids.max" in found[0]


def test_memory_beyond_mem_available_and_free_huge_pages() -> None:
    need = capacity.job(16, [8, 8], 0, 16 * 2 * GIB)
    assert capacity.problems(host(mem_available=16 * GIB, huge_free=16 * GIB), [need]) == []
    msg = capacity.problems(host(mem_available=16 * GIB, huge_free=8 * GIB), [need])[0]
    assert "16 ranks: their nodes' memory (big memory) is 32.0 GiB, the host has 24.0 GiB" in msg
    assert "LATTICE_BIGMEM_RESERVE=0" in msg and "--memory" in msg


def test_check_raises_one_error_with_the_others_below() -> None:
    need = capacity.job(16, [16], 1000, 64 * GIB)
    with pytest.raises(LatticeError) as e:
        capacity.check(host(pid_max=100, nproc=5, mem_available=GIB), [need])
    assert "kernel.pid_max" in e.value.message
    assert e.value.long_message is not None
    assert "ulimit -u" in e.value.long_message and "MemAvailable" in e.value.long_message
    capacity.check(host(), [capacity.job(16, [16], 1000, 0)])      # fits: no error


def test_check_costs_less_than_a_millisecond() -> None:
    """What `lattice run` pays on a booted block: read the host, count, compare."""
    need = capacity.job(16, [8, 8], os.getuid(), 8 * GIB)
    best = min(_timed(lambda: capacity.check(capacity.read_host(), [need])) for _ in range(50))
    assert best < 1e-3, best


def _timed(f: object) -> float:
    import time
    t0 = time.perf_counter()
    f()         # type: ignore[operator]
    return time.perf_counter() - t0


def test_virtual_node_mode_on_any_node_lattice_init_allows_fits_the_wire() -> None:
    """One process per core: the wire's processes per node (LAT_MAX_PPN) cover
    every core count `lattice init --cores` accepts (docs/architecture.md
    "Fixed limits")."""
    from lattice.state import machine
    from lattice.transport import wire_h
    assert wire_h.MAX_PPN == machine.MAX_CORES
