"""The machine database: schema version, migrations, and several `lattice`
processes at once (WAL + BEGIN IMMEDIATE must leave a consistent state and
never surface "database is locked")."""
from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import psycopg
import pytest

from lattice.state import blocks, db
from lattice.errors import LatticeError
from test_service_machine import ROOT, Home, Result, assert_clean_error, finish, home  # noqa: F401 - fixture

TABLES = {"nodes", "blocks", "daemons", "jobs", "ranks", "ras", "ras_spool", "schema_version", "hosts", "agents"}


def tables(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")} - {"sqlite_sequence"}


def columns(con: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in con.execute(f"PRAGMA table_info({table})")]


# --- schema version and migrations ---------------------------------------------

def test_fresh_database_gets_the_latest_version(tmp_path: Path) -> None:
    con = db.connect(tmp_path / "x.db")
    assert db.version(con) == len(db.MIGRATIONS) >= 1
    assert tables(con) == TABLES
    assert con.execute("SELECT count(*) FROM schema_version").fetchone()[0] == 1
    assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert con.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert con.execute("PRAGMA busy_timeout").fetchone()[0] >= 10000


def test_the_log_stays_short_for_the_next_command(tmp_path: Path) -> None:
    """Commands that never close their connection (they leave without Python's
    teardown) must not leave the next one a long log to read back: many
    commits by processes that each exit at once keep it near WAL_PAGES."""
    path = tmp_path / "x.db"
    db.connect(path).close()
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(ROOT / "service")!r})
        from lattice.state import db
        con = db.connect(__import__("pathlib").Path({str(path)!r}))
        for i in range(200):
            con.execute("INSERT INTO ras_spool VALUES (?, ?)", ("/spool/" + str(os.getpid()) + "-" + str(i) + "x" * 2000, i))
        os._exit(0)
    """)
    for _ in range(5):
        subprocess.run([sys.executable, "-c", script], check=True)
    frames = (os.path.getsize(str(path) + "-wal") - 32) // (4096 + 24)
    assert frames <= 2 * db.WAL_PAGES, f"{frames} pages in the log"
    con = db.connect(path)
    assert con.execute("SELECT count(*) FROM ras_spool").fetchone()[0] == 1000, "nothing lost"
    assert con.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == db.WAL_PAGES


def test_reopen_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    con = db.connect(path)
    con.execute("INSERT INTO ras_spool VALUES ('/spool', 42)")
    schema = [r[0] for r in con.execute("SELECT sql FROM sqlite_master ORDER BY name")]
    con.close()
    for _ in range(3):
        con = db.connect(path)
        assert db.version(con) == len(db.MIGRATIONS)
        assert con.execute("SELECT count(*) FROM schema_version").fetchone()[0] == 1
        assert [r[0] for r in con.execute("SELECT sql FROM sqlite_master ORDER BY name")] == schema
        assert [tuple(r) for r in con.execute("SELECT * FROM ras_spool")] == [("/spool", 42)]
        con.close()


def test_new_migrations_apply_once_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "x.db"
    con = db.connect(path)
    con.execute("INSERT INTO ras_spool VALUES ('/spool', 7)")
    con.close()
    base = len(db.MIGRATIONS)
    # the second step needs the first: applied out of order or twice, it fails
    monkeypatch.setattr(db, "MIGRATIONS", [*db.MIGRATIONS,
                                           "ALTER TABLE ras_spool ADD COLUMN inode INTEGER",
                                           "CREATE TABLE t (x); UPDATE ras_spool SET inode = offset * 2"])
    con = db.connect(path)
    assert db.version(con) == base + 2
    assert "inode" in columns(con, "ras_spool") and "t" in tables(con)
    assert [tuple(r) for r in con.execute("SELECT path, offset, inode FROM ras_spool")] == [("/spool", 7, 14)]
    con.close()
    con = db.connect(path)                       # a second open must not re-run them
    assert db.version(con) == base + 2


def test_failed_migration_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "x.db"
    db.connect(path).close()
    monkeypatch.setattr(db, "MIGRATIONS", [*db.MIGRATIONS, "ALTER TABLE blocks ADD COLUMN extra TEXT; "
                                                           "SELECT * FROM no_such_table"])
    with pytest.raises(LatticeError, match="no_such_table"):
        db.connect(path)
    con = sqlite3.connect(path)
    assert con.execute("SELECT version FROM schema_version").fetchall() == [(len(db.MIGRATIONS) - 1,)]
    assert "extra" not in columns(con, "blocks")          # the half-done step was rolled back


def test_database_from_a_newer_lattice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    db.connect(path).close()
    con = sqlite3.connect(path)
    con.execute("UPDATE schema_version SET version = ?", (len(db.MIGRATIONS) + 1,))
    con.commit()
    con.close()
    with pytest.raises(LatticeError, match="newer"):
        db.connect(path)


@pytest.mark.sqlite_file
def test_not_a_database_is_a_clear_error(home: Home) -> None:
    assert home.run("init").status == 0       # in its own process: no connection left open here
    for suffix in ("", "-wal", "-shm"):
        (home.path / f"lattice.db{suffix}").unlink(missing_ok=True)
    (home.path / "lattice.db").write_bytes(b"this is not sqlite\n" * 100)
    assert_clean_error(home.run("blocks"), "lattice.db")


def test_foreign_keys_cascade(home: Home) -> None:
    """Deleting a block drops its daemon rows (ON DELETE CASCADE needs foreign_keys on)."""
    home.ok("init")
    home.ok("block", "create", "A", "--shape", "2x2x2")
    with home.active():
        con = db.connect()
        con.execute("INSERT INTO daemons VALUES ('A', 'ciod', 0, 1, NULL, NULL)")
        blocks.delete(con, "A")
        assert con.execute("SELECT count(*) FROM daemons").fetchone()[0] == 0
        with pytest.raises((sqlite3.IntegrityError, psycopg.IntegrityError)):
            con.execute("INSERT INTO daemons VALUES ('nope', 'ciod', 0, 1, NULL, NULL)")


def test_parallel_first_opens(tmp_path: Path) -> None:
    """Many processes opening a brand-new database at once: one migrates, the
    rest wait and see the finished schema."""
    path = tmp_path / "x.db"
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT / 'service')!r})
        from pathlib import Path
        from lattice.state import db
        con = db.connect(Path({str(path)!r}))
        print(db.version(con), len(db.MIGRATIONS))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(8)]
    results = [finish(p) for p in procs]
    for r in results:
        assert r.status == 0, r.err
        v, latest = r.out.split()
        assert v == latest
    con = sqlite3.connect(path)
    assert con.execute("SELECT count(*) FROM schema_version").fetchone()[0] == 1
    assert tables(con) == TABLES


# --- several lattice commands at once ----------------------------------------------

def test_parallel_block_creates_leave_a_consistent_database(home: Home) -> None:
    """2x2x16 in psets of 4: sixteen 2x2x1 slots, slot z = pset z.  At once:
    four blocks in slots nobody else wants, four pairs of blocks racing for
    the same slot, and two blocks with the same name in different slots.
    Each race has exactly one winner; the losers get a clear error."""
    home.ok("init", "--shape", "2x2x16", "--pset-size", "4")
    jobs: dict[str, list[str]] = {}
    for k in range(4):
        jobs[f"d{k}"] = [f"d{k}", "--corner", f"0,0,{12 + k}"]
        jobs[f"p{k}a"] = [f"p{k}a", "--corner", f"0,0,{k}"]
        jobs[f"p{k}b"] = [f"p{k}b", "--corner", f"0,0,{k}"]
    jobs["twin@8"] = ["twin", "--corner", "0,0,8"]
    jobs["twin@9"] = ["twin", "--corner", "0,0,9"]
    procs = {key: home.popen("block", "create", *args, "--shape", "2x2x1") for key, args in jobs.items()}
    res = {key: finish(p) for key, p in procs.items()}

    for key, r in res.items():
        assert "Traceback" not in r.err and "locked" not in r.err, f"{key}: {r.err}"
        assert r.status in (0, 1), f"{key}: {r}"
    for k in range(4):
        assert res[f"d{k}"].status == 0, res[f"d{k}"].err
    rows = {r["name"]: (r["x0"], r["y0"], r["z0"]) for r in home.db().execute("SELECT * FROM blocks")}
    winners = []
    for k in range(4):
        a, b = res[f"p{k}a"], res[f"p{k}b"]
        assert sorted((a.status, b.status)) == [0, 1], f"pair {k}: {a} {b}"
        win, lose = (f"p{k}a", b) if a.status == 0 else (f"p{k}b", a)
        winners.append(win)
        assert_clean_error(lose, f"overlaps block '{win}'")
        assert rows[win] == (0, 0, k)
    t8, t9 = res["twin@8"], res["twin@9"]
    assert sorted((t8.status, t9.status)) == [0, 1], (t8, t9)
    assert_clean_error(t9 if t8.status == 0 else t8, "'twin' already exists")
    assert rows["twin"] == ((0, 0, 8) if t8.status == 0 else (0, 0, 9))
    assert set(rows) == {"d0", "d1", "d2", "d3", "twin", *winners}
    for k in range(4):
        assert rows[f"d{k}"] == (0, 0, 12 + k)
        assert f"block d{k}: 2x2x1 at 0,0,{12 + k}" in res[f"d{k}"].out
    check_consistent(home)

    # then eight at once with no corner: seven free slots are left (4..7, 10, 11
    # and the twin's loser), so seven land in distinct slots and one is refused
    procs = {f"auto{i}": home.popen("block", "create", f"auto{i}", "--shape", "2x2x1") for i in range(8)}
    res = {key: finish(p) for key, p in procs.items()}
    ok = [key for key, r in res.items() if r.status == 0]
    assert len(ok) == 7, {key: r.err for key, r in res.items()}
    for r in res.values():
        if r.status:
            assert_clean_error(r, "no free place")
    zs = sorted(r["z0"] for r in home.db().execute("SELECT z0 FROM blocks WHERE name LIKE 'auto%'"))
    assert zs == sorted({4, 5, 6, 7, 10, 11, 8 if t8.status else 9})
    check_consistent(home)


def check_consistent(home: Home) -> None:
    con = home.db()
    if home.database == "sqlite":
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    m = home.machine()
    seen: dict[int, str] = {}
    for r in con.execute("SELECT * FROM blocks"):
        nodes = set(m.box((r["x0"], r["y0"], r["z0"]), (r["sx"], r["sy"], r["sz"])))
        assert blocks.check_box(m, (r["x0"], r["y0"], r["z0"]), (r["sx"], r["sy"], r["sz"])) is None
        for i in nodes:
            assert i not in seen, f"node {i} in blocks {seen[i]} and {r['name']}"
            seen[i] = r["name"]


def test_parallel_create_and_delete(home: Home) -> None:
    """Deletes and creates of the same slot interleave without losing either
    kind of update: each delete's block is gone, each create either took its
    slot or was told which block holds it."""
    home.ok("init", "--shape", "2x2x8", "--pset-size", "4")
    for k in range(4):
        home.ok("block", "create", f"old{k}", "--shape", "2x2x1", "--corner", f"0,0,{k}")
    procs: dict[str, subprocess.Popen[str]] = {}
    for k in range(4):
        procs[f"del{k}"] = home.popen("block", "delete", f"old{k}")
        procs[f"new{k}"] = home.popen("block", "create", f"new{k}", "--shape", "2x2x1", "--corner", f"0,0,{k}")
    res: dict[str, Result] = {key: finish(p) for key, p in procs.items()}
    names = {r["name"]: r["z0"] for r in home.db().execute("SELECT name, z0 FROM blocks")}
    for k in range(4):
        assert res[f"del{k}"].status == 0, res[f"del{k}"].err
        assert f"old{k}" not in names
        new = res[f"new{k}"]
        if new.status == 0:
            assert names[f"new{k}"] == k
        else:
            assert_clean_error(new, f"overlaps block 'old{k}'")     # it ran before the delete
            assert f"new{k}" not in names
    assert "Traceback" not in "".join(r.err for r in res.values())
    check_consistent(home)


# --- no secret in the database, and the database its owner's --------------------

def test_new_database_and_its_log_are_private(tmp_path: Path) -> None:
    path = tmp_path / "x.db"
    con = db.connect(path)
    con.execute("INSERT INTO ras_spool VALUES ('/spool', 1)")      # the log exists while con is open
    for suffix in ("", "-wal", "-shm"):
        assert stat.S_IMODE((tmp_path / f"x.db{suffix}").stat().st_mode) == 0o600, suffix
    assert "key" not in columns(con, "blocks")
    assert con.execute("PRAGMA secure_delete").fetchone()[0] == 1


def test_old_database_with_keys_is_scrubbed_and_tightened(tmp_path: Path) -> None:
    """A version 2 database (keys in blocks.key, mode 0644, a leftover
    rollback journal) loses every byte of the keys on the first open."""
    path = tmp_path / "x.db"
    old = sqlite3.connect(path, isolation_level=None)
    old.execute("PRAGMA journal_mode=WAL")
    old.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    for step in db.MIGRATIONS[:2]:
        old.executescript(step)
    old.execute("INSERT INTO schema_version VALUES (2)")
    keys = [os.urandom(32).hex() for _ in range(3)]
    for i, k in enumerate(keys):
        old.execute("INSERT INTO blocks (name, x0, y0, z0, sx, sy, sz, state, key, created, changed) "
                    "VALUES (?, 0, 0, ?, 1, 1, 1, 'Initialized', ?, 0, 0)", (f"B{i}", i, k))
    old.execute("UPDATE blocks SET key = ? WHERE name = 'B0'", (os.urandom(32).hex(),))   # a stale one too
    keys.append(k)
    old.close()
    (tmp_path / "x.db-journal").write_bytes(b"")
    for f in tmp_path.iterdir():
        f.chmod(0o644)
    assert any(k.encode() in path.read_bytes() for k in keys)

    con = db.connect(path)
    assert db.version(con) == len(db.MIGRATIONS)
    assert "key" not in columns(con, "blocks")
    assert [r["name"] for r in con.execute("SELECT name FROM blocks ORDER BY name")] == ["B0", "B1", "B2"]
    for f in tmp_path.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f.name
        data = f.read_bytes()
        for k in keys:
            assert k.encode() not in data, f.name
    con.close()
    data = path.read_bytes()
    assert not any(k.encode() in data for k in keys)


# --- lost state is refused, never re-created --------------------------------------

def machine_with_a_block(home: Home, booted: bool) -> Path:
    """A machine with block A (as if booted: a key file) and its database path."""
    home.ok("init", "--shape", "2x2x2")
    home.ok("block", "create", "A", "--shape", "2x2x2")
    d = home.path / "blocks" / "A"
    d.mkdir(parents=True, exist_ok=True)
    if booted:
        (d / "key").write_text("00" * 32 + "\n")
    return home.path / "lattice.db"


@pytest.mark.sqlite_file
@pytest.mark.parametrize("damage", ["empty", "missing"])
def test_lost_database_with_blocks_is_refused(home: Home, damage: str) -> None:
    path = machine_with_a_block(home, booted=True)
    for suffix in db.SUFFIXES:
        path.with_name(path.name + suffix).unlink(missing_ok=True)
    if damage == "empty":
        path.write_bytes(b"")
    for args in (["blocks"], ["jobs"], ["block", "create", "B", "--shape", "2x2x2"]):
        assert_clean_error(home.call(*args), f"the database {path} is {damage}", "block A", "A booted",
                           "refusing", status=1)
    # nothing was re-created behind the refusal
    assert (path.exists() and path.stat().st_size == 0) if damage == "empty" else not path.exists()


@pytest.mark.sqlite_file
def test_corrupt_database_is_refused(home: Home) -> None:
    path = machine_with_a_block(home, booted=False)
    for suffix in db.SUFFIXES[1:]:
        path.with_name(path.name + suffix).unlink(missing_ok=True)
    path.write_bytes(b"this is not an SQLite database, just bytes " * 100)
    before = path.read_bytes()
    # as its own process: this one may still hold the old file open through earlier in-process calls
    assert_clean_error(finish(home.popen("blocks")), f"cannot open the database {path}", "never replaces",
                       status=1)
    assert path.read_bytes() == before


@pytest.mark.sqlite_file
def test_new_machine_still_gets_its_database(home: Home) -> None:
    """No block has ever been made: a missing database is simply created."""
    home.ok("init", "--shape", "2x2x2")
    (home.path / "lattice.db").unlink()
    assert "name" in home.ok("blocks").out
    assert (home.path / "lattice.db").stat().st_size > 0


def test_init_force_refuses_a_machine_whose_block_looks_booted(home: Home) -> None:
    machine_with_a_block(home, booted=True)
    with home.db() as con:      # the record says Free, the key file says booted
        con.execute("UPDATE blocks SET state = 'Free'")
    assert_clean_error(home.call("init", "--force", "--shape", "2x2x2"), "block A of the old machine looks booted")
    (home.path / "blocks" / "A" / "key").unlink()
    home.ok("init", "--force", "--shape", "2x2x2")
    assert not (home.path / "blocks").exists()
