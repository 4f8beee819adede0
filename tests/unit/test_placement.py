"""lattice.nodes.placement: hostfiles, dealing psets to hosts, reading the agents' reports."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lattice.nodes import placement
from lattice.errors import LatticeError
from lattice.state.machine import Machine
from lattice.nodes.placement import HostEntry, Launch, Reports, deal, parse_hostfile

M8 = Machine(shape=(2, 2, 2), pset_size=2)       # 4 psets of 2


def test_hostfile_forms() -> None:
    text = "# the cluster\nh1\nh2 slots=4   # half\nh3:2\n\nio1 role=io\nc1 role=compute slots=8\n"
    assert parse_hostfile(text) == [HostEntry("h1"), HostEntry("h2", 4), HostEntry("h3", 2),
                                    HostEntry("io1", None, "io"), HostEntry("c1", 8, "compute")]


@pytest.mark.parametrize("text, why", [
    ("", "names no host"),
    ("# nothing\n\n", "names no host"),
    ("h1 slots=0\n", "slots=N"),
    ("h1 slots=two\n", "slots=N"),
    ("h1 role=storage\n", "role="),
    ("h1 cpus=4\n", "slots=N"),
    ("h1\nh1\n", "listed twice"),
    ("-oProxyCommand=x\n", "not a host name"),
    ("h1;rm\n", "not a host name"),
])
def test_bad_hostfiles(text: str, why: str) -> None:
    with pytest.raises(LatticeError, match=why):
        parse_hostfile(text, "hosts")


def test_psets_are_dealt_in_turn_so_a_block_spans_hosts() -> None:
    w = deal(M8, [HostEntry("a"), HostEntry("b")])
    assert w.io == w.compute == {0: "a", 1: "b", 2: "a", 3: "b"}


def test_slots_bound_what_a_host_takes() -> None:
    w = deal(M8, [HostEntry("small", 2), HostEntry("big")])
    assert w.compute == {0: "small", 1: "big", 2: "big", 3: "big"}
    with pytest.raises(LatticeError, match="cannot hold 4 psets"):
        deal(M8, [HostEntry("a", 2), HostEntry("b", 3)])


def test_io_hosts_take_the_io_nodes_and_the_others_the_compute_nodes() -> None:
    w = deal(M8, [HostEntry("io1", role="io"), HostEntry("io2", role="io"), HostEntry("c1"), HostEntry("c2", role="compute")])
    assert w.io == {0: "io1", 1: "io2", 2: "io1", 3: "io2"}
    assert w.compute == {0: "c1", 1: "c2", 2: "c1", 3: "c2"}
    with pytest.raises(LatticeError, match="none runs compute nodes"):
        deal(M8, [HostEntry("io1", role="io")])
    with pytest.raises(LatticeError, match="need role=io hosts"):
        deal(M8, [HostEntry("c1", role="compute")])


def test_slurm_needs_an_allocation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SLURM_JOB_NODELIST", raising=False)
    monkeypatch.delenv("SLURM_NODELIST", raising=False)
    with pytest.raises(LatticeError, match="needs a Slurm allocation"):
        placement.slurm_hosts()


def report(host: str, event: str, **kw: object) -> str:
    return json.dumps({"host": host, "event": event, **kw}) + "\n"


def test_reports_wait_for_every_host(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    log.write_text(report("h1", "ready", ciods={}) + "ssh: a warning of its own\n" + report("h2", "listen"))
    r = Reports([Launch(("h1", "h2"), 1, log)], lambda pid: True)
    with pytest.raises(LatticeError, match="timed out .* host h2"):
        r.wait("ready", ["h1", "h2"], 0.05)
    with open(log, "a") as fh:
        fh.write('{"host": "h2", "event": "ready", "ci')      # half a line: not read yet
    with pytest.raises(LatticeError, match="timed out"):
        r.wait("ready", ["h1", "h2"], 0.05)
    with open(log, "a") as fh:
        fh.write('ods": {"0": 1}}\n')
    got = r.wait("ready", ["h1", "h2"], 1.0)
    assert got["h2"]["ciods"] == {"0": 1} and got["h1"]["event"] == "ready"


def test_an_agent_s_error_and_a_dead_launcher_are_clear(tmp_path: Path) -> None:
    log = tmp_path / "agent.log"
    log.write_text(report("h3", "error", message="cnode of R00-M0-N00-C:J04 exited during boot (status 1)"))
    with pytest.raises(LatticeError, match=r"host h3: cnode of R00-M0-N00-C:J04 exited during boot"):
        Reports([Launch(("h3",), 1, log)], lambda pid: True).wait("ready", ["h3"], 1.0)
    log.write_text("ssh: Could not resolve hostname h9: Name or service not known\n")
    with pytest.raises(LatticeError, match="host h9 ended before it was ready: ssh: Could not resolve"):
        Reports([Launch(("h9",), 1, log)], lambda pid: False).wait("ready", ["h9"], 1.0)


def test_the_agent_refuses_bad_orders() -> None:
    for orders in (b"not json\n", b"{}\n", b'{"hosts": {"a": [], "b": []}}\n'):
        p = subprocess.run([sys.executable, "-m", "lattice.nodes.agent"], input=orders, capture_output=True)
        assert p.returncode == 2
        r = json.loads(p.stdout)
        assert r["event"] == "error" and "bad orders" in r["message"]


def test_the_launcher_s_heartbeat_flows_on_a_channel_numbered_10_or_more(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A booter of several hosts holds a channel per host, so one of them has a
    two-digit descriptor: its launcher still writes heartbeats on it (sh could
    not name it: no heartbeat, and the far agent ended the block)."""
    import os
    import signal
    import time
    from lattice.nodes import agent
    monkeypatch.setattr(agent, "HEARTBEAT", 0.05)
    filler = []
    while not filler or filler[-1] < 12:        # the channel's pipe gets descriptors above them
        filler.append(os.open("/dev/null", os.O_RDONLY))
    log = tmp_path / "launcher.log"
    try:
        # the "launcher" reads its channel's first line (a heartbeat: there are no orders) and ends
        pid, w = placement._spawn(["sh", "-c", "head -n 1 >/dev/null && echo got a heartbeat"], b"", log, True)
    finally:
        for fd in filler:
            os.close(fd)
    assert w is not None and w >= 10
    try:
        deadline = time.monotonic() + 120       # a hang guard only: without heartbeats it waits for ever
        while os.waitpid(pid, os.WNOHANG) == (0, 0):
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.01)
    finally:
        os.close(w)
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert log.read_text() == "got a heartbeat\n"


# ---- agents started as a tree over ssh (lattice.nodes.agenttree) ----

def test_agent_tree_shape() -> None:
    from lattice.nodes import agenttree
    hosts = [f"h{i}" for i in range(1, 8)]
    tree = agenttree.children(hosts, 2)
    assert tree == {None: ["h1", "h2"], "h1": ["h3", "h4"], "h2": ["h5", "h6"], "h3": ["h7"]}
    assert agenttree.subtree(tree, "h1") == ["h1", "h3", "h4", "h7"]
    assert agenttree.children(hosts, 16) == {None: hosts}         # few hosts: one level, as before
    assert agenttree.children(["a", "b", "c"], 1) == {None: ["a"], "a": ["b"], "b": ["c"]}
    assert [agenttree.depth(n, 2) for n in (1, 2, 3, 6, 7)] == [1, 1, 2, 2, 3]
    assert agenttree.depth(1024, 16) == 3 and agenttree.depth(1024, 32) == 2
    with pytest.raises(ValueError):
        agenttree.children(hosts, 0)


def test_agent_orders_carry_only_the_subtree() -> None:
    from lattice.nodes import agenttree
    hosts = ["h1", "h2", "h3", "h4"]
    tree = agenttree.children(hosts, 2)
    spec = {"block": "B", "hosts": {h: [{"pset": i}] for i, h in enumerate(hosts)}, "ssh": ["ssh"]}
    o = agenttree.orders_for(spec, tree, "h1", "")
    assert list(o["hosts"]) == ["h1", "h3", "h4"] and o["tree"] == {"h1": ["h3", "h4"]}
    assert agenttree.orders_for(spec, tree, "h2", "")["hosts"] == {"h2": [{"pset": 1}]}


def test_fanout_is_the_machines(tmp_path: Path) -> None:
    m = Machine(shape=(2, 2, 2), pset_size=2, placement="ssh", fanout=2)
    assert placement.fanout(m) == 2 and placement.fanout(M8) == 16
    assert Machine.from_toml(m.to_toml(), "t").fanout == 2
    with pytest.raises(LatticeError, match="fanout"):
        Machine(fanout=-1)
