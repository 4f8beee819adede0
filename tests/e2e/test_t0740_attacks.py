"""Attacks on the I/O node by a job of an ordinary user (docs/security.md).

A job runs as a user this test creates.  In Linux mode its process forks;
the process whose pid the I/O node knows from the hello execs a setuid-root
program that holds a secret, and the child keeps the shipping connection and
asks for rendezvous reads and writes of the holder's memory
(tests/e2e/attack/).  Before the job's I/O
was done by a per-job worker holding the owner's identity, ciod (root, every
capability) read the setuid program's secret out and overwrote it.  Now:
nothing is read or written, the connection is closed, and a RAS event says
why; the block runs the next job.  Also: what the worker is (its ids and
capabilities, read from /proc while a job runs), and that one process gets
one shipping connection."""
from __future__ import annotations

import errno
import json
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest

from conftest import EXAMPLES, LATTICE, ROOT, Machine, make_machine, processes, local_users

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: a setuid program and a user of its own")

SRC = Path(__file__).with_name("attack")
ROLE_PROC = 3          # enum lat_role, protocol/lattice/wire.h
SECRET = "holder-secret-7f3a9c1e-only-root-may-read-this"
GUARD = 600            # s: a bound on waits for an event, only so that a hang fails


@pytest.fixture(scope="module")
def user() -> Iterator[pwd.struct_passwd]:
    with local_users(f"latatk{os.getpid() % 100000}") as (u,):
        yield u


@pytest.fixture(scope="module")
def am(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    m = make_machine(tmp_path_factory.mktemp("attack"), "--shape", "1x1x2", "--pset-size", "2")
    m.run("block", "create", "A", "--shape", "1x1x2")
    m.run("boot", "A")
    yield m
    m.run("free", "A", check=False)


@pytest.fixture(scope="module")
def tools(am: Machine, user: pwd.struct_passwd) -> dict[str, Path]:
    """attacker and the holder (setuid root) in a
    directory of the user's, on a file system that honours setuid, that the
    compute nodes see too (they exec the holder themselves)."""
    d = Path(tempfile.mkdtemp(prefix="lattice-attack-"))
    os.chmod(d, 0o755)
    os.chown(d, user.pw_uid, user.pw_gid)
    out = {}
    for name in ("attacker", "holder"):
        exe = d / name
        subprocess.run(["gcc", "-std=c11", "-D_GNU_SOURCE", "-O0", "-Wall", "-Wextra", "-Werror",
                        f"-I{ROOT / 'protocol'}", "-o", str(exe), str(SRC / f"{name}.c")], check=True)
        out[name] = exe
    suid = d / "holder-suid"
    shutil.copy(out["holder"], suid)
    os.chown(suid, 0, 0)
    os.chmod(suid, 0o4755)
    os.chown(out["holder"], user.pw_uid, user.pw_gid)
    os.chmod(out["attacker"], 0o755)
    (d / "payload").write_text("PWNED" * 20)
    for f in (d / "payload",):
        os.chown(f, user.pw_uid, user.pw_gid)
    out["holder-suid"] = suid
    out["dir"] = d
    return out


def attack(m: Machine, user: pwd.struct_passwd, tools: dict[str, Path], holder: str) -> tuple[str, str]:
    d = tools["dir"]
    leak = d / f"leak-{holder}"
    p = m.run("run", "--block", "A", "-n", "1", "--kernel", "linux", "--no-sandbox", "--user", user.pw_name, "--cwd", str(d),
              str(tools["attacker"]), str(tools[holder]), leak.name, "payload", check=False, timeout=GUARD)
    out = p.stdout + p.stderr
    leaked = leak.read_bytes().decode(errors="replace") if leak.exists() else ""
    return out, leaked


def test_setuid_program_memory_is_out_of_reach(am: Machine, user: pwd.struct_passwd, tools: dict[str, Path]) -> None:
    out, leaked = attack(am, user, tools, "holder-suid")
    dp = re.search(r"^datapath \d+,(\d+),(\d+)$", out, re.M)
    assert dp and int(dp[1]) > 0 and int(dp[2]) & 1, out               # rendezvous granted
    assert "holder euid 0: secret intact" in out, out                   # the setuid program really ran
    assert SECRET not in leaked and SECRET not in out, (leaked, out)   # nothing read
    assert "OVERWRITTEN" not in out, out                               # nothing written
    assert re.search(r"read attempt: (call 0x0303: ret -1 err 14|call 0x0303: connection closed)", out), out
    ras = am.run("ras").stdout
    assert re.search(r"process \d+ (exec'd a program the job owner may not reach|cannot be reached as the job "
                     r"owner): its I/O connection is closed", ras), ras


def test_the_block_serves_the_user_after_the_attack(am: Machine, user: pwd.struct_passwd,
                                                    tools: dict[str, Path]) -> None:
    """The attacked I/O node goes on: the same user's next job runs and ships its output."""
    p = am.run("run", "--block", "A", "-n", "2", "--user", user.pw_name, "--cwd", str(tools["dir"]),
               str(EXAMPLES / "hello"))
    assert "hello from rank 1 of 2" in p.stdout


def held_job(m: Machine, *opts: str) -> subprocess.Popen[str]:
    """A one-rank job of /bin/cat that runs until the test closes its standard
    input (end_held_job): returned once it echoed a line, so its process
    runs, past its PROC hello (cnode says it before the exec), and the job's
    I/O worker is up.  Events, however long a loaded host takes for them."""
    run = subprocess.Popen([*LATTICE, "run", "--block", "A", "-n", "1", *opts, "/bin/cat"], env=m.env,
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert run.stdin is not None and run.stdout is not None
    run.stdin.write("up\n")
    run.stdin.flush()
    line = run.stdout.readline()
    if line != "up\n":
        end_held_job(run)
        raise AssertionError(f"the held job did not start: {line!r}")
    return run


def end_held_job(run: subprocess.Popen[str]) -> None:
    out, err = run.communicate(timeout=GUARD)       # stdin closed: cat ends, and so does the job
    assert run.returncode == 0, (out, err)


def worker_of(m: Machine) -> int:
    """The pid of the I/O worker of the job running on machine m's block A
    (call while it runs: its worker is up): a child of that block's ciod
    whose title names the job.  "block A" alone also names the last job's
    worker while it ends, and other machines' workers on a shared host."""
    job = running_job(m)
    ciods = set(m.processes("ciod", "A"))
    deadline = time.monotonic() + GUARD
    while time.monotonic() < deadline:
        for pid, argv in processes():
            title = b" ".join(argv) + b" "
            if argv[0] == b"ciod-worker" and f" job {job} ".encode() in title and b" block A " in title \
                    and parent(pid) in ciods:
                return pid
        time.sleep(0.05)
    raise AssertionError(f"no I/O worker of job {job} while it ran")


def running_job(m: Machine) -> int:
    return max(int(line.split()[0]) for line in m.run("jobs").stdout.splitlines()[1:] if "Running" in line)


def parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def test_worker_holds_the_owner_identity_and_no_capability(am: Machine, user: pwd.struct_passwd,
                                                           tools: dict[str, Path]) -> None:
    run = held_job(am, "--user", user.pw_name, "--cwd", str(tools["dir"]))
    try:
        pid = worker_of(am)
        status = Path(f"/proc/{pid}/status").read_text()
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        uid = str(user.pw_uid)
        assert fields["Uid"].split() == [uid] * 4, status
        assert fields["Gid"].split() == [str(user.pw_gid)] * 4, status
        for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
            assert int(fields[cap], 16) == 0, (cap, status)
        assert fields["NoNewPrivs"].strip() == "1", status
        # not dumpable: its /proc files belong to root, not to the job's user
        assert os.stat(f"/proc/{pid}/mem").st_uid == 0
        # no descriptor of the monitor's secrets: key, personalities, database
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            assert not target.endswith(("/key", ".json", "lattice.db")), target
        # and none of its key in memory: the block key is wiped from its copy
        key = next(am.home.glob("**/blocks/A/key")).read_text().strip()
        with open(f"/proc/{pid}/mem", "rb") as mem:
            maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
            for line in maps:
                span, perms = line.split()[:2]
                if "r" not in perms or "[vvar]" in line or "[vsyscall]" in line:
                    continue
                lo, hi = (int(x, 16) for x in span.split("-"))
                try:
                    mem.seek(lo)
                    assert bytes.fromhex(key) not in mem.read(hi - lo), line
                except OSError:
                    continue
    finally:
        end_held_job(run)


def test_root_job_worker_has_no_capability(am: Machine, tools: dict[str, Path]) -> None:
    run = held_job(am, "--cwd", "/tmp")
    try:
        pid = worker_of(am)
        status = Path(f"/proc/{pid}/status").read_text()
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        assert fields["Uid"].split() == ["0"] * 4, status
        for cap in ("CapPrm", "CapEff", "CapBnd"):
            assert int(fields[cap], 16) == 0, (cap, status)
    finally:
        end_held_job(run)


def test_one_shipping_connection_per_process(am: Machine) -> None:
    """A second PROC hello for a process that has its connection is refused
    (EBUSY) and logged; the job goes on.  The test holds the block key, as
    the compute node that says the hello for its processes does."""
    ras_before = am.run("ras").stdout.count("that process is already connected")
    run = held_job(am, "--cwd", "/tmp")         # its process said hello: it runs
    try:
        assert proc_hello(am, node=0, t=0) == errno.EBUSY
    finally:
        end_held_job(run)
    ras = am.run("ras").stdout
    assert ras.count("that process is already connected") == ras_before + 1, ras


def proc_hello(m: Machine, node: int, t: int) -> int:
    """A PROC hello for process t of node of the running job: the ack's err."""

    (pfile,) = m.home.glob("**/node-0.json")
    pers = json.loads(pfile.read_text())
    job = running_job(m)
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(GUARD)             # a hang guard on ciod's answers
        s.connect(pers["ciod"].removeprefix("unix:"))
        return wire_hello(s, bytes.fromhex(pers["key"]), ROLE_PROC, node | t << 16, job)


def wire_hello(s: socket.socket, key: bytes, role: int, node: int, job: int) -> int:
    """The v2 handshake (docs/protocol.md 3): ciod's challenge, our MACed hello; the ack's err."""
    from lattice.transport import wire  # noqa: PLC0415

    typ, body = recv_msg(s)
    assert typ == wire.CHALLENGE, hex(typ)
    hello, _ = wire.hello_payload(key, body, role, node, job)
    s.sendall(wire.header(wire.HELLO, len(hello), 1) + hello)
    typ, body = recv_msg(s)
    return int(wire.HELLO_ACK.unpack(body[:wire.HELLO_ACK.size])[0])


def recv_msg(s: socket.socket) -> tuple[int, bytes]:
    from lattice.transport import wire  # noqa: PLC0415

    _, _, _, typ, n, _ = wire.HDR.unpack(recv_exact(s, wire.HDR.size))
    return typ, recv_exact(s, n)


def recv_exact(s: socket.socket, n: int) -> bytes:
    b = b""
    while len(b) < n:
        chunk = s.recv(n - len(b))
        assert chunk, "connection closed"
        b += chunk
    return b
