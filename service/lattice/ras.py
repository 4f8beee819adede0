"""RAS events: the service node's own, and those the I/O nodes spool to files."""
from __future__ import annotations

import datetime as dt
import os
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
    """Import the complete lines the I/O nodes appended since last time.
    The spool keeps every block's log, so a file that has not grown since
    it was read is skipped by its size alone (no open, no write)."""
    added = 0
    try:
        files = sorted((e.path, e.stat().st_size) for e in os.scandir(spool_dir()) if e.name.endswith(".log"))
    except FileNotFoundError:
        return 0
    done = dict(con.execute("SELECT path, offset FROM ras_spool").fetchall())
    grown = [(path, int(done.get(path, 0))) for path, size in files if size > int(done.get(path, 0))]
    for path, offset in grown:
        with db.transaction(con):
            with open(path, "rb") as fh:
                fh.seek(offset)
                data = fh.read()
            end = data.rfind(b"\n") + 1  # a line still being written waits for next time
            name = os.path.basename(path)
            for line in data[:end].decode(errors="replace").splitlines():
                parts = line.split("\t", 4)
                if len(parts) != 5 or parts[1] not in SEVERITIES:
                    parts = [stamp(), "WARNING", "LATTICE", "-", f"unreadable RAS line in {name}: {line!r}"]
                con.execute("INSERT INTO ras (time, severity, component, location, message) VALUES (?,?,?,?,?)",
                            parts)
                added += 1
            con.execute("INSERT OR REPLACE INTO ras_spool (path, offset) VALUES (?, ?)", (path, offset + end))
    return added
