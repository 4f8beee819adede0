"""Can this host hold what a boot or a job asks of it?  One clear error
before anything starts, instead of a fork or a thread that fails half-way
through a launch (docs/architecture.md, "Failure handling").

Two halves:

- `read_host` reads this host's limits: kernel.pid_max and
  kernel.threads-max with the threads running now, RLIMIT_NPROC of the
  process whose children run the nodes (the daemons pass it on to the ranks
  and the I/O worker), the pids cgroup levels above that process (v1 and
  v2), MemAvailable and the free huge pages.  Pure host facts in a
  NamedTuple of numbers and strings (`to_json`): a per-host agent can read
  them on a remote host and send them back.  A few small files; no database.
- `daemons`, `job` and `problems` do the arithmetic: how many processes and
  threads (each takes a pid) a block's daemons and a job's ranks add, and
  what memory the nodes ask; then which limit that breaks, by how much, and
  how to raise it.  Every message names the number used.

What each part costs in tasks (processes + threads), counted from the code
and checked with `ps -eLf` on a booted block running MPICH jobs:

- per host and block: its agent (lattice.nodes.agent), one thread;
- per compute node: `cnode`, one thread;
- per I/O node: `ciod`'s main thread, its RAS fold timer, one thread per
  connection: its `pset_size` compute nodes at boot; during a job also the
  control connection, the stdin pump, and a PROC and a PMI connection per
  rank of its pset;
- per pset that runs ranks: the job's I/O worker (the user's): main, reader
  and stdin threads and one thread per PROC connection (rank);
- per rank whose I/O node is on another host (a hostfile's role=io): the
  relay cnode starts to seal its link, two threads (the daemons' user);
- per rank: the compute process (the user's); for a program linked with
  MPI the thread UCX starts (its async thread), and MPICH's progress thread
  on a node that gets one (lattice.nodes.cores).  A 16-rank MPICH allreduce under
  cnk peaked at 54 tasks of the job's user (16 x 2 + 2 workers x 11): with
  `ulimit -u 51` UCX could not start its thread, with 54 it ran.

Tests pass a fake /proc and /sys tree as `root`.
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from pathlib import Path

    from lattice.state.blocks import Block
    from lattice.state.machine import Machine

CNODE_TASKS = 1
AGENT_TASKS = 1             # the block's host agent (lattice.nodes.agent), one thread, for as long as the block is up
CIOD_TASKS = 2              # main thread and RAS fold timer, besides one per connection
CIOD_JOB_TASKS = 2          # the job's control connection and the stdin pump
CIOD_RANK_TASKS = 2         # a PROC and a PMI connection thread per rank
WORKER_TASKS = 3            # the I/O worker: main, reader and stdin threads, besides one per rank
RANK_TASKS = 1              # the compute process
MPI_RANK_TASKS = 2          # an MPI program's: the process and UCX's async thread
RELAY_TASKS = 2             # cnode's relay of a rank whose I/O node is on another host: its two threads
PROGRESS_TASKS = 1          # MPICH's progress thread, on a node that gets one (lattice.nodes.cores)
PID_MAX_LIMIT = 4194304     # the kernel's ceiling for kernel.pid_max on 64-bit


Pids = tuple[str, int, int]     # a pids cgroup level that limits the process: its directory, pids.max, pids.current


class Host(NamedTuple):
    """A host's limits on processes, threads and memory, as read by read_host."""
    name: str
    pid_max: int                    # kernel.pid_max: every thread takes a pid
    threads_max: int                # kernel.threads-max
    tasks: int                      # threads on the host now (/proc/loadavg)
    nproc: int | None               # RLIMIT_NPROC (soft) of the process the nodes descend from; None: unlimited
    cgroups: tuple[Pids, ...]       # every pids cgroup level above it with a limit
    mem_available: int              # bytes (MemAvailable)
    huge_free: int                  # bytes of huge pages free in the pools (not counted in MemAvailable)

    def to_json(self) -> str:
        import json         # here: the launch path never serialises
        return json.dumps(self._asdict())

    @classmethod
    def from_json(cls, text: str) -> Host:
        import json
        d = json.loads(text)
        d["cgroups"] = tuple(tuple(c) for c in d["cgroups"])
        return cls(**d)


class Need:
    """What a boot or a job adds to a host.  (A plain class: a NamedTuple
    costs `lattice run` 0.15 ms to define, and this never leaves the host.)"""
    __slots__ = ("what", "tasks", "counted", "uid", "user_tasks", "memory")

    def __init__(self, what: str, tasks: int, counted: str, uid: int, user_tasks: int, memory: int = 0) -> None:
        self.what = what                # "16 ranks", "the daemons of block B (16 compute nodes, 2 I/O nodes)"
        self.tasks = tasks              # processes and threads
        self.counted = counted          # how tasks was counted, for the message
        self.uid = uid                  # who the user's tasks run as (RLIMIT_NPROC counts per user; root is exempt)
        self.user_tasks = user_tasks    # those of tasks that run as uid, plus that user's daemons
        self.memory = memory            # bytes the nodes ask up front (cnk's big memory); 0: none


def _read(path: str) -> str:
    """A small /proc or /sys file (os.open: pathlib costs more than the read)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 65536).decode()
    finally:
        os.close(fd)


def _int(path: str) -> int:
    return int(_read(path).split()[0])


def _nproc(text: str) -> int | None:
    """RLIMIT_NPROC's soft value from a /proc/PID/limits text."""
    for line in text.splitlines():
        if line.startswith("Max processes"):
            soft = line[len("Max processes"):].split()[0]
            return None if soft == "unlimited" else int(soft)
    return None


def _pids_levels(root: str, cgroup_text: str) -> tuple[Pids, ...]:
    """The limited levels of the process's pids cgroup, from /proc/PID/cgroup:
    v1 (a `N:pids:/path` line, mounted at sys/fs/cgroup/pids) or else v2
    (`0::/path`, at sys/fs/cgroup or sys/fs/cgroup/unified).  A level's
    pids.current counts everything below it, so each limited ancestor is a
    limit of its own."""
    top = f"{root}/sys/fs/cgroup"
    v1 = v2 = None
    for line in cgroup_text.splitlines():
        _, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):
            v1 = f"{top}/pids", path
        elif controllers == "":
            v2 = path
    if v1 is None and v2 is not None:
        for mount in (top, f"{top}/unified"):
            if os.path.exists(f"{mount}/cgroup.controllers"):
                v1 = mount, v2
                break
    if v1 is None:
        return ()
    mount, path = v1
    levels: list[Pids] = []
    parts = [p for p in path.split("/") if p and p != ".."]
    for i in range(len(parts), -1, -1):     # the process's own level first, then each ancestor
        d = "/".join([mount, *parts[:i]])
        try:
            text = _read(f"{d}/pids.max").strip()
            if text != "max":
                levels.append((d, int(text), _int(f"{d}/pids.current")))
        except (OSError, ValueError):
            pass            # no pids controller at this level (the root has none)
    return tuple(levels)


def _huge_free(root: str) -> int:
    """Bytes of free huge pages, every size: free_hugepages less resv_hugepages
    (pages a mapping has reserved but not touched yet)."""
    top = f"{root}/sys/kernel/mm/hugepages"
    try:
        pools = os.listdir(top)
    except OSError:
        return 0
    total = 0
    for name in pools:      # hugepages-2048kB
        try:
            kb = int(name.removeprefix("hugepages-").removesuffix("kB"))
            free = _int(f"{top}/{name}/free_hugepages") - _int(f"{top}/{name}/resv_hugepages")
        except (OSError, ValueError):
            continue
        total += max(0, free) * kb * 1024
    return total


def read_host(root: str | Path = "/", pid: int | str = "self", name: str | None = None,
              memory: bool = True) -> Host:
    """This host's limits for the processes that descend from pid (a booted
    block's cnode: the ranks inherit its rlimits and its cgroup; "self" for a
    boot about to start).  memory=False skips MemAvailable and the huge pages
    (left 0) when nothing asks memory up front."""
    root = os.fspath(root).rstrip("/")
    proc = f"{root}/proc"
    mem = 0
    if memory:
        for line in _read(f"{proc}/meminfo").splitlines():
            if line.startswith("MemAvailable:"):
                mem = int(line.split()[1]) * 1024
                break
    try:
        limits = _read(f"{proc}/{pid}/limits")
        cgroups = _pids_levels(root, _read(f"{proc}/{pid}/cgroup"))
    except OSError:         # that daemon is gone: ours are the next best guess (the boot's were a lattice command's)
        limits = _read(f"{proc}/self/limits")
        cgroups = _pids_levels(root, _read(f"{proc}/self/cgroup"))
    return Host(
        name=name or os.uname().nodename,
        pid_max=_int(f"{proc}/sys/kernel/pid_max"),
        threads_max=_int(f"{proc}/sys/kernel/threads-max"),
        tasks=int(_read(f"{proc}/loadavg").split()[3].split("/")[1]),
        nproc=_nproc(limits),
        cgroups=cgroups,
        mem_available=mem,
        huge_free=_huge_free(root) if memory else 0,
    )


def daemons(block: str, nodes: int, psets: int, pset_size: int, uid: int) -> Need:
    """What booting a block adds: a cnode per compute node, a ciod per pset (run by uid).
    block names it for the message ("block B", "a new 2x2x4 block")."""
    ciod = CIOD_TASKS + pset_size
    tasks = AGENT_TASKS + nodes * CNODE_TASKS + psets * ciod
    return Need(f"the daemons of {block} ({_n(nodes, 'compute node')}, {_n(psets, 'I/O node')})", tasks,
                f"the host agent + {nodes:,} x cnode + {psets:,} x ciod of {ciod} threads", uid, tasks)


def job(nranks: int, ranks_per_pset: list[int], uid: int, memory: int = 0,
        daemon_uid: int | None = None, daemon_tasks: int = 0, mpi_ranks: int = 0, progress_ranks: int = 0,
        relayed_ranks: int = 0) -> Need:
    """What a job adds: its ranks (mpi_ranks of them MPI programs, with
    their threads, progress_ranks of those with MPICH's progress thread) and
    I/O workers as uid, the connection threads of its I/O nodes, and the
    relays of relayed_ranks (ranks whose I/O node is on another host: cnode
    seals their link) as the daemons' user; memory: bytes its nodes ask.
    If the daemons run as uid too, their daemon_tasks count against uid's
    limit."""
    psets = len(ranks_per_pset)
    busy = [r for r in ranks_per_pset if r]
    ranks = (nranks - mpi_ranks) * RANK_TASKS + mpi_ranks * MPI_RANK_TASKS + progress_ranks * PROGRESS_TASKS
    mine = ranks + sum(WORKER_TASKS + r for r in busy)
    ciod = psets * CIOD_JOB_TASKS + CIOD_RANK_TASKS * sum(busy) + RELAY_TASKS * relayed_ranks
    mpi = f" ({MPI_RANK_TASKS} per MPI rank, {progress_ranks:,} progress threads)" if mpi_ranks else ""
    relays = f" and {relayed_ranks:,} relays of {RELAY_TASKS}" if relayed_ranks else ""
    counted = (f"{ranks:,} for the ranks{mpi}, {len(busy):,} I/O workers of {WORKER_TASKS} + 1 per rank, "
               f"{ciod:,} I/O node connection threads{relays}")
    user = mine + (ciod + daemon_tasks if daemon_uid == uid else 0)
    return Need(_n(nranks, "rank"), mine + ciod, counted, uid, user, memory)


def _n(n: int, thing: str) -> str:
    return f"{n:,} {thing}{'s' if n != 1 else ''}"


def _gib(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def problems(h: Host, needs: list[Need]) -> list[str]:
    """Each limit of h that what needs ask together breaks: what, the number
    used, the limit and how to raise it.  Empty: the host can hold them."""
    if not needs:
        return []
    what = " and ".join(n.what for n in needs)
    tasks = sum(n.tasks for n in needs)
    counted = "; ".join(n.counted for n in needs)
    head = f"host {h.name} cannot hold {what}: they need about {tasks:,} processes and threads ({counted})"
    out = []
    after = h.tasks + tasks
    if after > h.pid_max:
        fix = (f"raise it with `sysctl -w kernel.pid_max={min(PID_MAX_LIMIT, 2 * after)}`"
               if after <= PID_MAX_LIMIT else f"the kernel allows at most {PID_MAX_LIMIT:,}: use more hosts")
        out.append(f"{head}, and with the {h.tasks:,} the host runs now that is more pids than kernel.pid_max "
                   f"({h.pid_max:,}); {fix}")
    if after > h.threads_max:
        out.append(f"{head}, and with the {h.tasks:,} the host runs now that is more than kernel.threads-max "
                   f"({h.threads_max:,}); raise it with `sysctl -w kernel.threads-max={2 * after}`")
    for path, limit, current in h.cgroups:
        if current + tasks > limit:
            out.append(f"{head}; the pids cgroup {path} allows {limit:,} (pids.max) and {current:,} are in use; "
                       f"raise it with `echo {current + tasks} > {path}/pids.max` (a systemd unit: "
                       f"TasksMax=; Slurm: the job's cgroup)")
    users: dict[int, int] = {}
    for n in needs:
        users[n.uid] = users.get(n.uid, 0) + n.user_tasks
    for uid, count in sorted(users.items()):
        if uid != 0 and h.nproc is not None and count > h.nproc:   # root is exempt from RLIMIT_NPROC
            out.append(f"{head}; {count:,} of them run as uid {uid}, whose limit (ulimit -u, RLIMIT_NPROC, "
                       f"inherited from whoever booted the block) is {h.nproc:,}; raise it with `ulimit -u "
                       f"{count * 2}` before `lattice boot` (or nproc in /etc/security/limits.conf), "
                       f"or run fewer ranks")
    memory = sum(n.memory for n in needs)
    room = h.mem_available + h.huge_free
    if memory > room:
        asked = " and ".join(n.what for n in needs if n.memory)
        out.append(f"host {h.name} cannot hold {asked}: their nodes' memory (big memory) is {_gib(memory)}, the "
                   f"host has {_gib(room)} (MemAvailable {_gib(h.mem_available)} + free huge pages "
                   f"{_gib(h.huge_free)}); use fewer nodes or less memory per node (lattice init --memory), or let "
                   f"the ranks take pages at first touch (--env LATTICE_BIGMEM_RESERVE=0)")
    return out


def check(h: Host, needs: list[Need]) -> None:
    """Raise one LatticeError naming every limit of h that needs break."""
    found = problems(h, needs)
    if found:
        from lattice.errors import LatticeError
        raise LatticeError(found[0], "\n".join(f"lattice: error: {p}" for p in found[1:]) or None)


def check_boot(m: Machine, b: Block) -> None:
    """Before a boot starts any daemon of block b on this host: can it hold
    them (they run as we do)?  (Agents on other hosts check theirs:
    lattice.nodes.agent.)"""
    check(read_host(memory=False), [daemons(f"block {b.name}", b.size, len(b.psets(m)), m.pset_size, os.geteuid())])
