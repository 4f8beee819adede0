"""`--json` on a booted machine after a real job: `counters --json` counts the
calls the job shipped (with their bytes, time and latency histogram), `jobs
--json` and `jobs --ranks JOB --json` say how it and each rank ended with
the nodes' reports, and `blocks`, `machine` and `ras --json` show the booted
block; every document has exactly the keys docs/cli.md documents."""
from __future__ import annotations

import json
import os
from typing import Any, Iterator

import pytest

import json_docs
from conftest import EXAMPLES, Machine, make_machine

NODES = ["R00-M0-N00-C:J00", "R00-M0-N00-C:J01"]


@pytest.fixture(scope="module")
def jm(built: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    m = make_machine(tmp_path_factory.mktemp("json"), "--shape", "1x1x2", "--pset-size", "2")
    m.run("block", "create", "J", "--shape", "1x1x2")
    m.run("boot", "J")
    yield m
    m.run("free", "J", check=False)


def doc(m: Machine, *args: str) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(m.run(*args, "--json").stdout)
    json_docs.check(out, complete=False)
    return out


def test_json_after_a_real_job(jm: Machine) -> None:
    m = jm
    work = m.work / "fileops"
    work.mkdir()
    os.chmod(work, 0o777)
    (before,) = doc(m, "counters", "J")["ionodes"]
    m.run("run", "--block", "J", "-n", "2", "--cwd", str(work), str(EXAMPLES / "fileops"))

    counters = doc(m, "counters", "J")
    assert counters["block"] == "J" and counters["schema"] == "lattice.counters/1"
    (ion,) = counters["ionodes"]
    json_docs.check(counters)           # every key, the histograms included
    assert ion["location"] == "R00-M0-N00-I:J00"
    writes = ion["calls"]["write"] - before["calls"]["write"]
    assert writes >= 2, (before["calls"], ion["calls"])             # each rank wrote its result through the I/O node
    assert ion["bytes"]["write"] - before["bytes"]["write"] > 0
    assert ion["ns"]["write"] > before["ns"]["write"]
    for op, n in ion["calls"].items():   # the histogram counts every call once
        assert sum(ion["hist"][op]) == n, op

    jobs = doc(m, "jobs")["jobs"]
    json_docs.check({"schema": "lattice.jobs/1", "jobs": jobs}, complete=True)
    job = jobs[-1]
    assert (job["state"], job["status"], job["ranks"], job["block"], job["kernel"]) == ("Terminated", 0, 2, "J", "cnk")
    assert job["started"] <= job["ended"] and job["elapsed"] > 0
    assert job["calls"]["shipped"] > 0
    assert doc(m, "jobs", "--running")["jobs"] == []

    ranks = doc(m, "jobs", "--ranks", str(job["id"]))
    json_docs.check(ranks)
    assert ranks["job"] == job["id"]
    assert [(r["rank"], r["how"], r["value"]) for r in ranks["ranks"]] == [(0, "exit", 0), (1, "exit", 0)]
    assert sorted(r["location"] for r in ranks["ranks"]) == NODES
    for r in ranks["ranks"]:
        assert r["report_fields"]["kernel"] == "cnk" and r["report"].startswith("kernel=cnk")


def test_json_of_the_booted_block(jm: Machine) -> None:
    m = jm
    (b,) = doc(m, "blocks")["blocks"]
    assert (b["name"], b["state"], b["hosts"], b["psets"]) == ("J", "Initialized", ["local"], [0])
    assert b["booted"] is not None and b["booted"] >= b["created"]
    nodes = doc(m, "machine")["nodes"]
    assert [(n["location"], n["block"], n["state"], n["lost"]) for n in nodes] == [
        ("R00-M0-N00-I:J00", "J", "Initialized", False), *((loc, "J", "Initialized", False) for loc in NODES)]
    summary = doc(m, "machine", "--summary")
    assert summary["by_state"] == {"Initialized": 2} and summary["lost"] == 0
    events = doc(m, "ras")["events"]
    assert [e["time"] for e in events] == sorted(e["time"] for e in events)
