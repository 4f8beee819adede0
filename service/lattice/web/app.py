"""The Starlette application of `lattice serve`: routes, the guard, the
headers every answer carries, and the loop's life (lattice.web.watch)."""
from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator, Callable

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from lattice.web import Connection
from lattice.state import machine
from lattice.web import api, metrics
from lattice.web.auth import ASGIApp, Guard, Message, Receive, Scope, Send
from lattice.web.watch import Watcher

STATIC = Path(__file__).parent / "static"
# The console loads only its own files: a job's command line or a RAS
# message shown on it cannot run as script, nor frame it elsewhere
HEADERS = [(b"content-security-policy", b"default-src 'none'; script-src 'self'; style-src 'self'; "
                                        b"img-src 'self' data:; connect-src 'self'; frame-ancestors 'none'; "
                                        b"base-uri 'none'; form-action 'none'"),
           (b"x-content-type-options", b"nosniff"), (b"referrer-policy", b"no-referrer"),
           (b"x-frame-options", b"DENY")]


class Headers:
    """ASGI middleware: HEADERS on every answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)
        await self.app(scope, receive, sending)


async def index(request: Request) -> Response:
    return FileResponse(STATIC / "index.html", headers={"cache-control": "no-store"})


def make_metrics_route() -> Callable[[Request], object]:
    reg = metrics.registry()

    async def scrape(request: Request) -> Response:
        body = await run_in_threadpool(metrics.exposition, reg)
        return Response(body, media_type="text/plain; version=0.0.4; charset=utf-8",
                        headers={"cache-control": "no-store"})
    return scrape


def build(token: str | None, unix: bool = False,
          dispatch: Callable[[Connection, machine.Machine], object] | None = None,
          watch: bool = True) -> tuple[ASGIApp, Watcher]:
    """The whole server: token None means no token is asked (see
    lattice.web.auth); dispatch starts queued jobs (lattice.web.watch)."""
    watcher = Watcher(dispatch)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        task = asyncio.create_task(watcher.run()) if watch else None
        try:
            yield
        finally:
            watcher.stop()
            if task is not None:
                await task

    routes = [
        Route("/", index),
        Route("/metrics", make_metrics_route()),
        Route("/api/machine", api.machine_doc),
        Route("/api/machine/summary", api.summary_doc),
        Route("/api/blocks", api.blocks_doc),
        Route("/api/jobs", api.jobs_doc),
        Route("/api/jobs/{job}", api.job_doc),
        Route("/api/ras", api.ras_doc),
        Route("/api/counters/{block}", api.counters_doc),
        Route("/api/personality/{location}", api.personality_doc),
        Route("/api/events", api.events),
        Mount("/static", StaticFiles(directory=STATIC, follow_symlink=False), name="static"),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.watcher = watcher
    return Headers(Guard(app, token, unix)), watcher
