"""Who may read `lattice serve`: a bearer token, and the loopback rule.

Bound to a loopback address (or a 0600 unix socket) the server needs no
token, but a request must then name a loopback host (Host header): a web
page elsewhere cannot reach it through DNS rebinding.  Bound elsewhere (or
with --token) every request, the console's files, /api, /api/events and
/metrics alike, must carry the token: `Authorization: Bearer TOKEN`, or the
cookie a browser gets from a `?token=TOKEN` login link.  The token lives in
LATTICE_HOME/serve-token, 0600, made when missing."""
from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
from pathlib import Path
from typing import Awaitable, Callable, MutableMapping, Any
from urllib.parse import parse_qsl, urlencode

from lattice.errors import LatticeError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

COOKIE = "lattice_token"
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "[::1]", "::1")


def token_file(home: Path) -> Path:
    return home / "serve-token"


def load_token(home: Path) -> str:
    """The server's token, made (0600, 256 random bits) if the file is missing.
    A file others may read is refused: its token may be known."""
    path = token_file(home)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        pass
    except OSError as e:
        raise LatticeError(f"cannot make the token file {path}: {e.strerror}") from e
    else:
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_urlsafe(32) + "\n")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        raise LatticeError(f"cannot read the token file {path}: {e.strerror}") from e
    with os.fdopen(fd) as fh:
        st = os.fstat(fh.fileno())
        if st.st_mode & 0o077 or st.st_uid != os.geteuid():
            raise LatticeError(f"the token file {path} is readable by others or not yours "
                               f"(mode {st.st_mode & 0o777:o}): remove it and a new one is made")
        token = fh.read().strip()
    if len(token) < 16:
        raise LatticeError(f"the token file {path} holds no token of 16 characters or more: remove it "
                           "and a new one is made")
    return token


def loopback_host(host: str) -> bool:
    """Whether a Host header names this machine's loopback (any port)."""
    h = host.strip().lower()
    if h.startswith("["):
        h = h[:h.find("]") + 1] if "]" in h else h
    elif h.count(":") == 1:
        h = h.rsplit(":", 1)[0]
    if h in LOOPBACK_HOSTS:
        return True
    try:
        return ipaddress.ip_address(h.strip("[]")).is_loopback
    except ValueError:
        return False            # a name: localhost only (127.0.0.1.evil.example is not this host)


class Guard:
    """ASGI middleware: every http request is checked before the app sees
    it.  token None: no token (loopback or unix socket), Host must be
    loopback (unix socket: not checked, the socket's mode is the guard)."""

    def __init__(self, app: ASGIApp, token: str | None, unix: bool = False) -> None:
        self.app, self.token, self.unix = app, token, unix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":      # none is served: refused before anything else sees it
            await receive()
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":         # lifespan
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if self.token is None:
            if self.unix or loopback_host(headers.get("host", "")):
                await self.app(scope, receive, send)
            else:
                await reply(send, 403, "this server answers requests for localhost only\n")
            return
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        if "token" in query:        # a login link: set the cookie, then the same page without the token
            if not self.same(query["token"]):
                await reply(send, 401, "wrong token\n")
                return
            del query["token"]
            path = scope["path"]
            if path[1:2] in ("/", "\\"):      # "//host", "/\\host": a browser would leave the site
                path = "/"
            where = path + ("?" + urlencode(query) if query else "")
            await reply(send, 303, "", [("location", where),
                                        ("set-cookie", f"{COOKIE}={self.token}; Path=/; HttpOnly; SameSite=Strict")])
            return
        auth = headers.get("authorization", "")
        given = auth[7:].strip() if auth[:7].lower() == "bearer " else cookie(headers.get("cookie", ""), COOKIE)
        if given is None or not self.same(given):
            await reply(send, 401, "a token is needed: Authorization: Bearer TOKEN, or open /?token=TOKEN once\n",
                        [("www-authenticate", 'Bearer realm="lattice"')])
            return
        await self.app(scope, receive, send)

    def same(self, given: str) -> bool:
        assert self.token is not None
        return hmac.compare_digest(given.encode(), self.token.encode())


def cookie(header: str, name: str) -> str | None:
    for part in header.split(";"):
        k, _, v = part.strip().partition("=")
        if k == name:
            return v
    return None


async def reply(send: Send, status: int, text: str, extra: list[tuple[str, str]] | None = None) -> None:
    body = text.encode()
    headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", str(len(body)).encode()),
               (b"cache-control", b"no-store")]
    headers += [(k.encode(), v.encode()) for k, v in extra or []]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
