"""Nodes on cores (lattice.nodes.host, lattice.nodes.cores): the host's cores as hwloc
shows them, and how a job's nodes and ranks share them out.

The topologies are real lstopo output: this host's, and hwloc's synthetic
ones (`lstopo --input "package:2 core:4 pu:2"`, `--restrict`) for SMT,
several packages and a restricted cpuset.  The policy is checked on hosts
of 2 cores with 16 nodes, 8 cores with 2 nodes, SMT, a restricted cpuset and
a single node.
"""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from lattice.nodes import host
from lattice.transport import wire
from lattice.state.blocks import Block
from lattice.nodes.cores import map_job, node_lines, spread
from lattice.nodes.host import Core, Host
from lattice.state.machine import Machine
from lattice.jobs.mapping import App, map_ranks

LSTOPO = shutil.which(host.LSTOPO)
needs_hwloc = pytest.mark.skipif(LSTOPO is None, reason="hwloc-nox not installed (scripts/setup.sh installs it)")

M = Machine(shape=(4, 2, 2), pset_size=8, cores=2)          # 16 nodes
WHOLE = Block("W", (0, 0, 0), (4, 2, 2), "Free", False, None)


def lstopo(*args: str) -> str:
    assert LSTOPO
    return subprocess.run([LSTOPO, *args, "--of", "xml", "--no-io", "-"], check=True, capture_output=True,
                          text=True).stdout


def fake(npus_per_core: int, ncores: int, first: int = 0) -> Host:
    """A host of ncores cores, npus_per_core PUs each, numbered from first."""
    return Host("local", tuple(Core(first + c, tuple(first * npus_per_core + c * npus_per_core + k
                                                     for k in range(npus_per_core))) for c in range(ncores)), "test")


def job(n: int, mode: str = "co", mapping: str | None = None, m: Machine = M):
    return map_ranks(m, WHOLE, [App("/bin/true", [], n)], mode, mapping)


# ---- spread ----

def test_spread_splits_evenly_or_goes_round() -> None:
    assert spread([0, 1, 2, 3, 4, 5, 6, 7], 3) == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert spread([0, 1], 2) == [[0], [1]]
    assert spread([0, 1], 5) == [[0], [1], [0], [1], [0]]
    assert spread([0, 1, 2], 1) == [[0, 1, 2]]
    with pytest.raises(ValueError):
        spread([], 2)


# ---- the policy on fake hosts ----

def test_more_ranks_than_cores_pins_none() -> None:
    """16 nodes on 2 cores: every rank may run on both, as under
    mpiexec.hydra; pinned two to a core, an origin spinning on its target's
    answer kept the target off the core for a time slice (issue 28)."""
    cm = map_job(fake(1, 2), job(16), M.cores)
    assert cm.ranks == [(0, 1)] * 16, "no rank pinned to one core"
    assert {n.progress for n in cm.nodes} == {0}, "no node has a core to spare"
    assert all("shared with 15 other nodes" in n.why for n in cm.nodes)


def test_three_ranks_on_two_cores_none_shares_a_pinned_core() -> None:
    """MPICH's atomic_get test: 3 ranks on 2 cores pinned 0, 1, 0 put the
    target (rank 0) and the busiest origin (rank 2) on one core."""
    cm = map_job(fake(1, 2), job(3), M.cores)
    assert cm.ranks == [(0, 1)] * 3
    assert [n.own for n in cm.nodes] == [0, 0, 0] and {n.progress for n in cm.nodes} == {0}


def test_two_ranks_on_two_cores_get_one_each_without_progress_thread() -> None:
    cm = map_job(fake(1, 2), job(2), M.cores)
    assert cm.ranks == [(0,), (1,)]
    assert [n.progress for n in cm.nodes] == [0, 0]
    assert all(n.why.startswith("off: one core of its own") for n in cm.nodes)


def test_one_node_takes_every_core_and_its_progress_thread() -> None:
    cm = map_job(fake(1, 2), job(1), M.cores)
    assert cm.ranks == [(0, 1)] and cm.nodes[0].progress == 1 and cm.nodes[0].own == 2
    one_core_nodes = Machine(shape=(4, 2, 2), pset_size=8, cores=1)
    cm = map_job(fake(1, 2), job(1, m=one_core_nodes), one_core_nodes.cores)
    assert cm.nodes[0].progress == 0, "a modelled node with one core has no second core for the thread"


def test_eight_cores_two_nodes_four_each() -> None:
    cm = map_job(fake(1, 8), job(2), M.cores)
    assert cm.ranks == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert [n.progress for n in cm.nodes] == [1, 1] and [n.own for n in cm.nodes] == [4, 4]


def test_uneven_split_decides_per_node() -> None:
    """3 nodes on 4 cores: 2, 1, 1 cores; only the first has one to spare."""
    cm = map_job(fake(1, 4), job(3), M.cores)
    assert cm.ranks == [(0, 1), (2,), (3,)]
    assert [n.progress for n in cm.nodes] == [1, 0, 0]


def test_smt_a_rank_gets_every_pu_of_its_cores() -> None:
    h = fake(2, 4)                                       # cores 0..3, PUs (0,1) (2,3) (4,5) (6,7)
    cm = map_job(h, job(2), M.cores)
    assert cm.ranks == [(0, 1, 2, 3), (4, 5, 6, 7)] and [n.progress for n in cm.nodes] == [1, 1]
    cm = map_job(h, job(4), M.cores)
    assert cm.ranks == [(0, 1), (2, 3), (4, 5), (6, 7)]
    assert [n.progress for n in cm.nodes] == [0] * 4, "a hardware thread is not a core of its own"
    cm = map_job(h, job(5), M.cores)
    assert cm.ranks == [tuple(range(8))] * 5, "cores, not hardware threads, decide that ranks are crowded"


def test_restricted_cpuset_uses_only_the_allowed_cores() -> None:
    h = Host("local", (Core(2, (2,)), Core(3, (3,)), Core(6, (6,))), "test")
    cm = map_job(h, job(3), M.cores)
    assert cm.ranks == [(2,), (3,), (6,)]
    cm = map_job(h, job(5), M.cores)
    assert cm.ranks == [(2, 3, 6)] * 5, "crowded: every allowed core, and only those"


def test_vn_ranks_share_their_node_s_cores() -> None:
    """vn: a node's ranks share out its cores by the same rule; with a core
    each, each has its own; more ranks than cores share them round."""
    cm = map_job(fake(1, 4), job(4, "vn", "TXYZ"), M.cores)     # 2 nodes, 2 ranks each, 2 cores each
    assert cm.ranks == [(0,), (1,), (2,), (3,)]
    assert {n.progress for n in cm.nodes} == {wire.PROGRESS_UNSET}, "vn mode leaves the progress thread alone"
    cm = map_job(fake(1, 2), job(8, "vn", "TXYZ"), M.cores)     # 4 nodes, 8 ranks on 2 cores: crowded
    assert cm.ranks == [(0, 1)] * 8
    cm = map_job(fake(1, 4), job(6, "vn", "TXYZ"), M.cores)     # 3 nodes, 6 ranks on 4 cores: crowded
    assert cm.ranks == [(0, 1, 2, 3)] * 6
    cm = map_job(fake(1, 2), job(2, "vn", "TXYZ"), M.cores)     # 1 node, 2 ranks, 2 cores
    assert cm.ranks == [(0,), (1,)]


def test_the_user_s_setting_wins() -> None:
    cm = map_job(fake(1, 2), job(1), M.cores, {"MPIR_CVAR_ASYNC_PROGRESS": "0"})
    assert cm.nodes[0].progress == wire.PROGRESS_UNSET and "--env" in cm.nodes[0].why


def test_nodes_in_rank_order() -> None:
    """The job's own order decides who shares: with ZYXT the first two ranks
    (not the first two node indexes) get the two cores."""
    p = job(2, "co", "ZYXT")
    cm = map_job(fake(1, 2), p, M.cores)
    assert [n.node for n in cm.nodes] == [s.node for s in p.slots] and cm.ranks == [(0,), (1,)]


def test_verbose_lines() -> None:
    cm = map_job(fake(1, 4), job(3), M.cores)
    lines = node_lines(cm, {n.node: f"L{n.node}" for n in cm.nodes}, {n.node: [i] for i, n in enumerate(cm.nodes)})
    assert lines[0] == "cores: 3 nodes on 4 usable cores of host local (test)"
    assert lines[1] == "node L0 (rank 0): CPUs 0-1 (cores 0,1); progress thread on: 2 cores of its own, the thread takes one"
    assert lines[2].startswith("node L1 (rank 1): CPUs 2 (core 2); progress thread off: one core of its own")
    cm = map_job(fake(1, 2), job(3), M.cores)
    lines = node_lines(cm, {n.node: f"L{n.node}" for n in cm.nodes}, {n.node: [i] for i, n in enumerate(cm.nodes)})
    assert lines[0] == "cores: 3 nodes on 2 usable cores of host local (test); more ranks than cores: none pinned"
    assert lines[1] == ("node L0 (rank 0): CPUs 0-1 (cores 0,1); progress thread off: "
                        "its cores are shared with 2 other nodes of the job")


# ---- host.py: lstopo XML, cpulists, the cache ----

def test_cpulists() -> None:
    assert host.cpulist([3, 0, 1, 2, 8, 10, 11]) == "0-3,8,10-11"
    assert host.parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    with pytest.raises(ValueError):
        host.parse_cpulist("3-1")
    assert host.parse_bitmap("0x00000003") == {0, 1}
    assert host.parse_bitmap("0x00000001,0x00000000") == {32}
    assert host.parse_bitmap("0xf...f,0x0") is None


@needs_hwloc
def test_parse_this_host_s_lstopo() -> None:
    cores = host.parse_lstopo(lstopo())
    pus = [pu for c in cores for pu in c.pus]
    assert cores and len(pus) == len(set(pus))
    assert set(pus) <= set(range(os.cpu_count() or 1))
    allowed = os.sched_getaffinity(0)
    assert {pu for c in host.parse_lstopo(lstopo(), set(allowed)) for pu in c.pus} == allowed & set(pus)


@needs_hwloc
def test_parse_synthetic_smt_topology() -> None:
    cores = host.parse_lstopo(lstopo("--input", "package:2 core:4 pu:2"))
    assert len(cores) == 8 and all(len(c.pus) == 2 for c in cores)
    assert [c.pus for c in cores[:2]] == [(0, 1), (2, 3)], "hwloc's order: a core's hardware threads together"
    assert sorted(pu for c in cores for pu in c.pus) == list(range(16))


@needs_hwloc
def test_parse_restricted_topology() -> None:
    """--restrict 0x1c keeps PUs 2, 3, 4: core 1 whole, core 2 with one PU."""
    cores = host.parse_lstopo(lstopo("--input", "package:1 core:4 pu:2", "--restrict", "0x0000001c"))
    assert [c.pus for c in cores] == [(2, 3), (4,)]
    cores = host.parse_lstopo(lstopo("--input", "package:1 core:4 pu:2"), affinity={0, 5, 6})
    assert [c.pus for c in cores] == [(0,), (5,), (6,)], "within lattice's own affinity"


def test_parse_honours_the_allowed_cpuset() -> None:
    xml = ('<?xml version="1.0"?><topology version="2.0">'
           '<object type="Machine" os_index="0" cpuset="0x0000000f" allowed_cpuset="0x0000000c">'
           '<object type="Core" os_index="0"><object type="PU" os_index="0"/><object type="PU" os_index="1"/></object>'
           '<object type="Core" os_index="1"><object type="PU" os_index="2"/><object type="PU" os_index="3"/></object>'
           '</object></topology>')
    assert host.parse_lstopo(xml) == [Core(1, (2, 3))]


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    old = os.environ.get("LATTICE_HOME")
    os.environ["LATTICE_HOME"] = str(tmp_path)
    yield tmp_path
    if old is None:
        del os.environ["LATTICE_HOME"]
    else:
        os.environ["LATTICE_HOME"] = old


@needs_hwloc
def test_local_is_cached_and_learnt_again_when_the_cpus_change(home: Path) -> None:
    h = host.local()
    assert h.source.startswith("hwloc") and set(h.cpus()) <= os.sched_getaffinity(0)
    f = host.cache_file()
    assert f.exists() and host.load() == (h, host.fingerprint())
    # a cache that says something else is believed while the fingerprint holds...
    text = f.read_text()
    f.write_text(text.replace(f"source {h.source}", "source from the cache"))
    assert host.local().source == "from the cache"
    # ...and replaced when it does not, or when boot asks
    f.write_text(text.replace("fingerprint ", "fingerprint stale "))
    assert host.local().source == h.source and host.load() == (h, host.fingerprint())
    f.write_text(text.replace(f"source {h.source}", "source from the cache"))
    assert host.local(refresh=True).source == h.source
    f.write_text("garbage\ncore x\n")
    assert host.local() == h, "an unreadable cache is learnt again"


def test_without_hwloc_each_cpu_is_a_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host, "LSTOPO", "lstopo-not-installed-here")
    h = host.learn()
    assert h.source.startswith("no hwloc: lstopo-not-installed-here is not installed (apt-get install hwloc-nox)")
    assert [c.pus for c in h.cores] == [(c,) for c in sorted(os.sched_getaffinity(0))]


def test_core_numbers_that_repeat_across_packages() -> None:
    """Linux numbers cores within their package: two cores 0 are still two cores."""
    h = Host("local", (Core(0, (0,)), Core(0, (1,))), "test")
    cm = map_job(h, job(1), M.cores)
    assert cm.ranks == [(0, 1)] and cm.nodes[0].own == 2 and cm.nodes[0].progress == 1
    cm = map_job(h, job(2), M.cores)
    assert cm.ranks == [(0,), (1,)] and [n.own for n in cm.nodes] == [1, 1]


# ---- hwloc plug-ins with nothing to find (host.idle_hwloc_plugins) ----

def test_idle_hwloc_plugins_follow_the_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    x11, vendors = tmp_path / "X11-unix", tmp_path / "vendors"
    monkeypatch.setattr(host, "X11_SOCKETS", x11)
    monkeypatch.setattr(host, "OPENCL_VENDORS", vendors)
    everything = ("hwloc_gl.so", "hwloc_opencl.so", "hwloc_pci.so", "hwloc_xml_libxml.so")
    assert host.idle_hwloc_plugins() == everything, "no X server, no OpenCL driver: all four idle"
    x11.mkdir()
    vendors.mkdir()
    (vendors / "README").write_text("not a driver")
    assert host.idle_hwloc_plugins() == everything
    (x11 / "X0").touch()                       # an X server: gl may find an NVIDIA display
    (vendors / "nvidia.icd").write_text("libnvidia-opencl.so.1\n")
    assert host.idle_hwloc_plugins() == ("hwloc_pci.so", "hwloc_xml_libxml.so")


@needs_hwloc
def test_idle_plugins_leave_the_topology_as_it_was() -> None:
    """What a rank's hwloc sees without the idle plug-ins: the same cores, PCI
    devices and OS devices (disks, network interfaces) as with them."""
    idle = host.idle_hwloc_plugins()
    assert "hwloc_pci.so" in idle, "a Linux host lists its PCI devices in /sys"

    def objects(env: dict[str, str]) -> list[tuple[str, str, str]]:
        import xml.etree.ElementTree as ET
        xml = subprocess.run([str(LSTOPO), "--of", "xml", "--whole-io", "-"], capture_output=True, text=True,
                             check=True, env={**os.environ, **env}).stdout
        return sorted((o.get("type", ""), o.get("os_index", ""), o.get("name", ""))
                      for o in ET.fromstring(xml).iter("object"))

    with_all = objects({"HWLOC_PLUGINS_BLACKLIST": ""})
    assert any(t == "PCIDev" for t, _, _ in with_all), "this host shows PCI devices"
    assert objects({"HWLOC_PLUGINS_BLACKLIST": ",".join(idle)}) == with_all


def test_the_cache_keeps_the_idle_plugins(home: Path) -> None:
    h = Host("local", (Core(0, (0,)), Core(1, (1,))), "test", ("hwloc_gl.so", "hwloc_pci.so"), ("ib", "rdmacm"))
    host.save(h, "fp")
    assert host.load() == (h, "fp")
    f = host.cache_file()
    text = f.read_text()
    f.write_text("\n".join(line for line in text.splitlines() if not line.startswith("hwloc-idle")))
    assert host.load() is None, "a cache written before hwloc-idle is learnt again"
    f.write_text("\n".join(line for line in text.splitlines() if not line.startswith("ucx-idle")))
    assert host.load() is None, "a cache written before ucx-idle is learnt again"


# ---- the host's topology for the ranks' hwloc (host.export_topology) ----

@needs_hwloc
def test_learning_the_cores_leaves_the_topology_for_the_ranks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host, "SHM_DIR", tmp_path)
    h = host.learn()
    f = host.topology_file()
    assert f == tmp_path / f"lattice-hwloc-{os.geteuid()}.xml"
    st = f.stat()
    assert stat.S_IMODE(st.st_mode) == 0o644 and st.st_uid == os.geteuid()
    assert [c.pus for c in host.parse_lstopo(f.read_text(), os.sched_getaffinity(0))] == [c.pus for c in h.cores]
    assert "PCIDev" in f.read_text(), "I/O devices too: a rank's hwloc may ask for them"
    assert [p.name for p in tmp_path.iterdir()] == [f.name], "no temporary file left"


def test_the_topology_file_is_replaced_whole_and_never_through_a_link(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(host, "SHM_DIR", tmp_path)
    old = os.umask(0o077)
    try:
        host.export_topology("<topology>one</topology>")
    finally:
        os.umask(old)
    f = host.topology_file()
    assert f.read_text() == "<topology>one</topology>" and stat.S_IMODE(f.stat().st_mode) == 0o644
    victim = tmp_path / "victim"
    victim.write_text("mine")
    (tmp_path / f".{f.name}.{os.getpid()}").symlink_to(victim)      # planted at the temporary name
    with pytest.raises(FileExistsError):
        host.export_topology("<topology>two</topology>")
    assert victim.read_text() == "mine" and f.read_text() == "<topology>one</topology>"


# --- does the host report free memory to a hypervisor (lattice.nodes.host) ---------------

def virtio(root: Path, name: str, device: int, features: str) -> None:
    d = root / name
    d.mkdir(parents=True)
    (d / "device").write_text(f"0x{device:04x}\n")
    (d / "features").write_text(features + "\n")


@pytest.mark.parametrize("devices, reported", [
    ([], False),
    ([("virtio0", 1, "0" * 5 + "1")], False),                        # a network card's bit 5 says nothing
    ([("virtio0", 5, "011001")], True),                              # a balloon with free page reporting
    ([("virtio0", 5, "011000")], False),                             # a balloon without it
    ([("virtio0", 2, "1"), ("virtio1", 5, "000001" + "0" * 58)], True),
    ([("virtio0", 5, "01")], False),                                 # too few bits to say
])
def test_free_memory_reported(tmp_path: Path, devices: list[tuple[str, int, str]], reported: bool) -> None:
    root = tmp_path / "devices"
    root.mkdir()
    for name, device, features in devices:
        virtio(root, name, device, features)
    assert host.free_memory_reported(root) is reported
    assert host.free_memory_reported(tmp_path / "none") is False


# --- UCX's modules that find nothing here (lattice.nodes.host) ---------------------------

def test_ucx_ib_and_rdmacm_are_idle_without_rdma_devices(tmp_path: Path) -> None:
    assert host.idle_ucx_modules(tmp_path / "missing") == ("ib", "rdmacm")
    (tmp_path / "infiniband").mkdir()
    assert host.idle_ucx_modules(tmp_path / "infiniband") == ("ib", "rdmacm"), "the class, but no device"
    (tmp_path / "infiniband" / "mlx5_0").mkdir()
    assert host.idle_ucx_modules(tmp_path / "infiniband") == ()
    assert host.local().ucx_idle == host.idle_ucx_modules(), "the host says what it found"
