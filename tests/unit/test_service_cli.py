"""The `lattice` command's error boundary: a user mistake gives a non-zero
status and one clear line on stderr, never a Python traceback.

Nothing here boots: every `run` test points LATTICE_PREFIX at an empty
directory, so even a regression that got as far as booting would fail at once
instead of starting daemons.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from test_service_machine import Home, assert_clean_error, finish, home  # noqa: F401 - fixture

NEEDS_MACHINE = [
    ["machine"], ["blocks"], ["block", "create", "A", "--shape", "2x2x2"], ["block", "delete", "A"],
    ["boot", "A"], ["free", "A"], ["run", "true"], ["jobs"], ["ras"], ["counters", "A"],
]


@pytest.fixture
def no_prefix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "empty-prefix"
    d.mkdir()
    monkeypatch.setenv("LATTICE_PREFIX", str(d))
    return d


def test_unknown_command(home: Home) -> None:
    r = home.run("frobnicate")
    assert_clean_error(r, "invalid choice: 'frobnicate'", status=2)
    assert "usage: lattice" in r.err and "init" in r.err          # says what the commands are
    assert not home.path.exists()


def test_no_command(home: Home) -> None:
    assert_clean_error(home.call(), "required", status=2)


def test_help_lists_every_command(home: Home) -> None:
    r = home.call("--help")
    assert r.status == 0
    for cmd in ("init", "machine", "block", "boot", "free", "blocks", "run", "jobs", "ras", "counters"):
        assert f"    {cmd}" in r.out, cmd


@pytest.mark.parametrize("args", NEEDS_MACHINE, ids=[" ".join(a) for a in NEEDS_MACHINE])
def test_missing_machine(home: Home, no_prefix: Path, args: list[str]) -> None:
    r = home.call(*args)
    assert_clean_error(r, f"no machine at {home.path}", "lattice init", status=1)
    assert not home.path.exists(), "a command without a machine created its home"


@pytest.mark.parametrize("args", [["jobs"], ["ras"], ["free", "A"], ["blocks"]])
def test_empty_home_is_no_machine(home: Home, args: list[str]) -> None:
    """An existing but empty LATTICE_HOME is not a machine, and is left empty
    (no stray lattice.db that a later `lattice init` would trip over)."""
    home.path.mkdir()
    assert_clean_error(home.call(*args), "no machine", status=1)
    assert list(home.path.iterdir()) == []


def test_missing_machine_as_a_process(home: Home) -> None:
    procs = [home.popen("blocks"), home.popen("jobs"), home.popen("run", "true")]
    for p in procs:
        assert_clean_error(finish(p), "no machine", status=1)


def test_home_is_a_file(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    h = Home(tmp_path / "f")
    for args in (["blocks"], ["jobs"], ["machine"]):
        assert_clean_error(h.call(*args), "no machine", status=1)


def test_debug_shows_the_traceback(home: Home) -> None:
    """LATTICE_DEBUG=1 is the documented way to see where an error came from."""
    r = home.run("blocks", LATTICE_DEBUG="1")
    assert r.status != 0 and "Traceback" in r.err and "LatticeError" in r.err


def test_run_command_not_in_path(home: Home, no_prefix: Path) -> None:
    home.ok("init")
    r = home.call("run", "-n", "1", "no-such-program-x7q")
    assert_clean_error(r, "no-such-program-x7q", "not found", status=1)
    assert home.db().execute("SELECT count(*) FROM blocks").fetchone()[0] == 0
    assert home.db().execute("SELECT count(*) FROM jobs").fetchone()[0] == 0
    assert not (home.path / "blocks").exists(), "a block was set up for a program that does not exist"


def test_run_missing_executable_path(home: Home, no_prefix: Path, tmp_path: Path) -> None:
    home.ok("init")
    missing = tmp_path / "no" / "such" / "exe"
    r = home.run("run", "-n", "1", str(missing))
    assert "Traceback" not in r.err
    assert_clean_error(r, str(missing), status=1)
    assert not (home.path / "blocks").exists(), "a block was booted for a program that does not exist"


@pytest.mark.parametrize("args, why", [
    (["run", "-n", "0", "true"], "-n must be at least 1"),
    (["run", "-n", "17", "true"], "17 ranks do not fit in the 16"),
    (["run", "--env", "=x", "true"], "bad --env"),
    (["run", "--env", "NOVALUE", "true"], "bad --env"),
    (["run", "--block", "nope", "true"], "no block named 'nope'"),
    (["counters", "A"], "boot it first"),
    (["free", "nope"], "no block named 'nope'"),
    (["boot", "nope"], "no block named 'nope'"),
])
def test_run_and_block_errors_before_any_boot(home: Home, no_prefix: Path, args: list[str], why: str) -> None:
    home.ok("init")
    home.ok("block", "create", "A", "--shape", "2x2x2")
    assert_clean_error(home.call(*args), why, status=1)
    assert [tuple(r) for r in home.db().execute("SELECT name, state FROM blocks")] == [("A", "Free")]
    assert not (home.path / "blocks").exists()
