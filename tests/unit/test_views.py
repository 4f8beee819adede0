"""lattice.views: the machine's state as JSON-ready documents, checked
against a state each test makes in a real database (nothing is booted: a
"booted" block's daemons are processes that carry its mark, as a ciod's
command line does, and one that is gone stands for a lost node).

The `made` fixture is shared with test_cli_json.py."""
from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

from lattice import views
from lattice.nodes import boot
from lattice.state import db, machine
from lattice.transport.ciodclient import Counters
from test_service_machine import Home, home  # noqa: F401 - fixture

GONE = 2**22 + 1        # above pid_max: no such process
T0 = 1_780_000_000.25   # 2026-05-28T20:26:40.250000Z
REPORT = "kernel=cnk pages=2M bigmem=64M local=5 shipped=10 unsupported=0 why=the job asked for it"
RAS = [  # time as stored (three precisions), severity, component, location, job, message
    ("2026-01-01T00:00:02Z", "INFO", "CIOD", "R00-M0-N00-I:J00", None, "whole seconds"),
    ("2026-01-01T00:00:02.500Z", "WARNING", "MMCS", "A", 1, "milliseconds"),
    ("2026-01-01T00:00:01.000001Z", "ERROR", "MMCS", "R00-M0-N00-C:J09", None, "micro, in B"),
    ("2026-01-01T00:00:03.000000Z", "FATAL", "MMCS", "-", 2, "of job 2 on A \x1b[2J"),
]


@dataclass
class Made:
    """A 2x2x4 machine (psets 0 and 1): block A (pset 0) Initialized, its
    compute node 7 lost; block B (pset 1) Free; three jobs, job 1's ranks,
    and RAS events."""
    home: Home
    daemons: list[subprocess.Popen[bytes]]

    def con(self) -> sqlite3.Connection:
        return db.connect()

    def m(self) -> machine.Machine:
        return self.home.machine()


def fake_daemon(block: str) -> subprocess.Popen[bytes]:
    """A process whose command line names the block's directory, as its ciods' and cnodes' do."""
    p = subprocess.Popen([sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()",
                          str(boot.block_dir(block)) + "/x"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert p.stdout is not None and p.stdout.readline() == b"up\n"     # its command line is its own by now
    return p


@pytest.fixture
def made(home: Home, monkeypatch: pytest.MonkeyPatch) -> Iterator[Made]:
    monkeypatch.setenv("LATTICE_HOME", str(home.path))     # the machine the views read (and its daemons' mark)
    home.ok("init")
    home.ok("block", "create", "A", "--shape", "2x2x2")
    home.ok("block", "create", "B", "--shape", "2x2x2")
    live: list[subprocess.Popen[bytes]] = []
    try:
        live += [fake_daemon("A") for _ in range(8)]
        with home.db() as con:
            con.execute("UPDATE blocks SET state = 'Initialized', changed = ? WHERE name = 'A'", (T0,))
            con.execute("INSERT INTO daemons (block, kind, node, pid, address) VALUES ('A', 'ciod', 0, ?, 'x')",
                        (live[0].pid,))
            for i in range(8):
                con.execute("INSERT INTO daemons (block, kind, node, pid) VALUES ('A', 'cnode', ?, ?)",
                            (i, GONE if i == 7 else live[1 + i].pid))
            jobs = [("A", "u1", "cnk", None, "Terminated", 0, None, T0, T0 + 1, T0 + 3.5, 10, 20, 0),
                    ("A", "u2", "linux", 1, "Running", None, None, T0 + 10, T0 + 11, None, None, None, None),
                    ("B", "u1", "linux", 0, "Error", 1, "rank 0 \x1b]0;x\x07 failed", T0 + 20, None, T0 + 21,
                     None, None, None)]
            for j in jobs:
                con.execute("INSERT INTO jobs (block, user, uid, exe, args, cwd, nranks, kernel, sandbox, state, "
                            "status, message, submitted, started, ended, calls_local, calls_shipped, "
                            "calls_unsupported) VALUES (?, ?, 0, '/bin/x', '/bin/x \"a b\"', '/', 2, ?, ?, ?, ?, ?, "
                            "?, ?, ?, ?, ?, ?)", j)
            con.execute("INSERT INTO ranks (job, rank, location, how, value, message, report) VALUES "
                        "(1, 0, 'R00-M0-N00-C:J00', 'exit', 0, NULL, ?), "
                        "(1, 1, 'R00-M0-N00-C:J01', 'signal', 9, 'killed', NULL)", (REPORT,))
            con.executemany("INSERT INTO ras (time, severity, component, location, job, message) "
                            "VALUES (?, ?, ?, ?, ?, ?)", RAS)
        yield Made(home, live)
    finally:
        for p in live:
            p.kill()
            p.wait()


def jsonable(doc: Any) -> None:
    """Only JSON's own types, and unchanged by a round trip through JSON."""
    assert json.loads(json.dumps(doc)) == doc


# ---- machine -----------------------------------------------------------------

def test_machine_view_lists_every_node_with_its_block_state_host_and_loss(made: Made) -> None:
    doc = views.machine_view(made.con(), made.m())
    jsonable(doc)
    assert doc["schema"] == "lattice.machine/1"
    assert (doc["shape"], doc["compute_nodes"], doc["io_nodes"], doc["pset_size"]) == ([2, 2, 4], 16, 2, 8)
    assert (doc["memory"], doc["cores"], doc["placement"]) == (512 << 20, 2, "local")
    nodes = doc["nodes"]
    assert [n["location"] for n in nodes] == (["R00-M0-N00-I:J00"] + [f"R00-M0-N00-C:J{i:02d}" for i in range(8)]
                                              + ["R00-M0-N00-I:J01"] + [f"R00-M0-N00-C:J{i:02d}" for i in range(8, 16)])
    io0, j05, io1, j13 = nodes[0], nodes[6], nodes[9], nodes[15]
    assert io0 == {"location": "R00-M0-N00-I:J00", "kind": "io", "x": None, "y": None, "z": None, "pset": 0,
                   "io_node": None, "host": "local", "block": "A", "state": "Initialized", "lost": False}
    assert j05 == {"location": "R00-M0-N00-C:J05", "kind": "compute", "x": 1, "y": 0, "z": 1, "pset": 0,
                   "io_node": "R00-M0-N00-I:J00", "host": "local", "block": "A", "state": "Initialized",
                   "lost": False}
    assert (io1["block"], io1["state"], j13["block"], j13["state"], j13["pset"]) == ("B", "Free", "B", "Free", 1)
    assert [n["location"] for n in nodes if n["lost"]] == ["R00-M0-N00-C:J07"]


def test_machine_summary_counts_by_state_pset_and_host(made: Made) -> None:
    with made.home.db() as con:
        con.execute("DELETE FROM blocks WHERE name = 'B'")
    doc = views.machine_summary(made.con(), made.m())
    jsonable(doc)
    assert doc["schema"] == "lattice.machine.summary/1"
    assert doc["by_state"] == {"Unassigned": 8, "Initialized": 8}
    assert doc["lost"] == 1
    assert doc["hosts"] == [{"host": "local", "io_nodes": 2, "compute_nodes": 16,
                             "by_state": {"Unassigned": 8, "Initialized": 8}}]
    assert doc["psets"] == [
        {"pset": 0, "io_node": "R00-M0-N00-I:J00", "host": "local", "compute_host": "local", "block": "A",
         "state": "Initialized", "compute_nodes": 8, "lost": 1},
        {"pset": 1, "io_node": "R00-M0-N00-I:J01", "host": "local", "compute_host": "local", "block": None,
         "state": "Unassigned", "compute_nodes": 8, "lost": 0}]
    assert "nodes" not in doc


def test_machine_hosts_come_from_the_placement_and_the_booted_daemons(made: Made) -> None:
    """A daemon placed on another host is shown there, per node and per host."""
    with made.home.db() as con:
        con.execute("UPDATE daemons SET host = 'n1' WHERE kind = 'ciod' AND node = 0")
        con.execute("UPDATE daemons SET host = 'n2' WHERE kind = 'cnode' AND node = 0")
    nodes = views.machine_view(made.con(), made.m())["nodes"]
    assert (nodes[0]["host"], nodes[1]["host"], nodes[2]["host"]) == ("n1", "n2", "local")
    hosts = {h["host"]: h for h in views.machine_summary(made.con(), made.m())["hosts"]}
    assert (hosts["n1"]["io_nodes"], hosts["n2"]["compute_nodes"], hosts["local"]["compute_nodes"]) == (1, 8, 8)


# ---- blocks ------------------------------------------------------------------

def test_blocks_view(made: Made) -> None:
    a, b = views.blocks_view(made.con(), made.m())
    jsonable([a, b])
    assert a["name"] == "A" and a["state"] == "Initialized"
    assert (a["shape"], a["corner"], a["nodes"], a["io_nodes"], a["psets"]) == ([2, 2, 2], [0, 0, 0], 8, 1, [0])
    assert a["booted"] == a["changed"] == "2026-05-28T20:26:40.250000Z"
    assert a["hosts"] == ["local"] and a["auto"] is False and a["message"] is None
    assert (a["owner_pid"], a["owner"]) == (None, None)
    assert (b["name"], b["state"], b["corner"], b["psets"], b["booted"], b["hosts"]) == ("B", "Free", [0, 0, 2], [1],
                                                                                         None, [])
    assert b["created"].endswith("Z") and b["created"][:2] == "20"


def test_blocks_view_names_the_owner_of_a_block_a_run_holds(made: Made) -> None:
    import os
    import pwd
    with made.home.db() as con:
        con.execute("UPDATE blocks SET owner_pid = ?, auto = 1 WHERE name = 'B'", (os.getpid(),))
    b = views.blocks_view(made.con(), made.m())[1]
    assert (b["owner_pid"], b["owner"], b["auto"]) == (os.getpid(), pwd.getpwuid(os.getuid()).pw_name, True)


# ---- jobs --------------------------------------------------------------------

def test_jobs_view_every_column_with_iso_times_and_elapsed_seconds(made: Made) -> None:
    con = made.con()
    before = time.time()
    j1, j2, j3 = views.jobs_view(con)
    after = time.time()
    jsonable([j1, j2, j3])
    assert j1 == {"id": 1, "block": "A", "user": "u1", "ranks": 2, "kernel": "cnk", "state": "Terminated",
                  "status": 0, "submitted": "2026-05-28T20:26:40.250000Z", "started": "2026-05-28T20:26:41.250000Z",
                  "ended": "2026-05-28T20:26:43.750000Z", "elapsed": 2.5, "command": '/bin/x "a b"',
                  "message": None, "calls": {"local": 10, "shipped": 20, "unsupported": 0}, "reason": None}
    assert (j2["kernel"], j2["status"], j2["ended"], j2["calls"]) == ("linux/sandbox", None, None, None)
    assert before - (T0 + 11) <= j2["elapsed"] <= after - (T0 + 11)     # still running: from its start to now
    assert (j3["kernel"], j3["started"], j3["elapsed"]) == ("linux/preload", None, None)
    assert j3["message"] == "rank 0 \x1b]0;x\x07 failed"    # as stored; json.dumps escapes it
    assert "\\u001b]0;x\\u0007" in json.dumps(j3)


def test_jobs_view_running_one_job_and_the_last_n(made: Made) -> None:
    con = made.con()
    assert [j["id"] for j in views.jobs_view(con, running=True)] == [2]
    assert [j["id"] for j in views.jobs_view(con, job=3)] == [3]
    assert [j["id"] for j in views.jobs_view(con, limit=2)] == [2, 3]
    assert views.jobs_view(con, job=99) == []


def test_ranks_view_with_the_nodes_report_as_fields(made: Made) -> None:
    r0, r1 = views.ranks_view(made.con(), 1)
    jsonable([r0, r1])
    assert r0 == {"rank": 0, "location": "R00-M0-N00-C:J00", "how": "exit", "value": 0, "message": None,
                  "report": REPORT, "report_fields": {"kernel": "cnk", "pages": "2M", "bigmem": "64M", "local": "5",
                                                      "shipped": "10", "unsupported": "0",
                                                      "why": "the job asked for it"}}
    assert (r1["how"], r1["value"], r1["message"], r1["report"], r1["report_fields"]) == ("signal", 9, "killed",
                                                                                        None, None)
    assert views.ranks_view(made.con(), 2) == []


# ---- RAS ---------------------------------------------------------------------

def test_ras_view_in_time_order_in_one_format(made: Made) -> None:
    events = views.ras_view(made.con())
    jsonable(events)
    assert [(e["time"], e["message"]) for e in events] == [
        ("2026-01-01T00:00:01.000001Z", "micro, in B"), ("2026-01-01T00:00:02.000000Z", "whole seconds"),
        ("2026-01-01T00:00:02.500000Z", "milliseconds"), ("2026-01-01T00:00:03.000000Z", "of job 2 on A \x1b[2J")]
    assert events[2] == {"id": 2, "time": "2026-01-01T00:00:02.500000Z", "severity": "WARNING", "component": "MMCS",
                         "location": "A", "job": 1, "message": "milliseconds"}


def test_ras_view_filters(made: Made) -> None:
    con = made.con()

    def ids(**kw: Any) -> list[int]:
        return [e["id"] for e in views.ras_view(con, m=made.m(), **kw)]
    assert ids(severity="ERROR") == [3, 4]
    assert ids(severity="INFO") == [3, 1, 2, 4]
    assert ids(job=2) == [4]
    assert ids(block="A") == [1, 2, 4]        # its I/O node; the block by name; its job 2
    assert ids(block="B") == [3]              # one of its compute nodes
    assert ids(limit=2) == [2, 4]
    assert ids(block="A", severity="WARNING", limit=1) == [4]


def test_ras_view_refuses_a_bad_severity_and_an_unknown_block(made: Made) -> None:
    from lattice.errors import LatticeError
    with pytest.raises(LatticeError, match="bad severity 'LOUD'"):
        views.ras_view(made.con(), severity="LOUD")
    with pytest.raises(LatticeError, match="no block named 'Z'"):
        views.ras_view(made.con(), block="Z")


# ---- counters, personality -----------------------------------------------------

def test_counters_document_keeps_each_ionodes_counters() -> None:
    c = Counters(calls={"openat": 3, "write": 0})
    c.bytes, c.ns, c.hist, c.stats = {"openat": 0, "write": 0}, {"openat": 900, "write": 0}, \
        {"openat": [0, 1, 2], "write": [0, 0, 0]}, {"eager": 4}
    doc = views.counters_document("A", [("R00-M0-N00-I:J00", c)])
    jsonable(doc)
    assert doc == {"schema": "lattice.counters/1", "block": "A", "hist_buckets": views.HIST_NOTE,
                   "ionodes": [{"location": "R00-M0-N00-I:J00", "calls": {"openat": 3, "write": 0},
                                "bytes": {"openat": 0, "write": 0}, "ns": {"openat": 900, "write": 0},
                                "hist": {"openat": [0, 1, 2], "write": [0, 0, 0]}, "stats": {"eager": 4}}]}


def test_personality_view_is_the_personality_text_typed(made: Made) -> None:
    doc = views.personality_view(made.con(), made.m(), "R00-M0-N00-C:J13", "vn", 1)
    jsonable(doc)
    assert doc == {"schema": "lattice.personality/1", "block": "B", "location": "R00-M0-N00-C:J13",
                   "coords": [1, 0, 3], "torus": [2, 2, 4], "pset": 1, "pset_size": 8, "rank_in_pset": 5,
                   "ionode": "R00-M0-N00-I:J01", "memory": 256 << 20, "cores": 2, "mode": "vn", "t": 1}


def test_iso_times() -> None:
    assert views.iso(0) == "1970-01-01T00:00:00.000000Z"
    assert views.iso(None) is None
    assert views.iso_text("2026-01-01T01:00:00+01:00") == "2026-01-01T00:00:00.000000Z"
    assert views.iso_text("not a time") == "not a time"


def test_a_big_machine_is_summed_up_per_pset_not_per_node(home: Home) -> None:
    """64x64x16 (65,536 compute nodes, 1,024 psets): the summary has a row
    per pset and per host, and counts every node."""
    home.ok("init", "--shape", "64x64x16", "--pset-size", "64")
    home.ok("block", "create", "R00", "--shape", "64x64x1")
    with home.active():
        doc = views.machine_summary(db.connect(), home.machine())
    assert doc["by_state"] == {"Unassigned": 61440, "Free": 4096}
    assert len(doc["psets"]) == 1024 and doc["hosts"][0]["compute_nodes"] == 65536
    assert len(json.dumps(doc)) < 300_000
