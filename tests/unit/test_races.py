"""Races between commands, each made to happen at the one moment it can:
`lattice run` without --block whose chosen place is taken before it records
it moves on to another (lattice.jobs.launch.reserve); `lattice cancel` of a
job that ends, or whose block is freed, while the cancel signals it is no
error.  On a machine's database on each backend, nothing booted: the
other command's move is made from the test, where the race puts it."""
from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Iterator, NoReturn
from unittest import mock

import pytest

from lattice.errors import LatticeError
from lattice.nodes import boot
from lattice.state import db, reclaim

from cli_inprocess import home, lattice


@pytest.fixture(params=["sqlite", "postgresql"])
def m(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """A 1x1x8 machine in psets of 2, nothing booted; on each backend in turn."""
    database = "sqlite" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    with home(tmp_path / "m"):
        assert lattice("init", "--shape", "1x1x8", "--pset-size", "2", "--memory", "64M",
                       "--database", database)[0] == 0
        yield tmp_path / "m"


def block(con: sqlite3.Connection, name: str, corner: str, state: str) -> None:
    assert lattice("block", "create", name, "--shape", "1x1x2", "--corner", corner)[0] == 0
    con.execute("UPDATE blocks SET state = ? WHERE name = ?", (state, name))


def running_on(con: sqlite3.Connection, name: str) -> int:
    """A job that holds block name, run by this test's process (alive: the sweep keeps it)."""
    from lattice import procs
    pid, start = procs.me()
    cur = con.execute("INSERT INTO jobs (block, user, uid, exe, args, cwd, nranks, state, submitted, started, "
                      "client_pid, client_start) VALUES (?, 'u', 0, '/bin/x', '/bin/x', '/', 1, 'Running', 0, 0, ?, ?) "
                      "RETURNING id", (name, pid, start))
    return int(cur.fetchone()[0])


class Booted(Exception):
    """Where the run got to: the block it was about to boot, its record there."""


def run_until_boot(took: list[tuple[str, str | None]]) -> tuple[int, str, str]:
    """`lattice run -n 2 /bin/true` without --block, stopped where it would
    boot (or claim) the place it recorded; took: (block, its record's state there)."""
    def at_boot(con: db.Connection, _m: object, name: str, owner: object = None) -> NoReturn:
        row = con.execute("SELECT state FROM jobs WHERE block = ? AND client_pid IS NOT NULL ORDER BY id DESC",
                          (name,)).fetchone()
        took.append((name, row["state"] if row else None))
        raise LatticeError("stopped at the boot by the test")

    def at_claim(con: db.Connection, _m: object, b: object, spec: object, wait: bool = False) -> NoReturn:
        at_boot(con, _m, getattr(b, "name"))
    with mock.patch("lattice.nodes.boot.boot", at_boot), mock.patch("lattice.jobs.job.run", at_claim):
        return lattice("run", "--kernel", "linux", "-n", "2", "/bin/true")


def test_a_run_whose_idle_block_is_taken_meanwhile_records_another(m: Path) -> None:
    """Between choosing idle block I0 and recording its claim, another run
    takes I0: the run takes I1 (the next idle block), not "busy"."""
    con = reclaim.connect()
    block(con, "I0", "0,0,0", "Initialized")
    block(con, "I1", "0,0,2", "Initialized")
    real = __import__("lattice.jobs.launch", fromlist=["check_capacity"]).check_capacity
    other: list[int] = []

    def capacity_then_race(*args: object) -> None:
        if not other:           # the other run claims I0 right after this one chose it
            other.append(running_on(reclaim.connect(), "I0"))
        real(*args)
    took: list[tuple[str, str | None]] = []
    with mock.patch("lattice.jobs.launch.check_capacity", capacity_then_race):
        status, _, err = run_until_boot(took)
    assert "busy" not in err, err
    assert took == [("I1", "Starting")], (took, err)
    # I0's job untouched; the stopped run's record ended with why
    rows = {r["id"]: (r["state"], r["block"], r["message"]) for r in con.execute("SELECT * FROM jobs")}
    assert rows.pop(other[0]) == ("Running", "I0", None), rows
    assert list(rows.values()) == [("Error", "I1", "stopped at the boot by the test")], rows


def test_a_run_whose_new_box_is_taken_meanwhile_records_another(m: Path) -> None:
    """Between choosing a new box at 0,0,0 and making it, another run makes
    a block there: the run records a box of its own elsewhere, never "overlaps"."""
    con = reclaim.connect()
    real = __import__("lattice.jobs.launch", fromlist=["check_capacity"]).check_capacity
    raced: list[bool] = []

    def capacity_then_race(*args: object) -> None:
        if not raced:
            raced.append(True)
            other = reclaim.connect()
            other.execute("INSERT INTO blocks (name, x0, y0, z0, sx, sy, sz, auto, created, changed) "
                          "VALUES ('auto-other', 0, 0, 0, 1, 1, 2, 1, 0, 0)")
        real(*args)
    took: list[tuple[str, str | None]] = []
    with mock.patch("lattice.jobs.launch.check_capacity", capacity_then_race):
        status, _, err = run_until_boot(took)
    assert "overlaps" not in err, err
    assert len(took) == 1 and took[0][0].startswith("auto-") and took[0][0] != "auto-other", (took, err)
    assert took[0][1] == "Starting", "the box and the run's record were made together"
    # the run's failed boot took its box and record with it
    assert {r["name"] for r in con.execute("SELECT name FROM blocks")} == {"auto-other"}
    assert con.execute("SELECT count(*) FROM jobs").fetchone()[0] == 0


def test_a_free_block_a_run_boots_is_not_another_runs(m: Path) -> None:
    """A Free block another run is booting (its record is on it, Starting)
    is not this run's: it takes a new box."""
    con = reclaim.connect()
    block(con, "F0", "0,0,0", "Free")
    booting = running_on(con, "F0")
    con.execute("UPDATE jobs SET state = 'Starting', started = NULL WHERE id = ?", (booting,))
    took: list[tuple[str, str | None]] = []
    run_until_boot(took)
    assert len(took) == 1 and took[0][0].startswith("auto-"), took


def ciods_that_race(con: db.Connection, job: int, freed_by: str) -> object:
    """boot.ciods that finds the block gone as the race leaves it: the job
    ended (by its run) and its block freed (freed_by: "run" ends the record
    first; "free" frees the block under the still active job)."""
    def ciods(c: db.Connection, b: object, m: object, timeout: float = 10.0) -> NoReturn:
        other = reclaim.connect()
        if freed_by == "run":
            other.execute("UPDATE jobs SET state = 'Terminated', status = 0, ended = 1 WHERE id = ?", (job,))
        other.execute("UPDATE blocks SET state = ? WHERE name = 'B'", ("Free" if freed_by == "run" else "Terminating",))
        boot.block_key(getattr(b, "_replace")(state="Free"))     # the real refusal: no key file any more
        raise AssertionError("unreachable")
    return ciods


def test_cancel_of_a_job_that_ends_meanwhile_is_no_error(m: Path) -> None:
    con = reclaim.connect()
    block(con, "B", "0,0,0", "Initialized")
    job = running_on(con, "B")
    with mock.patch("lattice.nodes.boot.ciods", ciods_that_race(con, job, "run")):
        status, out, err = lattice("cancel", str(job))
    assert (status, out, err) == (0, f"lattice: job {job} had already ended\n", ""), (status, out, err)


def test_cancel_of_a_job_whose_block_is_being_freed_is_no_error(m: Path) -> None:
    """The block goes Terminating under the job as the cancel signals it:
    the cancel waits for the job's record to end (its run ends it when its
    I/O nodes go: here a thread does, once the block is Terminating)."""
    con = reclaim.connect()
    block(con, "B", "0,0,0", "Initialized")
    job = running_on(con, "B")

    def the_run() -> None:
        mine = reclaim.connect()
        while mine.execute("SELECT state FROM blocks WHERE name = 'B'").fetchone()["state"] != "Terminating":
            freeing.wait(0.05)
        mine.execute("UPDATE jobs SET state = 'Error', status = 1, ended = 1 WHERE id = ?", (job,))
    freeing = threading.Event()
    t = threading.Thread(target=the_run)
    t.start()
    try:
        with mock.patch("lattice.nodes.boot.ciods", ciods_that_race(con, job, "free")):
            status, out, err = lattice("cancel", str(job))
    finally:
        t.join(timeout=300)
    assert status == 0, err
    assert out in (f"lattice: job {job} had already ended\n",
                   f"lattice: job {job} cancelled (its block B was being freed: it ended with it)\n"), out
