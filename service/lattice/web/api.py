"""The read-only JSON API under /api/: the documents lattice.views makes,
the same the CLI's --json prints, one route each.  Each request reads the
database with its own connection, in a worker thread."""
from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator, Callable

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from lattice.web import Connection
from lattice import views
from lattice.errors import LatticeError
from lattice.state import blocks as blockstate
from lattice.state import db, machine
from lattice.web.watch import KINDS, Watcher

MAX_LIMIT = 100_000
MAX_STREAMS = 64        # open /api/events streams at once; more are told to come back
KEEPALIVE = 15.0        # seconds between comments on a quiet stream (proxies close idle ones)


class BadRequest(Exception):
    pass


class Unavailable(Exception):
    """The machine's state cannot be read now (its database damaged, locked, gone)."""


def read(fn: Callable[[Connection, machine.Machine], Any]) -> Any:
    try:
        con = db.connect()
    except LatticeError as e:
        raise Unavailable(e.message) from e
    try:
        return fn(con, machine.load())
    finally:
        con.close()


async def answer(fn: Callable[[Connection, machine.Machine], Any], missing: int = 404) -> Response:
    """fn's document as JSON; a LatticeError (no such block, job, node) as
    {"error": message} with status `missing`."""
    try:
        doc = await run_in_threadpool(read, fn)
    except LatticeError as e:
        return JSONResponse({"error": e.message}, status_code=missing)
    except Exception as e:      # the database failed under the request: one line, no traceback
        line = str(e) if isinstance(e, Unavailable) else db.failure_line(e)
        if line is None:
            raise
        return JSONResponse({"error": line}, status_code=503, headers={"retry-after": "5"})
    return JSONResponse(doc, headers={"cache-control": "no-store"})


def bad(e: BadRequest) -> Response:
    return JSONResponse({"error": str(e)}, status_code=400)


def number(request: Request, name: str, most: int | None = None) -> int | None:
    text = request.query_params.get(name)
    if text is None or text == "":
        return None
    if not text.isdigit() or (most is not None and int(text) > most):
        raise BadRequest(f"bad {name} {text!r}: a whole number" + (f" up to {most}" if most else ""))
    return int(text)


def flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "") in ("1", "true", "yes")


async def machine_doc(request: Request) -> Response:
    if flag(request, "summary"):
        return await answer(views.machine_summary)
    return await answer(views.machine_view)


async def summary_doc(request: Request) -> Response:
    return await answer(views.machine_summary)


async def blocks_doc(request: Request) -> Response:
    return await answer(lambda con, m: views.document("blocks", views.blocks_view(con, m)))


async def jobs_doc(request: Request) -> Response:
    try:
        running, limit = flag(request, "running"), number(request, "limit", MAX_LIMIT)
    except BadRequest as e:
        return bad(e)
    return await answer(lambda con, m: views.document("jobs", views.jobs_view(con, running=running, limit=limit)))


async def job_doc(request: Request) -> Response:
    text = request.path_params["job"]
    if not text.isdigit():
        return bad(BadRequest(f"bad job id {text!r}"))
    job = int(text)

    def one(con: Connection, m: machine.Machine) -> Any:
        found = views.jobs_view(con, job=job)
        if not found:
            raise LatticeError(f"no job {job}")
        return views.document("ranks", views.ranks_view(con, job), job=found[0])
    return await answer(one)


async def ras_doc(request: Request) -> Response:
    severity = request.query_params.get("severity") or None
    block = request.query_params.get("block") or None
    try:
        job, limit = number(request, "job"), number(request, "limit", MAX_LIMIT)
    except BadRequest as e:
        return bad(e)
    return await answer(lambda con, m: views.document("ras", views.ras_view(
        con, severity=severity, block=block, job=job, limit=limit, m=m)), missing=400)


async def counters_doc(request: Request) -> Response:
    name = request.path_params["block"]

    def ask(con: Connection, m: machine.Machine) -> Any:
        state = blockstate.get(con, name).state
        if state != "Initialized":
            raise LatticeError(f"block {name} is {state}: counters come from a booted block's I/O nodes")
        return views.counters_view(con, m, name)
    return await answer(ask, missing=404)


async def personality_doc(request: Request) -> Response:
    loc = request.path_params["location"]
    return await answer(lambda con, m: views.personality_view(con, m, loc), missing=404)


def sse(event: str, data: Any) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


async def events(request: Request) -> Response:
    """Server-sent events: `hello` at once, then `change` with the kinds
    (blocks, jobs, ras) whose state changed; a comment when quiet."""
    watcher: Watcher = request.app.state.watcher
    if len(watcher.streams) >= MAX_STREAMS:
        return JSONResponse({"error": f"{MAX_STREAMS} event streams are open: try again later"}, status_code=503,
                            headers={"retry-after": "10"})
    stream = watcher.subscribe()

    async def body() -> AsyncIterator[bytes]:
        try:
            yield b"retry: 2000\n" + sse("hello", {"seq": watcher.seq, "kinds": list(KINDS)})
            while not watcher.stopping.is_set():
                try:
                    await asyncio.wait_for(stream.wake.wait(), KEEPALIVE)
                except asyncio.TimeoutError:
                    yield b": quiet\n\n"
                    continue
                kinds = stream.take()
                if kinds:
                    yield sse("change", {"seq": watcher.seq, "changed": sorted(kinds)})
        finally:
            watcher.unsubscribe(stream)
    return StreamingResponse(body(), media_type="text/event-stream",
                             headers={"cache-control": "no-store", "x-accel-buffering": "no"})
