"""The queue: jobs `lattice submit` recorded as Queued, started in turn.

A submitted job's record holds its RunRequest (JSON), its owner and what it
needs: a number of compute nodes, or the block --block named.  dispatch()
decides, in one transaction, which queued jobs start now: first come, first
served, with backfill on block size.  In id order each job takes

- with --block B: B, if no job holds it and no earlier job waits for it
  (B Free: its runner boots it and frees it after);
- without: the smallest booted idle block that holds it, else a Free block
  or a new box of whole psets (lattice.state.blocks.smallest_fit), unless an
  earlier job waits for free nodes: new boxes are kept for that one.

A job that cannot start keeps, for later jobs, the blocks it waits for (a
later job gets only blocks the earlier one cannot use: "behind job N").  A
started job's record goes to Starting with its block, and a runner process
(lattice.jobs.runner) runs it through the same entry as `lattice run`
(lattice.jobs.launch), then calls dispatch again.  Whoever calls dispatch
(submit, every run's end, cancel, jobs, `lattice serve`) moves the queue on;
all of it is in the database, so it survives any process and restart.
A dispatcher that is not root starts only its own user's jobs.  A
`lattice run --wait` waiting for a block is Queued too, and counts in the
order: later submitted jobs do not take its block.
"""
from __future__ import annotations

import os
import pwd
import shlex
import subprocess
import sys
from typing import NamedTuple

from lattice import procs
from lattice.errors import LatticeError
from lattice.jobs.request import RunRequest
from lattice.state import blocks, db, ras
from lattice.state.blocks import Block
from lattice.state.machine import Machine

RUNNER = "lattice.jobs.runner"
SERVICE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))     # service/
DEFAULT_OUTPUT = "lattice-%j.out"       # sbatch's slurm-%j.out, in the submitter's working directory


class Start(NamedTuple):
    job: int
    block: str


class Decision(NamedTuple):
    starts: list[Start]                 # jobs whose turn has come, with their blocks
    reasons: dict[int, str]             # why each other queued job waits
    failed: dict[int, str]              # queued jobs that can never start, and why


def submit(req: RunRequest) -> int:
    """Record the request as a Queued job of its caller (checked as `lattice
    run` checks it, before anything is queued), move the queue on: its id."""
    from lattice.jobs import launch
    from lattice.state import machine, reclaim
    m = machine.load()
    con = reclaim.connect()
    if req.output is None:
        req.output = DEFAULT_OUTPUT
    nd = launch.need(con, m, req)
    if nd.block is not None:        # the ranks must fit the block named: said now, not in the output file later
        from lattice.jobs import mapping
        mapping.map_ranks(m, nd.block, nd.apps, nd.mode, req.mapping, nd.layout.nodes)
    launch.need_kernel(req.kernel)
    user, uid, gid, groups = launch.identity(req.user)
    if req.exe is not None and nd.apps[0].exe:
        req.exe = nd.apps[0].exe            # found now, in the caller's PATH and directory
    with db.transaction(con):
        cur = con.execute(
            "INSERT INTO jobs (user, uid, gid, group_ids, exe, args, cwd, nranks, kernel, sandbox, state, submitted, "
            "request, need_nodes, need_block, reason) VALUES (?,?,?,?,?,?,?,?,?,?, 'Queued', ?,?,?,?,?) RETURNING id",
            (user, uid, gid, ",".join(map(str, groups)), nd.apps[0].exe,
             shlex.join([nd.apps[0].exe, *nd.apps[0].args]), os.path.abspath(req.work_dir()),
             sum(a.nranks for a in nd.apps), req.kernel, int(nd.sandbox) if req.kernel == "linux" else None,
             db.now(), req.to_json(), nd.nodes, req.block, "submitted: its turn comes at the next dispatch"))
        job = int(cur.fetchone()[0])
    dispatch_quietly(con, m)
    return job


def queued_rows(con: db.Connection) -> list[db.Row]:
    """Queued jobs, first come first: submitted ones not started yet, and
    `lattice run --wait`s waiting for a block (their own process claims it)."""
    return con.execute("SELECT * FROM jobs WHERE state = 'Queued' ORDER BY id").fetchall()


def holders(con: db.Connection) -> dict[str, int]:
    """Each block a job holds (started, not ended), by that job's id."""
    rows = con.execute("SELECT id, block FROM jobs WHERE block IS NOT NULL AND state IN "
                       "('Starting', 'Running', 'Dying') ORDER BY id").fetchall()
    out: dict[str, int] = {}
    for r in rows:
        out.setdefault(r["block"], r["id"])
    return out


def ready(row: db.Row) -> str:
    """Why a job that could start waits for another dispatcher."""
    return (f"ready: {row['user']}'s jobs are started by {row['user']}'s or root's lattice commands "
            f"(or root's lattice serve)")


def may_start(row: db.Row) -> bool:
    """A dispatcher that is not root starts its own user's jobs only."""
    return os.geteuid() == 0 or row["uid"] == os.getuid()


def decide(con: db.Connection, m: Machine) -> Decision:
    """Which queued jobs start now and why the others wait (module
    docstring).  New boxes chosen here are made (as Free auto blocks) by
    the caller's transaction, so one round never gives two jobs one node."""
    held = holders(con)
    waited: dict[str, int] = {}         # block -> the earlier queued job that waits for it
    boxes_for: int | None = None        # an earlier job waiting for free nodes: new boxes are its
    out = Decision([], {}, {})
    every = {b.name: b for b in blocks.all_blocks(con)}
    for j in queued_rows(con):
        if j["request"] is None or j["client_pid"] is not None:     # a waiting run: its block is kept for it
            if j["need_block"] is not None:
                waited.setdefault(j["need_block"], j["id"])
            continue
        if j["need_block"] is not None:
            b = every.get(j["need_block"])
            if b is None:
                out.failed[j["id"]] = f"its block {j['need_block']} was deleted while it waited"
                continue
            if b.name in waited:
                out.reasons[j["id"]] = f"behind job {waited[b.name]} (waiting for block {b.name})"
            elif b.name in held:
                out.reasons[j["id"]] = f"waiting for block {b.name} (job {held[b.name]} runs there)"
                waited[b.name] = j["id"]
            elif b.state not in ("Initialized", "Free"):
                out.reasons[j["id"]] = f"waiting for block {b.name} ({b.state})"
                waited[b.name] = j["id"]
            elif not may_start(j):
                out.reasons[j["id"]] = ready(j)
                waited[b.name] = j["id"]
            else:
                out.starts.append(Start(j["id"], b.name))
                held[b.name] = j["id"]
            continue
        n = int(j["need_nodes"])
        usable = sorted((b for b in every.values() if not b.auto and b.size >= n), key=lambda b: (b.size, b.name))
        free = [b for b in usable if b.name not in held and b.name not in waited]
        chosen: Block | None = next((b for b in free if b.state == "Initialized"), None)
        if chosen is None and boxes_for is None:       # a box is made only for a job that starts
            chosen = new_place(con, m, n, [b for b in free if b.state == "Free"], j["id"], make=may_start(j))
        if chosen is not None and chosen.name:
            every[chosen.name] = chosen         # a new box counts from now on
        if chosen is not None and may_start(j):
            out.starts.append(Start(j["id"], chosen.name))
            held[chosen.name] = j["id"]
            continue
        if chosen is not None:
            out.reasons[j["id"]] = ready(j)
            if not chosen.name:                 # the free nodes are kept for it
                boxes_for = j["id"]
        elif boxes_for is not None and not any(b.name in held for b in usable):
            out.reasons[j["id"]] = f"behind job {boxes_for} (waiting for free compute nodes)"
        else:
            busy = [b for b in usable if b.name in held or b.name in waited]
            first = busy[0] if busy else None
            if first is not None and first.name in waited:
                out.reasons[j["id"]] = f"behind job {waited[first.name]} (waiting for block {first.name})"
            elif first is not None:
                out.reasons[j["id"]] = f"waiting for block {first.name} (job {held[first.name]} runs there)"
            else:
                out.reasons[j["id"]] = f"waiting for {n} free compute node{'s' if n > 1 else ''}"
        for b in usable:                # what it waits for is kept for it
            waited.setdefault(b.name, j["id"])
        if chosen is None and boxes_for is None:
            boxes_for = j["id"]
    return out


def new_place(con: db.Connection, m: Machine, n: int, free: list[Block], job: int,
              make: bool = True) -> Block | None:
    """A Free block the administrator made, unless a new box of fewer nodes
    would hold n (as lattice.state.blocks.fit chooses); a new box is made now,
    Free and auto (its runner boots it, frees and deletes it); without make
    only said (a block without a name)."""
    try:
        corner, shape = blocks.smallest_fit(con, m, n)
    except LatticeError:
        return free[0] if free else None
    if free and free[0].size <= shape[0] * shape[1] * shape[2]:
        return free[0]
    if not make:
        return Block("", corner, shape, "Free", True, None)
    t = db.now()
    name = f"auto-q{job}"
    con.execute("DELETE FROM blocks WHERE name = ? AND state = 'Free' AND auto = 1", (name,))   # a former try's
    con.execute("INSERT INTO blocks (name, x0, y0, z0, sx, sy, sz, auto, created, changed) "
                "VALUES (?,?,?,?,?,?,?,1,?,?)", (name, *corner, *shape, t, t))
    return blocks.get(con, name)


def dispatch(con: db.Connection, m: Machine | None = None) -> list[int]:
    """Start the queued jobs whose turn has come: their ids.  Each goes to
    Starting on its block, named by this command until its runner (started
    here, detached) takes it over; the others get their reason.  m: the
    machine (default: lattice.state.machine.load())."""
    if con.execute("SELECT 1 FROM jobs WHERE state = 'Queued' AND request IS NOT NULL AND client_pid IS NULL "
                   "LIMIT 1").fetchone() is None:
        return []
    if m is None:
        from lattice.state import machine
        m = machine.load()
    pid, started = procs.me()
    with db.transaction(con):
        d = decide(con, m)
        for s in d.starts:
            con.execute("UPDATE jobs SET state = 'Starting', block = ?, reason = NULL, client_pid = ?, "
                        "client_start = ? WHERE id = ? AND state = 'Queued'", (s.block, pid, started, s.job))
            con.execute("UPDATE blocks SET owner_pid = ?, owner_start = ? WHERE name = ? AND auto = 1 "
                        "AND state = 'Free'", (pid, started, s.block))
        for job, why in d.reasons.items():
            con.execute("UPDATE jobs SET reason = ? WHERE id = ? AND (reason IS NULL OR reason != ?)",
                        (why, job, why))
        for job, why in d.failed.items():
            con.execute("UPDATE jobs SET state = 'Error', status = 1, message = ?, reason = NULL, ended = ? "
                        "WHERE id = ? AND state = 'Queued'", (why, db.now(), job))
    for job, why in d.failed.items():
        ras.record(con, "WARNING", "MMCS", "-", f"job {job} left the queue: {why}", job)
    for s in d.starts:
        spawn(con, s.job)
    return [s.job for s in d.starts]


def spawn(con: db.Connection, job: int) -> None:
    """The job's runner: a process of its own session, without a terminal,
    that outlives this command (lattice.jobs.runner); the first process
    records its detached child as the job's and the block's owner, and is
    waited for here, so no zombie is left and the record never names a
    process that is gone while the job still starts."""
    env = {**os.environ, "PYTHONPATH": SERVICE + os.pathsep + os.environ.get("PYTHONPATH", "")}
    try:
        p = subprocess.run([sys.executable, "-m", RUNNER, str(job)], env=env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                           timeout=db.busy_wait() + 60)
        why = p.stderr.decode(errors="replace").strip().splitlines()[-1:] if p.returncode else []
        if p.returncode == 0:
            return
        reason = why[0] if why else f"its runner exited {p.returncode}"
    except (OSError, subprocess.TimeoutExpired) as e:
        reason = f"its runner could not start: {e}"
    with db.transaction(con):
        con.execute("UPDATE jobs SET state = 'Error', status = 1, message = ?, ended = ? WHERE id = ? "
                    "AND state = 'Starting' AND client_pid = ?", (reason, db.now(), job, procs.me()[0]))


def dispatch_quietly(con: db.Connection, m: Machine | None = None) -> list[int]:
    """dispatch() where the queue is not the command's business: a failure
    is one warning line, never the command's failure."""
    failures: tuple[type[Exception], ...] = (LatticeError, OSError, *db.errors())
    try:
        return dispatch(con, m)
    except failures as e:
        text = e.message if isinstance(e, LatticeError) else str(e)
        print(f"lattice: warning: the queue could not move on: {text}", file=sys.stderr, flush=True)
        return []


def cancel_queued(con: db.Connection, job: int, who: str) -> bool:
    """A Queued job leaves the queue: Terminated, its message naming who
    cancelled it (a waiting `lattice run --wait` sees it and ends).  False:
    it was no longer Queued."""
    with db.transaction(con):
        cur = con.execute("UPDATE jobs SET state = 'Terminated', message = ?, reason = NULL, ended = ? "
                          "WHERE id = ? AND state = 'Queued'",
                          (f"cancelled by `lattice cancel` ({who}) while queued", db.now(), job))
    return bool(cur.rowcount)


def owner_of(uid: int, user: str | None = None) -> tuple[str, int, int, list[int]]:
    """(name, uid, gid, groups) of a job's owner from the password and group files."""
    try:
        pw = pwd.getpwuid(uid)
    except KeyError:
        raise LatticeError(f"job owner {user or uid} (uid {uid}) is no user of this host") from None
    groups = [g for g in os.getgrouplist(pw.pw_name, pw.pw_gid) if g != pw.pw_gid][:256]
    return pw.pw_name, pw.pw_uid, pw.pw_gid, groups
