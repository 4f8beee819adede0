"""RAS events: the service node's own, and those the I/O nodes spool to files.

A message may carry what a job said (a PMI abort's text): every field is
stored with its control characters escaped (lattice.text), and a spool
line ends at "\n" only, so a job cannot forge a second record."""
from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

from lattice.state import db, machine
from lattice.text import printable

SEVERITIES = ("INFO", "WARNING", "ERROR", "FATAL")


def spool_dir() -> Path:
    return machine.home() / "ras"


def stamp() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


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
                parts = [printable(p) for p in line.split("\t", 4)]
                if len(parts) != 5 or parts[1] not in SEVERITIES:
                    parts = [stamp(), "WARNING", "LATTICE", "-", f"unreadable RAS line in {name}: {printable(line)}"]
                con.execute("INSERT INTO ras (time, severity, component, location, message) VALUES (?,?,?,?,?)",
                            parts)
                added += 1
            con.execute('INSERT INTO ras_spool (path, "offset") VALUES (?, ?) '
                        'ON CONFLICT (path) DO UPDATE SET "offset" = excluded."offset"', (path, offset + end))
    return added
