"""The machine's state in a PostgreSQL database (psycopg 3), behind the
calling convention of the SQLite backend: `con.execute(sql with ?
placeholders, params)`, rows read by name and by index.

The SQL the modules write is SQLite's and portable; what differs is
translated here, once per statement text: `?` becomes psycopg's `%s`, and
the column name `user` (a reserved word in PostgreSQL, CURRENT_USER) is
quoted.  The migrations' column types are mapped too: INTEGER is 64-bit
in SQLite (BIGINT here: pids' start times and spool offsets outgrow 32
bits), REAL is a double (DOUBLE PRECISION here: float4 would round a Unix
time to minutes), AUTOINCREMENT is an identity column.

transaction() keeps SQLite's BEGIN IMMEDIATE meaning: one writer at a
time.  Each one takes the machine's transaction-scoped advisory lock
first, so two read-modify-write sequences never interleave, and a single
write outside a transaction takes it too, as SQLite's autocommit writes
take the write lock.  Readers never wait.  A wait longer than
$LATTICE_DB_TIMEOUT fails (lock_timeout) with one line naming the holder.

Imported only for a machine whose database is PostgreSQL: psycopg costs
tens of milliseconds to import, more than a whole warm `lattice jobs`.
"""
from __future__ import annotations

import functools
import os
import re
import sys
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Sequence
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import errors

from lattice.errors import LatticeError

# The advisory lock every writer takes (any number: one machine, one database)
WRITE_LOCK = 0x1A771CE

Params = Sequence[Any]


def redact(url: str) -> str:
    """The URL as said in messages: without a password, should it hold one."""
    try:
        u = urlsplit(url)
    except ValueError:
        return "(a malformed URL)"
    if u.password is not None:
        u = u._replace(netloc=f"{u.username or ''}:***@{u.netloc.rsplit('@', 1)[-1]}")
    return urlunsplit(u._replace(query=re.sub(r"(^|&)password=[^&]*", r"\1password=***", u.query)))


def check_url(url: str) -> None:
    """A URL `lattice init --database` may record: postgresql:// or
    postgres://, and no password (the machine's config is readable by every
    login host's users that run lattice: passwords go in ~/.pgpass,
    $PGPASSFILE or a service file, which libpq reads itself)."""
    try:
        u = urlsplit(url)
        u.port                                              # a bad port raises here
    except ValueError as e:
        raise LatticeError(f"--database {redact(url)}: not a URL ({e})") from e
    if u.scheme not in ("postgresql", "postgres"):
        raise LatticeError(f"--database {redact(url)}: not sqlite nor a postgresql://USER@HOST/DBNAME URL")
    if u.password is not None or re.search(r"(^|[?&])password=", u.query):
        raise LatticeError(f"--database {redact(url)}: a password in the URL would be stored in clear "
                           "in machine.toml; give it in ~/.pgpass or $PGPASSFILE (or a service file) instead")


class Row(tuple[Any, ...]):
    """A row read by index, by column name (as sqlite3.Row), and as a tuple."""

    names: dict[str, int]

    def __new__(cls, values: Sequence[Any], names: dict[str, int]) -> Row:
        self = super().__new__(cls, values)
        self.names = names
        return self

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            try:
                key = self.names[key]
            except KeyError:
                raise IndexError(f"no such column: {key}") from None
        return super().__getitem__(key)

    def keys(self) -> list[str]:
        return list(self.names)


def rows(cursor: Any) -> Any:
    """psycopg's row factory: Row, its names taken once per result."""
    index = {d.name: i for i, d in enumerate(cursor.description or ())}
    return lambda values: Row(values, index)


def tokens(sql: str) -> Iterator[tuple[str, str]]:
    """(kind, text): 'str' a '...' literal, 'id' a "..." identifier, 'note'
    a -- comment, 'code' anything else."""
    for m in re.finditer(r"'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|--[^\n]*|[^'\"-]+|-", sql):
        t = m.group()
        yield ("str" if t[0] == "'" else "id" if t[0] == '"' else
               "note" if t.startswith("--") else "code", t)


@functools.lru_cache(maxsize=512)
def statement(sql: str) -> str:
    """A statement of the modules' SQL as PostgreSQL and psycopg want it."""
    out = []
    for kind, t in tokens(sql):
        t = t.replace("%", "%%")                # psycopg reads every % of a statement it is given values for
        if kind == "code":
            t = t.replace("?", "%s")
            t = re.sub(r"(?<![\w.\"])user(?![\w\"])", '"user"', t, flags=re.IGNORECASE)
        out.append(t)
    return "".join(out)


def ddl(sql: str) -> str:
    """A migration's statement with SQLite's column types mapped."""
    out = []
    for kind, t in tokens(sql):
        if kind == "code":
            t = re.sub(r"\bINTEGER\s+PRIMARY\s+KEY\s+AUTOINCREMENT\b",
                       "BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY", t, flags=re.IGNORECASE)
            t = re.sub(r"\bINTEGER\b", "BIGINT", t, flags=re.IGNORECASE)
            t = re.sub(r"\bREAL\b", "DOUBLE PRECISION", t, flags=re.IGNORECASE)
        out.append(t)
    return statement("".join(out))


class Connection:
    """A connection to the machine's PostgreSQL database, used as the
    modules use a sqlite3.Connection."""

    def __init__(self, raw: psycopg.Connection[Any]) -> None:
        self.raw = raw
        self.in_transaction = False

    def execute(self, sql: str, params: Params = ()) -> psycopg.Cursor[Any]:
        if self.in_transaction or not writes(sql):
            return self.raw.execute(statement(sql), tuple(params))
        with self.transaction():                       # a lone write takes the writers' lock, as in SQLite
            return self.raw.execute(statement(sql), tuple(params))

    def executemany(self, sql: str, seq: Iterable[Params]) -> psycopg.Cursor[Any]:
        cur = self.raw.cursor()
        if self.in_transaction:
            cur.executemany(statement(sql), list(seq))
            return cur
        with self.transaction():
            cur.executemany(statement(sql), list(seq))
        return cur

    def close(self) -> None:
        self.raw.close()

    def __enter__(self) -> Connection:         # `with con:` as with sqlite3: every statement is committed
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        if self.in_transaction:
            raise RuntimeError("a transaction inside a transaction")
        self.raw.execute("BEGIN")
        self.in_transaction = True
        try:
            try:
                self.raw.execute("SELECT pg_advisory_xact_lock(%s)", (WRITE_LOCK,))
            except errors.LockNotAvailable as e:
                self.raw.execute("ROLLBACK")
                self.in_transaction = False
                e.add_note(self.holders())      # who to wait for, in the command's one line
                raise
            yield self
        except BaseException:
            if not self.in_transaction:
                raise
            self.in_transaction = False
            if not self.raw.closed:
                self.raw.execute("ROLLBACK")
            raise
        self.in_transaction = False
        self.raw.execute("COMMIT")

    def set_wait(self, seconds: float) -> None:
        """How long a writer waits for another's lock from now on."""
        self.raw.execute(f"SET lock_timeout = {wait_ms(seconds)}")

    def has_table(self, name: str) -> bool:
        row = self.raw.execute("SELECT to_regclass(%s) IS NOT NULL", (name,)).fetchone()
        return row is not None and row[0] is True

    def holders(self) -> str:
        """Who holds the writers' lock: "pid N: APPLICATION" (the session's
        application_name says which lattice command on which host)."""
        found = self.raw.execute(
            "SELECT a.pid, a.application_name, a.client_hostname, host(a.client_addr) FROM pg_locks l "
            "JOIN pg_stat_activity a ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.granted "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND l.objid = %s AND a.pid != pg_backend_pid()", (WRITE_LOCK,)).fetchall()
        return "; ".join(f"{r[1] or 'server pid ' + str(r[0])}" + (f" from {r[2] or r[3]}" if r[2] or r[3] else "")
                         for r in found)


def writes(sql: str) -> bool:
    return not re.match(r"\s*(SELECT|WITH|SHOW|SET)\b", sql, re.IGNORECASE)


def application_name() -> str:
    """What pg_stat_activity shows for this session: the lattice command and its pid."""
    words = " ".join(a.rsplit("/", 1)[-1] for a in sys.argv[:3] if a)
    return f"lattice pid {os.getpid()} on {os.uname().nodename}: {words}"[:63]


def connect(url: str, wait: float) -> Connection:
    try:
        raw = psycopg.connect(url, autocommit=True, row_factory=rows, connect_timeout=max(2, int(wait)),
                              application_name=application_name(),
                              options=f"-c lock_timeout={wait_ms(wait)}")
    except psycopg.Error as e:
        raise LatticeError(f"cannot connect to the machine's database {redact(url)}: {first_line(e)}",
                           "is the PostgreSQL server up, and may this user connect to it? (a password "
                           "goes in ~/.pgpass or $PGPASSFILE)") from e
    return Connection(raw)


def wait_ms(seconds: float) -> int:
    """lock_timeout for a wait: 0 would mean no limit to PostgreSQL, not none."""
    return max(1, int(seconds * 1000))


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def failure_line(e: psycopg.Error, url: str) -> str:
    """One line for a failure of the PostgreSQL database under a command."""
    if isinstance(e, errors.LockNotAvailable):
        from lattice.state import db
        holders = "; ".join(getattr(e, "__notes__", []))
        return (f"the machine's database {redact(url)} is locked by another lattice command"
                + (f" ({holders})" if holders else "")
                + f"; waited {db.busy_wait():g} s ($LATTICE_DB_TIMEOUT): try again when it is done")
    return f"the machine's database {redact(url)}: {first_line(e)}"


def reset(con: Connection, tables: list[str]) -> None:
    """Drop the machine's tables (`lattice init --force`), and only them."""
    with con.transaction():
        for t in [*tables, "schema_version"]:
            con.raw.execute(f'DROP TABLE IF EXISTS "{t}" CASCADE')
