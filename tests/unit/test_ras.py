"""RAS an operator can trust (issue 26): one time format, time order across
the service node's own events and the I/O nodes' spooled ones, and every
event of a job found by `lattice ras --job`."""
from __future__ import annotations

import re
import struct
from pathlib import Path

from lattice.state import ras
from test_ciod import CTL_EXIT, EXIT_LOST, Ciod, Job, ciod, ciod_bin  # noqa: F401 - fixtures
from test_service_machine import Home, home  # noqa: F401 - fixture

MICROS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def spool(home: Home, *lines: str) -> None:
    (home.path / "ras").mkdir(exist_ok=True)
    with open(home.path / "ras" / "R00-ionode0.log", "a") as f:
        f.write("".join(line + "\n" for line in lines))


def shown(home: Home, *args: str) -> list[str]:
    return home.ok("ras", *args).out.splitlines()


def test_ciod_writes_microseconds_and_the_job_an_event_is_about(ciod: Ciod, tmp_path: Path) -> None:
    """The spool line of a node lost under job 11 says job 11 in its own
    field, and its time has the service node's precision."""
    job = Job(ciod, tmp_path, job_id=11, image=b"x" * 10)
    job.nodes[1].close()
    ex = job.next_ctl(CTL_EXIT)
    assert struct.unpack("<QIIIi", ex[:24])[:4] == (11, 1, 1, EXIT_LOST)
    lines = [line.split("\t") for line in ciod.rastext().splitlines()]
    assert lines and all(len(f) == 6 and MICROS.fullmatch(f[0]) for f in lines), lines
    lost = [f for f in lines if f[1] == "ERROR" and "lost while running rank 1 of job 11" in f[5]]
    assert lost and lost[0][4] == "11", lines
    started = [f for f in lines if "listening on" in f[5]]
    assert started and started[0][4] == "-", lines      # about no job


def test_an_old_ciods_whole_seconds_sort_among_the_service_nodes_events(home: Home) -> None:
    """Stored as written, "…:05Z" sorted after every "…:05.xxxxxxZ" (the
    '.' is below 'Z'): an event of 05.0 came after one of 05.7."""
    home.ok("init", "--shape", "1x1x2", "--pset-size", "2")
    with home.active():
        from lattice.state import db
        con = db.connect()
        with db.transaction(con):
            for t, what in (("2026-01-01T00:00:04.900000Z", "before"), ("2026-01-01T00:00:05.700000Z", "after")):
                con.execute("INSERT INTO ras (time, severity, component, location, message) "
                            "VALUES (?, 'INFO', 'MMCS', 'R00', ?)", (t, what))
        con.close()
    spool(home, "2026-01-01T00:00:05Z\tWARNING\tCIOD\tR00-M0-N00-I:J00\tbetween")
    out = shown(home)
    assert [line.split()[-1] for line in out] == ["before", "between", "after"], out
    assert all(MICROS.fullmatch(line.split()[0]) for line in out), out
    assert out[1].startswith("2026-01-01T00:00:05.000000Z"), out


def test_ras_job_shows_the_io_nodes_events_of_the_job(home: Home) -> None:
    home.ok("init", "--shape", "1x1x2", "--pset-size", "2")
    spool(home,
          "2026-01-01T00:00:01.000001Z\tINFO\tCIOD\tR00-M0-N00-C:J00\t7\tjob 7 rank 0 exited with code 3",
          "2026-01-01T00:00:02.000002Z\tINFO\tCIOD\tR00-M0-N00-I:J00\t-\tciod of block R00 listening",
          "2026-01-01T00:00:03.000003Z\tINFO\tCIOD\tR00-M0-N00-I:J00\t8\tjob 8 rank 1 exited with code 1")
    out = shown(home, "--job", "7")
    assert len(out) == 1 and out[0].endswith("job 7 rank 0 exited with code 3"), out
    assert "R00-M0-N00-C:J00" in out[0] and "\t" not in out[0]
    assert len(shown(home)) == 3


def test_a_line_that_is_no_event_is_kept_as_a_warning() -> None:
    for line in ("yesterday\tINFO\tCIOD\tR00\t-\tx", "2026-01-01T00:00:01Z\tNOTICE\tCIOD\tR00\tx", "x"):
        time, severity, component, _, job, message = ras.spool_record(line, "A.log")
        assert (severity, component, job) == ("WARNING", "LATTICE", None) and "unreadable RAS line in A.log" in message


def test_times_in_any_precision_or_offset_become_the_one_format() -> None:
    assert ras.normal_time("2026-01-01T00:00:05Z") == "2026-01-01T00:00:05.000000Z"
    assert ras.normal_time("2026-01-01T00:00:05.123Z") == "2026-01-01T00:00:05.123000Z"
    assert ras.normal_time("2026-01-01T01:00:05.5+01:00") == "2026-01-01T00:00:05.500000Z"
    assert ras.normal_time("not a time") is None
    assert MICROS.fullmatch(ras.stamp())
