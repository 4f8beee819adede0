"""A machine whose state is in PostgreSQL (`lattice init --database URL`)
against a real server (tests/pgserver.py): boot, run, cancel, ras, free,
the failure sweeps, and two "login hosts" (process groups of their own)
starting and cancelling jobs at once with the states consistent after."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Iterator

import psycopg
import pytest

import pgserver
from conftest import EXAMPLES, LATTICE, Machine, make_machine, wait_for

SHAPE = ("--shape", "1x1x4", "--pset-size", "2", "--memory", "256M")


def pg(url: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(url, autocommit=True)


@pytest.fixture(scope="module")
def pm(built: Path, pg_server: pgserver.Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    """A 1x1x4 machine (two psets of 2) whose database is PostgreSQL; its url in env."""
    url = pg_server.create_database()
    m = make_machine(tmp_path_factory.mktemp("pg"), *SHAPE, "--database", url)
    m.env["TEST_PG_URL"] = url
    yield m
    for b in ("P", "Q"):
        m.run("free", b, check=False)
    shutil.rmtree(m.work, ignore_errors=True)


def url_of(m: Machine) -> str:
    return m.env["TEST_PG_URL"]


def test_boot_run_ras_free_keep_their_records_in_postgresql(pm: Machine) -> None:
    m = pm
    assert not (m.home / "lattice.db").exists(), "no SQLite file beside a PostgreSQL machine"
    m.run("block", "create", "P", "--shape", "1x1x2")
    m.run("boot", "P")
    p = m.run("run", "--block", "P", "-n", "2", "--label", str(EXAMPLES / "hello"))
    assert sorted(re.findall(r"^(\d): hello", p.stdout, re.M)) == ["0", "1"]
    with pg(url_of(m)) as con:
        job, user, state, status = con.execute('SELECT id, "user", state, status FROM jobs ORDER BY id DESC').fetchone()
        assert (state, status) == ("Terminated", 0)
        assert user == os.environ.get("USER", user) and user != pgserver.SUPERUSER     # the job's owner, not the role
        assert con.execute("SELECT count(*) FROM ranks WHERE job = %s AND how = 'exit'", (job,)).fetchone()[0] == 2
        assert con.execute("SELECT state FROM blocks WHERE name = 'P'").fetchone()[0] == "Initialized"
        assert con.execute("SELECT count(*) FROM daemons WHERE block = 'P'").fetchone()[0] == 3   # 1 ciod, 2 cnodes
    jobs = m.run("jobs", "--ranks", str(job)).stdout
    assert "R00-M0-N00-C:J00" in jobs and "exit" in jobs
    assert "block P initialized" in m.run("ras").stdout
    m.run("free", "P")
    assert re.search(r"^P\s+Free\b", m.run("blocks").stdout, re.M)
    assert "block P freed" in m.run("ras").stdout
    with pg(url_of(m)) as con:
        assert con.execute("SELECT count(*) FROM daemons").fetchone()[0] == 0
    assert not m.processes("ciod", "P") and not m.processes("cnode", "P")


def test_cancel_on_postgresql(pm: Machine) -> None:
    m = pm
    m.run("boot", "P")
    run = m.popen("run", "--block", "P", "-n", "2", str(EXAMPLES / "sleeper"), "600")
    assert run.stdout is not None and "sleeping" in run.stdout.readline()
    job = int(m.run("jobs", "--running").stdout.splitlines()[1].split()[0])
    assert m.run("cancel", str(job)).stdout.strip() == f"lattice: job {job} cancelled (SIGTERM)"
    _, err = run.communicate(timeout=600)           # a hang guard
    assert run.returncode == 128 + 15, err
    with pg(url_of(m)) as con:
        state, message = con.execute("SELECT state, message FROM jobs WHERE id = %s", (job,)).fetchone()
    assert state == "Terminated" and "cancelled by `lattice cancel`" in message
    assert "hello" in m.run("run", "--block", "P", "-n", "1", str(EXAMPLES / "hello")).stdout
    m.run("free", "P")


def test_killing_ciod_errors_the_block_and_free_recovers(pm: Machine) -> None:
    m = pm
    m.run("boot", "P")
    run = m.popen("run", "--block", "P", "-n", "2", str(EXAMPLES / "sleeper"), "600")
    assert run.stdout is not None and "sleeping" in run.stdout.readline()
    os.kill(m.processes("ciod", "P")[0], signal.SIGKILL)
    _, err = run.communicate(timeout=600)
    assert run.returncode != 0 and re.search(r"I/O node.*(lost|died)|(lost|died).*I/O node", err, re.I), err
    assert re.search(r"^P\s+Error\b", m.run("blocks").stdout, re.M)
    assert re.search(r"FATAL", m.run("ras").stdout)
    wait_for(lambda: not m.processes("sleeper", "P"))
    m.run("free", "P")
    assert not m.processes("ciod", "P") and not m.processes("cnode", "P")
    m.run("boot", "P")
    assert "hello" in m.run("run", "--block", "P", "-n", "2", str(EXAMPLES / "hello")).stdout
    m.run("free", "P")


def test_a_killed_run_is_swept_by_the_next_command(pm: Machine) -> None:
    """`lattice run` SIGKILLed after booting a block for itself: the next
    command ends its job and frees the block (lattice.state.reclaim)."""
    m = pm
    run = m.popen("run", "-n", "2", str(EXAMPLES / "sleeper"), "600")
    assert run.stdout is not None and "sleeping" in run.stdout.readline()
    run.kill()
    run.wait()
    out = m.run("jobs").stdout
    last = out.splitlines()[-1]
    assert " Error " in last and "ended without finishing it" in out, out
    wait_for(lambda: not m.processes("sleeper") and not m.processes("cnode") and not m.processes("ciod"))
    with pg(url_of(m)) as con:
        assert con.execute("SELECT count(*) FROM blocks WHERE state != 'Free'").fetchone()[0] == 0
        assert con.execute("SELECT count(*) FROM daemons").fetchone()[0] == 0


def test_a_login_host_sweeps_only_what_it_started(pm: Machine) -> None:
    """A run on login1 SIGKILLed after booting a block for itself: login2's
    commands leave its job and block alone (a pid that login1 recorded says
    nothing on login2, docs/cli.md "Sharing a machine between login
    hosts"); login1's next command ends the job and frees the block."""
    if os.geteuid() != 0:
        pytest.skip("the login hosts are namespaces: root makes them")
    m = pm

    def on(host: str, *args: str) -> str:
        p = subprocess.run([*login_host(host), *LATTICE, *args], env=m.env, capture_output=True, text=True,
                           timeout=600, stdin=subprocess.DEVNULL)
        assert p.returncode == 0, p.stderr
        return p.stdout
    run = subprocess.Popen([*login_host("login1"), *LATTICE, "run", "-n", "2", str(EXAMPLES / "sleeper"), "600"],
                           env=m.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           stdin=subprocess.DEVNULL)
    assert run.stdout is not None and "sleeping" in run.stdout.readline()
    run.kill()
    run.wait()
    on("login2", "jobs")
    on("login2", "blocks")
    with pg(url_of(m)) as con:
        job, state = con.execute("SELECT id, state FROM jobs ORDER BY id DESC").fetchone()
        assert state == "Running", "login2 took login1's run for vanished"
        # the block it booted for itself (P, a Free block that fits, or a new one) stays booted
        assert con.execute("SELECT b.state FROM blocks b JOIN jobs j ON j.block = b.name WHERE j.id = %s",
                           (job,)).fetchone()[0] == "Initialized"
    out = on("login1", "jobs")
    assert re.search(rf"^\s*{job}\b.* Error ", out, re.M) and "ended without finishing it" in out, out
    wait_for(lambda: not m.processes("sleeper") and not m.processes("cnode") and not m.processes("ciod"))
    with pg(url_of(m)) as con:
        assert con.execute("SELECT count(*) FROM blocks WHERE state != 'Free'").fetchone()[0] == 0


# ---- two login hosts at once ----

LOGIN_HOST = textwrap.dedent("""
    # One "login host": a run on each of the shared blocks P0 and P1 (waiting
    # while the block is busy), one run without --block, and two submitted
    # jobs; it cancels every running job it sees (the other host's too) until
    # its own runs and jobs have ended.  Prints what each of its commands ended with.
    import re, subprocess, sys, time
    sleeper = sys.argv[1]
    lattice = [sys.executable, "-m", "lattice"]
    def start(*args):
        return subprocess.Popen([*lattice, "run", *args, "-n", "2", sleeper, "600"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)
    def active():
        out = subprocess.run([*lattice, "jobs", "--running"], capture_output=True, text=True).stdout
        return {int(l.split()[0]): re.search(r" (Queued|Starting|Running|Dying) ", l).group(1)
                for l in out.splitlines()[1:] if l.strip()}
    runs = [start("--block", "P0", "--wait"), start("--block", "P1", "--wait"), start()]
    mine = [int(subprocess.run([*lattice, "submit", "-n", "2", sleeper, "600"], capture_output=True, text=True,
                               check=True).stdout) for _ in range(2)]
    print("submitted", *mine, flush=True)
    while True:
        now = active()
        if all(r.poll() is not None for r in runs) and not set(mine) & set(now):
            break
        for job, state in now.items():
            if state == "Running":
                c = subprocess.run([*lattice, "cancel", str(job)], capture_output=True, text=True)
                print("cancel", job, c.returncode, c.stderr.strip(), flush=True)
        time.sleep(0.05)
    for r in runs:
        print("run", r.returncode, r.communicate()[1].strip().replace(chr(10), " | "), flush=True)
""")


def login_host(name: str) -> list[str]:
    """The prefix that makes a command a login host of its own: as root, a
    network and UTS namespace (its own hostname and loopback, as the
    testbed's hosts have; they end with it); else just its own process group."""
    if os.geteuid() != 0:
        return []
    return ["unshare", "--net", "--uts", "sh", "-c", 'hostname "$0" && ip link set lo up && exec "$@"', name]


@pytest.fixture
def shared(built: Path, pg_server: pgserver.Server, tmp_path: Path) -> Iterator[Machine]:
    """A 1x1x8 machine in psets of 2 on PostgreSQL with blocks P0 and P1
    booted; every block freed afterwards, whatever the test left."""
    url = pg_server.create_database()
    m = make_machine(tmp_path, "--shape", "1x1x8", "--pset-size", "2", "--memory", "256M", "--database", url)
    m.env["TEST_PG_URL"] = url
    try:
        for b, z in (("P0", 0), ("P1", 2)):
            m.run("block", "create", b, "--shape", "1x1x2", "--corner", f"0,0,{z}")
            m.run("boot", b)
        yield m
    finally:
        m.run("free", "--all", "--force", check=False)
        shutil.rmtree(m.work, ignore_errors=True)


def test_two_login_hosts_start_and_cancel_jobs_at_once(shared: Machine) -> None:
    """Two process groups (login hosts sharing LATTICE_HOME and the database)
    each start runs on two shared booted blocks and one without --block,
    submit two jobs, and cancel every running job they see, at once.  After: every job
    ended, none in two states, no block double-booked, nothing left running."""
    m = shared
    url = url_of(m)
    hostnames = {subprocess.run([*login_host(f"login{i}"), "hostname"], capture_output=True, text=True,
                                check=True).stdout.strip() for i in (1, 2)}
    assert os.geteuid() != 0 or hostnames == {"login1", "login2"}
    script = m.home.parent / "login_host.py"
    script.write_text(LOGIN_HOST)
    hosts = [subprocess.Popen([*login_host(f"login{i}"), sys.executable, str(script), str(EXAMPLES / "sleeper")], env=m.env, cwd=m.work, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL, start_new_session=True)
             for i in (1, 2)]
    reports = [h.communicate(timeout=900)[0] for h in hosts]        # a hang guard
    check_reports(hosts, reports)
    # the machine serves the next job, on an idle block (a sweep first, as any command does)
    assert "hello from rank 0" in m.run("run", "-n", "1", str(EXAMPLES / "hello")).stdout
    with pg(url) as con:
        states = con.execute("SELECT id, state FROM jobs ORDER BY id").fetchall()
        assert len(states) >= 9 and len({j for j, _ in states}) == len(states)
        assert all(s in ("Terminated", "Error") for _, s in states), states
        # no block double-booked: jobs that ran at the same time ran on different blocks and compute nodes
        ran = con.execute("SELECT j.id, j.started, j.ended, j.block, array_agg(r.location) FROM jobs j "
                          "JOIN ranks r ON r.job = j.id WHERE j.started IS NOT NULL GROUP BY j.id").fetchall()
        assert len(ran) >= 9, ran           # 4 runs on P0/P1, 4 submitted, the last hello
        for a in ran:
            for b in ran:
                if a[0] < b[0] and a[1] < b[2] and b[1] < a[2]:
                    assert a[3] != b[3] and not set(a[4]) & set(b[4]), (a, b)
        blocks = dict(con.execute("SELECT name, state FROM blocks").fetchall())
        assert blocks == {"P0": "Initialized", "P1": "Initialized"}, blocks   # every auto block freed and gone
        assert con.execute("SELECT count(*) FROM daemons WHERE block NOT IN ('P0', 'P1')").fetchone()[0] == 0
    for b in ("P0", "P1"):
        m.run("free", b)
    wait_for(lambda: not m.processes("ciod") and not m.processes("cnode") and not m.processes("sleeper"), 300)


def check_reports(hosts: list[subprocess.Popen[str]], reports: list[str]) -> None:
    """What each login host's commands ended with (LOGIN_HOST's report): no
    race between them is an error (tests/e2e/test_t1080_races.py runs it on SQLite)."""
    for h, report in zip(hosts, reports):
        assert h.returncode == 0, report
        assert "Traceback" not in report, report
        runs = re.findall(r"^run (-?\d+) (.*)$", report, re.M)
        assert len(runs) == 3, report
        # the runs on P0 and P1: cancelled (143)
        assert [code for code, _ in runs[:2]] == ["143", "143"], report
        # the one without --block: cancelled, or told in one line that there was no room (the submitted jobs
        # may hold every free place); never a place taken under it ("overlaps", "busy": lattice.jobs.launch.reserve)
        assert runs[2][0] == "143" or (runs[2][0] == "1" and re.fullmatch(
            r"lattice: error: no free block of whole psets holds 2 compute nodes \(see `lattice blocks`\)",
            runs[2][1])), report
        # a cancel racing its job's end or its block's free is no error; one of a job that ended before
        # the cancel read it is refused "not running"
        for job, code, err in re.findall(r"^cancel (\d+) (-?\d+) (.*)$", report, re.M):
            assert code == "0" or (code == "1" and err in (f"lattice: error: job {job} is not running ({s})"
                                                           for s in ("Terminated", "Error"))), report
