"""`lattice cancel`: end running jobs, as scancel does.

Without --signal a job is ended the way scancel ends one: SIGTERM to every
rank, and SIGKILL to what still runs after --grace seconds.  The job's record
says first that it is being cancelled (state Dying, the message naming who
cancelled it), so its `lattice run` reports the cancellation, not the ranks'
deaths, and exits with 128 + the signal that ended them.  With --signal only
that signal is sent, and the job goes on if the program lets it.

A Queued job (submitted, or a `lattice run --wait` that waits) leaves the
queue: Terminated, no exit status, its message naming who cancelled it.

The signals go to the job's I/O nodes (LAT_CTL_KILL, which names the job:
an I/O node running another job refuses it), over control connections of
their own; the job's own run keeps its connections.
"""
from __future__ import annotations

import argparse
import errno
import os
import pwd
import signal
import time

from lattice.jobs import queue
from lattice.state import blocks, db, machine, reclaim
from lattice.nodes import boot
from lattice.transport import wire
from lattice.transport.ciodclient import CiodError
from lattice.errors import LatticeError
from lattice.state.machine import Machine

description = ("end running jobs (SIGTERM, then SIGKILL after --grace seconds), or send them one signal; "
               "a queued job leaves the queue")


def setup_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("jobs", metavar="JOB", type=int, nargs="+", help="job ids (`lattice jobs --running`)")
    p.add_argument("-s", "--signal", metavar="SIG",
                   help="only send this signal (name or number, e.g. USR1), as scancel -s; the job is not ended")
    p.add_argument("--grace", type=float, default=5.0, metavar="SECONDS",
                   help="how long ranks have after SIGTERM before SIGKILL (default 5)")


def parse_signal(text: str) -> int:
    name = text.upper().removeprefix("SIG")
    try:
        sig = int(name) if name.isdigit() else int(signal.Signals[f"SIG{name}"])
    except (KeyError, ValueError):
        raise LatticeError(f"no such signal: {text}") from None
    if not 1 <= sig < signal.NSIG:
        raise LatticeError(f"no such signal: {text}")
    return sig


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def running_job(con: db.Connection, job: int) -> db.Row:
    row: db.Row | None = con.execute("SELECT * FROM jobs WHERE id = ?", (job,)).fetchone()
    if row is None:
        raise LatticeError(f"no job {job}")
    if row["state"] not in reclaim.ACTIVE:
        raise LatticeError(f"job {job} is not running ({row['state']})")
    if os.getuid() not in (0, row["uid"]):
        raise LatticeError(f"job {job} is {row['user']}'s: only its owner or root may cancel it")
    return row


def signal_job(con: db.Connection, m: Machine, row: db.Row, sig: int) -> int:
    """sig to the job on each of its block's I/O nodes: how many took it."""
    b = blocks.get(con, row["block"])
    took = 0
    try:
        ciods = boot.ciods(con, b, m)
    except (LatticeError, OSError) as e:
        raise LatticeError(f"cannot reach the I/O nodes of block {b.name}: {e}") from None
    try:
        for c in ciods:
            try:
                ret, err, text = c.call(wire.CTL_KILL, wire.KILL.pack(row["id"], sig, 0))
            except (CiodError, OSError):
                continue                # lost meanwhile: its ranks are lost with it
            if ret >= 0:
                took += 1
            elif err != errno.ESRCH:    # ESRCH: the job ended there already
                raise LatticeError(f"I/O node {c.location} refused signal {sig} for job {row['id']}: {text}")
    finally:
        for c in ciods:
            c.close()
    return took


def settle(con: db.Connection, row: db.Row, e: LatticeError) -> str:
    """A signal that found no I/O node to take it (e): the job ended
    meanwhile, or its block is being freed, which ends it (its record ends
    once its run sees its I/O nodes go, waited for here): what to say.
    Raises e if the job still runs on a block that is up."""
    reclaim.end_orphaned_jobs(con)
    now = con.execute("SELECT state FROM jobs WHERE id = ?", (row["id"],)).fetchone()
    if now is None or now["state"] not in reclaim.ACTIVE:
        return f"lattice: job {row['id']} had already ended"
    b = con.execute("SELECT state FROM blocks WHERE name = ?", (row["block"],)).fetchone()
    if b is not None and b["state"] == "Initialized":
        raise e
    if ended(con, row["id"], time.monotonic() + 120):
        return f"lattice: job {row['id']} cancelled (its block {row['block']} was being freed: it ended with it)"
    raise LatticeError(f"job {row['id']} still runs 120 s after its block {row['block']} began to be freed")


def ended(con: db.Connection, job: int, deadline: float) -> bool:
    """Wait until the job's record ends, or the deadline."""
    while True:
        reclaim.end_orphaned_jobs(con)      # a run killed meanwhile ends no record itself
        state = con.execute("SELECT state FROM jobs WHERE id = ?", (job,)).fetchone()["state"]
        if state not in reclaim.ACTIVE:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.1)


def cancel(args: argparse.Namespace) -> int:
    m = machine.load()
    con = reclaim.connect()
    only = parse_signal(args.signal) if args.signal else None
    if args.grace < 0:
        raise LatticeError("--grace must not be negative")
    rows = [running_job(con, j) for j in dict.fromkeys(args.jobs)]     # all checked before any is touched
    if only is not None:
        for row in rows:
            if not launched(con, row):
                raise LatticeError(f"job {row['id']} has not started ({row['state']}): no rank to signal")
            try:
                signal_job(con, m, row, only)
            except LatticeError as e:
                print(settle(con, row, e))
                continue
            print(f"lattice: signal {signal.Signals(only).name} sent to job {row['id']}")
        return 0
    who = user_name(os.getuid())
    left = []
    for row in rows:
        if row["state"] == "Queued" and queue.cancel_queued(con, row["id"], who):
            print(f"lattice: job {row['id']} cancelled (it was queued: out of the queue, Terminated)")
            continue
        # said before anything is killed: the job's run reads it when its ranks die
        cur = con.execute("UPDATE jobs SET state = 'Dying', message = ? WHERE id = ? AND state IN (?, ?, ?, ?)",
                          (f"cancelled by `lattice cancel` ({who})", row["id"], *reclaim.ACTIVE))
        if not cur.rowcount:            # it ended since it was read: as scancel of a job just ended, no error
            print(f"lattice: job {row['id']} had already ended")
            continue
        if launched(con, row):
            try:
                signal_job(con, m, row, signal.SIGTERM)
            except LatticeError as e:
                print(settle(con, row, e))
                continue
        left.append(row)
    for row in left:
        if not launched(con, row):
            if row["started"] is not None:      # ran on a block no longer up: being freed, its ranks end with it
                print(settle(con, row, LatticeError(f"block {row['block']} is not up")))
            elif ended(con, row["id"], time.monotonic() + 120):    # its run is booting: it ends the job first
                print(f"lattice: job {row['id']} cancelled before it started")
            else:
                print(f"lattice: job {row['id']} marked cancelled: its runner ends it once its block is booted")
            continue
        how = "SIGTERM"
        if not ended(con, row["id"], time.monotonic() + args.grace):
            try:
                signal_job(con, m, row, signal.SIGKILL)
            except LatticeError as e:
                print(settle(con, row, e))
                continue
            how = f"SIGKILL after {args.grace:g} s"
            if not ended(con, row["id"], time.monotonic() + 30):
                raise LatticeError(f"job {row['id']} still runs 30 s after SIGKILL")
        print(f"lattice: job {row['id']} cancelled ({how})")
    queue.dispatch_quietly(con, m)      # the next queued job's turn may have come
    return 0


def launched(con: db.Connection, row: db.Row) -> bool:
    """Whether the job may have ranks on I/O nodes: it has a block and the block is booted."""
    if row["block"] is None:
        return False
    b = con.execute("SELECT state FROM blocks WHERE name = ?", (row["block"],)).fetchone()
    return b is not None and b["state"] == "Initialized"
