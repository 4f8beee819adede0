"""Jobs never harm each other, and the state never lies (issue 14, item 1).

On a 1x1x4 machine in psets of two (two I/O nodes), with the block S over
all of it: a second run on a busy block is refused (or waits with --wait)
and the first finishes whole; a refused start never touches the job that
runs there; a `lattice run` killed with SIGKILL leaves no job record
Running and no block it booted for itself; a dead compute node puts its
block in Error until it is freed and booted; a closed pipe or a full disk
ends the job with one line; `lattice free` refuses a busy block unless
--force, and the cancelled run says so; RAS tells the rank that failed from
the ranks lattice ended because of it; cnk's CPU clocks start with the
program.  tests/e2e/jobsafe_probe.c is the job.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from conftest import build_probe, EXAMPLES, LATTICE, Machine, make_machine, wait_for


@pytest.fixture(scope="module")
def probe(built: Path, tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_probe(tmp_path_factory, "jobsafe_probe")


@pytest.fixture
def sm(built: Path, tmp_path: Path) -> Iterator[Machine]:
    """A 1x1x4 machine in psets of two; its block S is created, not booted."""
    m = make_machine(tmp_path, "--shape", "1x1x4", "--pset-size", "2", "--memory", "256M")
    m.run("block", "create", "S", "--shape", "1x1x4")
    yield m
    m.run("free", "--all", "--force", check=False)
    shutil.rmtree(m.work, ignore_errors=True)


def start_sleepers(m: Machine) -> tuple[subprocess.Popen[str], int]:
    """Block S booted, four ranks sleeping on it: the run and its job id."""
    m.run("boot", "S")
    job = m.popen("run", "--block", "S", "-n", "4", "--label", str(EXAMPLES / "sleeper"), "600")
    assert job.stdout is not None
    assert "sleeping" in job.stdout.readline()
    return job, last_job(m)


def job_rows(m: Machine) -> list[list[str]]:
    return [line.split() for line in m.run("jobs").stdout.splitlines()[1:] if line.split()]


def job_line(m: Machine, job: int) -> str:
    return next(line for line in m.run("jobs").stdout.splitlines() if line.split()[:1] == [str(job)])


def last_job(m: Machine) -> int:
    return int(job_rows(m)[-1][0])


def block_line(m: Machine, name: str) -> str:
    return next(line for line in m.run("blocks").stdout.splitlines() if line.split()[:1] == [name])


def test_second_run_on_a_busy_block_is_refused_and_the_first_finishes(sm: Machine, probe: str) -> None:
    sm.run("boot", "S")
    go = sm.work / "go"
    first = sm.popen("run", "--block", "S", "-n", "4", "--label", probe, "gate", str(go), "5")
    assert first.stdout is not None
    head = first.stdout.readline()
    assert "line 0" in head
    first_job = last_job(sm)
    second = sm.run("run", "--block", "S", "-n", "4", probe, "flood", "1", check=False)
    assert second.returncode == 1, (second.stdout, second.stderr)
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert f"block S is busy: job {first_job}" in lines[0] and "--wait" in lines[0], lines
    assert second.stdout == ""
    go.touch()
    rest = first.stdout.read()          # not communicate(): it would miss what readline buffered
    assert first.stderr is not None
    err = first.stderr.read()
    assert first.wait(timeout=120) == 0, (rest, err)
    assert sorted((head + rest).splitlines()) == sorted(f"{r}: rank {r} line {i}" for r in range(4) for i in range(5))
    row = job_line(sm, first_job).split()
    assert row[5:7] == ["Terminated", "0"], row


def test_a_refused_start_never_kills_the_job_running_there(sm: Machine, probe: str) -> None:
    """Even when the record lies (the busy job looks ended), the second run
    reaches the I/O nodes: pset 0 refuses it, pset 1 had started it and ends
    it; the kill names the second job, so the first one runs on untouched."""
    sm.run("boot", "S")
    go = sm.work / "go"
    first = sm.popen("run", "--block", "S", "-n", "1", probe, "gate", str(go), "3")    # rank 0: pset 0
    assert first.stdout is not None
    assert "rank 0 line 0" in first.stdout.readline()
    sm.write("UPDATE jobs SET state = 'Terminated' WHERE state = 'Running'")
    p = sm.run("run", "--block", "S", "-n", "4", "--cwd", "/tmp", str(EXAMPLES / "sleeper"), "120", check=False)
    assert p.returncode == 126, (p.stdout, p.stderr)
    assert "job refused by I/O node" in p.stderr and "running" in p.stderr, p.stderr
    lines = sm.run("jobs", "--ranks", str(last_job(sm))).stdout.strip().splitlines()[1:]
    assert {int(f[0]): f[2] for f in (line.split() for line in lines)} == {2: "signal", 3: "signal"}, lines
    go.touch()
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0, (out, err)
    assert out.splitlines() == ["rank 0 line 1", "rank 0 line 2"], out


def test_wait_waits_for_the_busy_block(sm: Machine, probe: str) -> None:
    sm.run("boot", "S")
    go = sm.work / "go"
    first = sm.popen("run", "--block", "S", "-n", "4", probe, "gate", str(go), "2")
    assert first.stdout is not None
    assert "line 0" in first.stdout.readline()
    second = sm.popen("run", "--block", "S", "--wait", "-n", "4", "--label", probe, "flood", "3")
    assert second.stderr is not None
    progress = second.stderr.readline()
    assert "block S is busy" in progress and "waiting (--wait)" in progress, progress
    go.touch()
    assert first.wait(timeout=120) == 0
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, (out, err)
    assert out.count("of a long output") == 12, out


def test_wait_for_a_block_another_run_booted_for_itself(sm: Machine, probe: str) -> None:
    """S is Free: the first run boots it for itself and frees it after its
    job; the waiting run gets it all the same, and nothing stays booted."""
    go = sm.work / "go"
    first = sm.popen("run", "--block", "S", "-n", "4", probe, "gate", str(go), "2")
    assert first.stdout is not None
    assert "line 0" in first.stdout.readline()
    second = sm.popen("run", "--block", "S", "--wait", "-n", "4", "--label", probe, "flood", "3")
    assert second.stderr is not None and second.stdout is not None
    assert "waiting (--wait)" in second.stderr.readline()
    go.touch()
    assert first.wait(timeout=120) == 0
    out = second.stdout.read()
    assert second.wait(timeout=120) == 0, second.stderr.read()
    assert out.count("of a long output") == 12, out
    assert " Free " in block_line(sm, "S")
    wait_for(lambda: not sm.processes("ciod") and not sm.processes("cnode"))


def test_killed_client_ends_its_job_and_its_record(sm: Machine) -> None:
    job, job_id = start_sleepers(sm)
    job.kill()
    job.wait()
    line = job_line(sm, job_id)
    assert " Error " in line and f"its lattice run (pid {job.pid}) ended without finishing it" in line, line
    assert "Running" not in sm.run("jobs").stdout
    # the I/O nodes ended its ranks: a run that waits for the block gets it
    p = sm.run("run", "--block", "S", "--wait", "-n", "4", str(EXAMPLES / "hello"))
    assert p.stdout.count("hello from rank") == 4
    assert f"job {job_id} ended: its lattice run" in sm.run("ras").stdout


def test_killed_client_frees_the_block_it_booted(sm: Machine) -> None:
    sm.run("block", "delete", "S")
    job = sm.popen("run", "-n", "2", str(EXAMPLES / "sleeper"), "600")
    assert job.stdout is not None
    assert "sleeping" in job.stdout.readline()
    assert "auto-" in sm.run("blocks").stdout
    job.kill()
    job.wait()
    blocks = sm.run("blocks").stdout          # the next command reclaims it
    assert "auto-" not in blocks, blocks
    wait_for(lambda: not sm.processes("ciod") and not sm.processes("cnode"))
    assert "that booted it for itself is gone" in sm.run("ras").stdout
    p = sm.run("run", "-n", "4", str(EXAMPLES / "hello"))     # the whole machine is free again
    assert p.stdout.count("hello from rank") == 4


def node_location(cnode_pid: int) -> str:
    argv = open(f"/proc/{cnode_pid}/cmdline").read().split("\0")
    return str(json.loads(open(argv[argv.index("--personality") + 1]).read())["location"])


def test_lost_compute_node_puts_its_block_in_error(sm: Machine) -> None:
    sm.run("boot", "S")
    victim = sm.processes("cnode", "S")[1]
    where = node_location(victim)
    os.kill(victim, signal.SIGKILL)
    wait_for(lambda: victim not in sm.processes("cnode", "S"))
    line = block_line(sm, "S")
    assert " Error " in line and f"{where} lost" in line, line
    machine_line = next(l for l in sm.run("machine").stdout.splitlines() if l.startswith(where))
    assert "LOST" in machine_line and "S (Error)" in machine_line, machine_line
    p = sm.run("run", "--block", "S", "-n", "4", str(EXAMPLES / "hello"), check=False)
    assert p.returncode == 1 and "block S is Error" in p.stderr, p.stderr
    sm.run("free", "S")
    sm.run("boot", "S")
    assert sm.run("run", "--block", "S", "-n", "4", str(EXAMPLES / "hello")).stdout.count("hello from rank") == 4


def test_node_lost_during_a_job_leaves_the_block_in_error(sm: Machine) -> None:
    job, _ = start_sleepers(sm)
    victim = sm.processes("cnode", "S")[0]
    where = node_location(victim)
    os.kill(victim, signal.SIGKILL)
    out, err = job.communicate(timeout=120)
    assert job.returncode == 255, err
    line = block_line(sm, "S")
    assert " Error " in line and f"compute node {where} lost during job" in line, line


def test_closed_pipe_ends_the_job_cleanly(sm: Machine, probe: str) -> None:
    sm.run("boot", "S")
    cmd = " ".join([*LATTICE, "run", "--block", "S", "-n", "4", probe, "flood", "20000"])
    p = subprocess.run(["bash", "-c", f"set -o pipefail; {cmd} | head -2"], env=sm.env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 141, (p.returncode, p.stderr)
    assert len(p.stdout.splitlines()) == 2
    assert "Traceback" not in p.stderr and "Exception" not in p.stderr, p.stderr
    assert re.fullmatch(r"lattice: cannot write the job's stdout: Broken pipe: ending job \d+\n", p.stderr), p.stderr
    row = job_rows(sm)[-1]
    assert row[5:7] == ["Terminated", "141"], row


def test_full_device_ends_the_job_cleanly(sm: Machine, probe: str) -> None:
    sm.run("boot", "S")
    with open("/dev/full", "w") as full:
        p = subprocess.run([*LATTICE, "run", "--block", "S", "-n", "2", probe, "flood", "100"], env=sm.env,
                           stdout=full, stderr=subprocess.PIPE, text=True, timeout=120)
    assert p.returncode == 74, p.stderr
    assert re.fullmatch(r"lattice: cannot write the job's stdout: No space left on device: ending job \d+\n",
                        p.stderr), p.stderr
    row = job_rows(sm)[-1]
    assert row[5:7] == ["Terminated", "74"], row
    assert "No space left on device" in " ".join(row)


def test_free_refuses_a_busy_block_unless_forced(sm: Machine) -> None:
    job, job_id = start_sleepers(sm)
    p = sm.run("free", "S", check=False)
    assert p.returncode == 1 and f"block S is busy: job {job_id}" in p.stderr and "--force" in p.stderr, p.stderr
    assert " Initialized " in block_line(sm, "S")
    p = sm.run("free", "--force", "S")
    assert f"block S freed; job {job_id}" in p.stdout and "cancelled" in p.stdout, p.stdout
    out, err = job.communicate(timeout=120)
    assert job.returncode == 128 + 9, err
    assert f"job {job_id} cancelled: its block S was freed by `lattice free --force`" in err, err
    assert "I/O node" not in err and "lost" not in err, err
    line = job_line(sm, job_id)
    assert "Running" not in line and "cancelled" in line, line
    assert " Free " in block_line(sm, "S")
    # --all frees every block that is not Free
    sm.run("boot", "S")
    p = sm.run("free", "--all")
    assert "block S freed" in p.stdout
    assert " Free " in block_line(sm, "S")


def test_ras_names_the_root_cause_apart_from_the_ranks_ended_for_it(sm: Machine, probe: str) -> None:
    sm.run("boot", "S")
    p = sm.run("run", "--block", "S", "-n", "4", probe, "die", "2", "11", check=False)
    assert p.returncode == 128 + 11, p.stderr
    job = last_job(sm)
    ras = sm.run("ras").stdout.splitlines()
    mine = [l for l in ras if f"job {job} rank" in l]
    cause = [l for l in mine if f"job {job} rank 2 " in l and "MMCS" not in l and "CIOD" not in l]
    assert any("signal 11" in l and "root cause" in l for l in cause), mine
    for r in (0, 1, 3):
        ended = [l for l in mine if f"job {job} rank {r} " in l]
        assert ended and all("root cause" not in l and " INFO " in l for l in ended), ended
        assert any("ended by lattice, not by a fault of its own" in l and "because rank 2" in l for l in ended), ended
        assert any("on purpose" in l for l in ended), ended     # and the I/O node says why it killed them


HUGE_1G = Path("/sys/kernel/mm/hugepages/hugepages-1048576kB")


@pytest.mark.skipif(os.geteuid() != 0 or not HUGE_1G.exists(), reason="needs root and 1 GiB huge pages")
def test_cnk_cpu_clocks_start_with_the_program(built: Path, tmp_path: Path, probe: str) -> None:
    """Under cnk big memory of 2 GiB sits on 1 GiB pages, which the kernel
    zeroes whole (seconds of CPU) while cnk loads the program: not the
    program's time.  Every CPU clock the program reads starts near zero, and
    never shows more CPU than the wall time it ran, as in Linux mode."""
    m = make_machine(tmp_path, "--shape", "1x1x2", "--pset-size", "2", "--memory", "2G")
    try:
        for kernel in ("cnk", "linux"):
            out = m.run("run", "-n", "1", "--kernel", kernel, "-v", probe, "cpu").stdout
            got = dict(kv.split("=") for kv in re.search(r"^cpu (.*)$", out, re.M).group(1).split())
            v = {k: float(x) for k, x in got.items()}
            assert v["main"] < 0.25, (kernel, out)                   # the 2 GiB of zeroing is cnk's
            assert v["end"] <= v["main"] + v["wall"] + 0.05, (kernel, out)
            for k in ("times", "rusage", "thread"):
                assert v[k] <= v["end"] + 0.05, (kernel, k, out)
    finally:
        shutil.rmtree(m.work, ignore_errors=True)


def test_a_run_without_block_takes_the_free_block_that_fits(sm: Machine) -> None:
    """The administrator's Free block S holds the job: `lattice run` without --block boots it, runs
    there and frees it (it is not deleted), instead of failing for want of room for a new block."""
    p = sm.run("run", "-n", "4", "--label", str(EXAMPLES / "hello"))
    assert sorted(l.split(":")[0] for l in p.stdout.splitlines() if "hello" in l) == ["0", "1", "2", "3"], p.stdout
    assert job_rows(sm)[-1][1] == "S"
    assert block_line(sm, "S").split()[1] == "Free"
    assert [l.split()[0] for l in sm.run("blocks").stdout.splitlines()[1:]] == ["S"]
