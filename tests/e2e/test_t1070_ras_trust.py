"""RAS an operator can trust, on a booted block (issue 26 item 6): every
event of a job is found by `lattice ras --job` (the I/O nodes' too), all
events are in time order with one time format, and an I/O worker that ciod
ends after its job (a file call still blocked) is INFO, not the ERROR
"ended by signal 9" it was."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterator

import pytest

from conftest import EXAMPLES, Machine, booted_block, wait_for

MICROS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z ")


@pytest.fixture(scope="module")
def rm(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    yield from booted_block(tmp_path_factory.mktemp("ras"), "R", "1x1x2", "--pset-size", "2", "--memory", "256M")


def last_job(m: Machine) -> str:
    return m.run("jobs").stdout.splitlines()[-1].split()[0]


def events(m: Machine, *args: str) -> list[str]:
    return m.run("ras", *args).stdout.splitlines()


def test_a_jobs_io_node_events_are_the_jobs(rm: Machine) -> None:
    p = rm.run("run", "--block", "R", "-n", "2", str(EXAMPLES / "exit_code"), "1", "3", check=False)
    assert p.returncode == 3, p.stderr
    job = last_job(rm)
    mine = events(rm, "--job", job)
    ciod = [e for e in mine if " CIOD " in e]
    assert any(f"job {job} rank 1 exited with code 3" in e for e in ciod), mine
    assert all(f"job {job}" in e for e in mine), mine


def test_every_event_in_time_order_in_one_format(rm: Machine) -> None:
    rm.run("run", "--block", "R", "-n", "2", str(EXAMPLES / "hello"))
    shown = events(rm)
    assert len(shown) > 3 and all(MICROS.match(e) for e in shown), shown
    times = [e.split()[0] for e in shown]
    assert times == sorted(times), shown


def test_an_io_worker_ciod_ends_after_its_job_is_no_error(rm: Machine) -> None:
    """The rank's `cat FIFO` blocks the worker in open(); the time limit ends
    the rank; the worker is ended by Lattice: INFO, and no ERROR about it
    (nor about any other job's worker, each of which ended normally)."""
    fifo = rm.work / "fifo"
    os.mkfifo(fifo)
    p = rm.run("run", "--block", "R", "-n", "1", "-t", "0:02", "cat", str(fifo), check=False)
    assert p.returncode == 124, p.stderr
    job = last_job(rm)
    # ended by ciod after the grace, or before it with the job's control connection (its
    # PR_SET_PDEATHSIG): which comes first is the host's doing, either is Lattice's, INFO
    wait_for(lambda: any("I/O worker" in e for e in events(rm, "--job", job)), timeout=300)
    mine = events(rm, "--job", job)
    worker = [e for e in mine if "I/O worker" in e]
    assert len(worker) == 1 and " INFO " in worker[0] and f"I/O worker of job {job}" in worker[0], mine
    assert "after its job ended" in worker[0], worker
    assert not [e for e in events(rm, "--severity", "ERROR") if "I/O worker" in e], events(rm)
