"""RAS events: the service node's own, and those the I/O nodes spool to files."""
from __future__ import annotations

import datetime as dt
import sqlite3
from pathlib import Path

from lattice import db, machine

SEVERITIES = ("INFO", "WARNING", "ERROR", "FATAL")


def spool_dir() -> Path:
    return machine.home() / "ras"


def stamp() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def record(con: sqlite3.Connection, severity: str, component: str, location: str, message: str,
           job: int | None = None) -> None:
    assert severity in SEVERITIES
    con.execute("INSERT INTO ras (time, severity, component, location, job, message) VALUES (?,?,?,?,?,?)",
                (stamp(), severity, component, location, job, message))


def ingest(con: sqlite3.Connection) -> int:
    """Import the complete lines the I/O nodes appended since last time."""
    added = 0
    d = spool_dir()
    if not d.is_dir():
        return 0
    for f in sorted(d.glob("*.log")):
        with db.transaction(con):
            row = con.execute("SELECT offset FROM ras_spool WHERE path = ?", (str(f),)).fetchone()
            offset = int(row[0]) if row else 0
            with f.open("rb") as fh:
                fh.seek(offset)
                data = fh.read()
            end = data.rfind(b"\n") + 1  # a line still being written waits for next time
            for line in data[:end].decode(errors="replace").splitlines():
                parts = line.split("\t", 4)
                if len(parts) != 5 or parts[1] not in SEVERITIES:
                    parts = [stamp(), "WARNING", "LATTICE", "-", f"unreadable RAS line in {f.name}: {line!r}"]
                con.execute("INSERT INTO ras (time, severity, component, location, message) VALUES (?,?,?,?,?)",
                            parts)
                added += 1
            con.execute("INSERT OR REPLACE INTO ras_spool (path, offset) VALUES (?, ?)", (str(f), offset + end))
    return added
