"""The queue (lattice.jobs.queue): submitted jobs start first come first
served with backfill on block size, wait with a reason, leave the queue on
cancel, and survive the processes that queued them; `lattice run` without
--block takes a booted idle block; -D finds a relative program in DIR.
Checked on a machine's database without booting anything: the runners are
replaced by a record of what would have been started."""
from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Iterator
from unittest import mock

import pytest

from lattice.errors import LatticeError
from lattice.jobs import queue
from lattice.jobs.request import RunRequest, resolve_exe
from lattice.state import db, machine, reclaim

from cli_inprocess import home, lattice


@pytest.fixture(params=["sqlite", "postgresql"])
def m2(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """A 2x2x2 machine in psets of 4 (two psets), nothing booted; its
    database on each backend in turn."""
    database = "sqlite" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    with home(tmp_path / "m"):
        assert lattice("init", "--shape", "2x2x2", "--pset-size", "4", "--memory", "256M",
                       "--database", database)[0] == 0
        yield tmp_path / "m"


@pytest.fixture
def spawned() -> Iterator[list[int]]:
    """Runners are not started: the jobs they would run are listed."""
    seen: list[int] = []
    with mock.patch("lattice.jobs.queue.spawn", lambda con, job: seen.append(job)):
        yield seen


def con_of() -> sqlite3.Connection:
    return reclaim.connect()


def block(con: sqlite3.Connection, name: str, shape: str, corner: str, state: str = "Free") -> None:
    assert lattice("block", "create", name, "--shape", shape, "--corner", corner)[0] == 0
    con.execute("UPDATE blocks SET state = ? WHERE name = ?", (state, name))


def running_on(con: sqlite3.Connection, name: str) -> int:
    """A job that holds block name, run by this test's process (alive: the sweep keeps it)."""
    from lattice import procs
    pid, start = procs.me()
    cur = con.execute("INSERT INTO jobs (block, user, uid, exe, args, cwd, nranks, state, submitted, client_pid, "
                      "client_start) VALUES (?, 'u', 0, '/bin/x', '/bin/x', '/', 1, 'Running', 0, ?, ?) RETURNING id",
                      (name, pid, start))
    return int(cur.fetchone()[0])


def submit(*args: str) -> int:
    status, out, err = lattice("submit", *args)
    assert status == 0, err
    return int(out.strip())


def rows(con: sqlite3.Connection) -> dict[int, sqlite3.Row]:
    return {r["id"]: r for r in con.execute("SELECT * FROM jobs ORDER BY id")}


def test_first_come_first_served_with_reasons(m2: Path, spawned: list[int]) -> None:
    con = con_of()
    block(con, "R00", "2x2x2", "0,0,0", "Initialized")
    a, b, c = (submit("-N", "8", "/bin/true") for _ in range(3))
    assert spawned == [a], "the first job takes the idle booted block, the others wait"
    r = rows(con)
    assert r[a]["state"] == "Starting" and r[a]["block"] == "R00"
    assert r[b]["state"] == "Queued" and r[b]["reason"] == f"waiting for block R00 (job {a} runs there)"
    assert r[c]["state"] == "Queued" and r[c]["reason"] == f"behind job {b} (waiting for block R00)"
    out = lattice("jobs", "--running")[1]
    assert f"# waiting for block R00 (job {a} runs there)" in out and f"# behind job {b}" in out, out
    # the first ends: the second, not the third, takes the block
    con.execute("UPDATE jobs SET state = 'Terminated', status = 0, ended = 1 WHERE id = ?", (a,))
    assert queue.dispatch(con, machine.load()) == [b]
    assert rows(con)[c]["reason"] == f"waiting for block R00 (job {b} runs there)"


def test_backfill_on_block_size(m2: Path, spawned: list[int]) -> None:
    con = con_of()
    block(con, "A", "2x2x1", "0,0,0", "Initialized")
    block(con, "B", "2x2x1", "0,0,1", "Initialized")
    held = running_on(con, "A")
    big = submit("-N", "8", "/bin/true")         # no block of 8 nodes can be made: A and B take the machine
    small = submit("-N", "4", "/bin/true")       # B is idle, and the big job cannot use it
    third = submit("-N", "4", "/bin/true")
    r = rows(con)
    assert spawned == [small] and r[small]["block"] == "B"
    assert r[big]["reason"] == "waiting for 8 free compute nodes", r[big]["reason"]
    assert r[third]["reason"] == f"waiting for block A (job {held} runs there)", r[third]["reason"]


def test_new_boxes_are_kept_for_a_job_waiting_for_nodes(m2: Path, spawned: list[int]) -> None:
    con = con_of()
    block(con, "A", "2x2x1", "0,0,0", "Initialized")
    held = running_on(con, "A")
    big = submit("-N", "8", "/bin/true")
    small = submit("-N", "4", "/bin/true")       # a new box would fit, but the nodes are the big job's
    r = rows(con)
    assert spawned == [] and r[small]["reason"] == f"waiting for block A (job {held} runs there)"
    con.execute("UPDATE jobs SET state = 'Terminated', ended = 1 WHERE block = 'A'")
    con.execute("UPDATE blocks SET state = 'Free' WHERE name = 'A'")
    con.execute("DELETE FROM blocks WHERE name = 'A'")
    assert queue.dispatch(con, machine.load()) == [big]
    r = rows(con)
    assert r[big]["block"] == f"auto-q{big}", "a new box, made for it in the same transaction"
    assert con.execute("SELECT auto, state FROM blocks WHERE name = ?", (f"auto-q{big}",)).fetchone()[:] == (1, "Free")


def test_block_option_is_honoured(m2: Path, spawned: list[int]) -> None:
    con = con_of()
    block(con, "A", "2x2x1", "0,0,0", "Initialized")
    block(con, "B", "2x2x1", "0,0,1")
    a = submit("--block", "B", "-n", "1", "/bin/true")      # B is Free: its runner boots it
    r = rows(con)
    assert spawned == [a] and r[a]["block"] == "B" and r[a]["need_block"] == "B"
    b = submit("--block", "B", "-n", "1", "/bin/true")
    assert rows(con)[b]["reason"] == f"waiting for block B (job {a} runs there)"
    assert "(B)" in next(l for l in lattice("jobs")[1].splitlines() if l.split()[:1] == [str(b)])


def test_cancel_of_a_queued_job(m2: Path, spawned: list[int]) -> None:
    con = con_of()
    block(con, "R00", "2x2x2", "0,0,0", "Initialized")
    a, b, c = (submit("-N", "8", "/bin/true") for _ in range(3))
    status, out, err = lattice("cancel", str(b))
    assert status == 0, err
    assert f"job {b} cancelled (it was queued" in out
    r = rows(con)
    assert r[b]["state"] == "Terminated" and r[b]["status"] is None and "cancelled by `lattice cancel`" in \
        r[b]["message"] and "while queued" in r[b]["message"]
    assert r[c]["reason"] == f"waiting for block R00 (job {a} runs there)", "the next moved up"
    assert str(b) not in [l.split()[0] for l in lattice("jobs", "--running")[1].splitlines()[1:]]
    status, _, err = lattice("cancel", "-s", "USR1", str(c))
    assert status == 1 and err.startswith(f"lattice: error: job {c} has not started (Queued)"), err


def test_the_queue_survives_its_dispatcher(m2: Path, spawned: list[int]) -> None:
    """Nothing of the queue lives in a process: a runner that died (host
    restarted) is ended by the sweep with a message, the queued jobs stay,
    and the next command's dispatch starts the next one."""
    con = con_of()
    block(con, "R00", "2x2x2", "0,0,0", "Initialized")
    a, b = submit("-N", "8", "/bin/true"), submit("-N", "8", "/bin/true")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    con.execute("UPDATE jobs SET client_pid = ?, client_start = 1 WHERE id = ?", (int(dead), a))
    con.close()
    spawned.clear()
    out = lattice("jobs")[1]          # a new process's view: sweep, then dispatch
    con = con_of()
    r = rows(con)
    assert r[a]["state"] == "Error" and "its runner (lattice submit's)" in r[a]["message"], r[a]["message"]
    assert spawned == [b] and r[b]["state"] == "Starting", (spawned, out)


def test_submit_checks_as_run_does_and_says_one_line(m2: Path, spawned: list[int]) -> None:
    con = con_of()
    block(con, "B", "2x2x1", "0,0,0")
    for args, words in ((["-n", "0", "/bin/true"], "-n must be at least 1"),
                        (["/no/such/program"], "no such file"),
                        (["-n", "9", "--mode", "co", "/bin/true"], "do not fit in the 8 compute nodes"),
                        (["--print-map", "/bin/true"], "--print-map queues nothing"),
                        (["--block", "B", "-n", "9", "/bin/true"], "do not fit in block B")):
        status, out, err = lattice("submit", *args)
        assert status == 1 and out == "" and err.startswith(f"lattice: error: ") and words in err, (args, err)
        assert "Traceback" not in err
    assert con_of().execute("SELECT count(*) FROM jobs").fetchone()[0] == 0


def test_submit_records_the_request(m2: Path, spawned: list[int], tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with mock.patch.dict(os.environ, {"MY_SETTING": "42"}):
        job = submit("-n", "2", "-D", str(tmp_path), "/bin/echo", "hi")
    row = rows(con_of())[job]
    req = RunRequest.from_json(row["request"])
    assert req.output == "lattice-%j.out" and req.workdir == str(tmp_path) and req.environ["MY_SETTING"] == "42"
    assert (req.exe, req.args, req.n) == ("/bin/echo", ["hi"], 2)
    assert row["uid"] == os.getuid() and row["gid"] == os.getgid() and row["nranks"] == 2


def test_run_without_block_takes_the_booted_idle_block(m2: Path) -> None:
    con = con_of()
    block(con, "R00", "2x2x2", "0,0,0", "Initialized")
    status, out, err = lattice("run", "-n", "4", "--print-map", "/bin/true")
    assert status == 0 and out.startswith("# block R00: 2x2x2"), (out, err)
    running_on(con, "R00")                  # busy: a new block is made for the run instead... but none fits
    status, _, err = lattice("run", "-n", "4", "--print-map", "/bin/true")
    assert status == 1 and "no free block of whole psets holds 4" in err


def test_chdir_finds_a_relative_program_in_dir(tmp_path: Path) -> None:
    (tmp_path / "d" / "bin").mkdir(parents=True)
    (tmp_path / "d" / "bin" / "prog").write_text("")
    (tmp_path / "c" / "bin").mkdir(parents=True)
    (tmp_path / "c" / "bin" / "other").write_text("")
    assert resolve_exe("bin/prog", str(tmp_path / "d"), str(tmp_path / "c")) == str(tmp_path / "d" / "bin" / "prog")
    # not in DIR: the caller's directory, where the same words found it before -D was given
    assert resolve_exe("bin/other", str(tmp_path / "d"), str(tmp_path / "c")) == str(tmp_path / "c" / "bin" / "other")
    with pytest.raises(LatticeError, match=r"no such file in .*/d \(-D\) or .*/c"):
        resolve_exe("bin/none", str(tmp_path / "d"), str(tmp_path / "c"))


def test_migration_adds_the_queue_columns(tmp_path: Path) -> None:
    con = db.connect(tmp_path / "x.db")
    cols = {r[1] for r in con.execute("PRAGMA table_info(jobs)")}
    assert {"request", "reason", "need_nodes", "need_block", "gid", "group_ids"} <= cols


def test_a_waiting_run_is_queued_with_its_reason_and_can_be_cancelled(m2: Path, tmp_path: Path,
                                                                      spawned: list[int]) -> None:
    """`lattice run --wait` on a busy block: its record is Queued with why
    (in `lattice jobs --running`), its waiting line names the job, and
    `lattice cancel` ends the wait (the run exits 1 saying so)."""
    con = con_of()
    block(con, "A", "2x2x2", "0,0,0", "Initialized")     # looks booted: nothing is sent while it is busy
    held = running_on(con, "A")
    con.close()
    env = {**os.environ, "LATTICE_HOME": str(m2), "LATTICE_WARM": "0",
           "PYTHONPATH": str(Path(queue.__file__).parents[2])}
    run = subprocess.Popen([sys.executable, "-m", "lattice", "run", "--block", "A", "--wait", "--kernel", "linux",
                            "-n", "1", "/bin/true"], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    try:
        assert run.stderr is not None
        line = run.stderr.readline()        # said when it starts waiting: its record is there by then
        con = con_of()
        row = con.execute("SELECT * FROM jobs WHERE id != ?", (held,)).fetchone()
        assert line.startswith(f"lattice: job {row['id']} queued: block A is busy: job {held}"), line
        assert row["state"] == "Queued" and row["block"] is None and row["reason"].startswith("block A is busy")
        listing = lattice("jobs", "--running")[1]
        assert f"# block A is busy: job {held}" in listing and " Queued " in listing, listing
        later = submit("--block", "A", "-n", "1", "/bin/true")      # first come: the waiting run keeps A
        assert rows(con)[later]["reason"] == f"behind job {row['id']} (waiting for block A)"
        status, out, err = lattice("cancel", str(row["id"]))
        assert status == 0 and f"job {row['id']} cancelled (it was queued" in out, err
        _, rest = run.communicate(timeout=120)
        assert run.returncode == 1 and f"lattice: error: job {row['id']} was cancelled before it started" in rest, rest
        assert con.execute("SELECT state FROM jobs WHERE id = ?", (row["id"],)).fetchone()[0] == "Terminated"
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()


def test_a_request_runs_in_its_own_directory_not_the_runners(m2: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A queued job starts in a runner whose working directory is not the
    submitter's: its relative program, -D, --tree and -o are the request's."""
    from lattice.jobs import job, launch, trees
    (tmp_path / "data").mkdir()
    (tmp_path / "work").mkdir()
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "prog").write_text("")
    assert lattice("block", "create", "B", "--shape", "2x2x2")[0] == 0
    seen: dict[str, job.Spec] = {}

    def fake_run(con: object, m: object, b: object, spec: job.Spec, wait: bool = False) -> int:
        seen["spec"] = spec
        return 0
    req = RunRequest(exe="bin/prog", block="B", n=1, kernel="linux", tree=["data"], cwd="work", output="o-%j",
                     workdir=str(tmp_path), environ={"PATH": "/usr/bin"})
    monkeypatch.chdir("/")
    from lattice.state import blocks
    with mock.patch("lattice.nodes.boot.boot", lambda con, m, name, owner=None: blocks.get(con, name)), \
            mock.patch("lattice.nodes.boot.free"), mock.patch("lattice.jobs.job.run", fake_run), \
            mock.patch("lattice.jobs.launch.need_kernel"):
        assert launch.run(req) == 0
    spec = seen["spec"]
    assert spec.exe == str(tmp_path / "bin" / "prog") and spec.cwd == str(tmp_path / "work")
    assert str(tmp_path / "data") in dict(spec.mapping.env)[trees.VAR].split(":")
    assert spec.output is not None and spec.output.cwd == str(tmp_path)


def test_a_dispatcher_starts_only_the_jobs_it_may(m2: Path, spawned: list[int]) -> None:
    """A dispatcher that is not root leaves other users' jobs queued, says
    why, keeps their place, and makes no block for them."""
    with mock.patch.object(queue, "may_start", lambda row: False):
        job = submit("--user", "nobody", "-N", "8", "/bin/true")
        con = con_of()
        assert spawned == [] and rows(con)[job]["reason"].startswith("ready: nobody's jobs are started by nobody's")
        assert con.execute("SELECT count(*) FROM blocks").fetchone()[0] == 0, "no box made for a job not started"
    assert queue.dispatch(con) == [job], "root's next dispatch starts it"
