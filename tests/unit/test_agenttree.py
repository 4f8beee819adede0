"""lattice.nodes.agenttree: an agent's subtree, with a stand-in for ssh that runs a tiny agent
here (the real thing over the testbed's ssh: tests/e2e/test_t0915_agent_tree.py)."""
from __future__ import annotations

import json
import os
import selectors
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from lattice.nodes import agenttree

# "ssh HOST COMMAND": reads its orders, says ready for each host of them, then echoes every
# channel line as a report until end of file, then says done for each; host "bad" fails as ssh does
FAKE_SSH = r'''
import json, sys
host = sys.argv[1]
if host == "bad":
    print("root@bad: Permission denied (publickey).", flush=True)
    sys.exit(255)
orders = json.loads(sys.stdin.readline())
for h in orders["hosts"]:
    print(json.dumps({"host": h, "event": "ready", "parent": orders["parent"]}), flush=True)
for line in sys.stdin:
    print(json.dumps({"host": host, "event": "heard", "line": line.strip()}), flush=True)
for h in orders["hosts"]:
    print(json.dumps({"host": h, "event": "done"}), flush=True)
'''


def subtree(tmp_path: Path, hosts: list[str], k: int) -> tuple[agenttree.Subtree, list[dict[str, Any]]]:
    fake = tmp_path / "fake_ssh.py"
    fake.write_text(FAKE_SSH)
    tree = agenttree.children(hosts, k)       # with "root" in the service node's place
    spec = {"block": "B", "hosts": {h: [] for h in ["root", *hosts]},
            "tree": {"root": tree[None], **{h: c for h, c in tree.items() if h}},
            "ssh": [sys.executable, str(fake)]}
    said: list[dict[str, Any]] = []
    sub = agenttree.Subtree(spec, "root", lambda host, event, **f: said.append({"host": host, "event": event, **f}),
                            selectors.DefaultSelector())
    sub.start()
    return sub, said


def relayed(capfd: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in capfd.readouterr().out.splitlines() if line.startswith("{")]


def pump_until(sub: agenttree.Subtree, done: Any) -> None:
    end = time.monotonic() + 120          # a hang guard
    while not done() and time.monotonic() < end:
        if not sub.pump():
            time.sleep(0.01)
    assert done()


def test_children_get_their_subtree_and_the_channel_and_their_reports_come_up(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    # fan-out 2 below root: a and b (c, d under a; e under b)
    sub, said = subtree(tmp_path, ["a", "b", "c", "d", "e"], 2)
    assert sorted(c.host for c in sub.kids.values()) == ["a", "b"]
    pump_until(sub, lambda: all(c.ready == set(c.hosts) for c in sub.kids.values()))
    out = relayed(capfd)
    assert sorted(r["host"] for r in out if r["event"] == "ready") == ["a", "b", "c", "d", "e"]
    assert {r["parent"] for r in out if r["event"] == "ready"} == {"root"}
    sub.forward(b"boot\n")
    sub.forward(b"peers {\"a\": \"10.0.0.0/24\"}\n")
    sub.stop()
    assert not sub.running() and all(c.status is not None for c in sub.kids.values())
    out += relayed(capfd)
    for h in ("a", "b"):            # every line, in order, then "stop", then the end of the channel
        heard = [r["line"] for r in out if r["event"] == "heard" and r["host"] == h]
        assert heard == ["boot", 'peers {"a": "10.0.0.0/24"}', "stop"], (h, out)
    assert sorted(r["host"] for r in out if r["event"] == "done") == ["a", "b", "c", "d", "e"]
    assert said == []               # nothing failed, nothing was lost


def test_a_child_that_cannot_start_is_one_error_naming_its_subtree(
        tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    # fan-out 1 below root: bad, and x below it
    sub, said = subtree(tmp_path, ["bad", "x"], 1)
    pump_until(sub, lambda: bool(said))
    assert said == [{"host": "bad", "event": "error", "hosts": ["bad", "x"],
                     "message": "cannot start the agents of hosts bad, x over ssh from host root: "
                                "root@bad: Permission denied (publickey)."}]
    sub.stop()


def test_a_child_gone_after_its_boot_is_reported_lost(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    sub, said = subtree(tmp_path, ["a"], 1)
    pump_until(sub, lambda: all(c.ready == set(c.hosts) for c in sub.kids.values()))
    (child,) = sub.kids.values()
    os.kill(child.pid, signal.SIGKILL)     # its ssh killed: no "done"
    pump_until(sub, lambda: bool(said))
    assert said[0]["host"] == "a" and said[0]["event"] == "lost"
    sub.stop()
