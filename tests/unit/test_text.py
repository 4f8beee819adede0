"""Untrusted text made safe to show (lattice.text) and RAS spool lines that a
job's message cannot split into forged records (lattice.state.ras.ingest)."""
from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from lattice.state import ras
from lattice.text import printable
from test_service_machine import Home, home  # noqa: F401 - fixture

PWN = "\x1b]0;pwned\x07\x1b[2J"


@pytest.mark.parametrize("raw,shown", [
    (PWN, "\\x1b]0;pwned\\x07\\x1b[2J"),
    ("a\nb\tc\rd", "a\\x0ab\\x09c\\x0dd"),
    ("\x00\x7f", "\\x00\\x7f"),
    ("\x9b31m", "\\x9b31m"),                        # C1 CSI: a terminal's ESC [ in one character
    ("\x85\u2028\u2029", "\\x85\\u2028\\u2029"),     # line breaks of Unicode
    ("abc\u202edef", "abc\\u202edef"),               # a bidirectional override
    ("\U000e0001", "\\U000e0001"),                   # a format character beyond the BMP
    ("\udcff", "\\udcff"),                           # a surrogate (an undecodable byte)
])
def test_control_characters_are_escaped(raw: str, shown: str) -> None:
    assert printable(raw) == shown


@pytest.mark.parametrize("s", ["", "plain text, 100% [ok] \\x1b", "Grüße, 日本語, ✓ ¿ \ufffd", "a b"])
def test_printable_text_is_unchanged(s: str) -> None:
    assert printable(s) is s or printable(s) == s


def test_escaping_twice_changes_nothing_more() -> None:
    once = printable(PWN + "\n\u2028")
    assert printable(once) == once and once.isprintable()


def test_keep_leaves_the_named_characters() -> None:
    assert printable("one\ntwo\x1b", keep="\n") == "one\ntwo\\x1b"


def ras_rows(con: sqlite3.Connection) -> list[sqlite3.Row]:
    return con.execute("SELECT severity, component, location, message FROM ras ORDER BY id").fetchall()


def test_a_spool_line_is_one_record_whatever_its_message_holds(home: Home) -> None:
    """str.splitlines also ends a line at \\r, \\x1c-\\x1e, \\x85, \\u2028: a job's
    abort text holding them made several records of one (an older ciod
    passed all but \\t, \\n and \\r through)."""
    home.ok("init", "--shape", "1x1x2", "--pset-size", "2")
    (home.path / "ras").mkdir(exist_ok=True)
    message = f"job 1 rank 0 called PMI abort with code 3: {PWN}\x1eforged\x85two\u2028three\rfour\x0bfive"
    line = f"2026-01-01T00:00:00Z\tERROR\tCIOD\tR00-M0-N00-C:J00\t{message}\n"
    (home.path / "ras" / "A-ionode0.log").write_bytes(line.encode())
    with home.active():
        from lattice.state import db
        con = db.connect()
        assert ras.ingest(con) == 1
        rows = ras_rows(con)
    assert len(rows) == 1, [tuple(r) for r in rows]
    assert rows[0]["message"] == printable(message) and rows[0]["message"].isprintable()
    assert "\\x1b]0;pwned\\x07\\x1b[2J\\x1eforged\\x85two\\u2028three\\x0dfour\\x0bfive" in rows[0]["message"]
    out = home.ok("ras").out
    assert "\x1b" not in out and "\\x1b]0;pwned" in out and out.count("\n") == len(ras_rows(con))


def test_the_service_nodes_own_records_are_stored_escaped(home: Home, tmp_path: Path) -> None:
    home.ok("init", "--shape", "1x1x2", "--pset-size", "2")
    with home.active():
        from lattice.state import db
        con = db.connect()
        ras.record(con, "ERROR", "APP", "loc\x1b[2J", f"job 1 said {PWN}\nsecond line")
        row = ras_rows(con)[-1]
    assert row["location"] == "loc\\x1b[2J"
    assert row["message"] == "job 1 said \\x1b]0;pwned\\x07\\x1b[2J\\x0asecond line"


def test_jobs_and_ras_escape_records_an_older_lattice_stored_raw(home: Home) -> None:
    home.ok("init", "--shape", "1x1x2", "--pset-size", "2")
    home.ok("block", "create", "A", "--shape", "1x1x2")
    with home.db() as con:
        con.execute("INSERT INTO jobs (block, user, uid, exe, args, cwd, nranks, state, submitted, kernel, status, "
                    "message) VALUES ('A', 'u', 0, '/bin/x', ?, '/', 1, 'Terminated', 0, 'linux', 3, ?)",
                    (f"/bin/x {PWN}", f"rank 0 called abort: {PWN}\nforged"))
        job = con.execute("SELECT max(id) FROM jobs").fetchone()[0]
        con.execute("INSERT INTO ranks (job, rank, location, how, value, message) VALUES (?, 0, 'R00', 'exit', 3, ?)",
                    (job, f"called abort: {PWN}"))
        con.execute("INSERT INTO ras (time, severity, component, location, job, message) VALUES "
                    "('2026-01-01T00:00:00Z', 'ERROR', 'APP', 'R00', ?, ?)", (job, f"raw {PWN}\nforged"))
    for args in (("jobs",), ("jobs", "--ranks", str(job)), ("ras",)):
        out = home.ok(*args).out
        assert "\x1b" not in out and "\x07" not in out and "\\x1b]0;pwned\\x07\\x1b[2J" in out, (args, out)
        assert not any(line.startswith("forged") for line in out.splitlines()), (args, out)
