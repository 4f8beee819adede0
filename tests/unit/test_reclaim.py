"""The sweep before each command (lattice.state.reclaim) and the one-job-per-block
claim (lattice.state.busy), on a real database without booting anything: job
records whose `lattice run` is gone are ended, live ones are left alone,
and a run on a block with an active job is refused before it reaches any
I/O node."""
from __future__ import annotations

import os
from pathlib import Path

from lattice import procs
from test_service_machine import Home, assert_clean_error, home  # noqa: F401 - fixture


def add_job(db: Home, block: str, pid: int, start: int | None, state: str = "Running") -> int:
    with db.db() as con:
        cur = con.execute("INSERT INTO jobs (block, user, uid, exe, args, cwd, nranks, state, submitted, kernel, "
                          "client_pid, client_start) VALUES (?, 'u', 0, '/bin/x', '/bin/x', '/', 1, ?, 0, 'linux', ?, ?) "
                          "RETURNING id", (block, state, pid, start))
        return int(cur.fetchone()[0])


def state_of(db: Home, job: int) -> tuple[str, str | None]:
    with db.db() as con:
        return tuple(con.execute("SELECT state, message FROM jobs WHERE id = ?", (job,)).fetchone())  # type: ignore[return-value]


def test_jobs_of_vanished_runs_are_ended_and_live_ones_kept(home: Home) -> None:
    home.ok("init", "--shape", "2x2x2")
    home.ok("block", "create", "A", "--shape", "2x2x2")
    db = home
    me = os.getpid()
    live = add_job(db, "A", me, procs.start_time(me))
    recycled = add_job(db, "A", me, (procs.start_time(me) or 0) + 1)     # same pid, another process
    gone = add_job(db, "A", 2**22 + 1, 5)                               # above pid_max: no such process
    out = home.ok("jobs").out
    assert state_of(db, live) == ("Running", None)
    for job in (recycled, gone):
        state, message = state_of(db, job)
        assert state == "Error" and message and "ended without finishing it" in message, (state, message)
    assert "ended without finishing it" in out          # `lattice jobs` shows the reason
    assert "its lattice run (pid 4194305) ended" in home.ok("ras").out


def test_run_on_a_block_with_an_active_job_is_refused_before_any_io_node(home: Home) -> None:
    home.ok("init", "--shape", "2x2x2")
    home.ok("block", "create", "A", "--shape", "2x2x2")
    db = home
    with db.db() as con:        # looks booted; no daemon runs, and none is needed to refuse
        con.execute("UPDATE blocks SET state = 'Initialized' WHERE name = 'A'")
    me = os.getpid()
    busy = add_job(db, "A", me, procs.start_time(me))
    r = home.call("run", "--block", "A", "--kernel", "linux", "-n", "1", "/bin/true")
    assert_clean_error(r, f"block A is busy: job {busy} (u: /bin/x)", "--wait", status=1)
    assert len(r.err.strip().splitlines()) == 1, r.err
    with db.db() as con:
        assert con.execute("SELECT count(*) FROM jobs").fetchone()[0] == 1, "the refused run left no record"


def test_start_times_name_their_host() -> None:
    """procs: a start time carries a tag of the host that took it; an
    untagged one (recorded before tags) is this host's, compared by ticks."""
    me = os.getpid()
    now = procs.start_time(me)
    assert now is not None and procs.here(now) and procs.same(now, now)
    other = (procs.host_tag() % 0x7FFFFF + 1) << procs.TAG_SHIFT        # never this host's tag, never 0
    ticks = now & procs.TICKS
    assert procs.same(now, ticks) and procs.here(ticks)                 # recorded before tags
    assert not procs.here(ticks | other) and not procs.same(now, ticks | other)
    assert not procs.same(now, now + 1) and not procs.same(None, now)


def test_a_sweep_leaves_another_hosts_records_alone(home: Home) -> None:
    """A job whose `lattice run` another login host recorded is not this
    host's to judge (its pid means nothing here); this host's own vanished
    runs, tagged or recorded before tags, are ended."""
    home.ok("init", "--shape", "2x2x2")
    home.ok("block", "create", "A", "--shape", "2x2x2")
    other = (procs.host_tag() % 0x7FFFFF + 1) << procs.TAG_SHIFT
    theirs = add_job(home, "A", 2**22 + 1, 5 | other)          # no such pid here: on its own host it may run
    mine = add_job(home, "A", 2**22 + 1, 5 | procs.host_tag() << procs.TAG_SHIFT)
    old = add_job(home, "A", 2**22 + 1, 5)
    home.ok("jobs")
    assert state_of(home, theirs) == ("Running", None)
    assert state_of(home, mine)[0] == "Error" and state_of(home, old)[0] == "Error"
