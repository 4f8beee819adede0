"""Waits of boot and free that follow progress, not a fixed total (issue 27,
"Boots that scale and survive load"): the block network's tools (ip, nft)
are given up on only after TOOL_WAIT seconds without using cpu, and read
their whole batch however slowly they go; `lattice free` waits for an agent
while its log grows or it and its tools work (lattice.nodes.boot)."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lattice.nodes import blocknet, boot

def spin(seconds: float) -> list[str]:
    """A process that uses seconds of cpu, then ends."""
    return [sys.executable, "-c", "import time\nt = time.process_time()\n"
            f"while time.process_time() - t < {seconds}: pass\n"]


def test_a_tool_that_works_longer_than_the_wait_is_not_cut_off(monkeypatch: pytest.MonkeyPatch) -> None:
    """3 s of cpu against a 2 s wait: a fixed timeout killed it; its work is
    reported as it goes."""
    monkeypatch.setattr(blocknet, "TOOL_WAIT", 2.0)
    told: list[int] = []
    monkeypatch.setattr(blocknet, "progress", told.append)
    blocknet._run(spin(3.0), "")
    assert told and told == sorted(told)


def test_a_tool_that_waits_without_working_is_given_up_with_where_it_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(blocknet, "TOOL_WAIT", 1.0)
    with pytest.raises(RuntimeError, match=r"^sleep 600: no progress for 1 s \(state S, waiting in "):
        blocknet._run(["sleep", "600"], "")


def test_a_batch_longer_than_a_pipe_reaches_a_slow_reader_whole(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader that works past the wait before it reads still gets every
    byte (the batch is a file: nothing is left to feed after a timeout)."""
    monkeypatch.setattr(blocknet, "TOOL_WAIT", 1.0)
    text = "".join(f"netns add lat-0123456789ab-n{k}\n" for k in range(40000))     # ~1.3 MB
    out = tmp_path / "got"
    blocknet._run([*spin(2.0)[:2], spin(2.0)[2] + f"import shutil, sys\nshutil.copyfileobj(sys.stdin, open({str(out)!r}, 'w'))\n"], text)
    assert out.read_text() == text


def test_free_waits_for_an_agent_that_keeps_reporting(tmp_path: Path) -> None:
    """An agent that reports for longer than the quiet window, then leaves:
    waited for to its end, not signalled after the window."""
    log = tmp_path / "agent.log"
    log.touch()
    flag = tmp_path / "go"
    p = subprocess.Popen([sys.executable, "-c",
                          "import os, sys, time\n"
                          f"while not os.path.exists({str(flag)!r}): time.sleep(0.01)\n"
                          "for i in range(12):\n"
                          f"    open({str(log)!r}, 'a').write('progress\\n'); time.sleep(0.25)\n"])
    try:
        flag.touch()
        t0 = time.monotonic()
        assert boot.outlive_progress({p.pid: str(log)}, 1.0) == []
        assert time.monotonic() - t0 >= 2.5       # 12 reports a quarter second apart: longer than the window
        assert log.read_text().count("progress") == 12
    finally:
        p.kill()
        p.wait()


def test_free_stops_waiting_for_an_agent_that_does_nothing(tmp_path: Path) -> None:
    p = subprocess.Popen(["sleep", "600"])
    try:
        assert boot.outlive_progress({p.pid: str(tmp_path / "none.log")}, 0.5) == [p.pid]
    finally:
        p.kill()
        p.wait()


def test_an_agents_tools_count_as_its_work() -> None:
    """cpu used by an agent's child (ip at work) moves it."""
    p = subprocess.Popen(spin(600.0))
    try:
        parent = os.getpid()
        assert p.pid in boot.children(parent)
        before = sum(boot.cpu_ticks(c) for c in boot.children(parent))
        deadline = time.monotonic() + 120
        while sum(boot.cpu_ticks(c) for c in boot.children(parent)) == before:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        p.kill()
        p.wait()
