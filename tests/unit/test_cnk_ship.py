"""cnk's shipping part (the shipping core compute/shipc/ and compute/cnk/entry.c)
against a real ciod.

The files are built freestanding, as cnk builds them, and linked with
cnk's lib.c into a hosted harness (tests/unit/cnk_ship_harness.c) that calls
the sys_* handlers with struct cnk_call.  Here we play the service node and
the compute node: a one-node pset, a job, and for each phase a fresh PROC
connection handed to the harness.  The harness checks results, errno and
call class and looks at the I/O node's file system; this side checks ciod's
per-call counters and the rank's output, so a call that was not shipped, or
not chunked, fails here.
"""
from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from lattice.transport import wire

ROOT = Path(__file__).resolve().parents[2]
MAGIC, VERSION, REPLY = wire.MAGIC, wire.VERSION, wire.REPLY
HDR = wire.HDR
HELLO, CTL_JOB, CTL_COUNTERS, CTL_OUTPUT = 0x0001, 0x0101, 0x0104, 0x0180
NODE_JOB, NODE_IMAGE, NODE_START = 0x0200, 0x0201, 0x0202
ROLE_CONTROL, ROLE_NODE, ROLE_PROC = 1, 2, 3
SYS = ["openat", "close", "read", "write", "pread", "pwrite", "lseek", "fstatat", "statx",
       "faccessat", "unlinkat", "renameat", "mkdirat", "getdents64", "readlinkat", "truncate",
       "ftruncate", "fsync", "fdatasync", "dup", "fcntl", "chdir", "fchdir", "getcwd", "umask",
       "fchmodat", "fchmod", "utimensat", "statfs", "fstatfs"]
JOB_ID = 77
CNK_CFLAGS = ["-std=c11", "-ffreestanding", "-fno-builtin", "-fno-stack-protector", "-fPIE",
              "-O2", "-g", "-Wall", "-Wextra", "-Wimplicit-fallthrough", "-Werror",
              "-Iprotocol", "-Icompute/include", "-Icompute/shipc", "-Ibuild/gen", "-DSHIPC_CNK"]
MINE = ["entry"]    # cnk's side of the core: the sys_* handlers and the hooks
CORE = sorted(p.stem for p in (ROOT / "compute/shipc").glob("*.c"))   # the shipping core
# What lib.h offers: the only things the shipping files may call.
LIB_H = {"kcrit_enter", "kcrit_leave", "memcpy", "memmove", "memset", "memcmp", "strlen", "strnlen", "strcmp", "strncmp",
         "strchr", "kgetenv", "kparse_u64", "kvfmt", "kfmt", "kprint", "kwrite_all", "kread_all",
         "kexit", "klock", "kunlock"}
LIBC_NAMES = ["memcpy", "memmove", "memset", "memcmp", "strlen", "strnlen", "strcmp", "strncmp",
              "strchr"]


# ---- wire ----

def send(s: socket.socket, typ: int, payload: bytes = b"", seq: int = 1) -> None:
    s.sendall(HDR.pack(MAGIC, VERSION, 0, typ, len(payload), seq) + payload)


def recv_exact(s: socket.socket, n: int) -> bytes:
    b = b""
    while len(b) < n:
        chunk = s.recv(n - len(b))
        assert chunk, "connection closed early"
        b += chunk
    return b


def recv(s: socket.socket) -> tuple[int, bytes]:
    magic, version, _, typ, ln, _ = HDR.unpack(recv_exact(s, 16))
    assert (magic, version) == (MAGIC, VERSION)
    return typ, recv_exact(s, ln)


# ---- building ----

@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cnkship")
    subprocess.run(["make", "-s", "-C", str(ROOT), "build/gen/fwd_posix_stubs.c"], check=True)
    objs = []
    for src in [f"compute/shipc/{n}.c" for n in CORE] + [f"compute/cnk/{n}.c" for n in MINE + ["lib"]]:
        obj = out / (("shipc_" if "/shipc/" in src else "") + Path(src).stem + ".o")
        subprocess.run(["gcc", *CNK_CFLAGS, "-c", src, "-o", str(obj)], check=True, cwd=ROOT)
        objs.append(str(obj))
    # the hosted harness keeps libc's string functions: lib.c's stay cnk's
    subprocess.run(["objcopy", *[f"--localize-symbol={n}" for n in LIBC_NAMES], objs[-1]],
                   check=True)
    exe = out / "cnk_ship_harness"
    subprocess.run(["gcc", "-std=c11", "-O1", "-g", "-Wall", "-Wextra", "-pthread", "-Iprotocol",
                    "-Icompute/include", "-Icompute/shipc", "-Icompute/cnk", "-o", str(exe),
                    "tests/unit/cnk_ship_harness.c", *objs], check=True, cwd=ROOT)
    return exe


@pytest.fixture(scope="module")
def ciod_bin() -> Path:
    subprocess.run(["make", "-s", "-C", str(ROOT), "ciod"], check=True)
    return ROOT / "build/bin/ciod"


# ---- a one-node pset with a running job ----

class Pset:
    def __init__(self, binary: Path, d: Path) -> None:
        self.dir = d
        self.key = os.urandom(32)
        keyfile = d / "key"
        keyfile.write_text(self.key.hex() + "\n")
        keyfile.chmod(0o600)
        self.sock = d / "ciod.sock"
        self.log = open(d / "ciod.log", "w")
        self.proc = subprocess.Popen(
            [str(binary), "--block", "K", "--pset", "0", "--pset-size", "1", "--listen",
             f"unix:{self.sock}", "--key-file", str(keyfile), "--ras", str(d / "ras.log"),
             "--location", "R00-M0-N00-I:J00"], stdout=self.log, stderr=subprocess.STDOUT)
        end = time.time() + 10
        while not self.sock.exists():
            assert self.proc.poll() is None and time.time() < end, "ciod did not listen"
            time.sleep(0.02)
        self.work = d / "work"
        self.work.mkdir()
        self.output: dict[int, bytearray] = {1: bytearray(), 2: bytearray()}
        self.node = self.connect(ROLE_NODE)
        self.ctl = self.connect(ROLE_CONTROL)
        self.start_job()
        self.reader = threading.Thread(target=self.read_ctl, daemon=True)
        self.reader.start()

    def connect(self, role: int, job: int = 0) -> socket.socket:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(30)
        s.connect(str(self.sock))
        typ, challenge = recv(s)
        assert typ == wire.CHALLENGE
        hello, nonce = wire.hello_payload(self.key, challenge, role, 0, job)
        send(s, HELLO, hello, 0)        # seq 0, as cnode's: a process numbers its requests from 1
        typ, body = recv(s)
        assert typ == HELLO | REPLY and struct.unpack("<i", body[:4])[0] == 0
        assert wire.ack_ok(self.key, challenge, nonce, body)
        return s

    def start_job(self) -> None:
        exe = self.dir / "prog"
        exe.write_bytes(b"\x7fELF not really")
        exe.chmod(0o755)
        head = struct.pack("<QIIIIIIII", JOB_ID, os.getuid(), os.getgid(), 1, 1, 0, 1, 1, 0)
        tail = struct.pack("<i", 0) + struct.pack("<I", os.getgid())
        strings = b"".join(x.encode() + b"\0" for x in [str(exe), str(self.work), "prog"])
        send(self.ctl, CTL_JOB, head + tail + strings, 9)
        for want in (NODE_JOB, NODE_IMAGE, NODE_START):
            typ, _ = recv(self.node)
            assert typ == want, hex(typ)
        typ, body = recv(self.ctl)
        assert typ == CTL_JOB | REPLY and struct.unpack("<qi", body[:12]) == (0, 0), body

    def read_ctl(self) -> None:
        """The job's output: LAT_CTL_OUTPUT from rank 0 (the only one-way messages here)."""
        self.ctl.settimeout(None)
        try:
            while True:
                typ, body = recv(self.ctl)
                if typ == CTL_OUTPUT:
                    rank, stream = struct.unpack("<II", body[:8])
                    assert rank == 0
                    self.output[stream] += body[8:]
        except (AssertionError, OSError):
            pass

    def counters(self) -> dict[str, int]:
        with self.connect(ROLE_CONTROL) as s:
            send(s, CTL_COUNTERS, b"", 4)
            typ, body = recv(s)
            # calls[nsys] first; the trailing lat_counters_ext says what nsys is
            nsys = struct.unpack("<I", body[-16:-12])[0]
            assert typ == CTL_COUNTERS | REPLY and nsys >= len(SYS)
            body = body[:8 * len(SYS)]
            return dict(zip(SYS, struct.unpack(f"<{len(SYS)}Q", body)))

    def run(self, exe: Path, phase: str) -> tuple[subprocess.CompletedProcess[str], dict[str, int]]:
        """Run one harness phase on a fresh PROC connection; the counters it moved."""
        before = self.counters()
        local = Path(tempfile.mkdtemp(prefix="cnkship-local-"))
        try:
            with self.connect(ROLE_PROC, JOB_ID) as s:
                p = subprocess.run([str(exe), str(s.fileno()), str(self.work), phase], cwd=local,
                                   pass_fds=[s.fileno()], stdin=subprocess.DEVNULL,
                                   capture_output=True, text=True, timeout=600)
            # the I/O node answered everything; the local cwd saw nothing
            assert list(local.iterdir()) == [], "a relative name was used locally"
        finally:
            shutil.rmtree(local, ignore_errors=True)
        time.sleep(0.05)
        after = self.counters()
        return p, {k: after[k] - before[k] for k in SYS if after[k] != before[k]}

    def close(self) -> str:
        alive = self.proc.poll() is None
        if alive:
            self.proc.terminate()
        self.proc.wait(10)
        self.log.close()
        text = (self.dir / "ciod.log").read_text()
        assert alive, f"ciod died:\n{text}"
        return text


@pytest.fixture(scope="module")
def pset(ciod_bin: Path) -> Iterator[Pset]:
    d = Path(tempfile.mkdtemp(prefix="cnkship-"))
    os.chmod(d, 0o755)
    p = Pset(ciod_bin, d)
    try:
        yield p
    finally:
        p.close()
        shutil.rmtree(d, ignore_errors=True)


def passed(p: subprocess.CompletedProcess[str]) -> str:
    assert p.returncode == 0 and "FAIL" not in p.stdout, f"{p.stdout}\n{p.stderr}"
    assert " 0 failed, 69 handlers" in p.stdout, p.stdout
    return p.stdout


# ---- the tests ----

def test_shipping_files_are_freestanding(harness: Path) -> None:
    """No libc header and no libc call: only lib.h, uapi headers and each other."""
    gcc_inc = subprocess.run(["gcc", "-print-file-name=include"], capture_output=True, text=True,
                             check=True).stdout.strip()
    allowed = (str(ROOT) + "/", "protocol/", "compute/", "build/gen/", gcc_inc, "/usr/include/linux/",
               "/usr/include/asm-generic/", "/usr/include/x86_64-linux-gnu/asm/")
    for src in [f"compute/cnk/{n}.c" for n in MINE] + [f"compute/shipc/{n}.c" for n in CORE]:
        deps = subprocess.run(["gcc", *CNK_CFLAGS, "-M", src], cwd=ROOT,
                              capture_output=True, text=True, check=True).stdout
        files = [f for f in deps.replace("\\\n", " ").split()[1:]]
        bad = [f for f in files if not f.startswith(allowed)]
        assert not bad, f"{src} includes {bad}"
    objs = [harness.parent / f"{n}.o" for n in MINE] + [harness.parent / f"shipc_{n}.o" for n in CORE]
    nm = subprocess.run(["nm", "-u", *map(str, objs)], capture_output=True, text=True, check=True)
    undefined = {line.split()[-1] for line in nm.stdout.splitlines() if line.strip().startswith("U")}
    defined = set()
    for o in objs:
        out = subprocess.run(["nm", "--defined-only", str(o)], capture_output=True, text=True).stdout
        defined |= {line.split()[-1] for line in out.splitlines() if line.strip()}
    # entry.c reaches cnk's config, its thread count and its signal-masked waits
    assert undefined - defined - LIB_H == {"cnk", "thread_alive", "sys_ppoll", "sys_pselect6", "sys_epoll_pwait"}


def test_files_are_shipped_with_the_io_nodes_results(harness: Path, pset: Pset) -> None:
    p, moved = pset.run(harness, "files")
    passed(p)
    # every message type of the protocol went to ciod
    assert set(moved) == set(SYS), sorted(set(SYS) - set(moved))
    assert not (pset.work / "f1").exists() or (pset.work / "f1").read_bytes() == b"HELLO world\n"
    assert (pset.work / "c1").read_bytes() == b"c"
    assert (pset.work / "d2" / "rel").exists() and not (pset.work / "d1").exists()
    assert (pset.work / "um").stat().st_mode & 0o777 == 0o600


def test_node_local_names_never_reach_the_io_node(harness: Path, pset: Pset) -> None:
    p, moved = pset.run(harness, "local")
    passed(p)
    assert moved == {}, moved


def test_cnks_own_descriptors_are_hidden(harness: Path, pset: Pset) -> None:
    p, moved = pset.run(harness, "hidden")
    passed(p)
    # one open, its close by close_range, one getcwd afterwards: nothing else
    assert moved == {"openat": 1, "close": 1, "getcwd": 1}, moved


def test_large_transfers_go_in_max_io_chunks(harness: Path, pset: Pset) -> None:
    p, moved = pset.run(harness, "big")
    passed(p)
    assert moved == {"openat": 2, "write": 4 + 2, "lseek": 1, "read": 4, "pread": 2, "pwrite": 2,
                     "close": 2}, moved


def test_descriptors_0_1_2_are_the_ranks_output(harness: Path, pset: Pset) -> None:
    p, moved = pset.run(harness, "stdio")
    passed(p)
    assert moved == {"write": 3, "read": 1, "fstatat": 2, "lseek": 1}, moved
    deadline = time.time() + 600                # a hang guard: the output is the event
    while time.time() < deadline and b"parts" not in pset.output[1]:
        time.sleep(0.02)
    assert b"out line\ntwo parts\n" in pset.output[1]
    assert b"err line\n" in pset.output[2]
    assert "out line" not in p.stdout and "err line" not in p.stderr   # not written locally


def test_sendfile_and_copy_file_range_are_emulated(harness: Path, pset: Pset) -> None:
    p, moved = pset.run(harness, "copy")
    passed(p)
    assert (pset.work / "dst").read_bytes() == (pset.work / "src").read_bytes()
    assert moved["read"] >= 4 and moved["write"] >= 4 and moved["pread"] == 1, moved


def test_threads_share_the_connection(harness: Path, pset: Pset) -> None:
    p, moved = pset.run(harness, "threads")
    passed(p)
    assert moved == {"openat": 4, "pwrite": 800, "pread": 800, "close": 4}, moved


def test_a_broken_connection_gives_eio_and_one_message(harness: Path, pset: Pset) -> None:
    p, moved = pset.run(harness, "broken")
    passed(p)
    assert moved == {"getcwd": 1}, moved
    assert p.stderr.count("connection to the I/O node lost") == 1, p.stderr
