"""`lattice run --trace` prints each system call of the job with its class
(local, shipped, unsupported), and `lattice jobs --ranks` shows the per-class
counts cnk kept for each rank: the two agree."""
from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path
from typing import Iterator

import pytest

from conftest import Machine, make_machine
from cnk_helpers import CNK_EX, by_rank, class_counts, last_job, trace_lines

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "protocol"))
from pluggen import syscalls  # noqa: E402

# what a trace may show for a call of each class of lattice/syscalls.def
TRACED_AS = {"LOCAL": {"local"}, "SOCKET": {"local", "shipped"}, "REFUSED": {"local", "unsupported"},
             "OWN": {"local", "unsupported"}, "SHIPPED": {"local", "shipped", "unsupported"}}


@pytest.fixture(scope="module")
def trace_machine(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    assert (built / "bin" / "cnk").exists(), "build/bin/cnk missing: the compute node kernel is not built"
    m = make_machine(tmp_path_factory.mktemp("cnktrace"), "--shape", "1x1x2", "--pset-size", "2",
                     "--memory", "256M")
    m.run("block", "create", "C", "--shape", "1x1x2")
    m.run("boot", "C")
    yield m
    m.run("free", "C", check=False)


def test_trace_classifies_calls(trace_machine: Machine) -> None:
    m = trace_machine
    work = m.work / "trace"
    work.mkdir()
    os.chmod(work, 0o777)
    p = m.run("run", "--block", "C", "-n", "2", "--label", "--kernel", "cnk", "--trace", "--cwd", str(work),
              str(CNK_EX / "unsupported"))
    # the program's own output is there as without --trace
    for r in range(2):
        assert "unsupported: still running" in by_rank(p.stdout).get(r, []), p.stdout
    lines = trace_lines(p.stdout + "\n" + p.stderr)
    by = {r: [t for t in lines if int(t.group(1)) == r] for r in range(2)}
    for r in range(2):
        calls = {(t.group(2), t.group(5)) for t in by[r]}
        assert ("mount", "unsupported") in calls, sorted(calls)
        assert ("ptrace", "unsupported") in calls
        # the program's output goes to the I/O node
        assert any(name in ("write", "writev") and cls == "shipped" for name, cls in calls), sorted(calls)
        # memory is the node's business
        assert any(name in ("brk", "mmap") and cls == "local" for name, cls in calls), sorted(calls)
        mount = [t for t in by[r] if t.group(2) == "mount"]
        assert mount and all(t.group(4) in ("-38", "ENOSYS", "-ENOSYS") for t in mount), [t.group(0) for t in mount]
    # every traced call is named by the list, in a class its line allows
    listed = {s.name: s for s in syscalls.load()}
    for t in lines:
        s = listed.get(t.group(2))
        if s is None:       # a number the list does not name: syscall_NR, unsupported
            assert t.group(2).startswith("syscall_") and t.group(5) == "unsupported", t.group(0)
            continue
        allowed = {"unsupported"} if s.cls == "REFUSED" and s.op == "0" else TRACED_AS[s.cls]
        assert t.group(5) in allowed, (t.group(0), s)
    # the counters kept by cnk match what the trace showed, class by class
    counts = class_counts(m, last_job(m))
    for r in range(2):
        traced = Counter(t.group(5) for t in by[r])
        assert counts[r] == {c: traced.get(c, 0) for c in ("local", "shipped", "unsupported")}, (r, counts, traced)


def test_counts_without_trace(trace_machine: Machine) -> None:
    """Without --trace nothing is traced, and the counts are still kept."""
    m = trace_machine
    p = m.run("run", "--block", "C", "-n", "1", "--label", "--kernel", "cnk", "--cwd", "/tmp",
              str(CNK_EX / "unsupported"))
    assert not trace_lines(p.stdout + p.stderr), p.stderr
    counts = class_counts(m, last_job(m))
    assert counts[0].get("unsupported", 0) >= 6 and counts[0].get("shipped", 0) >= 7, counts
    assert counts[0].get("local", 0) >= 1, counts
