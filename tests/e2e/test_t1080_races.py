"""Races a site with several users hits, on both database backends:
concurrent `lattice run`s without --block each get a place of their own (a
booted idle block, or a new box) while there is room, never "overlaps
block auto-..." nor "busy" (lattice.jobs.launch.reserve chooses and records
in one transaction); a run that finds no room says so in one line."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from conftest import EXAMPLES, Machine, make_machine, wait_for
from test_t0930_postgres import LOGIN_HOST, check_reports

RUNS = 6            # two idle booted blocks and room for four new boxes of 1x1x2


@pytest.fixture(params=["sqlite", "postgresql"])
def crowded(request: pytest.FixtureRequest, built: Path, tmp_path: Path) -> Iterator[Machine]:
    """A 1x1x12 machine in psets of 2 with blocks I0 and I1 (1x1x2) booted:
    room for RUNS jobs of 2 compute nodes at once; on each backend."""
    database = () if request.param == "sqlite" else ("--database", request.getfixturevalue("pg_url"))
    m = make_machine(tmp_path, "--shape", "1x1x12", "--pset-size", "2", "--memory", "64M", *database)
    try:
        for b, z in (("I0", 0), ("I1", 2)):
            m.run("block", "create", b, "--shape", "1x1x2", "--corner", f"0,0,{z}")
            m.run("boot", b)
        yield m
    finally:
        m.run("free", "--all", "--force", check=False)
        wait_for(lambda: not m.processes("ciod") and not m.processes("cnode") and not m.processes("sleeper"), 300)
        shutil.rmtree(m.work, ignore_errors=True)


def test_concurrent_runs_without_block_each_get_a_place(crowded: Machine) -> None:
    m = crowded
    for _ in range(2):          # two rounds: more chances for the runs to meet
        runs = [m.popen("run", "-n", "2", str(EXAMPLES / "sleeper"), "3") for _ in range(RUNS)]
        results = [r.communicate(timeout=900) for r in runs]       # a hang guard
        for r, (out, err) in zip(runs, results):
            assert r.returncode == 0, err
            assert sorted(re.findall(r"rank (\d): sleeping", out)) == ["0", "1"], (out, err)
            assert "overlaps" not in err and "busy" not in err, err
    with m.db() as con:
        jobs = con.execute("SELECT id, state, status, block FROM jobs ORDER BY id").fetchall()
        assert len(jobs) == 2 * RUNS, [tuple(j) for j in jobs]
        assert all((j["state"], j["status"]) == ("Terminated", 0) for j in jobs), [tuple(j) for j in jobs]
        left = {r["name"]: r["state"] for r in con.execute("SELECT name, state FROM blocks")}
    assert left == {"I0": "Initialized", "I1": "Initialized"}, left       # every new box freed and gone



def test_a_run_that_finds_no_room_is_told_or_waits_with_wait(crowded: Machine) -> None:
    """With every place held, a run is refused in the one "no free block"
    line; with --wait it waits, Queued with why (as for a busy --block),
    and runs as soon as a job's end leaves it a place."""
    m = crowded
    holders = [m.popen("run", "-n", "2", str(EXAMPLES / "sleeper"), "600") for _ in range(RUNS)]
    try:
        for h in holders:
            assert h.stdout is not None and "sleeping" in h.stdout.readline()
        p = m.run("run", "-n", "2", str(EXAMPLES / "hello"), check=False)
        assert (p.returncode, p.stderr) == (1, "lattice: error: no free block of whole psets holds 2 compute nodes "
                                               "(see `lattice blocks`)\n")
        waiter = m.popen("run", "--wait", "-n", "2", str(EXAMPLES / "hello"))
        assert waiter.stderr is not None
        said = re.fullmatch(r"lattice: job (\d+) queued: waiting for 2 free compute nodes; waiting \(--wait\)\n",
                            waiter.stderr.readline())
        assert said, "the waiting run says so, with its job's id"
        job = int(said.group(1))
        listing = m.run("jobs", "--running").stdout
        assert re.search(rf"^\s*{job}\s.* Queued ", listing, re.M), listing
        assert "# waiting for 2 free compute nodes" in listing, listing
        # a second waiter, cancelled: its wait ends in one line
        other = m.popen("run", "--wait", "-n", "2", str(EXAMPLES / "hello"))
        assert other.stderr is not None
        said = re.match(r"lattice: job (\d+) queued", other.stderr.readline())
        assert said
        assert "(it was queued" in m.run("cancel", said.group(1)).stdout
        _, err = other.communicate(timeout=900)
        assert other.returncode == 1 and err.startswith(f"lattice: error: job {said.group(1)} was cancelled while it "
                                                        f"waited: cancelled by `lattice cancel`"), err
        with m.db() as con:
            first = con.execute("SELECT id FROM jobs WHERE state = 'Running' ORDER BY id").fetchone()["id"]
        m.run("cancel", str(first))
        out, err = waiter.communicate(timeout=900)
        assert waiter.returncode == 0, err
        assert sorted(re.findall(r"hello from rank (\d)", out)) == ["0", "1"], out
        with m.db() as con:
            row = con.execute("SELECT state, status, block FROM jobs WHERE id = ?", (job,)).fetchone()
        assert (row["state"], row["status"]) == ("Terminated", 0) and row["block"], tuple(row)
    finally:
        with m.db() as con:
            left = [str(r["id"]) for r in con.execute("SELECT id FROM jobs WHERE state = 'Running'")]
        if left:
            m.run("cancel", *left, check=False)
        for h in holders:
            h.communicate(timeout=900)


def test_two_groups_of_commands_start_and_cancel_at_once_on_sqlite(built: Path, tmp_path: Path) -> None:
    """t0930's two login hosts, on SQLite (two process groups of one host):
    runs waiting on shared blocks, runs without --block, submitted jobs and
    cancels of every running job, at once; no race between them is an error
    (check_reports), every job ends, no block is left but P0 and P1."""
    m = make_machine(tmp_path, "--shape", "1x1x8", "--pset-size", "2", "--memory", "64M", "--database", "sqlite")
    try:
        for b, z in (("P0", 0), ("P1", 2)):
            m.run("block", "create", b, "--shape", "1x1x2", "--corner", f"0,0,{z}")
            m.run("boot", b)
        script = tmp_path / "login_host.py"
        script.write_text(LOGIN_HOST)
        hosts = [subprocess.Popen([sys.executable, str(script), str(EXAMPLES / "sleeper")], env=m.env, cwd=m.work,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                  stdin=subprocess.DEVNULL, start_new_session=True) for _ in (1, 2)]
        reports = [h.communicate(timeout=900)[0] for h in hosts]        # a hang guard
        check_reports(hosts, reports)
        with m.db() as con:
            states = [r["state"] for r in con.execute("SELECT state FROM jobs")]
            assert len(states) >= 8 and set(states) <= {"Terminated", "Error"}, states
            # jobs that ran at the same time ran on different blocks
            ran = con.execute("SELECT id, started, ended, block FROM jobs WHERE started IS NOT NULL").fetchall()
            for a in ran:
                for b in ran:
                    if a["id"] < b["id"] and a["started"] < b["ended"] and b["started"] < a["ended"]:
                        assert a["block"] != b["block"], (tuple(a), tuple(b))
            left = {r["name"]: r["state"] for r in con.execute("SELECT name, state FROM blocks")}
        assert left == {"P0": "Initialized", "P1": "Initialized"}, left
    finally:
        m.run("free", "--all", "--force", check=False)
        wait_for(lambda: not m.processes("ciod") and not m.processes("cnode") and not m.processes("sleeper"), 300)
        shutil.rmtree(m.work, ignore_errors=True)
