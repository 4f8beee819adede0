"""`lattice init` and the machine model: shape, psets, locations, machine.toml.

No machine is booted here.  Commands run in-process through lattice.cli.main
(fast), or as real `python -m lattice` processes where the exit status,
stderr and the absence of a traceback are the point.  Each test has its own
LATTICE_HOME.  The helpers below are shared by the other test_service_* files.
"""
from __future__ import annotations

import contextlib
import gc
import io
import itertools
import os
import re
import sqlite3
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator
from unittest import mock

import pytest
import tomli_w

from lattice.cli import main as cli
from lattice.transport import wire
from lattice.state import machine as model, postgres
from lattice.errors import LatticeError
from lattice.state.machine import Machine

ROOT = Path(__file__).resolve().parents[2]
LATTICE = [sys.executable, "-m", "lattice"]


@dataclass
class Result:
    status: int
    out: str
    err: str


@dataclass
class Home:
    """A private LATTICE_HOME (not created until `lattice init`)."""

    path: Path
    database: str = "sqlite"        # or the URL of a PostgreSQL database: `lattice init` gets --database

    def with_database(self, args: tuple[str, ...]) -> tuple[str, ...]:
        if args[:1] == ("init",) and self.database != "sqlite" and "--database" not in args:
            return (*args, "--database", self.database)
        return args

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "LATTICE_DEBUG"}
        env.update(LATTICE_HOME=str(self.path), PYTHONPATH=str(ROOT / "service"), **extra)
        return env

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Run in-process code with LATTICE_HOME pointing here."""
        with mock.patch.dict(os.environ, {"LATTICE_HOME": str(self.path)}):
            os.environ.pop("LATTICE_DEBUG", None)
            yield

    def call(self, *args: str) -> Result:
        """`lattice ARGS` in this process: the CLI's error boundary included."""
        args = self.with_database(args)
        out, err = io.StringIO(), io.StringIO()
        with self.active(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                status = cli.main(list(args))
            except SystemExit as e:       # argparse's usage errors
                status = int(e.code or 0)
        # a command's process ends here and its database connections with it: close any the command
        # left to the collector now, or one closing later checkpoints its log into a file a test changed
        gc.collect()
        return Result(status, out.getvalue(), err.getvalue())

    def ok(self, *args: str) -> Result:
        r = self.call(*args)
        assert r.status == 0, f"lattice {' '.join(args)} exited {r.status}: {r.err}"
        return r

    def popen(self, *args: str, **extra_env: str) -> subprocess.Popen[str]:
        return subprocess.Popen([*LATTICE, *self.with_database(args)], env=self.env(**extra_env), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    def run(self, *args: str, **extra_env: str) -> Result:
        """`lattice ARGS` as its own process."""
        return finish(self.popen(*args, **extra_env))

    def machine(self) -> Machine:
        with self.active():
            return model.load()

    def db(self) -> sqlite3.Connection:
        if self.database != "sqlite":       # the same calling convention: ? placeholders, rows by name
            return postgres.connect(self.database, 30)      # type: ignore[return-value]
        con = sqlite3.connect(self.path / "lattice.db")
        con.row_factory = sqlite3.Row
        return con


def finish(p: subprocess.Popen[str], timeout: float = 60) -> Result:
    out, err = p.communicate(timeout=timeout)
    return Result(p.returncode, out, err)


def assert_clean_error(r: Result, *fragments: str, status: int | None = None) -> None:
    """A user error: non-zero status, the reason on stderr, no Python traceback."""
    assert r.status != 0, f"expected failure, got 0; stdout: {r.out}"
    if status is not None:
        assert r.status == status, r
    assert "Traceback" not in r.err, r.err
    assert not re.search(r"^[\w.]*(Error|Exception)\b", r.err, flags=re.M), r.err   # a bare exception line
    assert r.err.strip(), "no message on stderr"
    assert "error:" in r.err, r.err
    for f in fragments:
        assert f.lower() in r.err.lower(), f"{f!r} not in stderr: {r.err}"


@pytest.fixture(params=["sqlite", "postgresql"])
def home(request: pytest.FixtureRequest, tmp_path: Path) -> Home:
    """A machine's home, its database on each backend in turn (a fresh
    PostgreSQL database of the session's server for the second)."""
    if request.param == "postgresql" and request.node.get_closest_marker("sqlite_file"):
        pytest.skip("about the SQLite database file")
    database = "sqlite" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    return Home(tmp_path / "home", database)


@pytest.fixture
def default_home(home: Home) -> Home:
    home.ok("init")
    return home


def is_box(coords: list[tuple[int, int, int]]) -> bool:
    lo = [min(c[d] for c in coords) for d in range(3)]
    hi = [max(c[d] for c in coords) for d in range(3)]
    volume = (hi[0] - lo[0] + 1) * (hi[1] - lo[1] + 1) * (hi[2] - lo[2] + 1)
    return volume == len(set(coords)) == len(coords)


# --- lattice init: defaults ---------------------------------------------------

def test_init_defaults(home: Home) -> None:
    r = home.ok("init")
    m = home.machine()
    # docs: 2x2x4 torus, psets of 8, 512 MiB per node, one host
    assert (m.shape, m.pset_size, m.memory, m.placement, m.hide) == ((2, 2, 4), 8, 512 << 20, "local", ())
    assert m.nodes == 16 and m.psets == 2
    assert "16 compute nodes" in r.out and "2 I/O nodes" in r.out and "512 MiB" in r.out
    # the database knows the same nodes
    con = home.db()
    kinds = dict(con.execute("SELECT kind, count(*) FROM nodes GROUP BY kind").fetchall())
    assert kinds == {"compute": 16, "io": 2}
    assert [r[0] for r in con.execute("SELECT pset FROM nodes WHERE kind = 'io' ORDER BY pset")] == [0, 1]


def test_init_custom(home: Home, tmp_path: Path) -> None:
    r = home.ok("init", "--shape", "1x2x4", "--pset-size", "2", "--memory", "256M",
                "--hide", str(tmp_path / "a"), "--hide", "rel")
    m = home.machine()
    assert (m.shape, m.pset_size, m.memory) == ((1, 2, 4), 2, 256 << 20)
    assert m.psets == 4
    assert m.hide == (str(tmp_path / "a"), os.path.abspath("rel"))   # relative paths are made absolute
    assert "4 I/O nodes" in r.out and "256 MiB" in r.out
    n_io = home.db().execute("SELECT count(*) FROM nodes WHERE kind = 'io'").fetchone()[0]
    assert n_io == 4


@pytest.mark.parametrize("text, size", [("1G", 1 << 30), ("512M", 512 << 20), ("2g", 2 << 30),
                                        ("64MiB", 64 << 20), ("1T", 1 << 40), ("1048576", 1 << 20)])
def test_memory_sizes(text: str, size: int) -> None:
    assert model.parse_size(text) == size
    assert Machine(memory=size).memory == size


def test_init_refuses_to_overwrite(default_home: Home) -> None:
    before = (default_home.path / "machine.toml").read_text()
    r = default_home.call("init", "--shape", "1x1x2", "--pset-size", "2")
    assert_clean_error(r, "already exists", "--force")
    assert (default_home.path / "machine.toml").read_text() == before
    assert default_home.machine().shape == (2, 2, 4)


def test_init_force_replaces_machine_and_state(default_home: Home) -> None:
    default_home.ok("block", "create", "A", "--shape", "2x2x2")
    default_home.ok("init", "--force", "--shape", "1x1x2", "--pset-size", "2")
    assert default_home.machine().shape == (1, 1, 2)
    con = default_home.db()
    assert con.execute("SELECT count(*) FROM blocks").fetchone()[0] == 0      # old blocks are gone
    assert con.execute("SELECT count(*) FROM nodes").fetchone()[0] == 2 + 1   # and old nodes


def test_init_force_refuses_while_a_block_is_not_free(default_home: Home) -> None:
    default_home.ok("block", "create", "A", "--shape", "2x2x2")
    with default_home.db() as con:
        con.execute("UPDATE blocks SET state = 'Initialized' WHERE name = 'A'")
    r = default_home.call("init", "--force", "--shape", "1x1x2", "--pset-size", "2")
    assert_clean_error(r, "A", "not Free")
    assert default_home.machine().shape == (2, 2, 4)
    assert [tuple(r) for r in default_home.db().execute("SELECT name, state FROM blocks")] == [("A", "Initialized")]


def test_init_force_with_bad_arguments_keeps_the_machine(default_home: Home) -> None:
    default_home.ok("block", "create", "A", "--shape", "2x2x2")
    assert_clean_error(default_home.call("init", "--force", "--pset-size", "3"), "pset size 3")
    assert default_home.machine().pset_size == 8
    assert [r["name"] for r in default_home.db().execute("SELECT name FROM blocks")] == ["A"]


def test_init_over_a_leftover_database(home: Home) -> None:
    """A home with a database but no machine.toml is not silently reused (the old
    nodes would collide with the new ones); --force starts afresh."""
    home.ok("init")
    (home.path / "machine.toml").unlink()
    assert_clean_error(home.call("init"), "already", "--force")     # a machine, or (postgresql) its tables
    home.ok("init", "--force", "--shape", "1x1x4", "--pset-size", "4")
    assert home.db().execute("SELECT count(*) FROM nodes").fetchone()[0] == 4 + 1


# --- lattice init: bad input ---------------------------------------------------

BAD_INIT = [
    (["--shape", "0x2x2"], "bad shape"),
    (["--shape", "2x2"], "bad shape"),
    (["--shape", "2x2x4x1"], "bad shape"),
    (["--shape", "axbxc"], "bad shape"),
    (["--shape=-1x2x2"], "bad shape"),
    (["--pset-size", "3"], "does not divide"),
    (["--pset-size", "0"], "out of range"),
    (["--pset-size=-8"], "out of range"),
    (["--shape", "4x3x1", "--pset-size", "6"], "not boxes"),
    (["--shape", "16x16x1", "--pset-size", "256"], "out of range"),
    (["--memory", "lots"], "bad memory size"),
    (["--memory", "1.5G"], "bad memory size"),
    (["--memory", "0"], "memory"),
    (["--memory", "100"], "memory"),                    # 100 bytes: not a node
    (["--memory", "99999999999T"], "memory"),            # does not fit the 64-bit fields it is written to
]


@pytest.mark.parametrize("args, why", BAD_INIT, ids=[" ".join(a) for a, _ in BAD_INIT])
def test_init_rejects_bad_input(home: Home, args: list[str], why: str) -> None:
    r = home.call("init", *args)
    assert_clean_error(r, why, status=1)
    assert not (home.path / "machine.toml").exists() and not (home.path / "lattice.db").exists()


def test_init_bad_input_as_a_process(home: Home) -> None:
    """The same, as the user sees it: status, one message on stderr, no traceback."""
    procs = [home.popen("init", "--shape", "2x2"), home.popen("init", "--pset-size", "x"),
             home.popen("init", "--pset-size", "3")]
    shape, notint, pset = (finish(p) for p in procs)
    assert_clean_error(shape, "bad shape '2x2'", status=1)
    assert_clean_error(notint, "--pset-size", status=2)              # argparse's usage error
    assert_clean_error(pset, "pset size 3 does not divide the 16 compute nodes", status=1)
    assert not home.path.exists() or not any(home.path.iterdir())


def test_init_where_home_cannot_be(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    r = Home(tmp_path / "file").call("init")
    assert_clean_error(r, str(tmp_path / "file"))


# --- the model: psets, coordinates, locations -------------------------------

SMALL_SHAPES = [(x, y, z) for x, y, z in itertools.product((1, 2, 3, 4), repeat=3)]


def valid_machines() -> list[tuple[tuple[int, int, int], int]]:
    out = []
    for shape in SMALL_SHAPES:
        n = shape[0] * shape[1] * shape[2]
        for p in range(1, n + 1):
            with contextlib.suppress(LatticeError):
                Machine(shape=shape, pset_size=p)
                out.append((shape, p))
    return out


def test_pset_sizes_accepted_exactly_when_every_pset_is_a_box() -> None:
    """Brute force over small tori: init accepts a pset size iff it divides the
    nodes and every run of P consecutive nodes (x fastest) is a box."""
    accepted = set(valid_machines())
    checked = 0
    for shape in SMALL_SHAPES:
        n = shape[0] * shape[1] * shape[2]
        X, Y, _ = shape

        def coord(i: int) -> tuple[int, int, int]:       # the documented numbering: x fastest, then y, z
            return i % X, (i // X) % Y, i // (X * Y)

        for p in range(1, n + 1):
            boxes = n % p == 0 and all(is_box([coord(i) for i in range(k, k + p)]) for k in range(0, n, p))
            assert ((shape, p) in accepted) == boxes, f"shape {shape} pset size {p}: boxes={boxes}"
            checked += 1
    assert checked >= 1000 and len(accepted) > 100


@pytest.mark.parametrize("shape, p", [((2, 2, 4), 8), ((1, 2, 4), 2), ((4, 2, 2), 4), ((4, 4, 2), 8),
                                      ((3, 2, 4), 12), ((4, 1, 1), 2), ((2, 3, 2), 6)])
def test_every_node_in_exactly_one_pset_box(shape: tuple[int, int, int], p: int) -> None:
    m = Machine(shape=shape, pset_size=p)
    owner: dict[int, int] = {}
    for ps in range(m.psets):
        nodes = list(m.pset_nodes(ps))
        assert len(nodes) == p
        for i in nodes:
            assert i not in owner, f"node {i} in psets {owner[i]} and {ps}"
            owner[i] = ps
            assert m.pset_of(i) == ps
        assert is_box([m.coord(i) for i in nodes]), f"pset {ps} is not a box"
    assert sorted(owner) == list(range(m.nodes))


def test_coordinates_x_fastest() -> None:
    m = Machine(shape=(2, 3, 4), pset_size=2)
    assert [m.coord(i) for i in range(4)] == [(0, 0, 0), (1, 0, 0), (0, 1, 0), (1, 1, 0)]
    assert m.coord(6) == (0, 0, 1)
    coords = [m.coord(i) for i in range(m.nodes)]
    assert sorted(coords) == sorted(itertools.product(range(2), range(3), range(4)))
    assert all(m.index(m.coord(i)) == i for i in range(m.nodes))


def test_pset_size_limit_is_the_protocols() -> None:
    Machine(shape=(wire.MAX_PSET, 1, 1), pset_size=wire.MAX_PSET)
    with pytest.raises(LatticeError, match="out of range"):
        Machine(shape=(2 * wire.MAX_PSET, 1, 1), pset_size=2 * wire.MAX_PSET)


def test_locations_in_database(home: Home) -> None:
    home.ok("init", "--shape", "2x2x4", "--pset-size", "4")
    m = home.machine()
    rows = home.db().execute("SELECT * FROM nodes").fetchall()
    locations = [r["location"] for r in rows]
    assert len(locations) == len(set(locations)) == 16 + 4
    for r in rows:
        if r["kind"] == "compute":
            i = r["id"]
            # Blue Gene naming with the linear index (docs: compute node R00-M0-N00-C:J05)
            assert r["location"] == f"R00-M0-N00-C:J{i:02d}"
            assert (r["x"], r["y"], r["z"]) == m.coord(i)
            assert r["pset"] == i // 4
        else:
            assert r["id"] == -1 - r["pset"]
            assert r["location"] == f"R00-M0-N00-I:J{r['pset']:02d}"
    assert Machine.compute_location(5) == "R00-M0-N00-C:J05"
    assert Machine.io_location(1) == "R00-M0-N00-I:J01"


def test_machine_command_lists_every_node(default_home: Home) -> None:
    default_home.ok("block", "create", "Z", "--shape", "2x2x2", "--corner", "0,0,2")
    out = default_home.ok("machine").out.splitlines()
    m = default_home.machine()
    rows = {line.split()[0]: line.split() for line in out[2:]}
    assert len(rows) == m.nodes + m.psets
    for i in range(m.nodes):
        row = rows[m.compute_location(i)]
        assert row[1] == "compute" and row[2] == ",".join(map(str, m.coord(i)))
        assert int(row[3]) == m.pset_of(i) and row[4] == m.io_location(m.pset_of(i))
        assert row[5] == "local", "local placement: every pset on this host"
        # the block owns exactly pset 1 (z = 2..3)
        assert (row[6:] == ["Z"]) == (m.coord(i)[2] >= 2)


# --- machine.toml --------------------------------------------------------------

@pytest.mark.parametrize("m", [
    Machine(),
    Machine(shape=(1, 2, 4), pset_size=2, memory=256 << 20),
    Machine(shape=(8, 4, 4), pset_size=128, memory=3 << 40, hide=("/a b", '/quote"d', "/ünï")),
    Machine(hold_pages="block"),
    Machine(hold_pages="job"),
])
def test_toml_round_trip(m: Machine, tmp_path: Path) -> None:
    path = tmp_path / "machine.toml"
    m.save(path)
    assert Machine.from_toml(tomllib.loads(path.read_text()), str(path)) == m


def test_init_writes_what_load_reads(home: Home) -> None:
    home.ok("init", "--shape", "4x2x2", "--pset-size", "4", "--memory", "2G", "--hide", "/srv/x")
    data = tomllib.loads((home.path / "machine.toml").read_text())
    assert data["torus"]["shape"] == [4, 2, 2] and data["pset"]["size"] == 4
    assert data["node"]["memory"] == 2 << 30 and data["compute"]["hide"] == ["/srv/x"]
    assert home.machine() == Machine(shape=(4, 2, 2), pset_size=4, memory=2 << 30, hide=("/srv/x",),
                                     database=home.database)


def test_toml_optional_sections_default(tmp_path: Path) -> None:
    data = {"torus": {"shape": [1, 1, 2]}, "pset": {"size": 2}, "node": {"memory": 512 << 20}}
    assert Machine.from_toml(data, "x") == Machine(shape=(1, 1, 2), pset_size=2, hide=())
    assert Machine.from_toml(data, "x").hold_pages == "auto"


@pytest.mark.parametrize("hold, reported, block", [("block", False, True), ("job", True, False),
                                                   ("auto", True, True), ("auto", False, False)])
def test_who_holds_the_pages(hold: str, reported: bool, block: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    from lattice.nodes import host
    monkeypatch.setattr(host, "free_memory_reported", lambda: reported)
    assert Machine(hold_pages=hold).block_holds_pages() is block


def test_init_hold_pages_and_the_machine_command_says_it(home: Home) -> None:
    home.ok("init", "--shape", "1x1x2", "--pset-size", "2", "--hold-pages", "block")
    assert home.machine().hold_pages == "block"
    assert "huge pages a job touched held by the block (--hold-pages block)" in home.ok("machine").out


@pytest.mark.parametrize("edit, why", [
    (lambda d: d["pset"].update(size="eight"), "bad machine description"),
    (lambda d: d["torus"].update(shape=[2, 2]), "3 dimensions"),
    (lambda d: d.pop("node"), "bad machine description"),
    (lambda d: d.update(placement="local"), "bad machine description"),      # a string, not a table
    (lambda d: d["compute"].update(hide="/one/path"), "list"),                # not split into characters
    (lambda d: d["placement"].update(hosts="mars"), "not one of local, ssh, slurm"),
    (lambda d: d["pset"].update(size=3), "does not divide"),
    (lambda d: d["node"].update(hold_pages="host"), "hold-pages 'host' is not one of auto, block, job"),
], ids=["size-not-int", "2d-shape", "no-node", "placement-not-table", "hide-not-list", "unknown-placement", "pset-3", "hold-pages-unknown"])
def test_bad_machine_file_is_a_clear_error(default_home: Home, edit: Callable[[dict[str, Any]], None],
                                           why: str) -> None:
    path = default_home.path / "machine.toml"
    data = tomllib.loads(path.read_text())
    edit(data)
    path.write_text(tomli_w.dumps(data))
    assert_clean_error(default_home.call("blocks"), why)


def test_unparsable_machine_file(default_home: Home) -> None:
    (default_home.path / "machine.toml").write_text("[torus\n")
    assert_clean_error(default_home.call("machine"), "machine.toml")
