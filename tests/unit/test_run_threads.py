"""`lattice run --threads N` (issue 28 item 3): each rank's thread limit
under cnk, passed to cnk as LATTICE_THREADS (compute/cnk/thread.c), checked
before anything boots: 1 to 4096, within what the rank's memory holds, for
cnk only; nonsense is one `lattice: error:` line."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

import pytest

from lattice.errors import LatticeError
from lattice.jobs import threads

from cli_inprocess import home, jobs_not_run, lattice


@pytest.fixture
def machine_home(tmp_path: Path) -> Iterator[Path]:
    """A 2x1x1 machine of 64 MiB, 2-core nodes with block B."""
    with home(tmp_path / "m"):
        assert lattice("init", "--shape", "2x1x1", "--pset-size", "2", "--memory", "64M")[0] == 0
        assert lattice("block", "create", "B", "--shape", "2x1x1")[0] == 0
        yield tmp_path


@pytest.fixture
def no_boot() -> Iterator[dict[str, Any]]:
    """`lattice run` up to the job (cli_inprocess.jobs_not_run)."""
    with jobs_not_run() as seen:
        yield seen


def env_of(seen: dict[str, Any]) -> dict[str, str]:
    return dict(seen["spec"].mapping.env)


def test_threads_reach_cnk_in_the_job_environment(machine_home: Path, no_boot: dict[str, Any]) -> None:
    status, _, err = lattice("run", "--block", "B", "--threads", "16", "/bin/true")
    assert status == 0, err
    assert env_of(no_boot)[threads.VAR] == "16"


def test_without_threads_cnk_counts_cores(machine_home: Path, no_boot: dict[str, Any]) -> None:
    status, _, err = lattice("run", "--block", "B", "/bin/true")
    assert status == 0, err
    assert threads.VAR not in env_of(no_boot)


def test_the_job_s_own_variable_is_checked_too(machine_home: Path, no_boot: dict[str, Any]) -> None:
    status, _, err = lattice("run", "--block", "B", "--env", "LATTICE_THREADS=8", "--threads", "8", "/bin/true")
    assert status == 0, err
    assert no_boot["spec"].env.count("LATTICE_THREADS=8") == 1 and threads.VAR not in env_of(no_boot)


@pytest.mark.parametrize("args, words", [
    (["--threads", "0"], "bad --threads '0': a rank's thread limit is a whole number from 1 to 4096"),
    (["--threads", "4097"], "bad --threads '4097'"),
    (["--threads", "lots"], "bad --threads 'lots'"),
    (["--threads", "-3"], "bad --threads '-3'"),
    (["--threads", "2.5"], "bad --threads '2.5'"),
    (["--env", "LATTICE_THREADS=x"], "bad --env LATTICE_THREADS 'x'"),
    (["--threads", "4", "--env", "LATTICE_THREADS=5"], "--threads 4 and --env LATTICE_THREADS=5 disagree"),
    (["--kernel", "linux", "--threads", "4"], "--threads is cnk's thread limit; under --kernel linux"),
    # 64 MiB nodes: a rank holds the smallest stacks of 1024 threads, 512 in vn mode
    (["--threads", "1025"], "--threads 1025: each rank has 64 MiB of memory, which holds the stacks of at most "
                            "1024 threads"),
    (["--mode", "vn", "--threads", "600"], "each rank has 32 MiB of memory"),
])
def test_nonsense_is_one_clear_line(machine_home: Path, no_boot: dict[str, Any], args: list[str],
                                    words: str) -> None:
    status, _, err = lattice("run", "--block", "B", *args, "/bin/true")
    assert status != 0 and "spec" not in no_boot
    lines = err.strip().splitlines()
    assert lines[0].startswith("lattice: error: ") and words in lines[0] and "Traceback" not in err, err
    assert len([line for line in lines if line.startswith("lattice:")]) == 1, err


def test_limit_bounds() -> None:
    assert threads.limit(None, {}, "cnk", 1 << 20) is None
    assert threads.limit("16", {}, "cnk", 1 << 20) == 16
    with pytest.raises(LatticeError, match="at most 16 threads"):
        threads.limit("17", {}, "cnk", 1 << 20)
    assert threads.limit(None, {"LATTICE_THREADS": "4096"}, "cnk", 512 << 20) == 4096
    assert threads.limit(None, {"LATTICE_THREADS": "junk"}, "linux", 1 << 20) is None    # only cnk reads it
