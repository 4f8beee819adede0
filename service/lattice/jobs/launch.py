"""`lattice run`'s one entry: run(RunRequest) -> exit status.

It resolves the block (the one asked for; else a booted idle one, a Free one
or a new box it boots for itself), places the ranks, checks the hosts'
capacity, starts the job, waits for it and frees what it booted.  The
command line only parses (lattice.cli.cmd.run); a queued job's runner
(lattice.jobs.runner) comes through here as well.
"""
from __future__ import annotations

import dataclasses
import os
import pwd
import shlex
import socket
import sys
import time
from typing import TYPE_CHECKING, NamedTuple

from lattice.state import blocks, db, machine, ras, reclaim
from lattice.nodes import boot, cores, host, placement
from lattice.jobs import (collectives, distribution, job, jobenv, jobinput, mapping, mpienv, outfiles, threads,
                          timelimit, trees)
from lattice import procs
from lattice.transport import wire
from lattice.state.blocks import Block
from lattice.state.busy import POLL, PROGRESS_EVERY, BlockFreed, active_job
from lattice.nodes.cores import CoreMap
from lattice.errors import LatticeError
from lattice.state.machine import Machine
from lattice.jobs.mapping import App, RankMapping, Slot
from lattice.jobs.request import RunRequest, resolve_exe, segments

if TYPE_CHECKING:
    from lattice.nodes import capacity


def identity(user: str | None) -> tuple[str, int, int, list[int]]:
    if user is None:
        uid = os.getuid()
        try:
            name = pwd.getpwuid(uid).pw_name
        except KeyError:
            name = str(uid)
        return name, uid, os.getgid(), [g for g in os.getgroups() if g != os.getgid()][:256]
    if os.geteuid() != 0:
        raise LatticeError("--user needs root")
    try:
        pw = pwd.getpwnam(user)
    except KeyError:
        raise LatticeError(f"no user {user!r}") from None
    groups = [g for g in os.getgrouplist(pw.pw_name, pw.pw_gid) if g != pw.pw_gid]
    return pw.pw_name, pw.pw_uid, pw.pw_gid, groups[:256]


def sandboxed(req: RunRequest) -> bool:
    """Whether the job runs in the node sandbox: --kernel linux unless
    --no-sandbox (which only Linux mode has); --tree is the sandbox's."""
    if req.kernel != "linux":
        if not req.sandbox:
            raise LatticeError("--no-sandbox is for --kernel linux: a cnk job has no sandbox to leave")
        if req.tree:
            raise LatticeError("--tree is for --kernel linux: a cnk job's files are wherever its I/O node finds them")
        return False
    if not req.sandbox and req.tree:
        raise LatticeError("--tree needs the sandbox: a --no-sandbox job sees the host's whole file system")
    return bool(req.sandbox)


def job_trees(m: Machine, cwd: str, given: list[str], uid: int, user_env: dict[str, str],
              base: str) -> list[str]:
    """A sandboxed job's file trees (lattice.jobs.trees): the working directory,
    the machine's defaults with ~ as the owner's home, and --tree's (relative
    to base, the caller's directory)."""
    if trees.VAR in user_env:
        raise LatticeError(f"{trees.VAR} is Lattice's to set: name the job's trees with --tree PATH")
    try:
        home: str | None = pwd.getpwuid(uid).pw_dir
    except KeyError:
        home = None
    # a local machine's I/O nodes see this host's files: a --tree that is no directory fails here, not at launch
    return trees.job_trees(cwd, given, m.linux_trees, home, base, check=m.placement == "local")


def need_kernel(kernel: str) -> None:
    """Fail before booting anything if the kernel the job asks for is not built."""
    cnk = machine.prefix() / "bin" / "cnk"
    if kernel == "cnk" and not os.access(cnk, os.X_OK):
        raise LatticeError(f"the compute node kernel {cnk} is not built",
                           "build it with `make`, or run in Linux mode with --kernel linux")


def job_apps(req: RunRequest, default_n: int) -> list[App]:
    """The job's programs with their executables resolved on the service node."""
    apps = []
    for n, words in segments(req):
        if n is not None and n < 1:
            raise LatticeError("-n must be at least 1")
        if not words:
            if not req.print_map:
                raise LatticeError("no program to run: lattice run [OPTIONS] EXE [ARGS...]")
            apps.append(App(exe="", args=[], nranks=n or default_n))
            continue
        apps.append(App(exe=resolve_exe(words[0], req.work_dir(), req.workdir), args=words[1:], nranks=n or default_n))
    return apps


def map_cores(m: Machine, p: RankMapping, where: dict[int, str | None],
              user_env: dict[str, str]) -> tuple[CoreMap, bool, list[host.Host]]:
    """Each node's cores on its own host; True if a host's cores are not
    known yet (never booted there: this host's stand in until its agent says);
    the job's hosts."""
    hosts: dict[str | None, host.Host] = {}
    unknown = False
    for node in p.nodes():
        h = where[m.pset_of(node)]
        if h not in hosts:
            k = host.known(h)
            unknown |= k is None
            hosts[h] = k or host.local()._replace(name=h or host.LOCAL)
    per_node = {n: hosts[where[m.pset_of(n)]] for n in p.nodes()}
    # Open MPI ranks stay pinned on a crowded host (cores.crowded): unpinned, two 4-rank Open MPI
    # jobs in vn mode on 2 cores took over 180 s against 3.5 s pinned (t0630); why is not known
    unpin = not any(a.exe and mpienv.is_open_mpi(a.exe) for a in p.apps)
    return cores.map_job(per_node, p, m.cores, user_env, unpin_crowded=unpin), unknown, list(hosts.values())


def core_lines(m: Machine, p: RankMapping, cm: CoreMap) -> list[str]:
    """What each node got of the host's cores (-v)."""
    ranks_of: dict[int, list[int]] = {}
    for s in p.slots:
        ranks_of.setdefault(s.node, []).append(s.rank)
    return cores.node_lines(cm, {n: m.compute_location(n) for n in ranks_of}, ranks_of)


def print_map(m: Machine, b: Block, p: RankMapping, cm: CoreMap, booted: bool, verbose: bool) -> None:
    where = "" if booted else " (not created yet: lattice run creates it)" if b.auto else " (not booted)"
    print(f"# block {b.name}{where}: {machine.shape_str(b.shape)} at {','.join(map(str, b.corner))}, "
          f"{p.mode} mode, {p.ppn} process{'es' if p.ppn > 1 else ''} per node, "
          f"{p.nranks} rank{'s' if p.nranks != 1 else ''}")
    if verbose:
        print(f"# PMI_process_mapping {mapping.process_mapping(p)}")
        for k, v in sorted(p.env.items()):
            print(f"# env {k}={v}")
        for line in core_lines(m, p, cm):
            print(f"# {line}")
    for line in mapping.map_lines(m, p, socket.gethostname(), [host.cpulist(c) for c in cm.ranks]):
        print(line)


def check_capacity(con: db.Connection, m: Machine, b: Block, p: RankMapping, cm: CoreMap, kernel: str,
                   uid: int, user_env: dict[str, str]) -> None:
    """One clear error before anything boots or launches if this host cannot
    hold the job's ranks (and the block's daemons, if this run boots them):
    lattice.nodes.capacity.  The ranks inherit the rlimits and cgroup of the
    block's cnodes, so a booted block's limits are read through one of them.
    A machine on other hosts is checked after its boot (check_hosts)."""
    if m.placement != "local":
        return
    from lattice.nodes import capacity
    booted = b.state == "Initialized"
    row = con.execute("SELECT pid FROM daemons WHERE block = ? AND kind = 'cnode' LIMIT 1",
                      (b.name,)).fetchone() if booted else None
    daemon_uid = os.geteuid()           # the daemons run as whoever runs lattice (the machine's owner)
    words = f"a new {machine.shape_str(b.shape)} block" if b.auto else f"block {b.name}"
    d = capacity.daemons(words, b.size, len(b.psets(m)), m.pset_size, daemon_uid)
    ranks = ranks_need(m, b, p, cm, kernel, uid, user_env, p.slots, d.tasks if booted else 0)
    host = capacity.read_host(pid=row["pid"] if row else "self", memory=ranks.memory > 0)
    capacity.check(host, [ranks] if booted else [d, ranks])


def check_hosts(m: Machine, b: Block, p: RankMapping, cm: CoreMap, kernel: str, uid: int,
                user_env: dict[str, str], where: dict[int, str | None], io: dict[int, str | None]) -> None:
    """check_capacity for the hosts of a booted block on other hosts: each
    host's ranks against what its agent read of that host at this boot
    (lattice.nodes.boot keeps it in hosts/NAME.capacity)."""
    from lattice.nodes import capacity
    on: dict[str | None, list[Slot]] = {}
    for sl in p.slots:
        on.setdefault(where[m.pset_of(sl.node)], []).append(sl)
    for h, slots in on.items():
        facts = boot.host_capacity(h) if h is not None else None
        if facts is None:
            continue
        psets = [q for q in b.psets(m) if where[q] == h]
        daemons = capacity.daemons("", len(psets) * m.pset_size, len(psets), m.pset_size, os.geteuid())
        relayed = sum(1 for sl in slots if io[m.pset_of(sl.node)] != h)
        capacity.check(facts, [ranks_need(m, b, p, cm, kernel, uid, user_env, slots, daemons.tasks, relayed)])


def ranks_need(m: Machine, b: Block, p: RankMapping, cm: CoreMap, kernel: str, uid: int,
               user_env: dict[str, str], slots: list[Slot], daemon_tasks: int, relayed: int = 0) -> capacity.Need:
    """What the ranks of slots add to their host (lattice.nodes.capacity.job)."""
    from lattice.nodes import capacity
    per_pset = dict.fromkeys(b.psets(m), 0)
    for sl in slots:
        per_pset[m.pset_of(sl.node)] += 1
    # cnk maps each rank's big memory (the node's memory over its processes) at start,
    # unless the job chose to take its pages at first touch (lattice.nodes.hugepages)
    first_touch = user_env.get("LATTICE_BIGMEM_RESERVE") == "0"
    memory = len(slots) * (m.memory // p.ppn) if kernel == "cnk" and not first_touch else 0
    mpi_apps = {i for i, a in enumerate(p.apps) if mpienv.links_mpi(a.exe)}
    progress = {n.node for n in cm.nodes if n.progress == 1}       # nodes whose MPICH starts a progress thread
    mpi = [sl for sl in slots if sl.app in mpi_apps]
    return capacity.job(len(slots), list(per_pset.values()), uid, memory, os.geteuid(), daemon_tasks,
                        len(mpi), sum(1 for sl in mpi if sl.node in progress), relayed)


def free_owned(con: db.Connection, m: Machine, name: str, mine: int | None = None) -> None:
    """Free (and delete, if this run made it) the block this run booted for
    itself, unless somebody freed it under the run already.  A run that got
    the block meanwhile (it waited for it) keeps it: the block becomes its
    run's to free (lattice.state.reclaim does, once that run is gone)."""
    with db.transaction(con):
        other = active_job(con, name, besides=mine)     # mine: this run's own record, not another's
        if other is not None:
            con.execute("UPDATE blocks SET owner_pid = ?, owner_start = ? WHERE name = ?",
                        (other["client_pid"], other["client_start"], name))
            return
        # Terminating now, in the transaction that found it idle: no run can claim it any more
        con.execute("UPDATE blocks SET state = 'Terminating', changed = ? WHERE name = ? AND state = 'Initialized'",
                    (db.now(), name))
    try:
        boot.free(con, m, name)
        if blocks.get(con, name).auto:
            blocks.delete(con, name)
    except LatticeError as e:
        print(f"lattice: block {name}: {e.message}", file=sys.stderr, flush=True)


SERVICE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # service/

SWEEPER = ("import os, select, sys\n"
           "try:\n"
           "    select.select([os.pidfd_open(int(sys.argv[1]))], [], [])\n"
           "except ProcessLookupError:\n"
           "    pass\n"
           "from lattice.state import reclaim\n"
           "reclaim.connect().close()\n")


def sweep_after_me() -> None:
    """An interrupted run leaves at once (docs/cli.md): the block it booted
    for itself is freed by a sweep (lattice.state.reclaim) that a detached process
    runs the moment this run's command is gone, as any next command would."""
    try:
        null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.posix_spawn(sys.executable, [sys.executable, "-c", SWEEPER, str(procs.me()[0])],
                       {**os.environ, "PYTHONPATH": SERVICE},
                       file_actions=[(os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, null, 1),
                                     (os.POSIX_SPAWN_DUP2, null, 2)], setsid=True)
    except OSError:
        pass            # the next command's sweep frees it
    finally:
        os.close(null)


class Need(NamedTuple):
    """What a request needs, checked before anything boots or is queued."""
    mode: str
    layout: distribution.Layout
    apps: list[App]
    stdin_rank: int | None
    limit: int | None
    sandbox: bool
    nodes: int              # compute nodes it runs on (without --block: the smallest block it fits)
    block: Block | None     # --block's
    threads: int | None     # each rank's thread limit under cnk (lattice.jobs.threads); None: its cores


def need(con: db.Connection, m: Machine, req: RunRequest) -> Need:
    """The request's layout and programs, or one clear error for what is wrong with it."""
    chosen = blocks.get(con, req.block) if req.block else None
    lay = distribution.layout(m, req.mode, req.n, req.nodes, req.ntasks_per_node,
                              chosen.size if chosen else None)
    mode = lay.mode
    ppn = mapping.ppn_of(m, mode)
    apps = job_apps(dataclasses.replace(req, n=lay.n), chosen.size * ppn if chosen else 1)   # -N's ranks
    for kv in req.env:
        if "=" not in kv or kv.startswith("="):
            raise LatticeError(f"bad --env {kv!r}: expected NAME=VALUE")
    try:
        stdin_rank = jobinput.parse(req.stdin)
    except ValueError as e:
        raise LatticeError(str(e)) from None
    if stdin_rank is not None and stdin_rank != wire.STDIN_ALL and stdin_rank >= sum(a.nranks for a in apps):
        raise LatticeError(f"--stdin {stdin_rank}: the job has {sum(a.nranks for a in apps)} ranks")
    limit = timelimit.parse(req.time) if req.time is not None else None
    for pattern, opt in ((req.output, "-o"), (req.error, "-e")):
        if pattern is not None:
            outfiles.check(pattern, opt)
    if req.trace and req.kernel != "cnk":
        raise LatticeError("--trace needs --kernel cnk: the compute node kernel does the tracing")
    sandbox = sandboxed(req)
    thread_limit = threads.limit(req.threads, dict(kv.split("=", 1) for kv in req.env), req.kernel,
                                 m.memory // ppn)
    if req.hugepages not in ("reserve", "keep"):
        raise LatticeError(f"bad LATTICE_HUGEPAGES {req.hugepages!r}: reserve or keep")
    nodes = max(mapping.nodes_needed(m, mode, sum(a.nranks for a in apps)), lay.nodes or 0)
    if chosen is None and nodes > m.nodes:
        raise LatticeError(f"{sum(a.nranks for a in apps)} ranks do not fit in the {m.nodes} compute nodes of "
                           f"this machine: {mode} mode runs {ppn} per node, so they need {nodes}")
    return Need(mode, lay, apps, stdin_rank, limit, sandbox, nodes, chosen, thread_limit)


def choose(con: db.Connection, m: Machine, nodes: int, auto_name: str) -> Block:
    """Where a run without --block goes: a booted idle block, else a Free
    block or a new box (named auto_name: lattice.state.blocks.fit)."""
    chosen = idle_block(con, m, nodes) or blocks.fit(con, m, nodes)
    return chosen._replace(name=auto_name) if chosen.auto else chosen


class Record(NamedTuple):
    """What a run without --block records of its job before it has a Spec."""
    user: str
    uid: int
    app: App
    cwd: str
    nranks: int
    kernel: str
    sandbox: bool

    def values(self) -> tuple[object, ...]:
        """user, uid, exe, args, cwd, nranks, kernel, sandbox: the jobs table's columns."""
        return (self.user, self.uid, self.app.exe, shlex.join([self.app.exe, *self.app.args]), self.cwd,
                self.nranks, self.kernel, int(self.sandbox) if self.kernel == "linux" else None)


def choose_or_wait(con: db.Connection, m: Machine, nodes: int, auto_name: str, wait: bool, rec: Record,
                   job_id: int | None) -> tuple[Block, int | None]:
    """choose(); with --wait, while no place holds the job, a Queued record
    (made the first time; job_id once made) that says why, as a run waiting
    for a busy --block does (lattice.state.busy): (the place, the record)."""
    said: float | None = None
    t0 = time.monotonic()
    while True:
        try:
            return choose(con, m, nodes, auto_name), job_id
        except blocks.NoRoom:
            if not wait:
                raise
        why = f"waiting for {nodes} free compute node{'s' if nodes > 1 else ''}"
        pid, started = procs.me()
        with db.transaction(con):
            if job_id is None:
                cur = con.execute("INSERT INTO jobs (user, uid, exe, args, cwd, nranks, kernel, sandbox, client_pid, "
                                  "client_start, state, submitted, reason, need_nodes) "
                                  "VALUES (?,?,?,?,?,?,?,?,?,?, 'Queued', ?, ?, ?) RETURNING id",
                                  (*rec.values(), pid, started, db.now(), why, nodes))
                job_id = int(cur.fetchone()[0])
            else:
                still_queued(con, job_id)
        if said is None or time.monotonic() - said >= PROGRESS_EVERY:
            waited = f", waited {time.monotonic() - t0:.0f} s" if said is not None else ""
            print(f"lattice: job {job_id} queued: {why}; waiting (--wait){waited}", file=sys.stderr, flush=True)
            said = time.monotonic()
        try:
            time.sleep(POLL)
            reclaim.sweep(con, m)       # a run killed meanwhile may hold the nodes
        except BaseException as e:      # Ctrl-C: the record says so at once, not at the next sweep
            end_record(con, job_id, e if isinstance(e, LatticeError) else LatticeError(INTERRUPTED_WAIT))
            raise


INTERRUPTED_WAIT = "the run ended while it waited"


def still_queued(con: db.Connection, job_id: int) -> None:
    """A waiting run's record is still Queued, or `lattice cancel` ended the wait."""
    row = con.execute("SELECT state, message FROM jobs WHERE id = ?", (job_id,)).fetchone()
    if row is None or row["state"] != "Queued":
        said = f": {row['message']}" if row is not None and row["message"] else ""
        raise LatticeError(f"job {job_id} was cancelled while it waited{said}")


def same_place(a: Block, b: Block) -> bool:
    return (a.name, a.corner, a.shape, a.state) == (b.name, b.corner, b.shape, b.state)


def reserve(con: db.Connection, m: Machine, chosen: Block, nodes: int, rec: Record,
            waiting: int | None) -> tuple[Block, int | None]:
    """The place a run without --block chose, made its own in one
    transaction that chooses again: the run's record (Starting, on the
    block: no other run nor the queue takes it now) and, for a new box, the
    block (Free, auto, the run its owner: a sweep frees it if the run dies).
    (block, job id); (another place, None) if the place was taken since the
    run chose it (the run prepares for that one and comes back).  waiting:
    the record of a --wait run that waited for room, made Starting here."""
    pid, started = procs.me()
    with db.transaction(con):
        now = choose(con, m, nodes, chosen.name if chosen.auto else f"auto-{os.getpid()}-{int(time.time())}")
        if not same_place(now, chosen):
            return now, None
        t = db.now()
        if now.auto:
            con.execute("INSERT INTO blocks (name, x0, y0, z0, sx, sy, sz, auto, created, changed, owner_pid, "
                        "owner_start) VALUES (?,?,?,?,?,?,?,1,?,?,?,?)",
                        (now.name, *now.corner, *now.shape, t, t, pid, started))
        if waiting is not None:
            still_queued(con, waiting)
            con.execute("UPDATE jobs SET block = ?, state = 'Starting', reason = NULL WHERE id = ?",
                        (now.name, waiting))
            return now, waiting
        cur = con.execute("INSERT INTO jobs (block, user, uid, exe, args, cwd, nranks, kernel, sandbox, client_pid, "
                          "client_start, state, submitted) VALUES (?,?,?,?,?,?,?,?,?,?,?, 'Starting', ?) RETURNING id",
                          (now.name, *rec.values(), pid, started, t))
        return now, int(cur.fetchone()[0])


def unreserve(con: db.Connection, job_id: int) -> None:
    """A reserved run that ends before its job started: its record goes
    (the run never said its id) unless a `lattice cancel` marked it, which
    then ends Terminated, as the cancel waits for."""
    with db.transaction(con):
        con.execute("UPDATE jobs SET state = 'Terminated', ended = ? WHERE id = ? AND state = 'Dying'",
                    (db.now(), job_id))
        con.execute("DELETE FROM jobs WHERE id = ? AND state = 'Starting' AND started IS NULL", (job_id,))


def end_record(con: db.Connection, job_id: int, e: LatticeError) -> None:
    """A reserved run's record left open by a failed launch (its claim
    refused: cancelled before it started): Terminated if it was cancelled
    (its message stays), else Error with the failure."""
    with db.transaction(con):
        con.execute("UPDATE jobs SET state = CASE WHEN state = 'Dying' THEN 'Terminated' ELSE 'Error' END, "
                    "status = ?, message = CASE WHEN state = 'Dying' THEN message ELSE ? END, ended = ? "
                    "WHERE id = ? AND state IN ('Queued', 'Starting', 'Running', 'Dying')",
                    (e.status, e.message, db.now(), job_id))


def idle_block(con: db.Connection, m: Machine, nodes: int) -> Block | None:
    """The smallest booted block with no job that holds nodes compute nodes
    (ties: the lowest name), as a Slurm user expects a free allocation to be
    used; blocks other runs booted for themselves are theirs."""
    fits = [b for b in blocks.all_blocks(con) if b.state == "Initialized" and not b.auto and b.size >= nodes
            and active_job(con, b.name) is None]
    return min(fits, key=lambda b: (b.size, b.name), default=None)


def run(req: RunRequest, job_id: int | None = None, target: str | None = None,
        owner: tuple[str, int, int, list[int]] | None = None) -> int:
    """Run the request to its end: the job's exit status.  A queued job's
    runner (lattice.jobs.runner) gives its record (job_id), the block the
    queue chose for it (target) and its owner (user, uid, gid, groups)."""
    m = machine.load()
    con = reclaim.connect()
    cwd = os.path.abspath(req.work_dir())
    nd = need(con, m, req)
    mode, lay, apps, stdin_rank, limit, sandbox = nd.mode, nd.layout, nd.apps, nd.stdin_rank, nd.limit, nd.sandbox
    ppn = mapping.ppn_of(m, mode)
    user, uid, gid, groups = owner or identity(req.user)
    t0 = time.monotonic()

    # place the job before anything boots: a bad mapping or too many ranks costs nothing
    chosen = blocks.get(con, target) if target else nd.block
    free_choice = chosen is None        # without --block: the place is chosen here, and made the run's
    rec = Record(user, uid, apps[0], cwd, sum(a.nranks for a in apps), req.kernel, sandbox)
    auto_name = f"auto-{os.getpid()}-{int(time.time())}"
    waiting: int | None = None          # the record of a --wait run while no place holds it
    if chosen is None and not req.print_map:
        chosen, waiting = choose_or_wait(con, m, nd.nodes, auto_name, req.wait, rec, None)
    elif chosen is None:
        chosen = choose(con, m, nd.nodes, auto_name)
    reserved: int | None = None         # the run's record, made where it took its place
    try:
        while True:
            p = mapping.map_ranks(m, chosen, apps, mode, req.mapping, lay.nodes)
            places = placement.of(con, m)
            where = places.compute                     # which host runs each pset's compute nodes
            for a in apps:          # Open MPI programs bootstrap through libpmi (docs/openmpi.md)
                for k, v in mpienv.mpi_env(a.exe, m, p, where, sandbox).items():
                    p.env.setdefault(k, v)
            exported, given = jobenv.exported(req.export, req.environ, set(p.env))
            user_env = {**given, **dict(kv.split("=", 1) for kv in req.env)}
            for k in user_env:
                p.env.pop(k, None)     # the user's --env wins over the mode's defaults
            if nd.threads is not None and threads.VAR not in user_env:
                p.env[threads.VAR] = str(nd.threads)
            collectives.add_preload(req.collectives, m.collectives, apps, user_env, p.env, exported)
            exported_names = {kv.partition("=")[0] for kv in exported}
            job_chose = {**dict.fromkeys(exported_names, ""), **user_env}      # the job's own choices win
            for k, v in mpienv.kernel_defaults(req.kernel, job_chose).items():
                p.env[k] = v           # (mpienv.UCX_TLS_CNK, mpienv.THP_TUNABLE)
            env_list = [f"{k}={v}" for k, v in user_env.items()]
            cm, unknown, hosts = map_cores(m, p, where, user_env)       # nodes on real cores
            p.env.update(mpienv.idle_defaults(hosts, job_chose))
            if sandbox:
                p.env[trees.VAR] = trees.env_value(job_trees(m, cwd, req.tree, uid, user_env, req.workdir))
                one_host = len({host.node_host(m, s.node, where) for s in p.slots}) == 1
                for k, v in mpienv.sandbox_defaults(job_chose, one_host).items():
                    p.env[k] = v
            jobenv.check_size([a.exe for a in apps] + [cwd] + [w for a in apps for w in a.args],
                              exported + env_list + [f"{k}={v}" for k, v in p.env.items()])
            if req.print_map:
                print_map(m, chosen, p, cm, chosen.state == "Initialized", req.verbose)
                return 0

            check_capacity(con, m, chosen, p, cm, req.kernel, uid, user_env)
            need_kernel(req.kernel)
            if not free_choice:
                break
            # chosen again and recorded in one transaction: two runs never get one place
            try:
                now, reserved = reserve(con, m, chosen, nd.nodes, rec._replace(nranks=p.nranks), waiting)
            except blocks.NoRoom:       # the last place was taken meanwhile: with --wait, wait for another
                now, waiting = choose_or_wait(con, m, nd.nodes, auto_name, req.wait, rec, waiting)
            if reserved is not None:
                break
            chosen = now            # taken meanwhile: the ranks are placed again, on the place there is now
    except BaseException as e:
        if waiting is not None and reserved is None:    # a --wait run that waited for room ends its record
            end_record(con, waiting, e if isinstance(e, LatticeError) else LatticeError(INTERRUPTED_WAIT))
        raise
    owned = None          # a block this run boots, and frees afterwards
    b = chosen
    try:
        if b.state == "Free":
            owned = b.name
            try:
                b = boot.boot(con, m, b.name, owner=procs.me())
            except LatticeError:
                if free_choice and chosen.auto:     # the new box goes with its failed boot
                    boot.free(con, m, b.name)
                    blocks.delete(con, b.name)
                raise
    except BaseException:
        if reserved is not None:
            unreserve(con, reserved)
        raise
    if unknown:         # hosts first seen at this boot: their agents said what cores they have
        cm, _, hosts = map_cores(m, p, where, user_env)
        for k in mpienv.IDLE_VARS:
            p.env.pop(k, None)
        p.env.update(mpienv.idle_defaults(hosts, job_chose))
    if req.verbose:
        client = procs.me()[0]
        if client != os.getpid():
            print(f"lattice: run by process {os.getpid()} of the warm server for this command (pid "
                  f"{client}); LATTICE_WARM=0 runs it in its own process", file=sys.stderr)
        print(f"lattice: block {b.name} ({machine.shape_str(b.shape)}, {b.size} nodes) ready after "
              f"{time.monotonic() - t0:.2f} s", file=sys.stderr)
        for line in core_lines(m, p, cm):
            print(f"lattice: {line}", file=sys.stderr)
        if sandbox:
            print(f"lattice: Linux mode in the node sandbox: the job's file trees (through the I/O node) are "
                  f"{p.env[trees.VAR].replace(':', ', ')}", file=sys.stderr)
        elif req.kernel == "linux":
            print("lattice: Linux mode without the sandbox (--no-sandbox): the host's view, file calls shipped by "
                  "the preload client", file=sys.stderr)
        if mpienv.HWLOC_SKIP in p.env:
            print(f"lattice: hwloc plug-ins that find nothing on the job's hosts left out: "
                  f"{mpienv.HWLOC_SKIP}={p.env[mpienv.HWLOC_SKIP]} (--env {mpienv.HWLOC_SKIP}= loads them)",
                  file=sys.stderr)
        if mpienv.UCX_MODULES in p.env:
            print(f"lattice: UCX modules that find nothing on the job's hosts left out: "
                  f"{mpienv.UCX_MODULES}={p.env[mpienv.UCX_MODULES]} (--env {mpienv.UCX_MODULES}=all loads them)",
                  file=sys.stderr)
        if not mpienv.names_topology(job_chose):
            f = host.topology_file()
            there = "" if m.placement != "local" or f.exists() else " (not there now: each rank finds it itself)"
            print(f"lattice: hwloc: ranks load their host's topology from {f}{there}, written when the host's "
                  f"cores were learnt (HWLOC_XMLFILE; a job's own HWLOC_XMLFILE, HWLOC_COMPONENTS... wins)",
                  file=sys.stderr)
    # exe and args are the first program's; every program is in the mapping's apps
    output = None
    if req.output is not None or req.error is not None:
        output = outfiles.Plan(req.output, req.error, req.workdir, outfiles.Owner(user, uid, gid, groups))
    spec = job.Spec(exe=apps[0].exe, args=list(apps[0].args), cwd=cwd, env=env_list, nranks=p.nranks,
                    uid=uid, gid=gid, groups=groups, user=user, mapping=p, label=req.label,
                    kernel=req.kernel, trace=req.trace, verbose=req.verbose,
                    hugepages=req.hugepages == "reserve", cores=cm, exported=tuple(exported),
                    stdin_rank=stdin_rank, time_limit=limit, output=output, sandbox=sandbox,
                    job_id=job_id if job_id is not None else reserved,
                    announce=job_id is None and (req.verbose or sys.stderr.isatty()))
    try:
        if m.placement != "local":
            check_hosts(m, b, p, cm, req.kernel, uid, user_env, where, places.io)
        # an Open MPI job's id and shared-memory directory on this host (docs/openmpi.md)
        with mpienv.OpenMpiJob(p.env, env_list, uid, gid, sandbox=sandbox) as ompi:
            said = ompi.describe()
            if req.verbose and said:
                print(f"lattice: {said}", file=sys.stderr)
            while True:
                try:
                    status = job.run(con, m, b, spec, wait=req.wait)
                    break
                except BlockFreed as e:     # the run it waited for freed the block: boot it, as for a Free --block
                    spec = spec._replace(job_id=e.job_id, announce=False)
                    owned = b.name
                    b = boot.boot(con, m, b.name, owner=procs.me())
                except LatticeError as e:
                    if reserved is not None:        # refused at its claim (cancelled meanwhile): the record ends
                        end_record(con, reserved, e)
                    raise
    finally:
        if job.INTERRUPTED is None:
            ras.ingest(con)
            if owned:
                free_owned(con, m, owned, spec.job_id)
            if job_id is None:          # a runner starts the next itself, once its job's record is final
                from lattice.jobs import queue
                queue.dispatch_quietly(con, m)      # the block may be the next queued job's turn
        elif owned:
            sweep_after_me()
    if req.verbose:
        print(f"lattice: job ended with status {status} after {time.monotonic() - t0:.2f} s", file=sys.stderr)
    return status
