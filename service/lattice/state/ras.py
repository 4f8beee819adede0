"""RAS events: the service node's own, and those the I/O nodes spool to files.

A message may carry what a job said (a PMI abort's text): every field is
stored with its control characters escaped (lattice.text), and a spool
line ends at "\n" only, so a job cannot forge a second record.

One time format everywhere: ISO 8601 UTC with microseconds (stamp), so
that text order is time order.  ciod writes the same (ionode/ciod/ras.c);
a line of an older ciod (whole seconds) is brought to it at ingest, and a
row an older lattice stored is brought to it when shown (events).  A spool
line names the job it is about (its fifth field, "-" for none), so `lattice
ras --job N` finds the I/O nodes' events of job N too."""
from __future__ import annotations

import datetime as dt
import os
import re
from pathlib import Path

from lattice.state import db, machine
from lattice.text import printable

SEVERITIES = ("INFO", "WARNING", "ERROR", "FATAL")


def spool_dir() -> Path:
    return machine.home() / "ras"


FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
_JOB_FIELD = re.compile(r"-|[0-9]{1,19}")


def stamp() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime(FORMAT)


def normal_time(text: str) -> str | None:
    """text (ISO 8601, any precision, UTC or with an offset) in the one
    format of RAS times; None if it is no time."""
    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.timezone.utc)
    return t.astimezone(dt.timezone.utc).strftime(FORMAT)


def spool_record(line: str, name: str) -> tuple[str, str, str, str, int | None, str]:
    """One spool line as (time, severity, component, location, job, message):
    the six fields of today's ciod, or the five of an older one (no job);
    anything else is stored as an unreadable-line WARNING."""
    parts = line.split("\t", 5)
    if len(parts) == 6 and _JOB_FIELD.fullmatch(parts[4]):
        when, severity, component, location, job, message = parts
    else:
        parts = line.split("\t", 4)
        when, severity, component, location, message = parts if len(parts) == 5 else ("", "", "", "", "")
        job = "-"
    time = normal_time(when)
    if time is None or severity not in SEVERITIES:
        return stamp(), "WARNING", "LATTICE", "-", None, f"unreadable RAS line in {name}: {printable(line)}"
    return (time, severity, printable(component), printable(location), None if job == "-" else int(job),
            printable(message))


def record(con: db.Connection, severity: str, component: str, location: str, message: str,
           job: int | None = None) -> None:
    assert severity in SEVERITIES
    con.execute("INSERT INTO ras (time, severity, component, location, job, message) VALUES (?,?,?,?,?,?)",
                (stamp(), severity, component, printable(location), job, printable(message)))


def ingest(con: db.Connection) -> int:
    """Import the complete lines the I/O nodes appended since last time.
    The spool keeps every block's log, so a file that has not grown since
    it was read is skipped by its size alone (no open, no write)."""
    added = 0
    try:
        files = sorted((e.path, e.stat().st_size) for e in os.scandir(spool_dir()) if e.name.endswith(".log"))
    except FileNotFoundError:
        return 0
    done = dict(con.execute('SELECT path, "offset" FROM ras_spool').fetchall())
    grown = [(path, int(done.get(path, 0))) for path, size in files if size > int(done.get(path, 0))]
    for path, offset in grown:
        with db.transaction(con):
            with open(path, "rb") as fh:
                fh.seek(offset)
                data = fh.read()
            end = data.rfind(b"\n") + 1  # a line still being written waits for next time
            name = os.path.basename(path)
            # one record a line: only "\n" ends one (str.splitlines would also end
            # it at \r, \x1c-\x1e, \x85, \u2028... a job could put in a message)
            for line in data[:end].decode(errors="replace").split("\n")[:-1]:
                con.execute("INSERT INTO ras (time, severity, component, location, job, message) "
                            "VALUES (?,?,?,?,?,?)", spool_record(line, name))
                added += 1
            con.execute('INSERT INTO ras_spool (path, "offset") VALUES (?, ?) '
                        'ON CONFLICT (path) DO UPDATE SET "offset" = excluded."offset"', (path, offset + end))
    return added


def events(con: db.Connection, severities: tuple[str, ...] = SEVERITIES,
           job: int | None = None) -> list[dict[str, object]]:
    """The events of these severities (and this job), oldest first: by
    time, then by the order they were stored.  Times are shown in the one
    format, whatever lattice stored them."""
    q = f"SELECT * FROM ras WHERE severity IN ({','.join('?' * len(severities))})"
    params: list[object] = list(severities)
    if job is not None:
        q += " AND job = ?"
        params.append(job)
    rows = [dict(r) for r in con.execute(q, params)]
    for r in rows:
        r["time"] = normal_time(str(r["time"])) or str(r["time"])
    rows.sort(key=lambda r: (str(r["time"]), int(str(r["id"]))))
    return rows
