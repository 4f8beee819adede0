"""cnk's scheduling calls and thread limit (issue 28, items 3 and 4), with
build/bin/cnk started directly as test_cnk_core starts it.

examples/conformance_threads (the sched_* calls and their errors, threads
made with PTHREAD_EXPLICIT_SCHED and each policy, pthread_setschedparam,
affinity) must print under cnk what it prints natively without
CAP_SYS_NICE: before, a thread with PTHREAD_EXPLICIT_SCHED failed with
ENOSYS.  The thread limit is the node's cores, or LATTICE_THREADS (what
`lattice run --threads N` sets), with one line on cnk's stderr naming it.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

import test_cnk_core
from test_cnk_core import run

ROOT = Path(__file__).resolve().parents[2]
PROBE = ROOT / "build" / "examples" / "conformance_threads"
# root's native run as a job of root runs: without capabilities (compute/cnode/launch.c drop_capabilities)
UNPRIVILEGED = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--securebits=+noroot,+noroot_locked"]


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    subprocess.run(["make", "-C", str(ROOT), "build/bin/cnk", str(PROBE.relative_to(ROOT))], check=True,
                   capture_output=True)
    cnk = test_cnk_core.CNK
    if os.geteuid() == 0:       # cnk as cnode starts it for a job of root
        wrapper = tmp_path_factory.mktemp("cnk") / "cnk"
        wrapper.write_text(f'#!/bin/sh\nexec {" ".join(UNPRIVILEGED)} {cnk} "$@"\n')
        wrapper.chmod(0o755)
        test_cnk_core.CNK = wrapper
    yield PROBE
    test_cnk_core.CNK = cnk


def native(prog: Path, *args: str) -> list[str]:
    argv = [*(UNPRIVILEGED if os.geteuid() == 0 else []), str(prog), *args]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout.splitlines()


def test_sched_calls_and_explicit_sched_threads_answer_as_linux(probe: Path) -> None:
    want = native(probe)
    r = run(probe, cores=2, env={"LATTICE_THREADS": "16"})
    assert r.rc == 0, r.cnk_err + r.err
    got = r.out.splitlines()
    for line in ("pthread_create(PTHREAD_EXPLICIT_SCHED, default policy) = 0, the thread runs SCHED_OTHER priority 0",
                 "pthread_create(inherit) from a SCHED_BATCH thread = 0, the thread runs SCHED_BATCH priority 0",
                 "pthread_create(PTHREAD_EXPLICIT_SCHED, SCHED_FIFO, min) = EPERM",
                 "sched_setscheduler(0, SCHED_RR, 99) = -1 EPERM",
                 "sched_setscheduler(no such pid, SCHED_OTHER, 0) = -1 ESRCH",
                 "sched_setaffinity(-1) = -1 ESRCH", "sched_setaffinity(0, bad pointer) = -1 EFAULT",
                 "pthread_create x8, all alive at once = 8 created", "# done"):
        assert line in want, line
    assert got == want, "\n".join(f"native: {a}\n   cnk: {b}" for a, b in zip(want, got) if a != b)


def test_the_limit_is_the_cores_and_said_once(probe: Path) -> None:
    r = run(probe, "8", cores=4)
    assert r.rc == 0, r.cnk_err
    assert "pthread_create x8, all alive at once = 3 created, then EAGAIN" in r.out.splitlines(), r.out
    said = [line for line in r.cnk_err.splitlines() if line.startswith("cnk: thread limit")]
    assert len(said) == 1, r.cnk_err
    assert "rank 5 may run 4 threads (its 4 cores)" in said[0] and "lattice run --threads N" in said[0], said


@pytest.mark.parametrize("n", [6, 1])
def test_lattice_threads_sets_the_limit(probe: Path, n: int) -> None:
    r = run(probe, "8", cores=4, env={"LATTICE_THREADS": str(n)})
    assert r.rc == 0, r.cnk_err
    out = r.out.splitlines()
    assert f"pthread_create x8, all alive at once = {n - 1} created, then EAGAIN" in out, r.out
    said = [line for line in r.cnk_err.splitlines() if line.startswith("cnk: thread limit")]
    assert len(said) == 1, r.cnk_err
    assert f"may run {n} threads (the job's --threads {n})" in said[0], said
    assert "lattice run --threads N, at most 4096" in said[0] and f"OMP_NUM_THREADS={n}" in said[0], said


def test_more_threads_than_cores_when_asked(probe: Path) -> None:
    r = run(probe, "16", cores=2, env={"LATTICE_THREADS": "17"})
    assert r.rc == 0, r.cnk_err
    assert "pthread_create x16, all alive at once = 16 created" in r.out.splitlines(), r.out
    assert "thread limit" not in r.cnk_err


@pytest.mark.parametrize("value", ["0", "4097", "abc", "", "4k", "-1"])
def test_a_bad_limit_is_a_launch_error(probe: Path, value: str) -> None:
    r = run(probe, cores=2, env={"LATTICE_THREADS": value})
    assert r.rc == 127 and not r.report.loaded, (r.rc, r.cnk_err)
    assert f"cnk: LATTICE_THREADS={value}: a thread limit is a number of threads from 1 to 4096" in r.cnk_err
