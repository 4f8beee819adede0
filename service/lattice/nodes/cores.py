"""Nodes on cores: which real CPUs each compute node of a job gets.

Compute nodes are processes that share the host's cores, so each job maps
its nodes onto them at launch (docs/architecture.md, "Nodes on cores"):

- the job's nodes, in its rank order (RankMapping.nodes()), share out the
  host's usable cores (lattice.nodes.host): each node gets cores of its own,
  split as evenly as possible in topology order (neighbours share caches);
- a node's ranks (virtual node mode) share out the node's cores by the same
  rule, in order of t: with as many cores as ranks each rank has its own;
- a rank's CPUs are every PU (hardware thread) of its cores;
- when the job's ranks on a host outnumber its cores (crowded), none is
  pinned: each may run on every usable core of the host, as mpiexec.hydra's
  ranks do, and the kernel's scheduler places them.

MPICH's asynchronous progress thread (co mode) is worth having only on a
core nothing else computes on: a node gets MPIR_CVAR_ASYNC_PROGRESS=1 only
when it holds at least two cores no other node of the job uses (and the
modelled node has a second core), else 0.  A user's `--env
MPIR_CVAR_ASYNC_PROGRESS=...` wins; vn mode leaves it alone (every core
runs a rank).
"""
from __future__ import annotations

from collections import Counter
from typing import NamedTuple, Sequence, TypeVar

from lattice.nodes.host import Core, Host, cpulist
from lattice.jobs.mapping import ASYNC_PROGRESS, RankMapping, Slot
from lattice.transport.wire import PROGRESS_UNSET as UNSET    # progress: leave the environment as it is

T = TypeVar("T")


class NodeCores(NamedTuple):
    node: int                   # the machine's compute node index
    cores: tuple[Core, ...]
    own: int                    # how many of its cores no other node of the job uses
    progress: int               # MPIR_CVAR_ASYNC_PROGRESS its ranks get: 0, 1 or UNSET
    why: str                    # why, in words (lattice run -v)

    def cpus(self) -> tuple[int, ...]:
        return tuple(pu for c in self.cores for pu in c.pus)


class CoreMap(NamedTuple):
    host: Host                          # the (first) host's cores
    nodes: list[NodeCores]              # in the job's node order
    ranks: list[tuple[int, ...]]        # rank -> its CPUs (OS indexes, on its node's host)
    hosts: dict[int, Host] = {}         # node -> its host, when the job spans several
    crowded: frozenset[str] = frozenset()   # hosts whose ranks of the job outnumber their cores

    def node(self, index: int) -> NodeCores:
        return next(n for n in self.nodes if n.node == index)


def spread(units: Sequence[T], n: int) -> list[list[T]]:
    """units shared among n takers: n <= len(units): contiguous runs whose
    lengths differ by at most one (the first ones longer); else taker k gets
    units[k mod len]."""
    if n < 1 or not units:
        raise ValueError("spread needs takers and units")
    if n > len(units):
        return [[units[k % len(units)]] for k in range(n)]
    base, extra = divmod(len(units), n)
    out, at = [], 0
    for k in range(n):
        size = base + (k < extra)
        out.append(list(units[at:at + size]))
        at += size
    return out


def crowded(ranks: int, cores: int) -> bool:
    """Whether a host's ranks of the job outnumber its cores: then none is
    pinned.  Two ranks pinned to one core wait for each other a scheduler
    time slice at a time whenever one spins on an answer the other must give
    (MPI's progress spins, it does not sleep): MPICH's atomic_get test, its
    target and busiest origin pinned to one core, took over 400 s against
    Hydra's 25 s (issue 28, bench/RESULTS.md).  Unpinned, the kernel runs
    whichever rank is runnable on whichever core is free, as under
    mpiexec.hydra, which binds nothing."""
    return ranks > cores


def progress(mode: str, model_cores: int, own: int, shared_with: int, user: str | None,
             cores: int = 1) -> tuple[int, str]:
    """MPIR_CVAR_ASYNC_PROGRESS for a node's ranks, and why (cores: how many
    the node has, for the words)."""
    if user is not None:
        return UNSET, f"as --env sets it ({ASYNC_PROGRESS}={user})"
    if mode != "co":
        return UNSET, "not set: vn mode, every core runs a rank"
    if model_cores < 2:
        return 0, "off: the machine's nodes have one core (lattice init --cores)"
    if own >= 2:
        return 1, f"on: {own} cores of its own, the thread takes one"
    if shared_with:
        its = "its cores are" if cores > 1 else "its core is"
        return 0, f"off: {its} shared with {shared_with} other node{'s' if shared_with > 1 else ''} of the job"
    return 0, "off: one core of its own, none to spare"


def map_job(host: Host | dict[int, Host], p: RankMapping, model_cores: int,
            user_env: dict[str, str] | None = None, unpin_crowded: bool = True) -> CoreMap:
    """Each node's and each rank's real CPUs for mapping p on host (or on
    each node's host: node -> Host), with the progress thread decision;
    user_env is the job's --env (name -> value).  The nodes of each host
    share out that host's cores.  unpin_crowded False: a crowded host's ranks are
    pinned as on any other (the job's Open MPI programs: lattice.jobs.launch)."""
    user = (user_env or {}).get(ASYNC_PROGRESS)
    order = p.nodes()
    host_of = host if isinstance(host, dict) else dict.fromkeys(order, host)
    on: dict[str, list[int]] = {}
    for node in order:
        on.setdefault(host_of[node].name, []).append(node)
    per_node = Counter(s.node for s in p.slots)
    share_of: dict[int, list[Core]] = {}
    packed: set[str] = set()            # crowded hosts: every node there gets all their cores
    for name, names in on.items():
        every = host_of[names[0]].cores
        if unpin_crowded and crowded(sum(per_node[n] for n in names), len(every)):
            packed.add(name)
            share_of.update((node, list(every)) for node in names)
            continue
        for node, share in zip(names, spread(every, len(names))):
            share_of[node] = share
    users: dict[tuple[str, tuple[int, ...]], int] = {}  # (host, core by its PUs: numbers repeat across packages) -> nodes
    for node in order:
        for c in share_of[node]:
            users[host_of[node].name, c.pus] = users.get((host_of[node].name, c.pus), 0) + 1
    nodes: list[NodeCores] = []
    for node in order:
        share, h = share_of[node], host_of[node].name
        own = sum(1 for c in share if users[h, c.pus] == 1)
        shared_with = max(users[h, c.pus] for c in share) - 1
        value, why = progress(p.mode, model_cores, own, shared_with, user, len(share))
        nodes.append(NodeCores(node, tuple(share), own, value, why))
    ranks: list[tuple[int, ...]] = [()] * p.nranks
    slots_of: dict[int, list[Slot]] = {}
    for s in p.slots:
        slots_of.setdefault(s.node, []).append(s)
    for n in nodes:
        slots = sorted(slots_of[n.node], key=lambda s: s.t)
        if host_of[n.node].name in packed:
            for s in slots:
                ranks[s.rank] = n.cpus()
            continue
        for s, cores in zip(slots, spread(n.cores, len(slots))):
            ranks[s.rank] = tuple(pu for c in cores for pu in c.pus)
    several = len(on) > 1
    return CoreMap(host_of[order[0]], nodes, ranks, host_of if several else {}, frozenset(packed))


def node_lines(cm: CoreMap, location: dict[int, str], ranks_of: dict[int, list[int]]) -> list[str]:
    """`lattice run -v`: one line per node, what it got and why."""
    lines = []
    for h in ({id(x): x for x in cm.hosts.values()}.values() if cm.hosts else [cm.host]):
        count = sum(1 for n in cm.nodes if cm.hosts.get(n.node, cm.host).name == h.name)
        lines.append(f"cores: {count} node{'s' if count != 1 else ''} on {len(h.cores)} "
                     f"usable core{'s' if len(h.cores) != 1 else ''} of host {h.name} ({h.source})"
                     + ("; more ranks than cores: none pinned" if h.name in cm.crowded else ""))
    for n in cm.nodes:
        rs = ranks_of.get(n.node, [])
        on = f" on {cm.hosts[n.node].name}" if cm.hosts else ""
        who = f"rank{'s' if len(rs) != 1 else ''} {cpulist(rs)}"
        cores = ",".join(str(c.os_index) for c in n.cores)
        lines.append(f"node {location[n.node]} ({who}){on}: CPUs {cpulist(n.cpus())} (core{'s' if len(n.cores) != 1 else ''} "
                     f"{cores}); progress thread {n.why}")
    return lines
