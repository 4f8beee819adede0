"""One job at a time on a block: the claim a run makes before it starts.

The claim is the job's record, inserted in the same transaction that found
the block Initialized with no active job; a second run on a busy block is
refused with one line, or with `--wait` waits (a progress line when it
starts waiting, then every PROGRESS_EVERY seconds) until the block is idle;
if the run it waited for frees the block (it had booted it for itself), the
waiting run boots it in turn (BlockFreed).  A waiting run's record is
Queued with why it waits (`lattice jobs`; `lattice cancel` ends the wait).
A queued job's runner (lattice.jobs.runner) claims the record the queue
made (Spec.job_id) instead of inserting one.
While it waits it sweeps (lattice.state.reclaim), so a run killed meanwhile does
not hold the block for ever; with `--wait` it also asks the I/O nodes,
which may still be ending a job whose run was killed.
"""
from __future__ import annotations

import shlex
import sys
import time
from typing import TYPE_CHECKING

from lattice.state import blocks, db, reclaim
from lattice.nodes import boot
from lattice import procs
from lattice.state.blocks import Block
from lattice.errors import LatticeError
from lattice.state.machine import Machine

if TYPE_CHECKING:
    from lattice.jobs.job import Spec

POLL = 0.5
PROGRESS_EVERY = 30.0
WAITABLE = ("Initialized", "Allocated", "Booting", "Terminating")     # states a block leaves by itself


class BlockFreed(LatticeError):
    """The block a run waited for was freed meanwhile: the run may boot it
    (its job's record, Queued, is job_id)."""
    job_id: int | None = None


def active_job(con: db.Connection, block: str, besides: int | None = None) -> db.Row | None:
    """The oldest job not ended on the block (besides: a job of its own, which a queued job's runner is)."""
    row: db.Row | None = con.execute(f"SELECT id, user, args, started, submitted, client_pid, client_start "
                                          f"FROM jobs WHERE block = ? AND id != ? AND state IN "
                       f"({','.join('?' * len(reclaim.ACTIVE))}) ORDER BY id LIMIT 1",
                       (block, -1 if besides is None else besides, *reclaim.ACTIVE)).fetchone()
    return row


def describe(job: db.Row) -> str:
    since = time.time() - (job["started"] or job["submitted"])
    return f"job {job['id']} ({job['user']}: {job['args']}) has run there for {since:.0f} s"


def ending_on_ionodes(con: db.Connection, m: Machine, b: Block) -> str | None:
    """A job an I/O node still runs though no record is active (its run was
    killed and its ranks are still dying), or None."""
    try:
        ciods = boot.ciods(con, b, m, timeout=5.0)
    except LatticeError:
        return None             # the run's start says what is wrong
    try:
        for c in ciods:
            job = c.status()[2]
            if job:
                return f"job {job} is still ending on I/O node {c.location}"
    except LatticeError:
        return None
    finally:
        for c in ciods:
            c.close()
    return None


def claim(con: db.Connection, m: Machine, b: Block, spec: Spec, wait: bool) -> int:
    """The job's id, once block b is Initialized and idle.  spec.job_id: the
    job's record made already (Queued or Starting: a queued job's runner),
    taken instead of a new one; a run that waits (--wait) makes its record
    Queued, with why, while it waits.  A record cancelled meanwhile ends the claim."""
    cmdline = shlex.join([spec.exe, *spec.args])
    pid, started = procs.me()
    t0 = time.monotonic()
    said: float | None = None
    job_id = spec.job_id
    while True:
        why = None
        with db.transaction(con):
            if job_id is not None:
                mine = con.execute("SELECT state, message FROM jobs WHERE id = ?", (job_id,)).fetchone()
                if mine is None or mine["state"] not in ("Queued", "Starting"):
                    said_why = f": {mine['message']}" if mine is not None and mine["message"] else ""
                    raise LatticeError(f"job {job_id} was cancelled before it started{said_why}")
            now = blocks.get(con, b.name)
            other = active_job(con, b.name, besides=job_id)
            if now.state == "Initialized" and other is None and wait:
                why = ending_on_ionodes(con, m, now)
            if now.state == "Initialized" and other is None and why is None:
                values = (b.name, spec.user, spec.uid, spec.exe, cmdline, spec.cwd, spec.nranks, spec.kernel,
                          int(spec.sandbox) if spec.kernel == "linux" else None, pid, started)
                if job_id is None:
                    cur = con.execute("INSERT INTO jobs (block, user, uid, exe, args, cwd, nranks, kernel, sandbox, "
                                      "client_pid, client_start, state, submitted) "
                                      "VALUES (?,?,?,?,?,?,?,?,?,?,?, 'Starting', ?) RETURNING id", (*values, db.now()))
                    job_id = int(cur.fetchone()[0])
                else:
                    con.execute("UPDATE jobs SET block = ?, user = ?, uid = ?, exe = ?, args = ?, cwd = ?, nranks = ?, "
                                "kernel = ?, sandbox = ?, client_pid = ?, client_start = ?, state = 'Starting', "
                                "reason = NULL WHERE id = ?", (*values, job_id))
                if spec.announce:
                    print(f"lattice: job {job_id}", file=sys.stderr, flush=True)
                return job_id
        if other is not None:
            why = f"block {b.name} is busy: {describe(other)}"
        elif why is None:
            why = f"block {b.name} is {now.state}, not Initialized" + (f" ({now.message})" if now.message else "")
        if wait and now.state == "Free":
            freed = BlockFreed(f"block {b.name} was freed while the run waited for it")
            freed.job_id = job_id
            raise freed
        if not wait or now.state not in WAITABLE:
            hint = "; `lattice run --wait` waits for it" if other is not None else ""
            raise LatticeError(why + hint)
        job_id = queued(con, spec, job_id, why, cmdline, pid, started, b.name)
        if said is None or time.monotonic() - said >= PROGRESS_EVERY:
            waited = f", waited {time.monotonic() - t0:.0f} s" if said is not None else ""
            print(f"lattice: job {job_id} queued: {why}; waiting (--wait){waited}", file=sys.stderr, flush=True)
            said = time.monotonic()
        time.sleep(POLL)
        reclaim.sweep(con, m)       # the other run may be gone without a word


def queued(con: db.Connection, spec: Spec, job_id: int | None, why: str, cmdline: str, pid: int,
           started: int, spec_block: str) -> int:
    """A waiting run's record: Queued, with why it waits (`lattice jobs`
    shows it; `lattice cancel` may end it) and the block it waits for (the
    queue keeps it for the run: lattice.jobs.queue); made the first time it waits."""
    if job_id is None:
        cur = con.execute("INSERT INTO jobs (user, uid, exe, args, cwd, nranks, kernel, sandbox, client_pid, "
                          "client_start, state, submitted, reason, need_block) "
                          "VALUES (?,?,?,?,?,?,?,?,?,?, 'Queued', ?, ?, ?) RETURNING id",
                          (spec.user, spec.uid, spec.exe, cmdline, spec.cwd, spec.nranks, spec.kernel,
                           int(spec.sandbox) if spec.kernel == "linux" else None, pid, started, db.now(), why,
                           spec_block))
        return int(cur.fetchone()[0])
    # a queued job's runner keeps Starting: its block stays the one the queue gave it
    con.execute("UPDATE jobs SET state = CASE WHEN request IS NULL THEN 'Queued' ELSE state END, reason = ? "
                "WHERE id = ? AND state IN ('Queued', 'Starting')", (why, job_id))
    return job_id
