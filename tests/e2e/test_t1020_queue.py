"""The queue on a booted machine of two psets (issue 26): `lattice submit`
returns the job id at once; jobs that each need the whole block run one
after another in order, their output in lattice-%j.out; meanwhile `lattice
jobs` shows them Queued with why; a queued job is cancelled; `lattice run`
without --block uses the booted idle block; -D finds a relative program in DIR."""
from __future__ import annotations

import os
import pty
import sqlite3
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from conftest import LATTICE, ROOT, Machine, booted_block, local_users, wait_for


@pytest.fixture(scope="module")
def qm(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    yield from booted_block(tmp_path_factory.mktemp("queue"), "R00", "1x1x4", "--pset-size", "2", "--memory", "256M")


def lattice_in(m: Machine, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([*LATTICE, *args], env=m.env, cwd=cwd, capture_output=True, text=True, timeout=600,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 0, f"lattice {' '.join(args)}: {p.returncode}\n{p.stdout}\n{p.stderr}"
    return p


def job_rows(m: Machine) -> dict[int, sqlite3.Row]:
    con = m.db()            # either backend (LATTICE_TEST_DATABASE)
    try:
        return {r["id"]: r for r in con.execute("SELECT * FROM jobs")}
    finally:
        con.close()


def test_submitted_jobs_run_in_order(qm: Machine) -> None:
    work = qm.work
    gate = work / "go"
    script = "while [ ! -e go ]; do sleep 0.05; done; echo {word} $LATTICE_RANK"
    ids = []
    for word in ("first", "second", "third", "dropped"):
        p = lattice_in(qm, work, "submit", "-N", "4", "--kernel", "linux", "/bin/sh", "-c", script.format(word=word))
        assert p.stdout.strip().isdigit() and p.stderr == "", (p.stdout, p.stderr)
        ids.append(int(p.stdout))
    a, b, c, d = ids

    def state(job: int) -> str:
        return str(job_rows(qm)[job]["state"])
    wait_for(lambda: state(a) == "Running", 300)
    listing = qm.run("jobs", "--running").stdout
    line = {int(l.split()[0]): l for l in listing.splitlines()[1:] if l.split()}
    assert " Queued " in line[b] and f"# waiting for block R00 (job {a} runs there)" in line[b], listing
    assert " Queued " in line[c] and f"# behind job {b} (waiting for block R00)" in line[c], listing
    out = qm.run("cancel", str(d)).stdout
    assert f"job {d} cancelled (it was queued" in out
    assert state(d) == "Terminated"
    gate.touch()
    wait_for(lambda: state(c) not in ("Queued", "Starting", "Running", "Dying"), 600)
    rows = job_rows(qm)
    for job, word in ((a, "first"), (b, "second"), (c, "third")):
        assert rows[job]["state"] == "Terminated" and rows[job]["status"] == 0 and rows[job]["block"] == "R00", \
            dict(rows[job])
        text = (work / f"lattice-{job}.out").read_text()
        assert sorted(text.split("\n")[:-1]) == [f"{word} {r}" for r in range(4)], text
    assert rows[a]["ended"] <= rows[b]["started"] and rows[b]["ended"] <= rows[c]["started"], "one after another"
    assert not (work / f"lattice-{d}.out").exists() and rows[d]["started"] is None


def last_job(m: Machine) -> sqlite3.Row:
    return max(job_rows(m).values(), key=lambda r: r["id"])


def test_run_without_block_uses_the_booted_idle_block(qm: Machine) -> None:
    p = qm.run("run", "-n", "4", "--kernel", "linux", "/bin/true")
    assert p.returncode == 0 and p.stderr == "", "no job id line when stderr is no terminal"
    last = last_job(qm)
    assert last["block"] == "R00" and last["state"] == "Terminated", dict(last)
    # the README's tour: after `lattice boot R00`, a relative program with -D elsewhere runs on R00
    tour = qm.work / "tour"
    tour.mkdir()
    p = lattice_in(qm, ROOT, "run", "-np", "4", "-D", str(tour), "build/examples/fileops")
    assert last_job(qm)["block"] == "R00" and (tour / "rank-3" / "result.txt").exists(), p.stderr
    assert [b.split()[0] for b in qm.run("blocks").stdout.splitlines()[1:]] == ["R00"], "no block made for it"


def test_run_names_its_job_on_a_terminal(qm: Machine) -> None:
    master, slave = pty.openpty()
    try:
        p = subprocess.run([*LATTICE, "run", "-n", "1", "--kernel", "linux", "/bin/true"], env=qm.env,
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, timeout=600)
    finally:
        os.close(slave)
    said = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:         # EIO: the terminal's last writer is gone
            break
        if not chunk:
            break
        said += chunk
    os.close(master)
    assert p.returncode == 0
    job = last_job(qm)["id"]
    assert said.decode().splitlines() == [f"lattice: job {job}"], said


def test_chdir_finds_a_relative_program_in_dir(qm: Machine) -> None:
    d = qm.work / "progs"
    d.mkdir()
    prog = d / "hello.sh"
    prog.write_text("#!/bin/sh\necho hello from $(pwd)\n")
    prog.chmod(0o755)
    p = lattice_in(qm, Path("/"), "run", "-n", "1", "--kernel", "linux", "-D", str(d), "./hello.sh")
    assert p.stdout == f"hello from {d}\n", (p.stdout, p.stderr)


def test_root_submits_for_a_user(qm: Machine) -> None:
    """A job root submits with --user runs as that user, and its output file is that user's
    (the runner stays root, as `lattice run --user` does: docs/architecture.md, "The queue")."""
    with local_users(f"latq{os.getpid() % 100000}") as (u,):
        d = qm.work / "for-user"
        d.mkdir()
        os.chown(d, u.pw_uid, u.pw_gid)
        job = int(lattice_in(qm, d, "submit", "--user", u.pw_name, "-n", "1", "--kernel", "linux", "/usr/bin/id",
                             "-u").stdout)
        wait_for(lambda: job_rows(qm)[job]["state"] in ("Terminated", "Error"), 300)
        row = job_rows(qm)[job]
        out = d / f"lattice-{job}.out"
        assert row["state"] == "Terminated" and row["status"] == 0 and row["user"] == u.pw_name, dict(row)
        assert out.read_text() == f"{u.pw_uid}\n" and out.stat().st_uid == u.pw_uid


def test_a_killed_runner_ends_its_job_and_the_queue_goes_on(qm: Machine) -> None:
    """The host lost a runner (SIGKILL): the next command's sweep ends its
    job with a message (never left Running), and the next queued job runs."""
    work = qm.work / "killed"
    work.mkdir()
    a = int(lattice_in(qm, work, "submit", "-N", "4", "--kernel", "linux", "/bin/sh", "-c",
                       "echo up; exec sleep 600").stdout)
    b = int(lattice_in(qm, work, "submit", "-n", "2", "--kernel", "linux", "/bin/echo", "after").stdout)
    wait_for(lambda: job_rows(qm)[a]["state"] == "Running", 300)
    assert job_rows(qm)[b]["state"] == "Queued"
    os.kill(int(job_rows(qm)[a]["client_pid"]), 9)
    wait_for(lambda: job_rows(qm)[a]["client_pid"] is not None and
             not Path(f"/proc/{job_rows(qm)[a]['client_pid']}/cmdline").exists(), 120)
    qm.run("jobs")          # the sweep, then the queue moves on
    row = job_rows(qm)[a]
    assert row["state"] == "Error" and "its runner (lattice submit's)" in row["message"], dict(row)
    wait_for(lambda: job_rows(qm)[b]["state"] in ("Terminated", "Error"), 300)
    assert job_rows(qm)[b]["status"] == 0, dict(job_rows(qm)[b])
    assert (work / f"lattice-{b}.out").read_text() == "after\nafter\n"
