"""Failures leave no mess and never lie (issue 24): the agent's channel
(booter gone, stop, heartbeat lost), a boot's stall window (progress keeps
it going, silence ends it), one line for a locked or unwritable database.
Time is a fake clock here: nothing waits on a window of seconds."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import types
from pathlib import Path

import pytest

from lattice.nodes import agent, placement
from lattice.state import db
from lattice.errors import LatticeError
from lattice.nodes.placement import Launch, Reports


class Clock:
    """time.monotonic and time.sleep for a module: sleeping advances the
    clock, and `at` runs actions when the clock reaches their times."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.at: list[tuple[float, object]] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += max(s, 0.01)
        due = [a for a in self.at if a[0] <= self.now]
        self.at = [a for a in self.at if a[0] > self.now]
        for _, action in due:
            action()  # type: ignore[operator]


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    fake = types.SimpleNamespace(monotonic=c.monotonic, sleep=c.sleep, time=lambda: c.now)
    monkeypatch.setattr(agent, "time", fake)
    monkeypatch.setattr(placement, "time", fake)
    return c


def channel(clock: Clock, remote: bool, stall: float = 60.0) -> tuple[agent.Channel, int]:
    r, w = os.pipe()
    return agent.Channel(r, remote, stall), w


def test_the_local_agent_stops_when_its_booter_goes_before_commit(clock: Clock) -> None:
    ch, w = channel(clock, remote=False)
    os.write(w, b"boot\n")
    ch.poll()
    assert ch.why_stop() is None
    os.close(w)                 # the booting lattice command died (SIGKILL)
    ch.poll()
    assert ch.why_stop() == "the lattice command that was booting the block is gone"


def test_the_local_agent_keeps_its_daemons_once_committed(clock: Clock) -> None:
    ch, w = channel(clock, remote=False)
    os.write(w, b"boot\ncommit\n")
    os.close(w)                 # the booter ended after a good boot
    ch.poll()
    clock.now += 3600
    assert ch.committed and ch.why_stop() is None


def test_a_silent_booter_is_taken_for_gone_after_the_stall_window(clock: Clock) -> None:
    ch, w = channel(clock, remote=False, stall=30)
    clock.now += 29
    os.write(w, b"boot\n")
    ch.poll()
    clock.now += 29
    assert ch.why_stop() is None                # it spoke 29 s ago
    clock.now += 2
    assert "no word from the lattice command booting the block for 30 s" in (ch.why_stop() or "")


def test_stop_is_obeyed(clock: Clock) -> None:
    ch, w = channel(clock, remote=True)
    os.write(w, b"boot\nstop\n")
    ch.poll()
    assert ch.why_stop() == "told to stop by the service node"


def test_a_remote_agent_ends_its_daemons_when_the_heartbeat_stops(clock: Clock) -> None:
    """After commit, the launcher's empty heartbeat lines keep it; none for
    HEARTBEAT_LOST seconds (a link down: nothing closes) and it stops."""
    ch, w = channel(clock, remote=True)
    os.write(w, b"commit\n")
    ch.poll()
    for _ in range(10):         # a heartbeat every HEARTBEAT seconds: kept
        clock.now += agent.HEARTBEAT
        os.write(w, b"\n")
        ch.poll()
        assert ch.why_stop() is None
    clock.now += agent.HEARTBEAT_LOST + 1
    ch.poll()
    assert "no heartbeat from the service node" in (ch.why_stop() or "")


def test_a_remote_agent_stops_when_its_channel_closes_even_after_commit(clock: Clock) -> None:
    ch, w = channel(clock, remote=True)
    os.write(w, b"commit\n")
    os.close(w)
    ch.poll()
    assert ch.why_stop() == "its channel to the service node closed"


def test_orders_are_read_past_heartbeats_and_what_follows_them_is_kept() -> None:
    r, w = os.pipe()
    os.write(w, b"\n\n" + json.dumps({"block": "B"}).encode() + b"\nboot\nco")
    os.close(w)
    line, rest = agent.read_orders(r)
    assert json.loads(line) == {"block": "B"} and rest == b"boot\nco"


def report(host: str, event: str, **kw: object) -> str:
    return json.dumps({"host": host, "event": event, **kw}) + "\n"


def test_a_boot_that_keeps_moving_is_not_cut_off(clock: Clock, tmp_path: Path) -> None:
    """A stall window of 10 s, a boot of 100 s: progress every 5 s keeps it
    going; the progress line says how far it got."""
    log = tmp_path / "agent.log"
    log.write_text("")
    for k in range(1, 21):
        clock.at.append((clock.now + 5 * k, lambda k=k: log.open("a").write(report("h1", "progress", up=k))))
    clock.at.append((clock.now + 101, lambda: log.open("a").write(report("h1", "ready", up=20, ciods={}))))
    r = Reports([Launch(("h1",), 1, log)], lambda pid: True, "B", 20, 10.0)
    got = r.wait("ready", ["h1"], 10.0)
    assert got["h1"]["event"] == "ready" and r.count() == "20/20 compute nodes up"


def test_a_boot_that_stalls_is_cut_off_and_says_how_far_it_got(clock: Clock, tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    log.write_text("")
    clock.at.append((clock.now + 5, lambda: log.open("a").write(report("h1", "progress", up=7))))
    r = Reports([Launch(("h1",), 1, log)], lambda pid: True, "B", 20, 10.0)
    with pytest.raises(LatticeError, match=r"timed out waiting for host h1: no progress for 10 s \(7/20 compute "
                                           r"nodes up; the stall window is \$LATTICE_BOOT_STALL\)"):
        r.wait("ready", ["h1"], 10.0)
    assert 1015 <= clock.now < 1017     # 10 s after its last word, not 10 s after the start


def test_the_booter_tells_its_agents_it_is_there_commit_and_stop(clock: Clock, tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    log.write_text("")
    clock.at.append((clock.now + 3, lambda: log.open("a").write(report("h1", "ready", ciods={}))))
    rd, w = os.pipe()
    os.set_blocking(w, False)
    r = Reports([Launch(("h1",), 1, log, w)], lambda pid: True, "B", 2, 8.0)
    r.wait("ready", ["h1"], 8.0)        # "boot" every stall / 4 = 2 s while it waits
    r.commit()
    assert os.read(rd, 100) == b"boot\nboot\ncommit\n"
    assert r.launches[0].channel is None


def test_stop_waits_for_agents_that_report_progress(clock: Clock, tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    log.write_text("")
    gone = {"yes": False}
    for k in range(1, 6):       # stopping 5000 daemons at 1000 a report, a report every 4 s
        clock.at.append((clock.now + 4 * k, lambda k=k: log.open("a").write(report("h1", "stopping", left=5000 - 1000 * k))))
    clock.at.append((clock.now + 21, lambda: gone.update(yes=True)))
    rd, w = os.pipe()
    r = Reports([Launch(("h1",), 1, log, w)], lambda pid: not gone["yes"], "B", 2, 5.0)
    assert r.stop(5.0) == []
    assert os.read(rd, 100) == b"stop\n"
    r2 = Reports([Launch(("h2",), 2, tmp_path / "silent.log")], lambda pid: True, "B", 2, 5.0)
    assert [ln.hosts for ln in r2.stop(5.0)] == [("h2",)]       # silent and still there: to be killed


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("LATTICE_HOME", str(tmp_path))
    con = db.connect(tmp_path / "lattice.db")
    con.close()
    return tmp_path


def test_a_locked_database_names_its_holder(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    holder = subprocess.Popen([sys.executable, "-c", "import sqlite3, sys\n"
                               f"c = sqlite3.connect({str(home / 'lattice.db')!r}, isolation_level=None)\n"
                               "c.execute('BEGIN EXCLUSIVE'); c.execute('UPDATE blocks SET changed = changed')\n"
                               "print('held', flush=True); sys.stdin.read()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        monkeypatch.setenv("LATTICE_DB_TIMEOUT", "0.2")
        con = db.connect(home / "lattice.db")
        with pytest.raises(sqlite3.OperationalError) as e:
            con.execute("BEGIN IMMEDIATE")
        line = db.failure_line(e.value)
        assert line is not None and "\n" not in line
        assert f"lattice.db is locked by another process (pid {holder.pid}: {sys.executable} -c import" in line
        assert "waited 0.2 s ($LATTICE_DB_TIMEOUT)" in line
    finally:
        holder.communicate("")


def test_a_bad_db_timeout_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LATTICE_DB_TIMEOUT", "soon")
    assert db.busy_wait() == 30.0


def test_an_unwritable_file_of_the_home_is_one_line(home: Path) -> None:
    e = PermissionError(13, "Permission denied", str(home / "blocks"))
    assert db.failure_line(e) == (f"{home / 'blocks'}: Permission denied (LATTICE_HOME {home} must be writable "
                                  "by whoever runs lattice)")
    assert db.failure_line(ValueError("a bug")) is None        # not a failure of the machine's files: a traceback


@pytest.mark.parametrize("answer,status,said", [
    (b"E3\nE3\n", 3, ""),                                   # the command's own answer and the server's, in one read
    (b"S9\n", 137, "lattice: error: the command was killed by signal 9\n"),     # SIGKILL: no handler to reset
])
def test_the_client_takes_the_first_answer_and_a_sigkill_is_one_line(tmp_path: Path, answer: bytes, status: int,
                                                                     said: str) -> None:
    """A fake warm server in a fresh LATTICE_HOME answers the client."""
    import socket
    import threading
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(tmp_path / "warm.sock"))
    srv.listen(1)

    def serve() -> None:
        conn, _ = srv.accept()
        _, fds, _, _ = socket.recv_fds(conn, 1 << 20, 4)
        for fd in fds:          # the client's streams: held here, its pipes would never end
            os.close(fd)
        conn.sendall(answer)
        conn.close()
    t = threading.Thread(target=serve, daemon=True)
    t.start()
    env = dict(os.environ, LATTICE_HOME=str(tmp_path), PYTHONPATH=str(Path(__file__).resolve().parents[2] / "service"))
    p = subprocess.run([sys.executable, "-c", "import sys\nfrom lattice.cli import client\nsys.exit(client.warm(['blocks']))"],
                       env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    t.join()
    srv.close()
    assert (p.returncode, p.stderr) == (status, said), p


def test_leftovers_are_the_block_s_processes_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process naming blocks/R00/ is R00's, not R0's (a prefix), and
    kill_leftovers ends it (its session: it leads one, as a daemon does)."""
    from lattice.nodes import boot
    monkeypatch.setenv("LATTICE_HOME", str(tmp_path))
    p = subprocess.Popen([sys.executable, "-c", "import sys, time; print('up', flush=True); time.sleep(600)",
                          "--personality", str(tmp_path / "blocks" / "R00" / "node-3.json")],
                         stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert p.stdout is not None and p.stdout.readline() == "up\n"
        assert boot.leftovers("R0") == []
        assert boot.leftovers("R00") == [p.pid]
        assert boot.kill_leftovers("R00") == 1
        assert not Path(f"/proc/{p.pid}").exists()     # killed and reaped (by kill_leftovers: it is our child)
    finally:
        p.kill()
        p.wait()
