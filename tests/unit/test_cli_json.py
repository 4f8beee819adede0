"""`--json` on every listing command, run in-process on the state test_views'
`made` fixture builds: each prints one document that parses, has exactly
the keys docs/cli.md documents (with their types), and says what the state
holds.  Then `lattice machine --summary`, the default above 1,024 compute
nodes.  (`counters --json` of a booted block: tests/e2e/test_t1010_json.py.)"""
from __future__ import annotations

import io
import json
import sys
from typing import Any

import pytest

import json_docs
from lattice.cli import jsonout
from test_service_machine import Home, assert_clean_error, home  # noqa: F401 - fixture
from test_views import GONE, Made, made  # noqa: F401 - fixture

J07 = "R00-M0-N00-C:J07"


def doc_of(home: Home, *args: str) -> dict[str, Any]:
    r = home.ok(*args, "--json")
    assert r.out.endswith("\n") and r.out.count("\n") == 1, "one line when stdout is no terminal"
    out: dict[str, Any] = json.loads(r.out)
    return out


LISTINGS = [  # args, schema, whether the state fills every documented key
    (["machine"], "lattice.machine/1", True), (["machine", "--nodes"], "lattice.machine/1", True),
    (["machine", "--summary"], "lattice.machine.summary/1", True), (["blocks"], "lattice.blocks/1", True),
    (["jobs"], "lattice.jobs/1", True), (["jobs", "--running"], "lattice.jobs/1", False),
    (["jobs", "--ranks", "1"], "lattice.ranks/1", True), (["ras"], "lattice.ras/1", True),
    (["ras", "--severity", "ERROR"], "lattice.ras/1", True), (["ras", "--job", "2"], "lattice.ras/1", True),
    (["personality", "R00-M0-N00-C:J13"], "lattice.personality/1", True),
    (["personality", "--mode", "vn", "--t", "1", "R00-M0-N00-C:J13"], "lattice.personality/1", True),
]


@pytest.mark.parametrize("args,schema,complete", LISTINGS, ids=[" ".join(a) for a, _, _ in LISTINGS])
def test_json_has_the_documented_keys_and_types(made: Made, args: list[str], schema: str, complete: bool) -> None:
    assert json_docs.check(doc_of(made.home, *args), complete) == schema


def test_every_documented_schema_has_a_command_tested() -> None:
    tested = {s for _, s, _ in LISTINGS} | {"lattice.counters/1"}      # counters: test_views and e2e t1010
    assert set(json_docs.schemas()) == tested


def test_counters_document_has_the_documented_keys() -> None:
    from lattice import views
    from lattice.transport.ciodclient import Counters
    c = Counters(calls={"openat": 1})
    c.bytes, c.ns, c.hist, c.stats = {"openat": 0}, {"openat": 5}, {"openat": [1]}, {"eager": 0}
    json_docs.check(views.counters_document("A", [("R00-M0-N00-I:J00", c)]))


def test_machine_json_says_what_each_node_is(made: Made) -> None:
    """The sweep before the command found A's compute node 7 gone: A is in
    Error, the node LOST; B is Free; the JSON says what the table says."""
    doc = doc_of(made.home, "machine")
    nodes = {n["location"]: n for n in doc["nodes"]}
    assert len(nodes) == 18
    assert nodes[J07]["lost"] and not nodes["R00-M0-N00-C:J06"]["lost"]
    assert {n["state"] for n in doc["nodes"] if n["block"] == "A"} == {"Error"}
    assert {n["state"] for n in doc["nodes"] if n["block"] == "B"} == {"Free"}
    assert nodes["R00-M0-N00-C:J10"] | {"host": None} == {
        "location": "R00-M0-N00-C:J10", "kind": "compute", "x": 0, "y": 1, "z": 2, "pset": 1,
        "io_node": "R00-M0-N00-I:J01", "host": None, "block": "B", "state": "Free", "lost": False}
    table = made.home.ok("machine").out
    assert f"{J07}   compute  1,1,1       0  R00-M0-N00-I:J00   local        A (Error) LOST (cnode gone)" in table


def test_blocks_jobs_ranks_ras_json_values(made: Made) -> None:
    blocks = {b["name"]: b for b in doc_of(made.home, "blocks")["blocks"]}
    assert blocks["A"]["state"] == "Error" and J07 in blocks["A"]["message"]
    assert blocks["A"]["booted"] is None and blocks["B"]["io_nodes"] == 1

    jobs = doc_of(made.home, "jobs")["jobs"]
    assert [(j["id"], j["state"], j["status"], j["kernel"]) for j in jobs] == [
        (1, "Terminated", 0, "cnk"), (2, "Running", None, "linux/sandbox"), (3, "Error", 1, "linux/preload")]
    assert (jobs[0]["elapsed"], jobs[0]["calls"]) == (2.5, {"local": 10, "shipped": 20, "unsupported": 0})
    assert [j["id"] for j in doc_of(made.home, "jobs", "--running")["jobs"]] == [2]

    ranks = doc_of(made.home, "jobs", "--ranks", "1")
    assert ranks["job"] == 1 and [(r["rank"], r["how"], r["value"]) for r in ranks["ranks"]] == [
        (0, "exit", 0), (1, "signal", 9)]
    assert ranks["ranks"][0]["report_fields"]["why"] == "the job asked for it"
    assert doc_of(made.home, "jobs", "--ranks", "7")["ranks"] == []

    events = doc_of(made.home, "ras")["events"]
    assert [e["message"] for e in events[:4]] == ["micro, in B", "whole seconds", "milliseconds",
                                                  "of job 2 on A \x1b[2J"]
    lost = events[4]       # the sweep's, just now: the newest
    assert (lost["severity"], lost["location"], lost["component"]) == ("FATAL", J07, "MMCS")
    assert [e["id"] for e in doc_of(made.home, "ras", "--severity", "FATAL")["events"]] == [4, lost["id"]]
    assert [e["id"] for e in doc_of(made.home, "ras", "--job", "1")["events"]] == [2]


def test_json_escapes_what_a_job_wrote(made: Made) -> None:
    """A job's escape sequences reach the terminal as \\u001b, never as ESC."""
    out = made.home.ok("jobs", "--json").out + made.home.ok("ras", "--json").out
    assert "\x1b" not in out and "\x07" not in out
    assert "rank 0 \\u001b]0;x\\u0007 failed" in out and "\\u001b[2J" in out


def test_personality_json_is_the_text_typed(made: Made) -> None:
    doc = doc_of(made.home, "personality", "R00-M0-N00-C:J05")
    text = dict(line.split(": ", 1) for line in made.home.ok("personality", "R00-M0-N00-C:J05").out.splitlines())
    assert set(doc) - {"schema"} == set(text)
    for k, v in text.items():
        shown = doc[k]
        want = ("x" if k == "torus" else ",").join(map(str, shown)) if isinstance(shown, list) else str(shown)
        assert want == v, k
    assert_clean_error(made.home.call("personality", "--json", "--env", "R00-M0-N00-C:J05"),
                       "not allowed with argument", status=2)


def test_counters_json_of_a_block_not_booted_is_one_error_line(made: Made) -> None:
    r = made.home.call("counters", "B", "--json")
    assert_clean_error(r, "block B is Free: boot it first", status=1)
    assert r.out == ""


def test_json_is_indented_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True
    out = Terminal()
    monkeypatch.setattr(sys, "stdout", out)
    jsonout.emit({"schema": "lattice.x/1", "a": [1]})
    assert out.getvalue() == '{\n  "schema": "lattice.x/1",\n  "a": [\n    1\n  ]\n}\n'


# ---- lattice machine --summary -------------------------------------------------

def test_machine_summary_table(made: Made) -> None:
    out = made.home.ok("machine", "--summary").out.splitlines()
    assert out[0].startswith("2x2x4 torus, 16 compute nodes, 2 I/O nodes (psets of 8)")
    assert out[1] == "compute nodes by state: 8 Free, 8 Error; 1 node LOST (daemon gone)"
    assert out[3].split() == ["local", "2", "16", "8", "Free,", "8", "Error"]
    assert out[5].split() == ["0", "R00-M0-N00-I:J00", "local", "A", "Error,", "1", "node", "LOST"]
    assert out[6].split() == ["1", "R00-M0-N00-I:J01", "local", "B", "Free"]


def test_summary_is_the_default_above_1024_compute_nodes(home: Home) -> None:
    home.ok("init", "--shape", "16x16x8")                 # 2,048 compute nodes, 256 psets
    home.ok("block", "create", "R00", "--shape", "16x16x2")
    r = home.ok("machine")
    assert r.err == "lattice: 2,048 compute nodes: a summary (--nodes for every node)\n"
    lines = r.out.splitlines()
    assert lines[1] == "compute nodes by state: 1536 Unassigned, 512 Free"
    assert [line.split()[:2] for line in lines[5:]] == [["0-63", "R00-M0-N00-I:J00..J63"],
                                                          ["64-255", "R00-M0-N00-I:J64..J255"]]
    assert len(home.ok("machine", "--nodes").out.splitlines()) == 2 + 2048 + 256
    assert home.ok("machine", "--summary").err == ""        # asked for: no hint
    assert json.loads(home.ok("machine", "--json").out)["schema"] == "lattice.machine.summary/1"
    full = json.loads(home.ok("machine", "--nodes", "--json").out)
    assert full["schema"] == "lattice.machine/1" and len(full["nodes"]) == 2048 + 256
    assert_clean_error(home.call("machine", "--nodes", "--summary"), "not allowed with argument", status=2)


def test_up_to_1024_compute_nodes_every_node_is_listed(home: Home) -> None:
    home.ok("init", "--shape", "16x16x4")                 # 1,024
    r = home.ok("machine")
    assert r.err == "" and len(r.out.splitlines()) == 2 + 1024 + 128
    assert json.loads(home.ok("machine", "--json").out)["schema"] == "lattice.machine/1"
