"""The server's loop: what changed in the machine's state, told to every
open /api/events stream.

Every INTERVAL seconds it imports the I/O nodes' RAS spool (as `lattice ras`
does) and reads a fingerprint of the blocks, the jobs and the RAS log; a
change wakes the streams, each told which of the three changed so that the
console fetches only those again.  On a change of the jobs or blocks, and
every CHORES seconds, it starts the queued jobs whose turn has come
(lattice.jobs.queue.dispatch), so that they start with no command running;
every CHORES seconds it also sweeps what dead processes left behind
(lattice.state.reclaim, as every command does), so that a run killed
outright does not stay Running on the console.  A stream that falls behind loses nothing: it is told the
union of what changed since it last looked."""
from __future__ import annotations

import asyncio
import sys
import time
from typing import Any, Callable

from starlette.concurrency import run_in_threadpool

from lattice.web import Connection
from lattice.errors import LatticeError
from lattice.state import db, machine, ras, reclaim

KINDS = ("blocks", "jobs", "ras")
INTERVAL = 0.5
CHORES = 5.0


def fingerprint(con: Connection) -> dict[str, Any]:
    """Values that change whenever what the console shows of each kind does
    (plain SQL: the same on every database backend)."""
    def rows(q: str) -> tuple[tuple[Any, ...], ...]:
        return tuple(tuple(r) for r in con.execute(q).fetchall())
    return {
        "blocks": rows("SELECT name, state, changed FROM blocks ORDER BY name"),
        "jobs": rows("SELECT max(id), count(started), count(ended) FROM jobs")
        + rows("SELECT id, state FROM jobs WHERE ended IS NULL ORDER BY id")
        # the ranks of jobs not ended yet: a rank's end shows before its job's
        + rows("SELECT count(*), count(how) FROM ranks WHERE job IN (SELECT id FROM jobs WHERE ended IS NULL)"),
        "ras": rows("SELECT max(id) FROM ras"),
    }


class Stream:
    """One /api/events client: what changed since it last looked."""

    def __init__(self) -> None:
        self.changed: set[str] = set()
        self.wake = asyncio.Event()

    def tell(self, kinds: set[str]) -> None:
        self.changed |= kinds
        self.wake.set()

    def take(self) -> set[str]:
        kinds, self.changed = self.changed, set()
        self.wake.clear()
        return kinds


class Watcher:
    """The loop and the streams it wakes (module doc).  dispatch: the
    queue's entry that starts queued jobs (lattice.jobs.queue)."""

    def __init__(self, dispatch: Callable[[Connection, machine.Machine], object] | None = None,
                 interval: float = INTERVAL, chores: float = CHORES) -> None:
        self.streams: set[Stream] = set()
        self.seq = 0
        self.last: dict[str, Any] | None = None
        self.dispatch = dispatch
        self.interval, self.chores = interval, chores
        self.chores_at = 0.0
        self.stopping = asyncio.Event()
        self.complained = ""

    def subscribe(self) -> Stream:
        s = Stream()
        self.streams.add(s)
        return s

    def unsubscribe(self, s: Stream) -> None:
        self.streams.discard(s)

    def look(self) -> dict[str, Any]:
        """One round, in a worker thread (the database calls block)."""
        con = db.connect()
        try:
            ras.ingest(con)
            now = fingerprint(con)
            due = time.monotonic() >= self.chores_at
            moved = self.last is None or any(now[k] != self.last[k] for k in ("jobs", "blocks"))
            if due or moved:        # a job ended or a block came up: a queued job may start now
                m = machine.load()
                if due:
                    self.chores_at = time.monotonic() + self.chores
                    reclaim.sweep(con, m)
                started = self.dispatch(con, m) if self.dispatch is not None else None
                if due or started:
                    now = fingerprint(con)
            return now
        finally:
            con.close()

    async def step(self) -> None:
        try:
            now = await run_in_threadpool(self.look)
        except Exception as e:      # the loop outlives a failed round (a locked or unreachable database): said once
            text = e.message if isinstance(e, LatticeError) else db.failure_line(e) or f"{type(e).__name__}: {e}"
            if text != self.complained:
                print(f"lattice serve: warning: reading the machine's state: {text}", file=sys.stderr, flush=True)
            self.complained = text
            return
        self.complained = ""
        kinds = set(KINDS) if self.last is None else {k for k in KINDS if now[k] != self.last[k]}
        self.last = now
        if kinds:
            self.seq += 1
            for s in list(self.streams):
                s.tell(kinds)

    async def run(self) -> None:
        while not self.stopping.is_set():
            await self.step()
            try:
                await asyncio.wait_for(self.stopping.wait(), self.interval)
            except asyncio.TimeoutError:
                pass

    def stop(self) -> None:
        self.stopping.set()
        for s in list(self.streams):
            s.wake.set()
