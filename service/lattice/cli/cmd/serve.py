from __future__ import annotations

import argparse
import ipaddress
import os
import signal
import socket
import stat
import sys

from lattice.errors import LatticeError
from lattice.state import machine

description = "serve the web console, a read-only JSON API (/api/) and Prometheus metrics (/metrics)"
DEFAULT_LISTEN = "127.0.0.1:8080"


def setup_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT|unix:PATH",
                   help=f"where to listen (default {DEFAULT_LISTEN}; port 0: any free one). Any address but "
                        "loopback requires the token in $LATTICE_HOME/serve-token")
    p.add_argument("--token", action="store_true",
                   help="require the token on a loopback address or unix socket too")
    p.add_argument("--socket-mode", default="600", metavar="OCTAL",
                   help="mode of a unix socket (default 600: its owner only)")


def parse_listen(text: str) -> tuple[str, str | int]:
    """("unix", path) or (host, port)."""
    if text.startswith("unix:"):
        path = text[5:]
        if not path:
            raise LatticeError(f"bad --listen {text!r}: unix:PATH names a socket file")
        return "unix", os.path.abspath(path)
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise LatticeError(f"bad --listen {text!r}: expected HOST:PORT (e.g. 127.0.0.1:8080, [::1]:8080) "
                           "or unix:PATH")
    return host, int(port)


def loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def tcp_socket(host: str, port: int) -> socket.socket:
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise LatticeError(f"cannot listen on {host}:{port}: {e.strerror}") from e
    family, kind, proto, _, addr = infos[0]
    s = socket.socket(family, kind, proto)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(addr)
        s.listen(128)
    except OSError as e:
        s.close()
        raise LatticeError(f"cannot listen on {host}:{port}: {e.strerror}") from e
    return s


def unix_socket(path: str, mode: int) -> socket.socket:
    """A socket made with `mode` from the start (never wider for a moment);
    a stale socket file of an ended server is replaced, a live one refused."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISSOCK(st.st_mode):
            raise LatticeError(f"cannot listen on unix:{path}: a file that is not a socket is there")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.connect(path)
        except OSError:
            os.unlink(path)         # nobody listens: an ended server's
        else:
            raise LatticeError(f"cannot listen on unix:{path}: a server listens there already")
        finally:
            probe.close()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o777 & ~mode)
    try:
        s.bind(path)
        os.chmod(path, mode)
        s.listen(128)
    except OSError as e:
        s.close()
        raise LatticeError(f"cannot listen on unix:{path}: {e.strerror}") from e
    finally:
        os.umask(old)
    return s


def serve(args: argparse.Namespace) -> int:
    machine.require()
    host, port = parse_listen(args.listen)
    try:
        mode = int(args.socket_mode, 8)
    except ValueError:
        mode = -1
    if not 0 <= mode <= 0o777:
        raise LatticeError(f"bad --socket-mode {args.socket_mode!r}: an octal mode such as 600 or 660")
    unix = host == "unix"
    need_token = args.token or not (unix or loopback(host))
    token = None
    if need_token:
        from lattice.web.auth import load_token, token_file
        token = load_token(machine.home())
    sock = unix_socket(str(port), mode) if unix else tcp_socket(host, int(port))
    import uvicorn
    from lattice.web import app as webapp
    from lattice.jobs import queue
    asgi, watcher = webapp.build(token, unix=unix, dispatch=queue.dispatch_quietly)
    if unix:
        url = f"http://localhost/ (through unix:{port})"
    else:
        name, bound = sock.getsockname()[:2]
        url = f"http://{f'[{name}]' if ':' in name else name}:{bound}/"
    print(f"lattice serve: listening on {url} for the machine in {machine.home()}", flush=True)
    if token is None:
        print("lattice serve: no token asked: " + (f"the socket is mode {mode:03o}" if unix else
              "loopback only (any local user of this host may read it; --token asks for one)"), flush=True)
    else:
        print(f"lattice serve: every request needs the token in {token_file(machine.home())}: "
              f"`Authorization: Bearer TOKEN`, or open {url}?token=TOKEN once in a browser", flush=True)

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: object) -> None:
            """SIGINT or SIGTERM: stop, open event streams too, and leave
            with status 0 (uvicorn would raise the signal again after)."""
            loop.call_soon_threadsafe(watcher.stop)
            self.force_exit = self.should_exit and sig == signal.SIGINT
            self.should_exit = True

    config = uvicorn.Config(asgi, log_level="warning", access_log=False, lifespan="on",
                            timeout_graceful_shutdown=5, proxy_headers=False, server_header=False)
    server = Server(config)
    import asyncio          # here: every command's parser imports this module, and only serve needs it
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(server.serve(sockets=[sock]))
    finally:
        loop.close()
        sock.close()
        if unix:
            try:
                os.unlink(str(port))
            except OSError:
                pass
    print("lattice serve: stopped", file=sys.stderr, flush=True)
    return 0

