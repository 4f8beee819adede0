"""ciod under the protocol fuzzer (tests/fuzz/ciodfuzz.py): about 10^5
random and structure-aware inputs on every kind of connection, four at a
time, against a standalone ciod with a running job; after every round of
sessions ciod must run, answer a fresh CTL_STATUS and hold no more threads
or descriptors than before (nor does the job's I/O worker, which serves
the process connections); at the end a normal process session works.
Connections speak wire v3 (challenge, MACed hello, ack proof); some
sessions end on a message whose seq is not after the last (ciod must close
them unanswered), and process connections are one per process at a time.

A count, not a rate: the run goes on until FUZZ_INPUTS inputs (default
100000) went out, however long a loaded host makes that take (about 30 s
on an idle one).  Every wait in it is for an event (a reply, a session
closed, a count back to its baseline) with FUZZ_HANG_SECONDS (default 300)
as a hang guard only: a session ciod does not finish in that time fails
as a hang.  A failure of the harness itself (its fake service node or
nodes losing their connections) fails as ciodfuzz.HarnessFailure, not as
a finding about ciod.  FUZZ_SEED picks the seed (default: fixed, so a
failure here reproduces with the same seed).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Iterator

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
import ciodfuzz  # noqa: E402

from test_ciod import ciod_bin  # noqa: E402,F401  (fixture: builds ciod)


@pytest.fixture
def target(ciod_bin: Path) -> Iterator[ciodfuzz.Target]:  # noqa: F811
    t = ciodfuzz.Target(ciod_bin)
    try:
        yield t
    finally:
        t.close()


def test_fuzzed_connections_of_every_kind_leave_ciod_serving(target: ciodfuzz.Target) -> None:
    seed = int(os.environ.get("FUZZ_SEED", "20261125"))
    want = int(os.environ.get("FUZZ_INPUTS", "100000"))
    st = ciodfuzz.fuzz(target, seed, want, workers=4)
    print(st.line())
    assert st.inputs >= want and st.crashes == 0, st.line()
    # every kind of connection got its share
    for kind in ("prehello", "control", "node", "proc", "pmi"):
        assert st.by_kind.get(kind, 0) >= st.inputs // 100, st.line()
    # process connections were served, not refused as busy: the job's worker got a real share
    assert st.proc_served >= st.inputs // 10 and st.proc_sessions >= 10 * st.proc_refused, st.line()
    assert st.dup_refused >= 1 and st.seq_broken >= 10, st.line()
    target.normal_session()
    target.check()
    # bad input was reported, not just survived
    ras = target.rastext()
    for what in ("bad magic", "mac is wrong", "not after the last one", "NODE_", "malformed",
                 "process connection of job", "that process is already connected"):
        assert what in ras, what


def test_the_harness_readers_wait_on_ciod_however_long_it_is_silent(target: ciodfuzz.Target) -> None:
    """The fake service node's and nodes' connections keep no read timeout:
    a node hears nothing between jobs, and with connect()'s 10 s timeout left
    on, their reader threads died silently after the first quiet spell (then
    a restart 'waited 20 s for JOB_END')."""
    for r in target.readers():
        assert r.is_alive() and r.s.sock.gettimeout() is None, r.name


def test_a_dead_harness_reader_fails_the_run_as_the_harness_not_as_ciod(target: ciodfuzz.Target) -> None:
    """A fake node's thread that breaks (here: the next job's push raises in
    it) is reported as a HarnessFailure naming it and why, at the next
    check, not lost (the run went on without the node) and not blamed on
    ciod; ciod itself is fine."""
    class Broken(dict[int, int]):
        def __setitem__(self, job: int, rank: int) -> None:
            raise RuntimeError("a bug of the harness (injected)")

    target.nodes[1].jobs = Broken()
    with pytest.raises(ciodfuzz.HarnessFailure, match=r"(?s)seed 5, .*the fake node 1 thread died.*injected"):
        ciodfuzz.fuzz(target, 5, 1, round_cases=8, restart_every=1)
    assert target.alive()
    assert target.owner.failure is None and target.nodes[0].failure is None


def test_ciodfuzz_says_a_broken_harness_is_no_finding(ciod_bin: Path, monkeypatch: pytest.MonkeyPatch,  # noqa: F811
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The script (and scripts/fuzz.sh, which maps the status to a line of
    its own) tells a harness failure from a finding: its own line, exit 3."""
    def broken(*_a: object, **_k: object) -> ciodfuzz.Stats:
        raise ciodfuzz.HarnessFailure("the fake node 0 thread died: injected")
    monkeypatch.setattr(ciodfuzz, "fuzz", broken)
    assert ciodfuzz.main(["--ciod", str(ciod_bin), "--seed", "1", "--inputs", "1"]) == ciodfuzz.HARNESS_EXIT == 3
    out = capsys.readouterr().out
    assert "ciodfuzz: HARNESS FAILED (seed 1), not a finding about ciod: the fake node 0 thread died" in out, out
    assert "ciodfuzz: FAILED" not in out
