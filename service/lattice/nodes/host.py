"""The host the machine runs on: what the service node knows of the real box.

Every assumption about the host sits behind this seam.  Today a machine has
one host, "local" (the box `lattice` runs on); a Host object per host lets a
later machine spread its nodes over several.

A host's cores come from hwloc (`lstopo-no-graphics --of xml`, Debian's
hwloc-nox; the XML is also left for the ranks' hwloc: export_topology): the
cores the service may use (hwloc's allowed cpuset, within `lattice`'s own
CPU affinity), each with its PUs (hardware threads) by OS
index, in hwloc's order, so neighbouring cores share caches.  lstopo costs
tens of milliseconds, so what it said is kept in LATTICE_HOME/hosts/local
with a fingerprint of the host's CPUs (the online CPUs and the process's
affinity), read on every use and learnt again when the fingerprint changes
or `lattice boot` asks.  Without hwloc (or if it fails) each CPU of the
affinity is taken for a core of its own, and the Host's source says why.
"""
from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import NamedTuple

from lattice.state import machine
from lattice.errors import LatticeError

LOCAL = "local"
LSTOPO = "lstopo-no-graphics"
ONLINE = Path("/sys/devices/system/cpu/online")
SHM_DIR = Path("/dev/shm")      # memory every process of a host can map (POSIX shm, tmpfs)


class Core(NamedTuple):
    os_index: int               # hwloc's os_index of the core (of the PU where hwloc shows no cores)
    pus: tuple[int, ...]        # its usable PUs (hardware threads), by OS index: what affinity masks name


class Host(NamedTuple):
    name: str
    cores: tuple[Core, ...]     # the cores the service may use, in hwloc's (topology) order
    source: str                 # how they were learnt, e.g. "hwloc 2.9.0"
    hwloc_idle: tuple[str, ...] = ()    # hwloc plug-ins with nothing to find here (idle_hwloc_plugins)
    ucx_idle: tuple[str, ...] = ()      # UCX modules with nothing to find here (idle_ucx_modules)

    def cpus(self) -> list[int]:
        return [pu for c in self.cores for pu in c.pus]


# ---- CPU lists, as Linux writes them ("0-3,8,10-11") ----

def cpulist(cpus: list[int] | tuple[int, ...] | set[int]) -> str:
    """CPU numbers in Linux's list format: 0-3,8."""
    out: list[str] = []
    s = sorted(set(cpus))
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[j] + 1:
            j += 1
        out.append(str(s[i]) if i == j else f"{s[i]}-{s[j]}")
        i = j + 1
    return ",".join(out)


def parse_cpulist(text: str) -> set[int]:
    """Linux's list format back to CPU numbers; ValueError if malformed."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        a, b = int(lo), int(hi or lo)
        if a < 0 or b < a:
            raise ValueError(f"bad CPU range {part!r}")
        out.update(range(a, b + 1))
    return out


# ---- hwloc ----

def parse_bitmap(text: str) -> set[int] | None:
    """An hwloc bitmap string ("0x00000003", "0x1,0xffffffff": 32-bit words,
    most significant first; a leading "0xf...f" word means all higher bits
    set): its bits, or None for an infinite set."""
    words = text.strip().split(",")
    if words and words[0].lower() == "0xf...f":
        return None
    value = 0
    for w in words:
        value = (value << 32) | int(w, 16)
    return {i for i in range(value.bit_length()) if value >> i & 1}


def parse_lstopo(xml: str, affinity: set[int] | None = None) -> list[Core]:
    """The usable cores of an lstopo XML topology, in topology order: each
    Core's PUs that are in the machine's allowed cpuset (and in affinity, if
    given); PUs outside any Core count as cores of their own.  Cores left
    with no PU are dropped."""
    import xml.etree.ElementTree as ET    # here: `lattice run` reads the cache, not XML
    try:
        root = ET.fromstring(xml)
    except ET.ParseError as e:
        raise LatticeError(f"cannot read hwloc's topology: {e}") from e
    top = root.find("object")
    if top is None:
        raise LatticeError("hwloc's topology has no root object")
    allowed = parse_bitmap(top.get("allowed_cpuset") or top.get("cpuset") or "0xf...f")

    def usable(pu: int) -> bool:
        return (allowed is None or pu in allowed) and (affinity is None or pu in affinity)

    cores: list[Core] = []

    def walk(obj: ET.Element) -> None:
        kind = obj.get("type")
        if kind == "Core":
            pus = tuple(int(p.get("os_index", "-1")) for p in obj.iter("object") if p.get("type") == "PU")
            pus = tuple(p for p in pus if p >= 0 and usable(p))
            if pus:
                cores.append(Core(int(obj.get("os_index", pus[0])), pus))
            return
        if kind == "PU":
            pu = int(obj.get("os_index", "-1"))
            if pu >= 0 and usable(pu):
                cores.append(Core(pu, (pu,)))
            return
        for child in obj.findall("object"):
            walk(child)

    walk(top)
    return cores


def hwloc_version(xml: str) -> str:
    import re
    m = re.search(r'name="hwlocVersion" value="([^"]+)"', xml)
    return f"hwloc {m[1]}" if m else "hwloc"


# hwloc's plug-ins (Debian's libhwloc-plugins) load with every program that
# asks hwloc for the topology (MPICH and Open MPI do, in MPI_Init): gl
# pulls in 8 X11 libraries, xml_libxml libxml2 and ICU, opencl the ICD
# loader, pci libpciaccess and the PCI name database.  Left out where they
# find nothing, a rank starts ~6 ms of CPU sooner (and ~450 fewer shipped
# calls under cnk): bench/RESULTS.md.
X11_SOCKETS = Path("/tmp/.X11-unix")
OPENCL_VENDORS = Path("/etc/OpenCL/vendors")


def idle_hwloc_plugins() -> tuple[str, ...]:
    """The hwloc plug-ins that would find nothing on this host, which a rank's
    hwloc need not load: pci (hwloc's Linux code lists PCI devices from
    /sys itself), xml_libxml (hwloc reads and writes its XML with its own
    code too), gl only without an X server (it asks NVIDIA X displays),
    opencl only without an OpenCL driver registered."""
    idle = ["hwloc_xml_libxml.so"]
    if Path("/sys/bus/pci/devices").is_dir():
        idle.append("hwloc_pci.so")
    try:
        if not any(f.name.startswith("X") for f in X11_SOCKETS.iterdir()):
            idle.append("hwloc_gl.so")
    except OSError:
        idle.append("hwloc_gl.so")
    try:
        if not any(f.suffix == ".icd" for f in OPENCL_VENDORS.iterdir()):
            idle.append("hwloc_opencl.so")
    except OSError:
        idle.append("hwloc_opencl.so")
    return tuple(sorted(idle))


# UCX (MPICH's ch4 device, Open MPI's pml) loads every transport module it
# has in MPI_Init: Debian's ib and rdmacm pull in libibverbs, libmlx5,
# librdmacm and libnl, and search a dozen directories for some of them.
# Under cnk each such open is a shipped call: a 2-rank MPICH hello shipped
# 323 calls with them, 147 without, ~8% of its time (bench/RESULTS.md).
RDMA_DEVICES = Path("/sys/class/infiniband")


def idle_ucx_modules(rdma: Path = RDMA_DEVICES) -> tuple[str, ...]:
    """The UCX modules that would find nothing on this host: ib and rdmacm
    without an RDMA device (UCX's tcp, shared memory and cma transports are
    not these)."""
    try:
        if any(rdma.iterdir()):
            return ()
    except OSError:
        pass
    return ("ib", "rdmacm")


# Each rank's hwloc otherwise finds the host's topology itself in MPI_Init:
# ~500 reads of /proc and /sys (trapped calls under cnk), ~5 ms of CPU a
# rank.  Whoever learns a host's cores leaves hwloc's XML of it here
# (0644, the machine owner's), and cnode points a job's ranks at it
# (HWLOC_XMLFILE) when it is there, a regular file of cnode's own user that
# nobody else may write, and the job names no topology of its own
# (compute/cnode/launch.c).  One file per user: a host's topology is the
# same for every machine on it.
def topology_file(uid: int | None = None) -> Path:
    return SHM_DIR / f"lattice-hwloc-{os.geteuid() if uid is None else uid}.xml"


def export_topology(xml: str) -> None:
    """Replace this host's topology file with xml, whole or not at all."""
    final = topology_file()
    tmp = final.with_name(f".{final.name}.{os.getpid()}")
    try:                        # O_EXCL: never through a link planted in /dev/shm
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644), "w") as f:
            os.fchmod(f.fileno(), 0o644)        # whatever the umask: every job's ranks read it
            f.write(xml)
        os.replace(tmp, final)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise


# A virtio balloon with free page reporting hands free memory back to the
# hypervisor in 2 MiB blocks (page_reporting_order 9); a huge page taken
# from such a block is supplied again at first touch: 1 GiB of fresh 2 MiB
# pages took 0.9-1.3 s to touch here, of pool pages touched before 0.2 s.
VIRTIO_DEVICES = Path("/sys/bus/virtio/devices")
VIRTIO_BALLOON = 5                      # the device id of a memory balloon
VIRTIO_BALLOON_F_REPORTING = 5          # its free page reporting feature bit


def free_memory_reported(devices: Path = VIRTIO_DEVICES) -> bool:
    """Does this host report its free memory to a hypervisor (so fresh huge
    pages are slow to touch, and a block does better to keep its own)?"""
    try:
        for d in devices.iterdir():
            try:
                if int((d / "device").read_text(), 16) != VIRTIO_BALLOON:
                    continue
                features = (d / "features").read_text().strip()
            except (OSError, ValueError):
                continue
            if len(features) > VIRTIO_BALLOON_F_REPORTING and features[VIRTIO_BALLOON_F_REPORTING] == "1":
                return True
    except OSError:
        pass
    return False


def fingerprint() -> str:
    """What changes when the host's usable CPUs do: the online CPUs and our affinity."""
    try:
        online = ONLINE.read_text().strip()
    except OSError:
        online = "?"
    return f"online={online} affinity={cpulist(os.sched_getaffinity(0))}"


def learn(name: str = LOCAL) -> Host:
    """Ask hwloc what this host has (tens of milliseconds)."""
    import subprocess      # here: `lattice run` reads the cache
    affinity = set(os.sched_getaffinity(0))
    idle, ucx = idle_hwloc_plugins(), idle_ucx_modules()

    def without_hwloc(why: str) -> Host:     # jobs still run, each CPU taken for a core; -v says why
        return Host(name, tuple(Core(c, (c,)) for c in sorted(affinity)), f"no hwloc: {why}; each CPU taken for a core",
                    idle, ucx)

    try:
        p = subprocess.run([LSTOPO, "--of", "xml", "--whole-io", "-"], capture_output=True, text=True, timeout=30,
                           env={**os.environ, "HWLOC_PLUGINS_BLACKLIST": ",".join(idle)})
    except FileNotFoundError:
        return without_hwloc(f"{LSTOPO} is not installed (apt-get install hwloc-nox)")
    except (OSError, subprocess.TimeoutExpired) as e:
        return without_hwloc(f"{LSTOPO}: {e}")
    if p.returncode != 0:
        return without_hwloc(f"{LSTOPO} failed (status {p.returncode}: {p.stderr.strip()[:200]})")
    try:
        cores = parse_lstopo(p.stdout, affinity)
    except LatticeError as e:
        return without_hwloc(e.message)
    if not cores:
        return without_hwloc(f"hwloc shows none of the CPUs this process may use ({cpulist(affinity)})")
    try:
        export_topology(p.stdout)
    except OSError:
        pass                    # ranks' hwloc finds the topology itself, as without Lattice
    return Host(name, tuple(cores), hwloc_version(p.stdout), idle, ucx)


# ---- the cache: LATTICE_HOME/hosts/NAME ----
#
#   # comment
#   fingerprint online=0-1 affinity=0-1
#   source hwloc 2.9.0
#   hwloc-idle hwloc_gl.so hwloc_pci.so
#   ucx-idle ib rdmacm
#   core 0 0          core's os_index, then its PUs
#   core 1 1

def cache_file(name: str = LOCAL) -> Path:
    return machine.home() / "hosts" / name


def save(h: Host, fp: str) -> None:
    f = cache_file(h.name)
    f.parent.mkdir(parents=True, exist_ok=True)
    lines = ["# the cores of this host as hwloc showed them (lattice.nodes.host); learnt again when the CPUs change",
             f"fingerprint {fp}", f"source {h.source}", " ".join(["hwloc-idle", *h.hwloc_idle]),
             " ".join(["ucx-idle", *h.ucx_idle])]
    lines += [f"core {c.os_index} {' '.join(map(str, c.pus))}" for c in h.cores]
    tmp = f.with_name(f".{f.name}.{os.getpid()}")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(f)


def load(name: str = LOCAL) -> tuple[Host, str] | None:
    """The cached host and its fingerprint, or None if there is none usable."""
    try:
        text = cache_file(name).read_text()
    except (OSError, UnicodeDecodeError):
        return None
    fp, source, cores, idle, ucx = "", "", [], None, None
    try:
        for line in text.splitlines():
            word, _, rest = line.partition(" ")
            if word == "fingerprint":
                fp = rest
            elif word == "source":
                source = rest
            elif word == "hwloc-idle":
                idle = tuple(rest.split())
            elif word == "ucx-idle":
                ucx = tuple(rest.split())
            elif word == "core":
                nums = [int(n) for n in rest.split()]
                cores.append(Core(nums[0], tuple(nums[1:])))
    except (ValueError, IndexError):
        return None
    if not fp or not cores or any(not c.pus for c in cores) or idle is None or ucx is None:
        return None             # (a cache written before hwloc-idle or ucx-idle: learnt again)
    return Host(name, tuple(cores), source, idle, ucx), fp


def local(refresh: bool = False) -> Host:
    """This host: from the cache while its CPUs are unchanged, else from hwloc
    (and cached).  refresh: ask hwloc in any case (`lattice boot`)."""
    fp = fingerprint()
    if not refresh:
        cached = load(LOCAL)
        if cached is not None and cached[1] == fp:
            return cached[0]
    h = learn(LOCAL)
    try:
        save(h, fp)
    except OSError:
        pass            # a read-only LATTICE_HOME: learnt again next time
    return h


# ---- which host runs which compute node ----


def node_host(m: machine.Machine, node: int, where: dict[int, str | None] | None = None) -> str:
    """The host that runs compute node `node`: its pset's host in the
    placement `where` (pset -> host, None: this one; lattice.nodes.placement).
    Ranks on one host share memory whichever compute node runs them."""
    if not 0 <= node < m.nodes:
        raise ValueError(f"compute node {node} is not in this machine of {m.nodes} nodes")
    return (where or {}).get(m.pset_of(node)) or socket.gethostname()


def known(name: str | None) -> Host | None:
    """A host's cores: this host's (name None), or what its agent said at
    its last boot (lattice.nodes.boot keeps it in the cache); None if never seen."""
    if name is None:
        return local()
    cached = load(name)
    return cached[0] if cached else None


def process_start(pid: int) -> int | None:
    """When process pid started (clock ticks since boot, /proc/PID/stat field
    22), or None if there is no such process: with the pid, it names one
    process even after the pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after its last ')'
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[19])
