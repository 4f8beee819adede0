"""Bad input and dying nodes: clear messages, RAS events, daemons survive."""
from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import struct

from conftest import EXAMPLES, Machine, wait_for

from lattice.transport import wire

MAGIC, VERSION = wire.MAGIC, wire.VERSION
CHALLENGES: dict[int, bytes] = {}


def connect(addr: str) -> socket.socket:
    kind, _, where = addr.partition(":")
    if kind == "unix":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(where)
    else:
        host, _, port = where.rpartition(":")
        s = socket.create_connection((host, int(port)))
    s.settimeout(600)           # a hang guard: ciod answers or closes
    _, _, _, typ, ln, _ = wire.HDR.unpack(recv_exact(s, 16))      # ciod's challenge first
    assert typ == wire.CHALLENGE and ln == 32
    CHALLENGES[s.fileno()] = recv_exact(s, ln)
    return s


def send_garbage(addr: str, key: bytes) -> None:
    rnd = random.Random(42)
    # random bytes
    with connect(addr) as s:
        s.sendall(bytes(rnd.getrandbits(8) for _ in range(4096)))
        assert closed(s)
    # a header that lies about its length
    with connect(addr) as s:
        s.sendall(wire.HDR.pack(MAGIC, VERSION, 0, 0x0001, 0xFFFFFFF0, 1) + b"x" * 100)
        assert closed(s)
    # a truncated hello
    with connect(addr) as s:
        s.sendall(wire.HDR.pack(MAGIC, VERSION, 0, 0x0001, 80, 1) + b"short")
        s.shutdown(socket.SHUT_WR)
        assert closed(s)
    # an authenticated control connection sending an unknown opcode and a bogus call
    with connect(addr) as s:
        hello, _ = wire.hello_payload(key, CHALLENGES[s.fileno()], wire.ROLE_CONTROL)
        s.sendall(wire.HDR.pack(MAGIC, VERSION, 0, 0x0001, len(hello), 1) + hello)
        hdr = recv_exact(s, 16)
        _, _, _, typ, ln, _ = wire.HDR.unpack(hdr)
        err = struct.unpack("<i", recv_exact(s, ln)[:4])[0]
        assert err == 0
        s.sendall(wire.HDR.pack(MAGIC, VERSION, 0, 0x0777, 0, 2))
        _, _, _, typ, ln, seq = wire.HDR.unpack(recv_exact(s, 16))
        body = recv_exact(s, ln)
        assert typ == 0x00FF | 0x8000 or typ == 0x0777 | 0x8000, hex(typ)
        assert struct.unpack("<qi", body[:12])[0] == -1
        # a file-system call on a control connection: refused, not executed
        s.sendall(wire.HDR.pack(MAGIC, VERSION, 0, 0x0301, 32, 3) + struct.pack("<qqqq", 99, 0, 0, 0))
        _, _, _, typ, ln, seq = wire.HDR.unpack(recv_exact(s, 16))
        body = recv_exact(s, ln)
        assert struct.unpack("<qi", body[:12])[0] == -1


def closed(s: socket.socket) -> bool:
    """ciod closed the connection on us (whatever it said first)."""
    try:
        while s.recv(65536):
            pass
    except ConnectionResetError:
        pass
    return True


def recv_exact(s: socket.socket, n: int) -> bytes:
    b = b""
    while len(b) < n:
        chunk = s.recv(n - len(b))
        assert chunk, "connection closed early"
        b += chunk
    return b


def test_malformed_messages_leave_ciod_serving(default_machine: Machine) -> None:
    m = default_machine
    work = m.work / "garbage"
    work.mkdir()
    ciods = m.processes("ciod", "R00")
    key = bytes.fromhex(str(m.personalities("R00")[0]["key"]))
    job = m.popen("run", "--block", "R00", "-n", "16", "--label", "--cwd", str(work), str(EXAMPLES / "fileops"))
    for addr in m.ciod_addresses("R00"):
        send_garbage(addr, key)
    out, err = job.communicate(timeout=600)     # a hang guard
    assert job.returncode == 0, (out, err)
    assert len(re.findall(r"^\d+: rank \d+: ok", out, re.M)) == 16
    assert m.processes("ciod", "R00") == ciods, "ciod survived"
    assert "CIOD" in m.run("ras").stdout
    # and serves the next job
    p = m.run("run", "--block", "R00", "-n", "16", str(EXAMPLES / "hello"))
    assert p.stdout.count("hello from rank") == 16


def test_killing_a_compute_node_ends_the_job(small_machine: Machine) -> None:
    m = small_machine
    m.run("block", "create", "S", "--shape", "1x1x4")
    m.run("boot", "S")
    job = m.popen("run", "--block", "S", "-n", "4", "--label", str(EXAMPLES / "sleeper"), "3600")
    assert job.stdout is not None
    assert "sleeping" in job.stdout.readline()
    victim = m.processes("cnode", "S")[0]
    argv = open(f"/proc/{victim}/cmdline").read().split("\0")
    location = json.loads(open(argv[argv.index("--personality") + 1]).read())["location"]
    os.kill(victim, signal.SIGKILL)
    out, err = job.communicate(timeout=600)     # a hang guard
    assert job.returncode != 0
    assert re.search(r"(lost|died)", err, re.I), err
    assert location in err, f"the message names the compute node {location}: {err}"
    assert location in m.run("ras").stdout
    assert m.run("ras").stdout.count("-C:") >= 1


def test_killing_ciod_errors_the_block_and_free_recovers(small_machine: Machine) -> None:
    m = small_machine
    m.run("block", "create", "S", "--shape", "1x1x4")
    m.run("boot", "S")
    job = m.popen("run", "--block", "S", "-n", "4", "--label", str(EXAMPLES / "sleeper"), "3600")
    assert job.stdout is not None
    assert "sleeping" in job.stdout.readline()
    os.kill(m.processes("ciod", "S")[0], signal.SIGKILL)
    out, err = job.communicate(timeout=600)     # a hang guard
    assert job.returncode != 0
    assert re.search(r"I/O node.*(lost|died)|(lost|died).*I/O node", err, re.I), err
    assert re.search(r"\bS\b.*Error", m.run("blocks").stdout), m.run("blocks").stdout
    assert re.search(r"FATAL|ERROR", m.run("ras").stdout)
    wait_for(lambda: not m.processes("sleeper", "S"))
    m.run("free", "S")
    assert re.search(r"\bS\b.*Free", m.run("blocks").stdout)
    assert not m.processes("ciod", "S") and not m.processes("cnode", "S")
    m.run("boot", "S")
    p = m.run("run", "--block", "S", "-n", "4", str(EXAMPLES / "hello"))
    assert p.stdout.count("hello from rank") == 4


def test_interrupt_ends_job_and_frees_auto_block(small_machine: Machine) -> None:
    m = small_machine
    job = m.popen("run", "-n", "2", str(EXAMPLES / "sleeper"), "3600")
    assert job.stdout is not None
    assert "sleeping" in job.stdout.readline()
    job.send_signal(signal.SIGINT)
    out, err = job.communicate(timeout=600)     # a hang guard
    assert job.returncode == 130, (out, err)
    blocks = m.run("blocks").stdout
    assert "Initialized" not in blocks and "Booting" not in blocks, blocks
    wait_for(lambda: not m.processes("ciod") and not m.processes("cnode"))


def test_run_without_block_boots_and_frees_one(small_machine: Machine) -> None:
    m = small_machine
    p = m.run("run", "-n", "3", "--label", str(EXAMPLES / "hello"))
    assert sorted(re.findall(r"^(\d): hello", p.stdout, re.M)) == ["0", "1", "2"]
    blocks = m.run("blocks").stdout
    assert "Initialized" not in blocks, blocks
    jobs = m.run("jobs").stdout
    assert "hello" in jobs


def test_a_boot_killed_half_way_is_cleaned_up_by_the_next_command(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """`lattice boot` killed while its agent starts the daemons: the next
    command's sweep finds the booting command gone, frees the block and ends
    every daemon it had started.  Half way is held, not raced: once the
    boot has recorded its agent, the test takes the database's write lock,
    so the boot cannot record the block booted (it waits for the lock, for
    as long as LATTICE_DB_TIMEOUT lets it) however fast it or slow the test."""
    import subprocess
    from contextlib import ExitStack
    from conftest import LATTICE, make_machine
    from lattice.state import db
    m = make_machine(tmp_path, "--shape", "8x8x4", "--pset-size", "8", "--memory", "64M")
    m.run("block", "create", "B", "--shape", "8x8x4")
    boot = subprocess.Popen([*LATTICE, "boot", "B"], env=dict(m.env, LATTICE_DB_TIMEOUT="3600"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    con = m.db(wait=600)                # either backend: its write lock is db.transaction's
    held = ExitStack()

    def held_while_booting() -> bool:
        """The write lock taken, and kept if the boot has started its agent."""
        held.enter_context(db.transaction(con))
        state = con.execute("SELECT state FROM blocks WHERE name = 'B'").fetchone()[0]
        agents = con.execute("SELECT count(*) FROM agents WHERE block = 'B'").fetchone()[0]
        assert state in ("Free", "Allocated", "Booting"), state
        if state == "Booting" and agents:
            return True
        held.close()
        return False
    try:
        wait_for(held_while_booting)
        wait_for(lambda: len(m.processes("cnode", "B")) > 10)     # its agent starts the daemons
        boot.kill()
        boot.wait()             # reaped: the sweep finds its pid gone
    finally:
        held.close()            # the transaction only read: its end lets the boot write
        con.close()
    listing = m.run("blocks").stdout
    assert re.search(r"\bB\s+Free\b", listing), listing
    wait_for(lambda: not m.processes("cnode", "B") and not m.processes("ciod", "B"))
    assert "the lattice command (pid" in m.run("ras").stdout
    m.run("boot", "B")          # and it boots again
    m.run("free", "B")
