"""`lattice cancel`, as scancel: SIGTERM to every rank, SIGKILL after --grace to what still runs,
the job's run saying it was cancelled (status 128 + the ending signal), its record ended with who
cancelled it; `-s SIG` only signals; a job that is not running is refused, and the running one is
never touched by it.  tests/e2e/cancel_probe.c is the job."""
from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from conftest import build_probe, EXAMPLES, Machine, booted_block


@pytest.fixture(scope="module")
def probe(built: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_probe(tmp_path_factory, "cancel_probe")


@pytest.fixture(scope="module")
def m(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    yield from booted_block(tmp_path_factory.mktemp("cancel"), "C", "1x1x4", "--pset-size", "2",
                            "--memory", "256M")


def started(m: Machine, *argv: str) -> tuple[subprocess.Popen[str], int]:
    """A 4-rank job on block C, once every rank said it is ready: the run and the job's id."""
    run = m.popen("run", "--block", "C", "-n", "4", "--kernel", "linux", *argv)
    assert run.stdout is not None
    ready = [run.stdout.readline() for _ in range(4)]
    assert all("ready" in l for l in ready), ready
    rows = [l.split() for l in m.run("jobs", "--running").stdout.splitlines()[1:]]
    assert len(rows) == 1, rows
    return run, int(rows[0][0])


def record(m: Machine, job: int) -> str:
    return next(l for l in m.run("jobs").stdout.splitlines() if l.split()[:1] == [str(job)])


def test_cancel_ends_a_job_with_sigterm(m: Machine) -> None:
    run = m.popen("run", "--block", "C", "-n", "4", str(EXAMPLES / "sleeper"), "600")
    assert run.stdout is not None and "sleeping" in run.stdout.readline()
    job = int(m.run("jobs", "--running").stdout.splitlines()[1].split()[0])
    p = m.run("cancel", str(job))
    assert p.stdout.strip() == f"lattice: job {job} cancelled (SIGTERM)"
    out, err = run.communicate(timeout=600)     # a hang guard
    # SIGTERM ended it (143), not a SIGKILL after the grace (137): the event, not a time
    assert run.returncode == 128 + 15, err
    assert f"lattice: job {job} cancelled by `lattice cancel`" in err
    assert "killed by signal" not in err            # the cause, not each rank's death
    rec = record(m, job)
    assert " Terminated " in rec and " 143 " in rec and "cancelled by `lattice cancel`" in rec, rec
    # it ended: a second cancel is refused, and the block takes the next job
    bad = m.run("cancel", str(job), check=False)
    assert bad.returncode != 0 and f"job {job} is not running (Terminated)" in bad.stderr
    assert "hello" in m.run("run", "--block", "C", "-n", "1", str(EXAMPLES / "hello")).stdout


def test_a_job_that_ignores_sigterm_is_killed_after_the_grace(m: Machine, probe: str) -> None:
    run, job = started(m, probe, "stubborn")
    t0 = time.monotonic()
    p = m.run("cancel", "--grace", "1", str(job))
    took = time.monotonic() - t0
    assert p.stdout.strip() == f"lattice: job {job} cancelled (SIGKILL after 1 s)"
    # SIGKILL came no sooner than the grace (load can only lengthen took: never a wrong failure);
    # that it came at all is the 137 below, not a bound on took
    assert took >= 1.0, took
    _, err = run.communicate(timeout=600)
    assert run.returncode == 128 + 9, err
    assert f"job {job} cancelled by `lattice cancel`" in err


def test_signal_only_signals_and_a_graceful_job_is_still_cancelled(m: Machine, probe: str) -> None:
    run, job = started(m, "--label", probe, "graceful")
    assert m.run("cancel", "-s", "USR1", str(job)).stdout.strip() == f"lattice: signal SIGUSR1 sent to job {job}"
    assert run.stdout is not None
    got = sorted(run.stdout.readline().strip() for _ in range(4))
    assert got == [f"{r}: rank {r} got SIGUSR1" for r in range(4)], got
    assert " Running " in record(m, job)            # -s does not end the job
    m.run("cancel", str(job))                       # the ranks save and exit 0 on SIGTERM
    out, err = run.communicate(timeout=600)
    assert sorted(l for l in out.splitlines() if "saving" in l) == [f"{r}: rank {r} saving" for r in range(4)]
    assert run.returncode == 128 + 15, err
    assert "cancelled by `lattice cancel`" in record(m, job)


def test_what_cannot_be_cancelled_is_refused(m: Machine, probe: str) -> None:
    for args, why in ((["999"], "no job 999"), (["-s", "NOPE", "1"], "no such signal: NOPE"),
                      (["--grace", "-1", "1"], "--grace must not be negative")):
        p = m.run("cancel", *args, check=False)
        assert p.returncode != 0 and why in p.stderr, (args, p.stderr)
    # another job's I/O nodes: a cancel names its job, so one that is not running there touches nothing
    run, job = started(m, probe, "stubborn")
    bad = m.run("cancel", str(job - 1), check=False)
    assert bad.returncode != 0 and "is not running" in bad.stderr
    assert " Running " in record(m, job)
    m.run("cancel", "--grace", "0", str(job))
    run.communicate(timeout=600)
    assert re.search(rf"^\s*{job} C .* 137 ", record(m, job)), record(m, job)
