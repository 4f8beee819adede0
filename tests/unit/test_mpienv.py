"""lattice.jobs.mpienv: recognising Open MPI programs by their ELF DT_NEEDED
entries, the environment that makes them bootstrap through Lattice's
PMI (Open MPI's pmix/flux component over build/lib/libpmi.so) and share
memory between all ranks of a host, and each job's id and directory in the
host's shared memory (OpenMpiJob, on a real directory).

Synthetic ELF files (64-bit little-endian, 32-bit big-endian, stripped of
section headers) test the parser without any MPI installed; the real Open
MPI and MPICH examples are used when they were built."""
from __future__ import annotations

import os
import struct
import subprocess
from pathlib import Path

import pytest

from lattice.jobs import mpienv
from lattice.state.blocks import Block
from lattice.errors import LatticeError
from lattice.nodes.host import Core, Host
from lattice.state.machine import Machine
from lattice.jobs.mapping import App, map_ranks
from lattice.jobs.mpienv import OpenMpiJob, host_mapping, is_open_mpi, needed_libraries
from tests.conftest import EXAMPLES

M = Machine(shape=(1, 1, 4), pset_size=2)
BLOCK = Block("P", (0, 0, 0), (1, 1, 4), "Initialized", False, None)


def mpi_env(exe: str, n: int = 4, mode: str = "co") -> dict[str, str]:
    """mpienv.mpi_env for a job of n ranks of exe on BLOCK."""
    return mpienv.mpi_env(exe, M, map_ranks(M, BLOCK, [App(exe, [], n)], mode, None))


def make_elf(path: Path, needed: list[str], wide: bool = True, little: bool = True,
             strtab_in_load: bool = True) -> Path:
    """A minimal dynamic ELF: one PT_LOAD holding everything, a PT_DYNAMIC
    listing DT_NEEDED names, DT_STRTAB (an address) and DT_STRSZ."""
    e = "<" if little else ">"
    ehsize, phentsize = (64, 56) if wide else (52, 32)
    base = 0x400000
    strings = b"\0" + b"".join(n.encode() + b"\0" for n in needed)
    offsets, o = [], 1
    for n in needed:
        offsets.append(o)
        o += len(n) + 1
    str_off = ehsize + 2 * phentsize
    dyn_off = str_off + len(strings)
    dyn_fmt = e + ("qQ" if wide else "iI")
    strtab_addr = base + str_off if strtab_in_load else 0x10000000
    entries = [(1, x) for x in offsets] + [(5, strtab_addr), (10, len(strings)), (0, 0)]
    dyn = b"".join(struct.pack(dyn_fmt, t, v) for t, v in entries)
    total = dyn_off + len(dyn)
    ident = b"\x7fELF" + bytes([2 if wide else 1, 1 if little else 2, 1]) + bytes(9)
    if wide:
        hdr = ident + struct.pack(e + "HHIQQQIHHHHHH", 3, 62, 1, 0, ehsize, 0, 0, ehsize, phentsize, 2, 0, 0, 0)
        load = struct.pack(e + "IIQQQQQQ", 1, 5, 0, base, base, total, total, 0x1000)
        dynamic = struct.pack(e + "IIQQQQQQ", 2, 6, dyn_off, base + dyn_off, base + dyn_off, len(dyn), len(dyn), 8)
    else:
        hdr = ident + struct.pack(e + "HHIIIIIHHHHHH", 3, 20, 1, 0, ehsize, 0, 0, ehsize, phentsize, 2, 0, 0, 0)
        load = struct.pack(e + "IIIIIIII", 1, 0, base, base, total, total, 5, 0x1000)
        dynamic = struct.pack(e + "IIIIIIII", 2, dyn_off, base + dyn_off, base + dyn_off, len(dyn), len(dyn), 6, 4)
    assert len(hdr) == ehsize
    path.write_bytes(hdr + load + dynamic + strings + dyn)
    return path


@pytest.fixture
def prefix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A LATTICE_PREFIX holding lib/libpmi.so."""
    p = tmp_path / "prefix"
    (p / "lib").mkdir(parents=True)
    (p / "lib" / "libpmi.so").write_bytes(b"")
    monkeypatch.setenv("LATTICE_PREFIX", str(p))
    return p


@pytest.mark.parametrize("wide,little", [(True, True), (False, False), (True, False), (False, True)])
def test_needed_libraries_of_synthetic_elf(tmp_path: Path, wide: bool, little: bool) -> None:
    f = make_elf(tmp_path / "a.out", ["libmpi.so.40", "libc.so.6"], wide=wide, little=little)
    assert needed_libraries(f) == ["libmpi.so.40", "libc.so.6"]
    assert is_open_mpi(f)


@pytest.mark.parametrize("needed,ompi", [
    (["libmpi.so.40", "libc.so.6"], True),
    (["libopen-rte.so.40"], True),
    (["libopen-pal.so.40"], True),
    (["libmpi_mpifh.so.40", "libgfortran.so.5"], True),
    (["libmpich.so.12", "libc.so.6"], False),           # MPICH
    (["libmpi.so.12"], False),                          # MPICH's other soname
    (["libc.so.6"], False),
    ([], False),
])
def test_which_programs_are_open_mpi(tmp_path: Path, needed: list[str], ompi: bool) -> None:
    assert is_open_mpi(make_elf(tmp_path / "p", needed)) is ompi


def test_not_elf_static_truncated_or_missing(tmp_path: Path, prefix: Path) -> None:
    script = tmp_path / "run.sh"
    script.write_text("#!/bin/sh\necho libmpi.so.40\n")
    assert needed_libraries(script) == [] and mpi_env(str(script)) == {}
    full = make_elf(tmp_path / "full", ["libmpi.so.40"]).read_bytes()
    (tmp_path / "trunc").write_bytes(full[:100])         # program headers cut off
    with pytest.raises(ValueError, match="truncated ELF"):
        needed_libraries(tmp_path / "trunc")
    assert mpi_env(str(tmp_path / "trunc")) == {}
    bad = make_elf(tmp_path / "bad", ["libmpi.so.40"], strtab_in_load=False)
    with pytest.raises(ValueError, match="outside every loaded segment"):
        needed_libraries(bad)
    assert mpi_env(str(tmp_path / "nonexistent")) == {}


def test_env_for_open_mpi(tmp_path: Path, prefix: Path) -> None:
    env = mpi_env(str(make_elf(tmp_path / "a.out", ["libmpi.so.40"])), 8, "vn")
    assert env["FLUX_PMI_LIBRARY_PATH"] == str(prefix / "lib" / "libpmi.so")
    assert env["OMPI_MCA_pmix"] == "flux" and env["OMPI_MCA_ess"] == "pmi"
    # every node of this machine is on this host: vader between all ranks, no TCP
    assert env["OMPI_MCA_pml"] == "ob1" and env["OMPI_MCA_btl"] == "self,vader"
    assert env["LATTICE_HOST_MAPPING"] == "(vector,(0,1,8))"
    assert "FLUX_JOB_ID" not in env         # OpenMpiJob draws it when the job starts


def test_host_mapping_groups_ranks_by_host_not_node() -> None:
    p = map_ranks(M, BLOCK, [App("a", [], 8)], "vn", None)
    # the nodes differ (PMI_process_mapping); the host is one
    from lattice.jobs.mapping import process_mapping
    assert process_mapping(p) == "(vector,(0,4,1),(0,4,1))"      # XYZT: rank r on node r % 4
    assert host_mapping(M, p) == "(vector,(0,1,8))"


def test_open_mpi_job_reserves_an_id_and_a_directory(tmp_path: Path) -> None:
    shm = tmp_path / "shm"
    shm.mkdir()
    env = {"FLUX_PMI_LIBRARY_PATH": "/x/libpmi.so"}
    with OpenMpiJob(env, [], os.getuid(), os.getgid(), shm) as a:
        env2 = {"FLUX_PMI_LIBRARY_PATH": "/x/libpmi.so"}
        with OpenMpiJob(env2, ["OMPI_MCA_orte_tmpdir_base=/mine"], os.getuid(), os.getgid(), shm):
            ids = {int(env["FLUX_JOB_ID"]), int(env2["FLUX_JOB_ID"])}
            assert len(ids) == 2 and all(i & 0xFFFF == 1 and 0 < i >> 16 < 0x8000 for i in ids)
            d = shm / f"lattice-ompi-{env['FLUX_JOB_ID']}"
            assert a.dir == d and d.is_dir() and (d.stat().st_mode & 0o777) == 0o700
            assert env["OMPI_MCA_btl_vader_backing_directory"] == str(d)
            assert env["OMPI_MCA_osc_sm_backing_directory"] == str(d)
            assert env["OMPI_MCA_orte_tmpdir_base"] == str(d)
            assert "OMPI_MCA_orte_tmpdir_base" not in env2      # the user's --env wins
            (d / "vader_segment.x.1.0").write_bytes(b"x")       # what a killed rank leaves
            assert len(list(shm.iterdir())) == 2
        assert len(list(shm.iterdir())) == 1
    assert list(shm.iterdir()) == []


def test_open_mpi_job_does_nothing_for_other_programs(tmp_path: Path) -> None:
    env: dict[str, str] = {}
    with OpenMpiJob(env, [], os.getuid(), os.getgid(), tmp_path):
        assert env == {} and list(tmp_path.iterdir()) == []


def test_a_killed_runs_directory_is_swept(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale, live = tmp_path / "lattice-ompi-65537", tmp_path / "lattice-ompi-131073"
    for d, pid in ((stale, dead.pid), (live, os.getpid())):
        d.mkdir()
        (d / "owner").write_text(f"{pid} {mpienv.host.process_start(os.getpid())}\n")
    (tmp_path / "lattice-ompi-196609").mkdir()      # no owner yet: being made right now
    with OpenMpiJob({"FLUX_PMI_LIBRARY_PATH": "/x"}, [], os.getuid(), os.getgid(), tmp_path) as j:
        left = sorted(p.name for p in tmp_path.iterdir())
        assert stale.name not in left and live.name in left and "lattice-ompi-196609" in left
        assert j.dir is not None and j.dir.name in left


def test_missing_library_is_a_clear_error(tmp_path: Path, prefix: Path) -> None:
    (prefix / "lib" / "libpmi.so").unlink()
    with pytest.raises(LatticeError, match="Lattice's PMI-1 library .*libpmi.so is missing"):
        mpi_env(str(make_elf(tmp_path / "a.out", ["libmpi.so.40"])))
    assert mpi_env(str(make_elf(tmp_path / "b.out", ["libc.so.6"]))) == {}


@pytest.mark.parametrize("exe,ompi", [("openmpi/hello", True), ("openmpi/ring", True),
                                      ("mpi/ring", False), ("hello", False)])
def test_built_examples(exe: str, ompi: bool, prefix: Path) -> None:
    path = EXAMPLES / exe
    if not path.exists():
        pytest.skip(f"{path} not built")
    assert is_open_mpi(path) is ompi
    assert bool(mpi_env(str(path))) is ompi


# ---- hwloc's idle plug-ins (mpienv.hwloc_default) ----

def hw(*idle: str) -> Host:
    return Host("h", (Core(0, (0,)),), "test", idle)


def test_hwloc_default_names_what_is_idle_on_every_host() -> None:
    one = hw("hwloc_gl.so", "hwloc_opencl.so", "hwloc_pci.so")
    assert mpienv.hwloc_default([one], {}) == {"HWLOC_PLUGINS_BLACKLIST": "hwloc_gl.so,hwloc_opencl.so,hwloc_pci.so"}
    gpu = hw("hwloc_pci.so", "hwloc_xml_libxml.so")      # a host with an X server and OpenCL
    assert mpienv.hwloc_default([one, gpu], {}) == {"HWLOC_PLUGINS_BLACKLIST": "hwloc_pci.so"}
    assert mpienv.hwloc_default([hw(), one], {}) == {}, "nothing idle everywhere: nothing set"
    assert mpienv.hwloc_default([], {}) == {}


def test_the_jobs_choice_wins_over_the_hwloc_default() -> None:
    one = hw("hwloc_gl.so", "hwloc_opencl.so")
    assert mpienv.hwloc_default([one], {"HWLOC_PLUGINS_BLACKLIST": ""}) == {}
    assert mpienv.hwloc_default([one], {"OCL_ICD_VENDORS": "/opt/icd"}) == \
        {"HWLOC_PLUGINS_BLACKLIST": "hwloc_gl.so"}, "the job's own OpenCL drivers: opencl loads"


def test_a_hosts_odd_plugin_names_are_not_passed_on() -> None:
    odd = hw("hwloc_gl.so", "x,LD_PRELOAD=/tmp/evil.so", "../hwloc_pci.so", "hwloc_pci.so\n")
    assert mpienv.hwloc_default([odd], {}) == {"HWLOC_PLUGINS_BLACKLIST": "hwloc_gl.so"}


# ---- UCX's idle modules (mpienv.ucx_default) ----

def ucx(*idle: str) -> Host:
    return Host("h", (Core(0, (0,)),), "test", (), idle)


def test_ucx_default_leaves_out_what_is_idle_on_every_host() -> None:
    plain = ucx("ib", "rdmacm")
    assert mpienv.ucx_default([plain], {}) == {"UCX_MODULES": "^ib,rdmacm"}
    assert mpienv.ucx_default([plain, ucx("rdmacm")], {}) == {"UCX_MODULES": "^rdmacm"}
    assert mpienv.ucx_default([plain, ucx()], {}) == {}, "a host with InfiniBand: every module loads"
    assert mpienv.ucx_default([], {}) == {}


def test_the_jobs_choice_wins_over_the_ucx_default() -> None:
    assert mpienv.ucx_default([ucx("ib", "rdmacm")], {"UCX_MODULES": "all"}) == {}
    assert mpienv.ucx_default([ucx("ib", "rdmacm")], {"UCX_MODULES": ""}) == {}, "exported from the environment"


def test_a_hosts_odd_ucx_module_names_are_not_passed_on() -> None:
    odd = ucx("ib", "x,y", "*", "../cma", "ib\n", "RDMACM")
    assert mpienv.ucx_default([odd], {}) == {"UCX_MODULES": "^ib"}


def test_the_topology_variables_are_cnodes() -> None:
    """-v says which variables keep cnode from naming the topology file: the ones cnode checks."""
    import re
    src = (Path(__file__).resolve().parents[2] / "compute/cnode/launch.c").read_text()
    body = src[src.index("static int names_topology"):]
    names = re.findall(r'"(HWLOC_[A-Z_]+)="', body[:body.index("}")])
    assert tuple(names) == mpienv.TOPOLOGY_VARS


def test_linux_mode_gives_malloc_huge_pages_unless_the_job_chose_tunables() -> None:
    """Linux mode's ranks get glibc's malloc on transparent huge pages (issue 27); cnk keeps its
    UCX_TLS and gets no tunable (big memory is huge pages already); the job's GLIBC_TUNABLES wins whole."""
    assert mpienv.kernel_defaults("linux", {}) == {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"}
    assert mpienv.kernel_defaults("cnk", {}) == {"UCX_TLS": "^posix"}
    assert mpienv.kernel_defaults("linux", {"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}) == {}
    assert mpienv.kernel_defaults("linux", {"GLIBC_TUNABLES": ""}) == {}
