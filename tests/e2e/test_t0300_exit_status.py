"""A job's exit status is its ranks', failures leave RAS events."""
from __future__ import annotations

import re

from conftest import EXAMPLES, Machine


def test_rank_exit_code_is_the_jobs(default_machine: Machine) -> None:
    m = default_machine
    p = m.run("run", "--block", "R00", "-n", "16", "--label", "--cwd", "/tmp",
              str(EXAMPLES / "exit_code"), "5", "3", check=False)
    assert p.returncode == 3, (p.stdout, p.stderr)
    assert "5: rank 5: ending with 3" in p.stdout
    ras = m.run("ras").stdout
    assert re.search(r"rank 5\b.*\b3\b", ras), ras
    jobs = m.run("jobs").stdout
    assert jobs.strip(), "the job is recorded"
    # the record has every rank's end (recorded together when the job ends),
    # and the job's status is the failing rank's
    job_id = jobs.strip().splitlines()[-1].split()[0]
    row = jobs.strip().splitlines()[-1].split()
    assert row[5:7] == ["Terminated", "3"], jobs
    lines = m.run("jobs", "--ranks", job_id).stdout.strip().splitlines()[1:]
    ended = {int(f[0]): (f[2], int(f[3])) for f in (line.split() for line in lines)}
    assert ended == {r: ("exit", 3 if r == 5 else 0) for r in range(16)}, lines


def test_rank_killed_by_signal(default_machine: Machine) -> None:
    m = default_machine
    p = m.run("run", "--block", "R00", "-n", "4", "--cwd", "/tmp",
              str(EXAMPLES / "exit_code"), "2", "-9", check=False)
    assert p.returncode == 128 + 9, (p.stdout, p.stderr)
    assert re.search(r"rank 2.*(signal 9|SIGKILL|Killed)", p.stderr, re.I), p.stderr


def test_all_ranks_zero_is_zero(default_machine: Machine) -> None:
    m = default_machine
    p = m.run("run", "--block", "R00", "-n", "16", "--cwd", "/tmp", str(EXAMPLES / "exit_code"), "99", "1")
    assert p.returncode == 0


def test_bad_executable_ends_job_cleanly(default_machine: Machine) -> None:
    m = default_machine
    bogus = m.work / "not-an-elf"
    bogus.write_bytes(b"\x7fELF garbage that is not a program")
    bogus.chmod(0o755)
    p = m.run("run", "--block", "R00", "-n", "2", "--cwd", "/tmp", str(bogus), check=False)
    assert p.returncode != 0
    assert "xec format error" in p.stderr, p.stderr
    # and the block is ready for the next job
    p = m.run("run", "--block", "R00", "-n", "16", str(EXAMPLES / "hello"))
    assert p.stdout.count("hello from rank") == 16
