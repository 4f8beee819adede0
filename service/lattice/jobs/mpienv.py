"""The environment an Open MPI program needs to start under Lattice's PMI.

Open MPI 4.1 (Debian's 4.1.4) has no PMI-1 wire client of its own, but its
`pmix/flux` component bootstraps through any PMI-1 client library it
dlopens from FLUX_PMI_LIBRARY_PATH, once FLUX_JOB_ID is set.  Lattice's
own library (compute/libpmi, built to build/lib/libpmi.so) speaks the PMI-1
wire protocol over the PMI_FD every rank gets from its cnode.  Its ranks
share memory with every rank on their host, whichever compute node runs
them (Open MPI's vader BTL, its PMI clique being the host's ranks); each
running job gets an id and a directory of its own in the host's shared
memory (OpenMpiJob).  docs/openmpi.md says why each variable is there.

An Open MPI program is recognised by its ELF dynamic section: it needs
libmpi.so.40 (or Open MPI's libopen-rte/libopen-pal, or its Fortran
bindings).  Everything else gets no extra environment.
"""
from __future__ import annotations

import os
import re
import shutil
import struct
from collections.abc import Iterable, Mapping
from pathlib import Path

from lattice.nodes import host
from lattice.errors import LatticeError
from lattice.state.machine import Machine, prefix
from lattice.jobs.mapping import RankMapping, process_mapping

PT_LOAD, PT_DYNAMIC = 1, 2
DT_NULL, DT_NEEDED, DT_STRTAB, DT_STRSZ = 0, 1, 5, 10
MAX_DYNAMIC = 1 << 20           # bytes of dynamic section or string table we are willing to read
HOST_MAPPING = "LATTICE_HOST_MAPPING"   # which ranks share a host: libpmi's PMI clique


def _is_open_mpi_lib(name: str) -> bool:
    return (name == "libmpi.so.40" or name.startswith(("libopen-rte.so", "libopen-pal.so"))
            or (name.startswith("libmpi_") and name.endswith(".so.40")))


_needed: dict[str, list[str]] = {}     # path -> DT_NEEDED: a run asks about each program twice


def needed_libraries(path: str | Path) -> list[str]:
    """DT_NEEDED names of an ELF file (read once per path and process)."""
    key = os.fspath(path)
    if key not in _needed:
        _needed[key] = _read_needed(key)
    return _needed[key]


def _read_needed(path: str) -> list[str]:
    """DT_NEEDED names of an ELF file; [] for a static or non-ELF file.

    Reads only the program headers, the dynamic segment and its string
    table (through the PT_LOAD segments), so stripped files work too.
    Raises ValueError for a truncated or inconsistent ELF file.
    """
    with open(path, "rb") as f:
        ident = f.read(16)
        if len(ident) < 16 or ident[:4] != b"\x7fELF" or ident[4] not in (1, 2) or ident[5] not in (1, 2):
            return []
        wide, end = ident[4] == 2, "<" if ident[5] == 1 else ">"

        def read(off: int, size: int) -> bytes:
            f.seek(off)
            data = f.read(size)
            if len(data) != size:
                raise ValueError(f"{path}: truncated ELF file (wanted {size} bytes at {off})")
            return data

        if wide:
            phoff, = struct.unpack(end + "Q", read(32, 8))
            phentsize, phnum = struct.unpack(end + "HH", read(54, 4))
            ph_fmt, dyn_fmt = end + "IIQQQQQQ", end + "qQ"
        else:
            phoff, = struct.unpack(end + "I", read(28, 4))
            phentsize, phnum = struct.unpack(end + "HH", read(42, 4))
            ph_fmt, dyn_fmt = end + "IIIIIIII", end + "iI"
        if phnum and phentsize < struct.calcsize(ph_fmt):
            raise ValueError(f"{path}: program header entries of {phentsize} bytes are too small")

        loads: list[tuple[int, int, int]] = []      # (vaddr, filesz, offset)
        dynamic: tuple[int, int] | None = None      # (offset, filesz)
        for i in range(phnum):
            raw = read(phoff + i * phentsize, struct.calcsize(ph_fmt))
            if wide:
                ptype, _flags, off, vaddr, _pa, filesz, _memsz, _align = struct.unpack(ph_fmt, raw)
            else:
                ptype, off, vaddr, _pa, filesz, _memsz, _flags, _align = struct.unpack(ph_fmt, raw)
            if ptype == PT_LOAD:
                loads.append((vaddr, filesz, off))
            elif ptype == PT_DYNAMIC:
                dynamic = (off, filesz)
        if dynamic is None:
            return []
        if dynamic[1] > MAX_DYNAMIC:
            raise ValueError(f"{path}: dynamic segment of {dynamic[1]} bytes is implausibly large")

        entry = struct.calcsize(dyn_fmt)
        needed: list[int] = []
        strtab = strsz = None
        data = read(*dynamic)
        for i in range(len(data) // entry):
            tag, val = struct.unpack_from(dyn_fmt, data, i * entry)
            if tag == DT_NULL:
                break
            if tag == DT_NEEDED:
                needed.append(val)
            elif tag == DT_STRTAB:
                strtab = val
            elif tag == DT_STRSZ:
                strsz = val
        if not needed:
            return []
        if strtab is None or strsz is None or strsz > MAX_DYNAMIC:
            raise ValueError(f"{path}: DT_NEEDED entries without a usable string table")
        # DT_STRTAB is an address: find the file offset through the segment holding it.
        for vaddr, filesz, off in loads:
            if vaddr <= strtab and strtab + strsz <= vaddr + filesz:
                strings = read(off + strtab - vaddr, strsz)
                break
        else:
            raise ValueError(f"{path}: the dynamic string table is outside every loaded segment")
        names = []
        for n in needed:
            stop = strings.find(b"\0", n)
            if n >= strsz or stop < 0:
                raise ValueError(f"{path}: DT_NEEDED name at {n} is outside the string table")
            names.append(strings[n:stop].decode("utf-8", "replace"))
        return names


def is_open_mpi(exe: str | Path) -> bool:
    """Whether exe is dynamically linked against Open MPI (False if unreadable or not ELF)."""
    try:
        return any(_is_open_mpi_lib(n) for n in needed_libraries(exe))
    except (OSError, ValueError):
        return False


def links_mpi(exe: str | Path) -> bool:
    """Whether exe is dynamically linked against an MPI library (MPICH's
    libmpi.so.12, libmpich, libmpifort; Open MPI's): its ranks start MPI's
    threads (lattice.nodes.capacity counts them)."""
    try:
        return any(n.startswith(("libmpi.", "libmpich", "libmpifort")) or _is_open_mpi_lib(n)
                   for n in needed_libraries(exe))
    except (OSError, ValueError):
        return False


def host_mapping(m: Machine, p: RankMapping, where: dict[int, str | None] | None = None) -> str:
    """Which ranks share a host, in PMI_process_mapping's vector format with
    host ids in place of node ids: LATTICE_HOST_MAPPING, from which libpmi
    answers PMI_Get_clique_size/ranks.  Ranks on one host share memory
    whichever compute node runs them (lattice.nodes.host says which host that is)."""
    hosts: dict[str, int] = {}
    ids = [hosts.setdefault(host.node_host(m, s.node, where), len(hosts)) for s in p.slots]
    # process_mapping counts "nodes" in order of first appearance: give it host ids as nodes
    by_host = p._replace(slots=[s._replace(node=i) for s, i in zip(p.slots, ids)])
    return process_mapping(by_host)


def mpi_env(exe: str, m: Machine, p: RankMapping, where: dict[int, str | None] | None = None,
            sandbox: bool = False) -> dict[str, str]:
    """Environment for exe to bootstrap through Lattice's PMI: Open MPI's
    pmix/flux component over build/lib/libpmi.so, and its shared-memory
    transport between all ranks of a host, for an Open MPI program; {} for
    any other program.  The job's own id and directory come from
    OpenMpiJob when it starts.

    In the node sandbox the ranks of one compute node share memory, but
    not those of two: each node is a pid namespace, so ranks of two nodes
    have the same pids, and Open MPI's shared-memory segments are told
    apart by their creator's pid (opal/mca/shmem: a segment whose creator
    has my pid is taken for my own mapping).  There each node is a
    clique, and ranks of two nodes talk over TCP on the block network."""
    if not is_open_mpi(exe):
        return {}
    lib = prefix() / "lib" / "libpmi.so"
    if not lib.is_file():
        raise LatticeError(f"{exe} is an Open MPI program, but Lattice's PMI-1 library {lib} is missing",
                           "build it with `make libpmi` in the repository")
    mapping = process_mapping(p) if sandbox else host_mapping(m, p, where)
    if sandbox:
        one_host = len({s.node for s in p.slots}) == 1
    else:
        one_host = len({host.node_host(m, s.node, where) for s in p.slots}) == 1
    env = {
        "FLUX_PMI_LIBRARY_PATH": str(lib),      # the PMI-1 library pmix/flux dlopens
        "OMPI_MCA_pmix": "flux",                # no fallback to another PMIx client
        "OMPI_MCA_ess": "pmi",                  # direct launch: no singleton, no orted
        "OMPI_MCA_pml": "ob1",                  # the BTLs below, not UCX
        # vader between the ranks of a host; TCP only if the job spans hosts
        # (a loaded TCP BTL makes the progress loop poll its sockets).
        "OMPI_MCA_btl": "self,vader" if one_host else "self,vader,tcp",
        # as mpirun sets it; each node adds the rank's own (OMPI_COMM_WORLD_RANK, PMIX_RANK...)
        "OMPI_COMM_WORLD_SIZE": str(len(p.slots)),
    }
    env[HOST_MAPPING] = mapping     # whole, however long: libpmi reads it from its environment
    return env


# Under cnk every system call a rank makes outside the seccomp filter's
# pass-through list is a trapped signal: UCX's shared-memory endpoints to each
# peer open, read and close the peer's /proc/PID/stat, and its posix transport
# also opens /proc/PID/fd/N and maps it.  sysv (and cma for large messages) do
# the same job as posix between the ranks of a host, so leaving posix out
# saves ~6 trapped calls per peer at MPI_Init: 64 ranks start 13% sooner
# (bench/RESULTS.md).  "^posix" keeps every other transport (TCP, InfiniBand).
UCX_TLS_CNK = "^posix"


def cnk_ucx_default(kernel: str, chosen: Mapping[str, str]) -> dict[str, str]:
    """UCX_TLS for a cnk job unless the user chose one (--env, --export, or the
    environment exported to the job): {} otherwise."""
    return {"UCX_TLS": UCX_TLS_CNK} if kernel == "cnk" and "UCX_TLS" not in chosen else {}


# Linux mode's counterpart of cnk's big memory.  Its ranks are plain
# processes: where the host's transparent huge pages are `madvise` (Debian's
# default) their malloc'd memory gets 4 KiB pages, one page fault and one TLB
# entry each, as Hydra's ranks do.  glibc's tunable (2.35 and later; an older
# glibc ignores it) makes malloc madvise(MADV_HUGEPAGE) its heap and every
# chunk of 2 MiB or more, so a rank's big arrays fault and map 2 MiB at a time
# (mg class A, 2 ranks: 150,000 page faults under Hydra, 300 under cnk;
# bench/RESULTS.md, issue 27).  A tiny program's heap may hold up to 2 MiB
# more.  The user's own GLIBC_TUNABLES wins whole.
GLIBC_TUNABLES = "GLIBC_TUNABLES"
THP_TUNABLE = "glibc.malloc.hugetlb=1"


def linux_thp_default(kernel: str, chosen: Mapping[str, str]) -> dict[str, str]:
    """GLIBC_TUNABLES giving malloc transparent huge pages, for a Linux mode
    job that did not set GLIBC_TUNABLES itself; {} otherwise."""
    return {GLIBC_TUNABLES: THP_TUNABLE} if kernel == "linux" and GLIBC_TUNABLES not in chosen else {}


def kernel_defaults(kernel: str, chosen: Mapping[str, str]) -> dict[str, str]:
    """What the job's kernel adds to its environment unless the job chose it:
    UCX_TLS under cnk, malloc's huge pages in Linux mode."""
    return {**cnk_ucx_default(kernel, chosen), **linux_thp_default(kernel, chosen)}


# A sandboxed job's nodes on one host share /dev/shm (the block's directory
# there) but each has its own pid and IPC namespaces (docs/cli.md, "Linux
# mode"): a peer on another node is not at its host pid, nor in our System V
# IPC.  Open MPI's vader would copy large messages with CMA
# (process_vm_readv on the peer's pid): none keeps it to its shared-memory
# segments.  UCX's posix transport opens a peer's segment through
# /proc/PID/fd/N: with the link off it names the segment in /dev/shm instead.
# (UCX's cma transport checks pid namespaces itself.)
SANDBOX_DEFAULTS = {
    "OMPI_MCA_btl_vader_single_copy_mechanism": "none",
    "UCX_POSIX_USE_PROC_LINK": "n",
}
# The job's own /dev/shm in the sandbox (a directory of the block's on this
# host, gone with the job): never a FUSE tree, which /tmp is under --cwd /tmp
# (Open MPI's shared mmap of a FUSE file fails with ENODEV).  Open MPI names
# its files there after the node (vader_segment.NODE..., osc_sm.NODE...,
# ompi.NODE.UID), so the nodes sharing it do not meet.
SANDBOX_DIR = "/dev/shm"


# A sandboxed job on one host: UCX's shared memory only.  Its cma transport
# cannot reach another node's process (another pid namespace), and UCX then
# took TCP on the block network for the rendezvous of large messages between
# nodes of the host: slower (mg class S, 4 ranks: 10.5 s against 7.8 s) and,
# with MPICH 4.0 over UCX 1.13's TCP, an MPI_Finalize that sometimes hangs.
UCX_TLS_SANDBOX_ONE_HOST = "self,sm"


def sandbox_defaults(chosen: Mapping[str, str], one_host: bool = False) -> dict[str, str]:
    """SANDBOX_DEFAULTS the job did not choose itself, and UCX_TLS_SANDBOX_ONE_HOST when
    all its ranks are on one host."""
    out = {k: v for k, v in SANDBOX_DEFAULTS.items() if k not in chosen}
    if one_host and "UCX_TLS" not in chosen:
        out["UCX_TLS"] = UCX_TLS_SANDBOX_ONE_HOST
    return out


# hwloc's variable naming plug-ins not to load (lattice.nodes.host.idle_hwloc_plugins)
HWLOC_SKIP = "HWLOC_PLUGINS_BLACKLIST"
PLUGIN = re.compile(r"hwloc_[a-z0-9_]+\.so")     # what a host's agent may name


def idle_everywhere(each: Iterable[tuple[str, ...]], name: re.Pattern[str]) -> set[str]:
    """What every host calls idle, of the names a host's agent may give."""
    idle: set[str] | None = None
    for names in each:
        mine = {n for n in names if name.fullmatch(n)}
        idle = mine if idle is None else idle & mine
    return idle or set()


def hwloc_default(hosts: Iterable[host.Host], chosen: Mapping[str, str]) -> dict[str, str]:
    """HWLOC_PLUGINS_BLACKLIST naming the hwloc plug-ins that find nothing on
    any of the job's hosts, unless the job chose it (or registers OpenCL
    drivers of its own, which the opencl plug-in would find); {} otherwise."""
    if HWLOC_SKIP in chosen:
        return {}
    idle = idle_everywhere((h.hwloc_idle for h in hosts), PLUGIN)
    if {"OCL_ICD_VENDORS", "OPENCL_VENDOR_PATH"} & chosen.keys():
        idle.discard("hwloc_opencl.so")
    return {HWLOC_SKIP: ",".join(sorted(idle))} if idle else {}


# UCX's variable naming the modules it loads (lattice.nodes.host.idle_ucx_modules)
UCX_MODULES = "UCX_MODULES"
UCX_MODULE = re.compile(r"[a-z0-9_]+")            # what a host's agent may name


def ucx_default(hosts: Iterable[host.Host], chosen: Mapping[str, str]) -> dict[str, str]:
    """UCX_MODULES leaving out the UCX modules that find nothing on any of the
    job's hosts, unless the job chose it; {} otherwise."""
    if UCX_MODULES in chosen:
        return {}
    idle = idle_everywhere((h.ucx_idle for h in hosts), UCX_MODULE)
    return {UCX_MODULES: "^" + ",".join(sorted(idle))} if idle else {}


IDLE_VARS = (HWLOC_SKIP, UCX_MODULES)


def idle_defaults(hosts: list[host.Host], chosen: Mapping[str, str]) -> dict[str, str]:
    """The variables that leave out of a job's ranks the hwloc plug-ins and
    UCX modules with nothing to find on its hosts (IDLE_VARS)."""
    return {**hwloc_default(hosts, chosen), **ucx_default(hosts, chosen)}


# Variables by which a job chooses hwloc's topology itself; without them
# cnode points its ranks at the host's topology file (lattice.nodes.host.topology_file;
# compute/cnode/launch.c names_topology lists the same).
TOPOLOGY_VARS = ("HWLOC_XMLFILE", "HWLOC_SYNTHETIC", "HWLOC_FSROOT", "HWLOC_THISSYSTEM",
                 "HWLOC_THISSYSTEM_ALLOWED_RESOURCES", "HWLOC_COMPONENTS")


def names_topology(chosen: Mapping[str, str]) -> bool:
    return any(v in chosen for v in TOPOLOGY_VARS)


def _fresh_job_id() -> int:
    """A random Open MPI job id.  pmix/flux takes FLUX_JOB_ID (decimal) as
    the job's 32-bit jobid; ORTE reads its high 16 bits as the job family and
    local job 0 as its daemons: a random family and local job 1."""
    import secrets         # here: only Open MPI programs need it
    return (1 + secrets.randbelow(0x7FFF)) << 16 | 1


class OpenMpiJob:
    """A running Open MPI job's host resources: a job id no other running
    Open MPI job on this host holds, and a directory of its own in the
    host's shared memory for vader's segments, osc/sm's windows and Open
    MPI's session directory, removed when the job ends.

    The id is reserved by creating the directory `lattice-ompi-ID` (mkdir
    is atomic, so two jobs, of one machine or of two machines on this host,
    cannot both get it); the `owner` file inside names the `lattice run`
    that made it, so a later job removes the directory of a run that was
    killed before it could.  Use as a context manager around the job; it
    adds its variables to env (a name the user set with --env is left
    alone) and does nothing for a job that is not Open MPI's.

    A sandboxed job's ranks do not see the host's /dev/shm, and share
    memory only with the ranks of their own node (mpi_env): the id is still
    reserved on the host, while the ranks' files go to the job's /dev/shm
    in the sandbox, which goes with the job."""

    PREFIX = "lattice-ompi-"

    def __init__(self, env: dict[str, str], user_env: list[str], uid: int, gid: int,
                 shm: Path | None = None, sandbox: bool = False) -> None:
        self.env, self.uid, self.gid, self.sandbox = env, uid, gid, sandbox
        self.user_keys = {kv.split("=", 1)[0] for kv in user_env}
        self.shm = shm or host.SHM_DIR
        self.dir: Path | None = None

    def __enter__(self) -> OpenMpiJob:
        if "FLUX_PMI_LIBRARY_PATH" not in self.env:
            return self
        self.sweep()
        for _ in range(100):
            job_id = _fresh_job_id()
            d = self.shm / f"{self.PREFIX}{job_id}"
            try:
                d.mkdir(mode=0o700)
            except FileExistsError:
                continue
            except OSError as e:
                raise LatticeError(f"cannot make Open MPI's job directory {d}: {e.strerror}",
                                   f"Open MPI's shared memory needs a writable {self.shm}") from None
            break
        else:
            raise LatticeError(f"no free Open MPI job id in {self.shm} after 100 tries")
        self.dir = d
        me = os.getpid()
        (d / "owner").write_text(f"{me} {host.process_start(me)}\n")
        if os.geteuid() == 0 and self.uid != 0:
            os.chown(d, self.uid, self.gid)
        seen = SANDBOX_DIR if self.sandbox else str(d)          # the directory as the ranks see it
        for k, v in {"FLUX_JOB_ID": str(job_id),                # selects pmix/flux; the job's Open MPI jobid
                     "OMPI_MCA_btl_vader_backing_directory": seen,
                     "OMPI_MCA_osc_sm_backing_directory": seen,
                     "OMPI_MCA_orte_tmpdir_base": seen}.items():
            if k not in self.user_keys:
                self.env[k] = v
        return self

    def describe(self) -> str | None:
        """What `lattice run -v` says about the job's Open MPI transport."""
        if self.dir is None:
            return None
        btl = ("as the user's --env OMPI_MCA_btl says" if "OMPI_MCA_btl" in self.user_keys
               else self.env.get("OMPI_MCA_btl", "Open MPI's default"))
        among = "a node" if self.sandbox else "a host"
        shm = f" (vader: shared memory between the ranks of {among})" if "vader" in btl else ""
        job_id = self.env.get("FLUX_JOB_ID", "with the user's FLUX_JOB_ID")
        files = f"the job's {SANDBOX_DIR} in the sandbox" if self.sandbox else str(self.dir)
        return f"Open MPI job {job_id}: btl {btl}{shm}; its files in {files}"

    def __exit__(self, *exc: object) -> None:
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None

    def sweep(self) -> None:
        """Remove the directories of `lattice run`s that are gone (killed
        before their own clean-up)."""
        for d in self.shm.glob(self.PREFIX + "*"):
            try:
                pid, start = (d / "owner").read_text().split()
            except (OSError, ValueError):
                continue        # being made right now, or not ours to judge
            if pid.isdigit() and str(host.process_start(int(pid))) != start:
                shutil.rmtree(d, ignore_errors=True)
