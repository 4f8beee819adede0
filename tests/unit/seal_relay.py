"""An on-path relay for the sealed-link tests (test_ciod_seal.py,
test_cnode_seal.py): a man in the middle of TCP connections to a ciod that
knows the framing.  Every frame after the handshake passes through a tamper
function, which returns what to send in its place; every byte is recorded."""
from __future__ import annotations

import socket
import struct
import threading
from dataclasses import dataclass, field
from typing import Callable

from lattice.transport import wire

# frames of the handshake, before anything is sealed: challenge and ack down, hello up
PLAIN = {"up": 1, "down": 2}


@dataclass
class Link:
    """One relayed connection: its role (from the hello) and its frames each way."""
    role: int = 0
    node: int = 0
    frames: dict[str, list[bytes]] = field(default_factory=lambda: {"up": [], "down": []})
    done: threading.Event = field(default_factory=threading.Event)

    def sealed(self, way: str) -> list[bytes]:
        return self.frames[way][PLAIN[way]:]


Tamper = Callable[[Link, int, bytes], list[bytes]]


def _exact(s: socket.socket, n: int) -> bytes:
    b = b""
    while len(b) < n:
        chunk = s.recv(n - len(b))
        if not chunk:
            raise EOFError
        b += chunk
    return b


def _frame(s: socket.socket, plain: bool) -> bytes:
    head = _exact(s, 4)
    if plain or struct.unpack("<I", head)[0] == wire.MAGIC:    # a plain frame (the old protocol's too)
        rest = _exact(s, wire.HDR.size - 4)
        return head + rest + _exact(s, struct.unpack_from("<I", rest, 4)[0])
    (n,) = struct.unpack("<I", head)
    return head + _exact(s, n + wire.SEAL_TAG_BYTES)


class Relay:
    def __init__(self, ciod_port: int, up: Tamper | None = None, down: Tamper | None = None) -> None:
        self.lst = socket.create_server(("127.0.0.1", 0))
        self.port = self.lst.getsockname()[1]
        self.ciod_port = ciod_port
        self.tamper = {"up": up, "down": down}
        self.links: list[Link] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def addr(self) -> str:
        return f"tcp:127.0.0.1:{self.port}"

    def close(self) -> None:
        self.lst.close()

    def wire_bytes(self) -> bytes:
        """Everything after the handshakes, both ways, on every link so far."""
        with self.lock:
            return b"".join(f for ln in self.links for way in ("up", "down") for f in ln.sealed(way))

    def _accept(self) -> None:
        while True:
            try:
                a, _ = self.lst.accept()
            except OSError:
                return
            link = Link()
            with self.lock:
                self.links.append(link)
            threading.Thread(target=self._run, args=(a, link), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, way: str, link: Link) -> None:
        i = 0
        try:
            while True:
                frame = _frame(src, i < PLAIN[way])
                with self.lock:
                    link.frames[way].append(frame)
                if way == "up" and i == 0 and len(frame) >= wire.HDR.size + wire.HELLO_FIELDS.size:
                    link.role, link.node, _ = wire.HELLO_FIELDS.unpack_from(frame, wire.HDR.size)
                tamper = self.tamper[way]
                out = tamper(link, i - PLAIN[way], frame) if tamper and i >= PLAIN[way] else [frame]
                for f in out:
                    dst.sendall(f)
                i += 1
        except (EOFError, OSError):
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def _run(self, a: socket.socket, link: Link) -> None:
        b = socket.create_connection(("127.0.0.1", self.ciod_port))
        down = threading.Thread(target=self._pump, args=(b, a, "down", link), daemon=True)
        down.start()
        self._pump(a, b, "up", link)
        down.join(60)
        a.close()
        b.close()
        link.done.set()
