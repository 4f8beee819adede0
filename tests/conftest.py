"""Shared fixtures: the repository's build, and machines in private LATTICE_HOMEs."""
from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import tempfile
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest

import pgserver

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build"
EXAMPLES = BUILD / "examples"
LATTICE = [sys.executable, "-m", "lattice"]


@dataclass
class Machine:
    """A Lattice machine in its own LATTICE_HOME, driven through the CLI."""

    home: Path
    work: Path  # hidden from compute nodes: only the I/O nodes see it
    env: dict[str, str] = field(default_factory=dict)
    run_dir: str = ""

    def run(self, *args: str, check: bool = True, timeout: float = 600,     # a hang guard, not a time limit
            input: str | None = None) -> subprocess.CompletedProcess[str]:
        # without input, none: `lattice run` would give the test's own stdin to rank 0
        p = subprocess.run([*LATTICE, *args], env=self.env, capture_output=True, text=True, timeout=timeout,
                           input=input, stdin=subprocess.DEVNULL if input is None else None)
        if check and p.returncode != 0:
            raise AssertionError(f"lattice {' '.join(args)} exited {p.returncode}\n"
                                 f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}")
        return p

    def popen(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen([*LATTICE, *args], env=self.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def db(self, wait: float | None = None) -> Any:
        """The machine's database, whichever its backend (lattice.state.db):
        ? placeholders, rows by name; `with m.db() as con:` commits.  wait:
        how long a write waits for another's lock (default $LATTICE_DB_TIMEOUT's)."""
        from unittest import mock
        from lattice.state import db
        env = {"LATTICE_HOME": str(self.home)} | ({} if wait is None else {"LATTICE_DB_TIMEOUT": str(wait)})
        with mock.patch.dict(os.environ, env):
            return db.connect()

    def rows(self, sql: str, *params: object) -> list[Any]:
        """Every row of a query on the machine's database, whichever its backend."""
        con = self.db()
        try:
            return list(con.execute(sql, params).fetchall())
        finally:
            con.close()

    def write(self, sql: str, *params: object) -> None:
        """One statement on the machine's database, committed (a test's forged state)."""
        con = self.db()
        try:
            con.execute(sql, params)
        finally:
            con.close()

    def personalities(self, block: str) -> list[dict[str, object]]:
        return [json.loads(p.read_text()) for p in sorted((self.home / "blocks" / block).rglob("*.json"))
                if '"ciod"' in p.read_text()]

    def ciod_addresses(self, block: str) -> list[str]:
        return sorted({str(p["ciod"]) for p in self.personalities(block)})

    def processes(self, program: str, block: str | None = None) -> list[int]:
        """pids of this machine's `program` processes serving `block` (any block if None)."""
        pids = []
        for pid, argv in processes():
            if not argv[0].endswith(program.encode()):
                continue
            text = b" ".join(argv).decode(errors="replace")
            if str(self.home) not in text and not (self.run_dir and self.run_dir in text):
                continue
            if block is None or f"/blocks/{block}/" in text or f"--block {block}" in text:
                pids.append(pid)
        return sorted(pids)


def processes() -> Iterator[tuple[int, list[bytes]]]:
    """Every process of this host now: (pid, its command line's words)."""
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                argv = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0]:
                yield int(d.name), argv


def wait_for(pred, timeout: float = 600) -> None:  # type: ignore[no-untyped-def]
    """Until pred() holds (an AssertionError after timeout seconds: a hang
    guard, generous so that a loaded host does not fail a test)."""
    end = time.time() + timeout
    while time.time() < end:
        if pred():
            return
        time.sleep(0.1)
    raise AssertionError("timed out")


ON_POSTGRES = os.environ.get("LATTICE_TEST_DATABASE") == "postgresql"    # every e2e machine on PostgreSQL


def db_errors() -> tuple[type[Exception], ...]:
    """What a failure of a machine's database raises, whichever its backend."""
    from lattice.state import db
    return db.errors()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "sqlite_file: a test of the SQLite database file: the `home` "
                                       "fixture gives it no PostgreSQL run, nor does LATTICE_TEST_DATABASE")


def pytest_runtest_setup(item: pytest.Item) -> None:
    # unit tests choose their backend themselves (the `home` fixture); e2e machines follow the variable
    if ON_POSTGRES and "e2e" in item.path.parts and item.get_closest_marker("sqlite_file"):
        pytest.skip("about the SQLite database file (LATTICE_TEST_DATABASE=postgresql)")


PG = pgserver.SESSION       # the session's PostgreSQL server, once a test needed one


def session_pg() -> pgserver.Server:
    if not PG:
        s = pgserver.Server()
        PG.append(s)
        s.start()
    return PG[0]


def pytest_sessionfinish(session: pytest.Session) -> None:
    for s in PG:
        s.stop()


@pytest.fixture(scope="session")
def pg_server() -> pgserver.Server:
    """The session's PostgreSQL server (tests/pgserver.py), started by the first test that needs it."""
    return session_pg()


@pytest.fixture
def pg_url(pg_server: pgserver.Server) -> str:
    """A fresh, empty PostgreSQL database for this test: its URL."""
    return pg_server.create_database()


def make_machine(tmp: Path, *init_args: str) -> Machine:
    home = tmp / "home"
    # the job's files: in a directory other users can reach (pytest's own
    # tmp directories are private), removed with the rest of /tmp
    work = Path(tempfile.mkdtemp(prefix="lattice-test-work-"))
    os.chmod(work, 0o755)
    # a test machine's warm server leaves after a minute without commands, not ten
    env = dict(os.environ, LATTICE_HOME=str(home), PYTHONPATH=str(ROOT / "service"), LATTICE_WARM_IDLE="60")
    m = Machine(home=home, work=work, env=env)
    if ON_POSTGRES and "--database" not in init_args:
        init_args += ("--database", session_pg().create_database())      # every test machine on PostgreSQL
    m.run("init", *init_args, "--hide", str(work))
    return m


def booted_block(tmp: Path, block: str, shape: str, *init_args: str) -> Iterator[Machine]:
    """For a module fixture: a machine of that shape with block over all of
    it, booted; freed, and its work directory removed, afterwards."""
    m = make_machine(tmp, "--shape", shape, *init_args)
    m.run("block", "create", block, "--shape", shape)
    m.run("boot", block)
    yield m
    # --force: a failed test may leave a job running; its nodes, huge pages
    # and block network must still go, not burden the rest of the suite
    m.run("free", "--force", block, check=False)
    shutil.rmtree(m.work, ignore_errors=True)


@contextmanager
def local_users(*names: str, group: str | None = None) -> Iterator[list[pwd.struct_passwd]]:
    """Ordinary local users (system accounts, no home,
    no login shell), the first also in a supplementary group of its own if
    group names one; removed afterwards."""
    made: list[str] = []
    if group:
        subprocess.run(["groupadd", "--system", group], check=True)
    try:
        for i, name in enumerate(names):
            extra = ["-G", group] if group and i == 0 else []
            subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", *extra, name],
                           check=True)
            made.append(name)
        yield [pwd.getpwnam(n) for n in names]
    finally:
        for name in made:
            subprocess.run(["userdel", name], check=False)
        if group:
            subprocess.run(["groupdel", group], check=False)


def build_probe(tmp_path_factory: pytest.TempPathFactory, name: str) -> str:
    """tests/e2e/NAME.c built into a directory every job user can read: its path."""
    d = tmp_path_factory.mktemp(name)
    os.chmod(d, 0o755)
    exe = d / name
    subprocess.run(["gcc", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(exe),
                    str(ROOT / "tests" / "e2e" / f"{name}.c")], check=True)
    return str(exe)


def warm_servers(under: Path) -> list[int]:
    """pids of the warm servers (lattice.cli.warm) of machines under a directory."""
    return [pid for pid, argv in processes()
            if b"lattice.cli.warm" in argv and len(argv) > 1 and argv[-2].startswith(str(under).encode())]


@pytest.fixture(scope="session", autouse=True)
def no_warm_servers_left(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The test machines' warm servers end with the session: nothing of the
    tests stays running (each would leave by itself after a minute idle)."""
    yield
    for pid in warm_servers(tmp_path_factory.getbasetemp()):
        try:
            os.kill(pid, 15)
        except ProcessLookupError:
            pass


@pytest.fixture(scope="session")
def built() -> Path:
    """Everything is built by scripts/test.sh; fail clearly if not."""
    for p in ("bin/ciod", "bin/cnode", "lib/libcnclient.so", "examples/fileops"):
        assert (BUILD / p).exists(), f"{BUILD / p} missing: run make"
    return BUILD


@pytest.fixture(scope="module")
def default_machine(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    """The default machine (2x2x4, psets of 8) with block R00 booted over all of it."""
    m = make_machine(tmp_path_factory.mktemp("default"))
    m.run("block", "create", "R00", "--shape", "2x2x4")
    m.run("boot", "R00")
    yield m
    m.run("free", "R00", check=False)


@pytest.fixture
def small_machine(built: Path, tmp_path: Path) -> Iterator[Machine]:
    """A 1x1x4 machine in psets of 2 (two I/O nodes): cheap to break."""
    m = make_machine(tmp_path, "--shape", "1x1x4", "--pset-size", "2", "--memory", "256M")
    yield m
    for b in ("S", ):
        m.run("free", b, check=False)
