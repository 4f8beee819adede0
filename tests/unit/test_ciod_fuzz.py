"""ciod under the protocol fuzzer (tests/fuzz/ciodfuzz.py): about 10^5
random and structure-aware inputs on every kind of connection, four at a
time, against a standalone ciod with a running job; after every round of
sessions ciod must run, answer a fresh CTL_STATUS and hold no more threads
or descriptors than before (nor does the job's I/O worker, which serves
the process connections); at the end a normal process session works.
Connections speak wire v3 (challenge, MACed hello, ack proof); some
sessions end on a message whose seq is not after the last (ciod must close
them unanswered), and process connections are one per process at a time.

Bounded in time twice: the run stops at FUZZ_INPUTS inputs (default
100000) or after FUZZ_SECONDS (default 75) of fuzzing, whichever comes
first, and must have done at least a third of the inputs then; a session
ciod does not finish within 30 s fails as a hang.  FUZZ_SEED picks the
seed (default: fixed, so a failure here reproduces with the same seed).
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
    budget = float(os.environ.get("FUZZ_SECONDS", "75"))
    st = ciodfuzz.fuzz(target, seed, want, workers=4, time_limit=budget)
    print(st.line())
    assert st.inputs >= min(want, 30000), st.line()
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
