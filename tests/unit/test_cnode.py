"""cnode against a tiny fake ciod: jobs are received, launched, supervised.

The fake listens on a unix socket, takes cnode's NODE hello, pushes jobs
(JOB, IMAGE chunks, START) and serves each compute process's PROC
connection with the fake from test_client.
"""
from __future__ import annotations

import errno
import json
import os
import signal
import socket
import struct
import subprocess
import threading
from pathlib import Path
from typing import Iterator

import pytest

from conftest import wait_for
from test_client import CFLAGS, ROOT, FakeCiod, _recv_exact, build_library

from lattice.transport import wire

MAGIC, VERSION, REPLY = wire.MAGIC, wire.VERSION, wire.REPLY
HELLO, NODE_JOB, NODE_IMAGE, NODE_START, NODE_KILL, NODE_SHUTDOWN = 0x1, 0x200, 0x201, 0x202, 0x203, 0x204
NODE_OUTPUT, NODE_EXIT = 0x280, 0x281
CODE, SIGNAL, LAUNCH = 1, 2, 3
KEY = bytes(range(32))

PROG = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(int argc, char **argv)
{
    /* past the client: the local stdout pipe, forwarded by cnode */
    syscall(SYS_write, 1, "raw local\n", 10);
    printf("rank %s of %s on %s: %s\n", getenv("LATTICE_RANK"), getenv("LATTICE_SIZE"),
           getenv("LATTICE_NODE"), argc > 1 ? argv[1] : "-");
    fflush(stdout);
    if (argc > 2)
        sleep(atoi(argv[2]));
    return getenv("EXIT_WITH") ? atoi(getenv("EXIT_WITH")) : 0;
}
"""


def send(s: socket.socket, typ: int, payload: bytes = b"") -> None:
    s.sendall(wire.HDR.pack(MAGIC, VERSION, 0, typ, len(payload), 0) + payload)


def recv(s: socket.socket) -> tuple[int, bytes]:
    magic, version, _, typ, ln, _ = wire.HDR.unpack(_recv_exact(s, 16))
    assert (magic, version) == (MAGIC, VERSION)
    return typ, _recv_exact(s, ln)


def challenge(lst: socket.socket) -> tuple[socket.socket, bytes]:
    """Accept a connection and send the challenge, as ciod does."""
    c, _ = lst.accept()
    c.settimeout(600)           # a hang guard
    nonce = os.urandom(32)
    send(c, wire.CHALLENGE, nonce)
    return c, nonce


def accept_hello(lst: socket.socket, role: int, proof_key: bytes = KEY) -> tuple[socket.socket, tuple[int, int, int]]:
    """The handshake as ciod does it: the hello's mac must be right (KEY);
    our ack carries a proof made with proof_key."""
    c, nonce = challenge(lst)
    typ, body = recv(c)
    while role == 3 and typ == HELLO and len(body) == 80 and struct.unpack_from("<I", body)[0] == 4:
        # the process's own PMI connection (LAT_ROLE_PMI), opened first: refused as
        # by a ciod without it (EPROTO), so cnode relays the PMI, which these tests check
        send(c, HELLO | REPLY, struct.pack("<iIII", errno.EPROTO, 1 << 20, 0, 4) + bytes(32))
        c.close()
        c, nonce = challenge(lst)
        typ, body = recv(c)
    # a PROC hello carries lat_hello_proc { pid, flags } (the data path)
    assert typ == HELLO and len(body) == (88 if role == 3 else 80)
    r, n, job, cnonce, mac = wire.HELLO_MSG.unpack(body[:80])
    assert r == role, (r, n, job)
    assert KEY not in body, "the block key travelled"
    assert mac == wire.hello_mac(KEY, nonce, cnonce, r, n, job, body[80:]), "the hello's mac is wrong"
    dp = b""
    if role == 3:
        pid, _flags = struct.unpack("<II", body[80:])
        assert Path(f"/proc/{pid}").exists()         # the process itself, not cnode
        dp = struct.pack("<IIII", 1 << 20, 0, 0, 1 << 20)
    send(c, HELLO | REPLY, wire.ack_payload(proof_key, nonce, cnonce, 0, 1 << 20, 0, 4, dp))
    return c, (r, n, job)


class FakeNodeCiod:
    def __init__(self, tmp: Path) -> None:
        self.addr = tmp / "ciod.sock"
        self.lst = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.lst.bind(str(self.addr))
        self.lst.listen(8)
        self.lst.settimeout(600)    # a hang guard
        self.node: socket.socket | None = None
        self.procs: list[FakeCiod] = []
        self.tmp = tmp

    def accept_node(self) -> None:
        self.node, hello = accept_hello(self.lst, 2)
        assert hello[1] == 3

    def push(self, job: int, image: bytes, argv: list[str], env: list[str], rank: int = 1,
             size: int = 4, proc: bool = True) -> FakeCiod | None:
        assert self.node
        strings = b"".join(s.encode() + b"\0" for s in [*argv, *env])
        groups = [os.getgid()]
        hdr = struct.pack("<QQIIIIIIII", job, len(image), rank, size, os.getuid(), os.getgid(), len(groups),
                          len(argv), len(env), 0)
        send(self.node, NODE_JOB, hdr + struct.pack(f"<{len(groups)}I", *groups) + strings)
        half = len(image) // 2
        send(self.node, NODE_IMAGE, image[:half])
        send(self.node, NODE_IMAGE, image[half:])
        send(self.node, NODE_START, struct.pack("<Q", job))
        if not proc:
            return None
        c, hello = accept_hello(self.lst, 3)
        assert hello[1:] == (3, job)
        d = self.tmp / f"io{job}"
        d.mkdir()
        f = FakeCiod(c, str(d))
        f.start()
        self.procs.append(f)
        return f

    def exited_within(self, seconds: float) -> bool:
        """Whether the node sent an EXIT within that time (it would within it, if it did at all)."""
        assert self.node
        before = self.node.gettimeout()
        self.node.settimeout(seconds)
        try:
            while True:
                typ, _ = recv(self.node)
                if typ == NODE_EXIT:
                    return True
        except (socket.timeout, TimeoutError):
            return False
        finally:
            self.node.settimeout(before)

    def until_exit(self) -> tuple[dict[int, bytes], tuple[int, int, int, int, int], str]:
        """Collect OUTPUT messages until EXIT; return output by stream, the exit, its text."""
        assert self.node
        out = {1: b"", 2: b""}
        while True:
            typ, body = recv(self.node)
            if typ == NODE_OUTPUT:
                rank, stream = struct.unpack("<II", body[:8])
                out[stream] += body[8:]
            else:
                assert typ == NODE_EXIT, hex(typ)
                return out, struct.unpack("<QIIIi", body[:24]), body[24:].decode()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("cnode")
    lib, cnode, prog = d / "libcnclient.so", d / "cnode", d / "prog"
    build_library(lib)
    src = [*sorted(str(f) for f in (ROOT / "compute" / "cnode").glob("*.c")), str(ROOT / "protocol/peer/peer.c"),
           str(ROOT / "protocol/peer/seal.c")]
    p = subprocess.run(["gcc", *CFLAGS, "-pthread", "-o", str(cnode), *src, "-ljansson", "-lcrypto"],
                       capture_output=True, text=True)
    assert p.returncode == 0 and "warning" not in p.stderr, p.stderr
    (d / "prog.c").write_text(PROG)
    subprocess.run(["gcc", "-O2", "-o", str(prog), str(d / "prog.c")], check=True)
    return {"lib": lib, "cnode": cnode, "prog": prog}


@pytest.fixture
def node(built: dict[str, Path], tmp_path: Path) -> Iterator[tuple[FakeNodeCiod, subprocess.Popen[bytes]]]:
    fake = FakeNodeCiod(tmp_path)
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "marker").write_text("only the I/O node sees this")
    pers = tmp_path / "pers.json"
    pers.write_text(json.dumps({
        "block": "T", "key": KEY.hex(), "ciod": f"unix:{fake.addr}", "node": 3, "pset": 0, "pset_size": 4,
        "coords": [0, 0, 3], "torus": [1, 1, 4], "memory": 1 << 30, "mode": "co",
        "location": "R00-M0-N00-C:J03", "ionode_location": "R00-M0-N00-I:J00", "hide": [str(hidden)]}))
    p = subprocess.Popen([str(built["cnode"]), "--personality", str(pers), "--client", str(built["lib"])],
                         stderr=subprocess.PIPE)
    fake.accept_node()
    yield fake, p
    if p.poll() is None:
        p.kill()
    p.wait()
    assert p.stderr
    p.stderr.close()


def test_job_runs_and_reports_its_exit_code(built: dict[str, Path],
                                            node: tuple[FakeNodeCiod, subprocess.Popen[bytes]]) -> None:
    fake, p = node
    if os.geteuid() == 0:  # hidden paths are covered in cnode's mount namespace
        hidden = fake.tmp / "hidden"
        assert not Path(f"/proc/{p.pid}/root{hidden}/marker").exists()
        assert (hidden / "marker").exists()
    image = built["prog"].read_bytes()
    proc = fake.push(7, image, ["prog", "first"], ["EXIT_WITH=3", "PATH=/usr/bin"])
    out, ex, text = fake.until_exit()
    assert ex == (7, 1, 3, CODE, 3), (ex, text, out)
    assert out[1] == b"raw local\n"
    assert proc
    proc.join(600)
    assert proc.out[1] == b"rank 1 of 4 on R00-M0-N00-C:J03: first\n"
    # the node is ready for the next job
    proc = fake.push(8, image, ["prog", "second"], [])
    out, ex, text = fake.until_exit()
    assert ex == (8, 1, 3, CODE, 0), (ex, text)
    send(fake.node, NODE_SHUTDOWN)  # type: ignore[arg-type]
    assert p.wait(600) == 0


def test_bad_image_is_a_launch_failure(built: dict[str, Path],
                                       node: tuple[FakeNodeCiod, subprocess.Popen[bytes]]) -> None:
    fake, p = node
    fake.push(9, b"\x7fELF garbage that is not a program", ["/work/not-an-elf"], [])
    out, ex, text = fake.until_exit()
    assert ex == (9, 1, 3, LAUNCH, errno.ENOEXEC), (ex, text)
    assert text == "cannot execute /work/not-an-elf: Exec format error"
    # still serving
    fake.push(10, built["prog"].read_bytes(), ["prog"], [])
    out, ex, text = fake.until_exit()
    assert ex[3:] == (CODE, 0), (ex, text)


def said(proc: FakeCiod, word: bytes) -> None:
    """Until the process's shipped stdout holds word (it printed its first line)."""
    wait_for(lambda: word in proc.out[1])


def test_kill_and_lost_connection(built: dict[str, Path],
                                  node: tuple[FakeNodeCiod, subprocess.Popen[bytes]]) -> None:
    fake, p = node
    assert fake.node
    # it sleeps far longer than any loaded host takes to get here: only a kill ends it
    proc = fake.push(11, built["prog"].read_bytes(), ["prog", "sleepy", "3600"], [])
    assert proc
    said(proc, b"sleepy")          # it runs, past its first line
    # a KILL naming another job touches nothing: the process still runs (a
    # negative check: under load it can only pass wrongly, never fail wrongly)
    send(fake.node, NODE_KILL, wire.KILL.pack(99, signal.SIGKILL, 0))
    assert not fake.exited_within(1.0)
    send(fake.node, NODE_KILL, wire.KILL.pack(11, signal.SIGTERM, 0))
    out, ex, text = fake.until_exit()
    assert ex[3:] == (SIGNAL, signal.SIGTERM), (ex, text)
    assert "signal 15" in text
    # ciod goes away while a job runs: the process dies, cnode exits 1
    proc = fake.push(12, built["prog"].read_bytes(), ["prog", "orphan", "3600"], [])
    assert proc
    said(proc, b"orphan")
    fake.node.close()
    assert p.wait(600) == 1
    assert proc
    proc.join(600)
    assert not proc.is_alive(), "the compute process was killed (its PROC connection closed)"


def test_malformed_job_is_refused(built: dict[str, Path],
                                  node: tuple[FakeNodeCiod, subprocess.Popen[bytes]]) -> None:
    fake, p = node
    assert fake.node
    # nargs says 3 strings, only one is there
    hdr = struct.pack("<QQIIIIIIII", 13, 10, 0, 1, 0, 0, 0, 3, 0, 0)
    send(fake.node, NODE_JOB, hdr + b"prog\0")
    out, ex, text = fake.until_exit()
    assert ex[0] == 13 and ex[3:] == (LAUNCH, errno.EPROTO), (ex, text)
    assert "malformed" in text
    # image bigger than announced
    hdr = struct.pack("<QQIIIIIIII", 14, 4, 0, 1, 0, 0, 0, 1, 0, 0)
    send(fake.node, NODE_JOB, hdr + b"prog\0")
    send(fake.node, NODE_IMAGE, b"12345")
    send(fake.node, NODE_START, struct.pack("<Q", 14))
    out, ex, text = fake.until_exit()
    assert ex[0] == 14 and ex[3:] == (LAUNCH, errno.EPROTO), (ex, text)
    send(fake.node, NODE_SHUTDOWN)
    assert p.wait(600) == 0
