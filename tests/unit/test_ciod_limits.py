"""What a peer can cost ciod (ionode/ciod/admit.c, ras.c): its threads stay
bounded under a flood of idle connections, which are shed by the hello
deadline or to make room, while the service node is served; and thousands
of malformed inputs write a bounded number of RAS events whose counts
("[repeated N times in the last T s]") account for every one of them."""
from __future__ import annotations

import errno
import os
import re
import resource
import select
import shutil
import socket
import struct
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from test_ciod import ciod_bin  # noqa: F401 - fixture
from test_ciod import (CHALLENGE, CTL_SHUTDOWN, CTL_STATUS, HDR, MAGIC, PSET_SIZE, ROLE_CONTROL, ROLE_NODE, VERSION,
                       Ciod, Job, closed, path, send, status)

MAX_HELLO = 64          # ADMIT_HELLO_MAX
# admit.c: ADMIT_CONTROL_MAX + pset_size * (1 + 2 * LAT_MAX_PPN) + ADMIT_HELLO_MAX
MAX_CONNS = 16 + PSET_SIZE * (1 + 2 * 64) + MAX_HELLO
BURST = 10              # RAS_FOLD_BURST
REPEATED = re.compile(r" \[repeated (\d+) times in the last (\d+) s(, by other peers)?\]$")


class PatientCiod(Ciod):
    """Connects as the service node does (lattice.transport.ciodclient): right after a
    flood the listen backlog may be full for a moment, which a non-blocking
    connect reports as EAGAIN; wait for room."""

    def raw(self) -> socket.socket:
        deadline = time.monotonic() + 600       # a hang guard
        while True:
            try:
                return super().raw()
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)


def threads(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no Threads line")


@pytest.fixture
def start(ciod_bin: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """start(**env): a ciod with those environment variables; stopped at the end."""
    made: list[Ciod] = []
    dirs: list[Path] = []

    def start(**env: str) -> Ciod:
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        d = Path(tempfile.mkdtemp(prefix="ciod-limits-", dir="/tmp"))
        os.chmod(d, 0o755)
        dirs.append(d)
        made.append(PatientCiod(ciod_bin, d))
        unpended(made[-1].proc.pid)
        return made[-1]

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    yield start
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    for c in made:
        if c.alive():
            c.proc.kill()
        c.proc.wait(600)        # a hang guard
        c.log.close()
    for d in dirs:
        shutil.rmtree(d, ignore_errors=True)


def unpended(pid: int) -> None:
    """Until ciod holds no connection but those it serves: the connection that
    found it listening (Ciod.listening) left without a hello, and its thread,
    still pending in admit.c until it sees that, would count against the caps
    (each connection's thread is "ciod" until it runs, then "ciod-hello"
    until its hello; the main thread is the only other "ciod")."""
    deadline = time.monotonic() + 600       # a hang guard
    while True:
        names = []
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                names.append((task / "comm").read_text().strip())
            except OSError:
                pass                         # a thread that just ended
        if names.count("ciod") == 1 and "ciod-hello" not in names:
            return
        assert time.monotonic() < deadline, names
        time.sleep(0.02)


def shutdown(c: Ciod) -> None:
    """LAT_CTL_SHUTDOWN: ciod exits, writing what it still had folded."""
    with c.connect(ROLE_CONTROL) as s:
        send(s, CTL_SHUTDOWN, b"", 5)
        c.proc.wait(600)        # a hang guard
    assert c.proc.returncode == 0, c.logtext()


def events(c: Ciod, needle: str) -> tuple[int, int]:
    """RAS lines whose message contains needle, and the events they stand for."""
    lines = total = 0
    for line in c.rastext().splitlines():
        f = line.split("\t")
        assert len(f) == 6 and f[2] == "CIOD", line      # what lattice.state.ras.ingest parses (f[4]: the job)
        if needle in f[5]:
            lines += 1
            m = REPEATED.search(f[5])
            total += int(m[1]) if m else 1
    return lines, total


def raw_connect(c: Ciod) -> socket.socket:
    """A connection that says nothing and does not take its challenge."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(str(c.sock))
    return s


def admitted(s: socket.socket) -> None:
    """Until ciod has taken s in (admit.c lists it as pending before its
    thread sends the challenge): the challenge, or the end if it was shut,
    is readable.  Unread: shut_unheard and still_open look at it later."""
    readable, _, _ = select.select([s], [], [], 600)    # a hang guard
    assert readable, "ciod never took the connection in"


def shut_unheard(s: socket.socket) -> bool:
    """Whether ciod shut a connection that never said hello, having sent it
    at most its challenge (wire v2: the first thing on every connection,
    unless ciod shut it first)."""
    got = b""
    try:
        while chunk := s.recv(1 << 16):
            got += chunk
    except ConnectionResetError:
        pass
    except TimeoutError:
        return False
    if not got:
        return True
    assert len(got) == HDR.size + 32, got
    magic, version, _, typ, ln, seq = HDR.unpack_from(got)
    assert (magic, version, typ, ln, seq) == (MAGIC, VERSION, CHALLENGE, 32, 0), got[:16].hex()
    return True


def test_idle_flood_keeps_threads_bounded_and_ciod_serving(start) -> None:  # type: ignore[no-untyped-def]
    # a deadline short enough to see, long enough that the service node's own
    # hello (status() below) is not shut before it is sent on a loaded host
    c = start(LATTICE_HELLO_TIMEOUT="10")
    pid = c.proc.pid
    base = threads(pid)                 # the accept loop and the RAS fold timer
    assert base <= 3
    peak = [base]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            try:
                peak[0] = max(peak[0], threads(pid))
            except OSError:
                return
            time.sleep(0.002)

    sampler = threading.Thread(target=sample)
    sampler.start()
    socks: list[socket.socket] = []
    try:
        for i in range(1000):
            socks.append(raw_connect(c))
            if i % 250 == 125:          # the service node is served during the flood
                assert status(c) == (0, PSET_SIZE, 0)
        assert status(c) == (0, PSET_SIZE, 0)
        # every idle one is shut: evicted at once, or by the 10 s deadline (the
        # shutting is the event; 600 s is a hang guard, not a bound on the deadline)
        for s in socks:
            s.settimeout(600)
            assert shut_unheard(s)
    finally:
        stop.set()
        sampler.join()
        for s in socks:
            s.close()
    # one thread per connection, evicted ones until they notice: never more
    # than the cap (without it, 1,000 idle connections held 1,003 threads)
    assert peak[0] <= base + MAX_CONNS, peak
    settle_pid(pid, base)
    # a job works after it
    job = Job(c, c.dir, job_id=5, image=b"img")
    assert job.proc(0).ok("getcwd", 4096)[1] == path(c.dir)
    shutdown(c)
    lines_e, evicted = events(c, "closed before its hello")
    lines_t, timed_out = events(c, "closed: ")
    assert events(c, "closed: no hello within 10 s") == (lines_t, timed_out)    # LATTICE_HELLO_TIMEOUT's
    assert evicted + timed_out == 1000, (evicted, timed_out, c.rastext())
    assert timed_out <= MAX_HELLO and evicted >= 1000 - MAX_HELLO
    assert lines_e <= BURST + 2 and lines_t <= BURST + 2, c.rastext()


def still_open(s: socket.socket) -> bool:
    s.settimeout(0.3)
    try:
        return s.recv(1) != b""
    except TimeoutError:
        return True
    except ConnectionResetError:
        return False


def settle_pid(pid: int, n: int) -> None:
    """Until the process runs at most n threads (its connections' threads
    end as they notice: the event; 600 s is a hang guard)."""
    deadline = time.monotonic() + 600
    while threads(pid) > n:
        assert time.monotonic() < deadline, threads(pid)
        time.sleep(0.02)


def settle(c: Ciod, n: int) -> None:
    """Until ciod runs at most n threads."""
    settle_pid(c.proc.pid, n)


def test_caps_evict_the_oldest_pending_and_refuse_beyond_all(start) -> None:  # type: ignore[no-untyped-def]
    # no hello deadline within the test, however loaded the host: only the
    # caps shut a connection here (still_open below would see a deadline's)
    c = start(LATTICE_MAX_CONNS="12", LATTICE_MAX_HELLO="4", LATTICE_HELLO_TIMEOUT="3600")
    base = threads(c.proc.pid)
    held = [c.connect(ROLE_CONTROL) for _ in range(6)]      # authenticated: never evicted
    idle = []
    for _ in range(6):
        idle.append(raw_connect(c))
        admitted(idle[-1])                                  # in order: the oldest is the first
    for s in idle[:2]:
        s.settimeout(600)                                   # a hang guard
    assert [shut_unheard(s) for s in idle[:2]] == [True, True]    # evicted at once for the newer ones
    assert all(still_open(s) for s in idle[2:])
    for s in idle:
        s.close()
    settle(c, base + 6)
    held += [c.connect(ROLE_CONTROL) for _ in range(6)]     # 12: the cap on all connections
    extra = raw_connect(c)
    extra.settimeout(600)                                   # a hang guard
    assert shut_unheard(extra)                              # no room: closed at once
    with pytest.raises((OSError, AssertionError)):          # nor for a hello
        c.hello(ROLE_CONTROL)
    assert threads(c.proc.pid) <= base + 12
    for s in held:                                          # the held ones are all served
        send(s, CTL_STATUS, b"", 3)
        assert len(s.recv(64)) > 16
    for s in held[1:]:
        s.close()
    settle(c, base + 1)
    assert status(c) == (0, PSET_SIZE, 0)                   # room again
    send(held[0], CTL_SHUTDOWN, b"", 5)
    c.proc.wait(600)            # a hang guard
    lines, refused = events(c, "the most this I/O node serves")
    assert refused == 2 and lines == 2, c.rastext()
    assert events(c, "closed before its hello") == (2, 2), c.rastext()


def test_malformed_flood_writes_bounded_events_that_add_up(start) -> None:  # type: ignore[no-untyped-def]
    c = start(LATTICE_RAS_WINDOW="2")
    kinds = {
        # needle in the event: what is sent on a new connection, after its challenge
        "bad magic": HDR.pack(0xDEADBEEF, VERSION, 0, 1, 0, 1),
        "not a hello": HDR.pack(MAGIC, VERSION, 0, CTL_STATUS, 0, 1),
        "version": HDR.pack(MAGIC, VERSION + 7, 0, 1, 0, 1),
    }
    n = 2000
    t0 = time.monotonic()
    for i in range(n):
        for msg in kinds.values():
            s = c.raw()                 # as a client does: the challenge first (ciod may not read before)
            s.sendall(msg)
            s.close()
        # and a probe that leaves before its challenge: no event, and no line in the log
        raw_connect(c).close()
    elapsed = time.monotonic() - t0
    # and malformed requests on one authenticated process connection
    job = Job(c, c.dir, job_id=6, image=b"img")
    p = job.proc(0)
    t1 = time.monotonic()
    for _ in range(n):
        assert p.fails("openat", -100, 0, 0, data=b"no-nul") == errno.EINVAL
    elapsed_openat = time.monotonic() - t1
    assert status(c) == (PSET_SIZE, PSET_SIZE, 6)
    # the window's end writes the count (the timer thread), not only exit: the
    # count is the event, awaited before the shutdown (600 s: a hang guard)
    deadline = time.monotonic() + 600
    while events(c, "malformed OPENAT request")[1] != n:
        assert time.monotonic() < deadline, c.rastext()[-2000:]
        time.sleep(0.1)
    shutdown(c)
    # the flood's windows: 2 s each, however long a loaded host took over it
    windows = (time.monotonic() - t0) / 2
    # two kinds of event: a connection closed (bad magic), a hello refused (the
    # others: one kind, one format, whose summaries carry the last one's text)
    for needle, want in (("closed: bad magic", n), ("refused: ", 2 * n)):
        lines, total = events(c, needle)
        assert total == want, (needle, total, c.rastext()[-3000:])
        # BURST in full, then one summary per 2 s window of the flood, and the last at exit
        assert lines <= BURST + elapsed / 2 + 2, (needle, lines)
    lines, total = events(c, "malformed OPENAT request")
    # BURST, one summary per 2 s window of that flood (20 on an idle host), the last
    assert total == n and lines <= BURST + max(20, elapsed_openat / 2 + 2), (lines, total)
    # 8,000 events in all; the lines are per kind (3) BURST and a summary per
    # window: under 200 on an idle host, more windows on a loaded one
    bound = max(200, 3 * (BURST + windows + 2) + 50)
    assert len(c.rastext().splitlines()) < bound
    assert len(c.logtext().splitlines()) < bound + 200  # the daemon's log is not flooded either


def test_events_of_the_service_node_and_nodes_are_never_folded(start) -> None:  # type: ignore[no-untyped-def]
    """Folding is for untrusted peers: the same kind of event from a compute
    node (its hello accepted) is written every time."""
    c = start()
    for _ in range(3 * BURST):
        deadline = time.monotonic() + 600       # a hang guard
        while True:             # the last one may still be detaching (EBUSY)
            s, err = c.hello(ROLE_NODE, 0)
            if err == 0:
                break
            s.close()
            assert err == errno.EBUSY and time.monotonic() < deadline
            time.sleep(0.01)
        s.sendall(HDR.pack(0xDEADBEEF, VERSION, 0, 1, 0, 1))
        assert closed(s)
        s.close()
    shutdown(c)
    lines, total = events(c, "sent a bad message")
    assert lines == total == 3 * BURST, c.rastext()


def test_a_service_node_evicted_before_its_hello_connects_again(start, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """On a loaded host the service node may be slow to answer its challenge,
    and a flood of idle connections evicts it (the oldest without a hello):
    it connects again and is served, instead of failing `lattice run`."""
    from lattice.transport import wire
    from lattice.transport.ciodclient import Ciod as Client
    c = start(LATTICE_MAX_HELLO="1", LATTICE_HELLO_TIMEOUT="3600")
    flood: list[socket.socket] = []
    real = wire.hello_payload

    def slow_hello(key: bytes, nonce: bytes, role: int) -> tuple[bytes, bytes]:
        if not flood:       # the first time only: a newer idle connection evicts ours
            flood.append(raw_connect(c))
            admitted(flood[-1])
        return real(key, nonce, role)
    monkeypatch.setattr(wire, "hello_payload", slow_hello)
    try:
        with Client(f"unix:{c.sock}", c.key, "R00-M0-N00-I:J00", timeout=600) as cl:
            assert cl.status()[1] == PSET_SIZE
    finally:
        for s in flood:
            s.close()
    assert len(flood) == 1
    assert "closed before its hello" in c.rastext(), c.rastext()     # it was evicted
