"""The machine's state: one database per machine, SQLite (the default, a
file in LATTICE_HOME) or PostgreSQL (`lattice init --database URL`,
lattice.state.postgres).  Both are used alike: `con.execute(sql, params)`
with ? placeholders, rows read by name and by index, and `transaction()`
for read-modify-write sequences; the schema's MIGRATIONS serve both.

SQLite: WAL mode and a busy timeout let several `lattice` commands work at once;
read-modify-write sequences use `transaction()` (BEGIN IMMEDIATE) so two of
them never interleave.  synchronous=NORMAL: in WAL mode a commit then
costs no fsync (the log is synced at checkpoints); the database stays
consistent through any crash, and only a crash of the host itself can lose
the last commits.  The schema is versioned: MIGRATIONS[i] moves the
database from version i to i+1, applied in order on open.

The database holds no secret (block keys live in blocks/NAME/key only), yet
it is its owner's alone: created 0600, tightened on open if it was not, as
are its -wal, -shm and -journal files.  secure_delete is on, so what a
row held before an update or delete is zeroed, not left in free space; the
move to version 3 (which dropped the blocks.key column of older versions)
also vacuums the file and truncates the log, so no old key survives there.
"""
from __future__ import annotations

import os
import sqlite3
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Protocol, Sequence, cast

from lattice.state import machine
from lattice.errors import LatticeError

if TYPE_CHECKING:
    from lattice.state import postgres


class Row(Protocol):
    """A row: by column name or index (sqlite3.Row, postgres.Row)."""
    def __getitem__(self, key: int | str, /) -> Any: ...
    def keys(self) -> list[str]: ...


class Cursor(Protocol):
    @property
    def rowcount(self) -> int: ...
    def fetchone(self) -> Any: ...
    def fetchall(self) -> list[Any]: ...
    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """What the modules use of a connection, whichever the backend."""
    def execute(self, sql: str, parameters: Sequence[Any] = ..., /) -> Cursor: ...
    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]], /) -> Cursor: ...
    def close(self) -> None: ...

MIGRATIONS: list[str] = [
    # 0 -> 1: the first schema
    """
    CREATE TABLE nodes (
        id        INTEGER PRIMARY KEY,          -- compute: linear index, I/O: -1 - pset
        kind      TEXT NOT NULL CHECK (kind IN ('compute', 'io')),
        x INTEGER, y INTEGER, z INTEGER,
        pset      INTEGER NOT NULL,
        location  TEXT NOT NULL UNIQUE
    );
    CREATE TABLE blocks (
        name      TEXT PRIMARY KEY,
        x0 INTEGER NOT NULL, y0 INTEGER NOT NULL, z0 INTEGER NOT NULL,
        sx INTEGER NOT NULL, sy INTEGER NOT NULL, sz INTEGER NOT NULL,
        state     TEXT NOT NULL DEFAULT 'Free'
                  CHECK (state IN ('Free', 'Allocated', 'Booting', 'Initialized', 'Terminating', 'Error')),
        auto      INTEGER NOT NULL DEFAULT 0,   -- created by `lattice run`, deleted after
        key       TEXT,                         -- hex security key while booted
        message   TEXT,
        created   REAL NOT NULL,
        changed   REAL NOT NULL
    );
    CREATE TABLE daemons (                       -- processes of a booted block
        block     TEXT NOT NULL REFERENCES blocks(name) ON DELETE CASCADE,
        kind      TEXT NOT NULL CHECK (kind IN ('ciod', 'cnode')),
        node      INTEGER NOT NULL,             -- pset (ciod) or compute node index (cnode)
        pid       INTEGER NOT NULL,
        address   TEXT,                         -- ciod: where it listens
        PRIMARY KEY (block, kind, node)
    );
    CREATE TABLE jobs (
        id        INTEGER PRIMARY KEY AUTOINCREMENT,
        block     TEXT,
        user      TEXT NOT NULL,
        uid       INTEGER NOT NULL,
        exe       TEXT NOT NULL,
        args      TEXT NOT NULL,                -- the command line, shell-quoted
        cwd       TEXT NOT NULL,
        nranks    INTEGER NOT NULL,
        state     TEXT NOT NULL DEFAULT 'Queued'
                  CHECK (state IN ('Queued', 'Starting', 'Running', 'Dying', 'Terminated', 'Error')),
        status    INTEGER,                      -- lattice run's exit status
        message   TEXT,
        submitted REAL NOT NULL,
        started   REAL,
        ended     REAL
    );
    CREATE TABLE ranks (
        job       INTEGER NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
        rank      INTEGER NOT NULL,
        location  TEXT NOT NULL,
        how       TEXT CHECK (how IN ('exit', 'signal', 'launch', 'lost')),
        value     INTEGER,
        message   TEXT,
        PRIMARY KEY (job, rank)
    );
    CREATE TABLE ras (
        id        INTEGER PRIMARY KEY AUTOINCREMENT,
        time      TEXT NOT NULL,
        severity  TEXT NOT NULL CHECK (severity IN ('INFO', 'WARNING', 'ERROR', 'FATAL')),
        component TEXT NOT NULL,
        location  TEXT NOT NULL,
        job       INTEGER,
        message   TEXT NOT NULL
    );
    CREATE TABLE ras_spool (                     -- how far each ciod spool file was imported
        path      TEXT PRIMARY KEY,
        "offset"  INTEGER NOT NULL
    );
    """,
    # 1 -> 2: the compute node kernel.  Which kernel ran a job (every job before
    # this version ran in Linux mode), its system calls by class summed over the
    # ranks (cnk jobs), and each rank's report line from its compute node
    # ("kernel=cnk pages=2M bigmem=... local=N shipped=N unsupported=N why=...")
    """
    ALTER TABLE jobs ADD COLUMN kernel TEXT CHECK (kernel IN ('cnk', 'linux'));
    UPDATE jobs SET kernel = 'linux';
    ALTER TABLE jobs ADD COLUMN calls_local INTEGER;
    ALTER TABLE jobs ADD COLUMN calls_shipped INTEGER;
    ALTER TABLE jobs ADD COLUMN calls_unsupported INTEGER;
    ALTER TABLE ranks ADD COLUMN report TEXT;
    """,
    # 2 -> 3: block keys leave the database (they live in blocks/NAME/key only);
    # connect() then vacuums so the bytes of old keys are gone from the file
    """
    ALTER TABLE blocks DROP COLUMN key;
    """,
    # 3 -> 4: who to ask whether a job or a block is still wanted.  A job's
    # `lattice run` (pid and start time, so a recycled pid is not taken for
    # it), and the run that booted a block for itself; lattice.state.reclaim ends
    # the records of runs that are gone and frees their blocks
    """
    ALTER TABLE jobs ADD COLUMN client_pid INTEGER;
    ALTER TABLE jobs ADD COLUMN client_start INTEGER;
    ALTER TABLE blocks ADD COLUMN owner_pid INTEGER;
    ALTER TABLE blocks ADD COLUMN owner_start INTEGER;
    """,
    # 4 -> 5: placement (lattice.nodes.placement): which host runs which pset.  The
    # hosts of an ssh placement (from its hostfile, at `lattice init`) and the
    # host of each I/O node (and of compute nodes that run on another host); each daemon's host (NULL: this one);
    # each booted block's host agents: the local process (the agent itself, or
    # the ssh or srun that carries it) whose life is the agent's connection
    """
    CREATE TABLE hosts (
        name      TEXT PRIMARY KEY,
        slots     INTEGER,                      -- compute nodes it may run (NULL: no limit)
        role      TEXT NOT NULL DEFAULT 'both' CHECK (role IN ('both', 'io', 'compute'))
    );
    ALTER TABLE nodes ADD COLUMN host TEXT;
    ALTER TABLE daemons ADD COLUMN host TEXT;
    CREATE TABLE agents (
        block     TEXT NOT NULL REFERENCES blocks(name) ON DELETE CASCADE,
        host      TEXT NOT NULL,
        pid       INTEGER NOT NULL,             -- on this host: the agent, or its ssh or srun
        start     INTEGER,                      -- its start time (a recycled pid is not it)
        log       TEXT NOT NULL,                -- what the agent reports, line by line
        PRIMARY KEY (block, host)
    );
    """,
    # 5 -> 6: which Linux mode ran a job: 1 the node sandbox (LAT_JOB_SANDBOX),
    # 0 the preload client (--no-sandbox); NULL for cnk and for older jobs
    """
    ALTER TABLE jobs ADD COLUMN sandbox INTEGER;
    """,
    # 6 -> 7: the queue (lattice.jobs.queue).  A submitted job's RunRequest as
    # JSON (NULL: a `lattice run`'s own record), why a Queued job waits, what it
    # needs (compute nodes; the block --block named) and its owner's group ids
    """
    ALTER TABLE jobs ADD COLUMN request TEXT;
    ALTER TABLE jobs ADD COLUMN reason TEXT;
    ALTER TABLE jobs ADD COLUMN need_nodes INTEGER;
    ALTER TABLE jobs ADD COLUMN need_block TEXT;
    ALTER TABLE jobs ADD COLUMN gid INTEGER;
    ALTER TABLE jobs ADD COLUMN group_ids TEXT;
    """,
]
KEYLESS = 3         # the first version whose database never held a key

SUFFIXES = ("", "-wal", "-shm", "-journal")


# Pages the write-ahead log may hold before a commit copies them back into
# the database (SQLite's default, 1000, made every command read up to 4 MiB).
WAL_PAGES = 64


def path() -> Path:
    return machine.home() / "lattice.db"


def database() -> str:
    """Where the machine's database is: "sqlite" (path()) or a postgresql:// URL."""
    return machine.load().database


def busy_wait() -> float:
    """Seconds a command waits for another's write lock before it gives up
    with one line (failure_line): $LATTICE_DB_TIMEOUT, default 30."""
    try:
        return max(0.0, float(os.environ.get("LATTICE_DB_TIMEOUT", "30")))
    except ValueError:
        return 30.0


def failure_line(e: BaseException) -> str | None:
    """One line for a failure of the machine's database or files under a
    command (the CLI's boundary, lattice.cli); None: not one of those."""
    import errno
    if "psycopg" in sys.modules:
        import psycopg
        if isinstance(e, psycopg.Error):
            from lattice.state import postgres
            try:
                url = database()
            except LatticeError:
                url = "(its URL)"
            return postgres.failure_line(e, url)
    if isinstance(e, sqlite3.OperationalError):
        text = str(e)
        if "locked" in text or "busy" in text:
            who = lock_holders()
            what = "lattice command" if who.startswith("lattice ") else "process"
            who = who.removeprefix("lattice ")
            return (f"the machine's database {path()} is locked by another {what}" + (f" ({who})" if who else "")
                    + f"; waited {busy_wait():g} s ($LATTICE_DB_TIMEOUT): try again when it is done")
        if "readonly" in text or "read-only" in text:
            return (f"the machine's database {path()} cannot be written ({text}): "
                    f"is LATTICE_HOME ({machine.home()}) read-only?")
        return f"the machine's database {path()}: {text}"
    if isinstance(e, sqlite3.DatabaseError):
        return f"the machine's database {path()}: {e}"
    if isinstance(e, OSError):
        where = f"{e.filename}: " if e.filename else ""
        hint = ""
        if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM) and str(e.filename or "").startswith(
                str(machine.home())):
            hint = f" (LATTICE_HOME {machine.home()} must be writable by whoever runs lattice)"
        return f"{where}{e.strerror or e}{hint}"
    return None


def writable(d: Path) -> bool:
    try:
        return os.access(d, os.W_OK) and not os.statvfs(d).f_flag & os.ST_RDONLY
    except OSError:
        return False


def lock_holders() -> str:
    """Who holds locks on the database's files (/proc/locks): "pid N: COMMAND"."""
    ids = set()
    for suffix in SUFFIXES:
        try:
            st = os.stat(path().with_name(path().name + suffix))
        except OSError:
            continue
        ids.add((os.major(st.st_dev), os.minor(st.st_dev), st.st_ino))
    pids = []
    try:
        with open("/proc/locks") as fh:
            for line in fh:
                f = line.split()
                if f[1] == "->":
                    f.pop(1)
                if len(f) < 6 or not f[4].isdigit() or int(f[4]) == os.getpid():
                    continue
                maj, mnr, ino = f[5].split(":")
                if (int(maj, 16), int(mnr, 16), int(ino)) in ids and int(f[4]) not in pids:
                    pids.append(int(f[4]))
    except (OSError, ValueError, IndexError):
        pass
    out = []
    ours = False
    for pid in pids[:3]:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().rstrip(b"\0").split(b"\0")
        except OSError:
            argv = [b"?"]
        # a lattice command: `lattice ...`, `python -m lattice ...`, a warm server's copy of one
        ours |= any(a.rsplit(b"/", 1)[-1] in (b"lattice", b"lattice.cli.warm") for a in argv[:4])
        words = b" ".join(argv).decode(errors="replace")
        printable = "".join(c if c.isprintable() else "?" for c in words)[:80]
        out.append(f"pid {pid}: {printable}")
    return ("lattice " if ours else "") + "; ".join(out)


def connect(db_path: Path | None = None) -> Connection:
    """The SQLite database at db_path, by default the machine's database
    (which must exist), whichever its backend."""
    if db_path is None:
        machine.require()
        where = database()
        if where != "sqlite":
            return connect_postgres(where)
        db_path = path()
        refuse_lost_state(db_path)
    try:
        private(db_path)
        wait = busy_wait()
        con = sqlite3.connect(db_path, timeout=wait, isolation_level=None)
        con.row_factory = sqlite3.Row
        write_ahead_log(con, wait)
        con.execute("PRAGMA synchronous=NORMAL")
        con.execute("PRAGMA foreign_keys=ON")
        con.execute(f"PRAGMA busy_timeout={int(wait * 1000)}")
        con.execute("PRAGMA secure_delete=ON")
        # Every command is a new process and the first connection to the log
        # reads all of it back (WAL recovery): keep it short.
        con.execute(f"PRAGMA wal_autocheckpoint={WAL_PAGES}")
        con.execute(f"PRAGMA journal_size_limit={WAL_PAGES * 4096}")
        was = migrate(con)
        if 0 < was < KEYLESS:
            scrub(con)
        private(db_path)        # the -wal and -shm files SQLite just made
    except sqlite3.OperationalError as e:
        if "locked" in str(e) or "readonly" in str(e):
            raise LatticeError(failure_line(e) or str(e)) from e
        if not writable(db_path.parent):
            raise LatticeError(f"cannot open the database {db_path}: {e}, and LATTICE_HOME {db_path.parent} "
                               "is read-only: lattice must write there") from e
        raise LatticeError(f"cannot open the database {db_path}: {e}",
                           "lattice never replaces a damaged database: restore it from a backup, or end "
                           "the machine's daemons by hand and start a new machine (`lattice init`)") from e
    except sqlite3.DatabaseError as e:
        raise LatticeError(f"cannot open the database {db_path}: {e}",
                           "lattice never replaces a damaged database: restore it from a backup, or end "
                           "the machine's daemons by hand and start a new machine (`lattice init`)") from e
    except OSError as e:
        raise LatticeError(f"cannot open the database {db_path}: {e.strerror}",
                           "`lattice` is run by the owner of the machine directory") from e
    return con


def connect_postgres(url: str) -> Connection:
    from lattice.state import postgres
    con = postgres.connect(url, busy_wait())
    try:
        if current(con):
            return con          # the usual case: two round trips
        if not con.has_table("schema_version"):
            refuse_lost_blocks(f"the database {postgres.redact(url)} is empty")
        migrate(con)
    except BaseException:
        con.close()
        raise
    return con


def refuse_lost_state(db_path: Path) -> None:
    """A missing or empty database in a machine directory that has had
    blocks is lost state, not a new machine: starting an empty one would
    forget booted blocks whose daemons still run (and let new blocks be
    made over their nodes).  Refuse, and say what is there."""
    try:
        empty = db_path.stat().st_size == 0
    except FileNotFoundError:
        empty = True
    if not empty:
        return
    refuse_lost_blocks(f"the database {db_path} is {'missing' if not db_path.exists() else 'empty'}")


def refuse_lost_blocks(what: str) -> None:
    blocks_dir = machine.home() / "blocks"
    try:
        names = sorted(d.name for d in blocks_dir.iterdir() if d.is_dir())
    except OSError:
        names = []
    if not names:
        return
    booted = [n for n in names if (blocks_dir / n / "key").exists()]
    raise LatticeError(
        f"{what}, but {blocks_dir} holds block{'s' if len(names) > 1 else ''} "
        f"{', '.join(names)}" + (f" ({', '.join(booted)} booted: their daemons may still run)" if booted else "")
        + "; refusing to start an empty one",
        "restore the database from a backup; or stop the blocks' daemons (see their pids in "
        f"{blocks_dir}/NAME/log), remove {blocks_dir} and run `lattice init` again")


def write_ahead_log(con: sqlite3.Connection, wait: float = 30.0) -> None:
    """Put the database in WAL mode.  Switching takes an exclusive lock, and
    SQLite answers "database is locked" at once, without its busy handler,
    while another process is switching or recovering the same file: retry
    until the connection's own timeout has passed."""
    deadline = time.monotonic() + wait
    while True:
        try:
            con.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def private(db_path: Path) -> None:
    """Create the database file 0600 if missing; make it and its companion
    files 0600 if they are more open (SQLite gives new -wal, -shm and
    -journal files the database's mode)."""
    try:
        os.close(os.open(db_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
    except FileExistsError:
        pass
    for suffix in SUFFIXES:
        f = db_path.with_name(db_path.name + suffix)
        try:
            st = os.stat(f)
        except FileNotFoundError:
            continue
        if st.st_mode & 0o077:
            os.chmod(f, 0o600)


def scrub(con: sqlite3.Connection) -> None:
    """Rewrite the database and empty its log: the old blocks.key values must
    not survive in free pages or in old log frames."""
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    con.execute("VACUUM")
    con.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def version(con: Connection) -> int:
    con.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    row = con.execute("SELECT version FROM schema_version").fetchone()
    return int(row[0]) if row else 0


def current(con: Connection) -> bool:
    """Whether the schema is this lattice's (read without taking the write lock)."""
    if not isinstance(con, sqlite3.Connection) and not cast("postgres.Connection", con).has_table("schema_version"):
        return False
    try:
        row = con.execute("SELECT version FROM schema_version").fetchone()
    except sqlite3.OperationalError:
        return False            # a new database: no table yet
    return bool(row) and int(row[0]) == len(MIGRATIONS)


def migrate(con: Connection) -> int:
    """Bring the schema up to date; the version it had (0: a new database)."""
    if current(con):
        return len(MIGRATIONS)
    with transaction(con):
        v = version(con)
        if v > len(MIGRATIONS):
            raise LatticeError(f"the database has schema version {v}, newer than this lattice "
                               f"understands ({len(MIGRATIONS)}): use a newer lattice")
        pg = not isinstance(con, sqlite3.Connection)
        if pg:
            from lattice.state import postgres
        for step in MIGRATIONS[v:]:
            for statement in step.split(";"):
                if statement.strip():
                    con.execute(postgres.ddl(statement) if pg else statement)
        if v < len(MIGRATIONS):
            con.execute("DELETE FROM schema_version")
            con.execute("INSERT INTO schema_version VALUES (?)", (len(MIGRATIONS),))
    return v


@contextmanager
def transaction(con: Connection) -> Iterator[Connection]:
    """A read-modify-write sequence no other writer interleaves with:
    SQLite's write lock (BEGIN IMMEDIATE), PostgreSQL's advisory lock."""
    if not isinstance(con, sqlite3.Connection):
        with cast("postgres.Connection", con).transaction():
            yield con
        return
    con.execute("BEGIN IMMEDIATE")
    try:
        yield con
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


def errors() -> tuple[type[Exception], ...]:
    """The exceptions a failure of the machine's database raises, whichever its backend."""
    if "psycopg" in sys.modules:
        import psycopg
        return sqlite3.Error, psycopg.Error
    return (sqlite3.Error,)


def tables() -> list[str]:
    """The machine's tables, as the migrations made them."""
    import re
    return re.findall(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)", "".join(MIGRATIONS))


def set_wait(con: Connection, seconds: float) -> None:
    """How long con waits for another writer's lock from now on."""
    if isinstance(con, sqlite3.Connection):
        con.execute(f"PRAGMA busy_timeout={int(seconds * 1000)}")
    else:
        cast("postgres.Connection", con).set_wait(seconds)


def now() -> float:
    return time.time()
