"""The host agent finds the cgroup v2 hierarchy as cnode does, with a statfs of its usual places
(lattice.nodes.agent.cgroup_want), so its sweeps of the block's job cgroups at boot and at free
read no /proc/self/mountinfo: on a host with thousands of mounts (each block network makes some)
that read cost 0.28 s of every agent's boot and free."""
from __future__ import annotations

import types
from pathlib import Path

import pytest

from lattice.nodes import agent, container


def usual_v2() -> str:
    found = container.root("v2")
    if found is None or str(found[0]) not in agent.CGROUP2_USUAL:
        pytest.skip("no cgroup v2 hierarchy at its usual places here")
    return str(found[0])


def test_cgroup_want_names_the_hierarchy_mountinfo_names() -> None:
    assert agent.cgroup_want("") == usual_v2()
    assert agent.cgroup_want("v2") == usual_v2()


def test_cgroup_want_keeps_what_the_block_chose() -> None:
    assert agent.cgroup_want("v1") == "v1"
    assert agent.cgroup_want("/sys/fs/cgroup/delegated") == "/sys/fs/cgroup/delegated"


def test_the_agents_sweep_reads_no_mountinfo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    usual_v2()
    monkeypatch.delenv("LATTICE_CGROUP", raising=False)

    def mounts() -> list[tuple[str, str, str]]:
        raise AssertionError("the agent's sweep read /proc/self/mountinfo")
    monkeypatch.setattr(container, "_mounts", mounts)
    said: list[tuple[str, str]] = []
    monkeypatch.setattr(agent, "say", lambda host, event, **f: said.append((host, event)))
    a = types.SimpleNamespace(spec={"env": {}}, host="h1",
                              container=container.name("no-such-block", tmp_path))
    agent.Agent.sweep_containers(a)     # type: ignore[arg-type]
    assert said == [], "nothing of a block that never ran is swept"
