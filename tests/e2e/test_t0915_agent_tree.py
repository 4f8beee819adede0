"""Agents started as a tree over ssh (issue 27): on the testbed's four hosts
with [placement] fanout = 2 the service node starts h1's and h2's agents and
h1's agent starts h3's and h4's (lattice.nodes.agenttree).  Each agent's ssh
session says who logged in from where (SSH_CONNECTION), so the test reads
each agent's real parent from the host's own process, not from Lattice.  A
host below h1 whose sshd is gone fails the boot with one error naming it and
the host that tried, and nothing of the block is left on the others."""
from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from conftest import LATTICE, Machine, make_machine, wait_for
from testbed import Cluster, build_hosts_probe, cluster_up, daemon_pids, namespace_pids, running

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: the testbed's namespaces and daemons"),
    pytest.mark.skipif(not shutil.which("mpicc.mpich"), reason="MPICH (mpicc.mpich) not installed"),
]

HOSTS = ["h1", "h2", "h3", "h4"]
RANK_LINE = re.compile(r"rank (\d+) of 8 on (h\d) sum 28")


@pytest.fixture(scope="module")
def tb() -> Iterator[Cluster]:
    with cluster_up(4) as t:
        yield t


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_hosts_probe(tmp_path_factory.mktemp("tree_probe"))


@pytest.fixture
def tree_machine(tb: Cluster, tmp_path: Path) -> Iterator[Machine]:
    """4 psets of 2, one a host, agents in a tree of fan-out 2 (machine.toml)."""
    m = make_machine(tmp_path, "--shape", "2x2x2", "--pset-size", "2", "--placement", "ssh",
                     "--hostfile", tb.env["LATTICE_TESTBED_HOSTFILE"], "--ssh-command", tb.env["LATTICE_TESTBED_SSH"])
    m.env.update({k: v for k, v in tb.env.items() if k.startswith(("SLURM_CONF", "LATTICE_TESTBED"))})
    toml = m.home / "machine.toml"
    toml.write_text(toml.read_text().replace('hosts = "ssh"\n', 'hosts = "ssh"\nfanout = 2\n'))
    m.run("block", "create", "all", "--shape", "2x2x2")
    yield m
    m.run("free", "all", check=False)
    shutil.rmtree(m.work, ignore_errors=True)


def address(tb: Cluster, host: str) -> str:
    return tb.run("getent", "hosts", host).stdout.split()[0]


def agents(host: str) -> list[int]:
    """The pids of the block agents running in host's namespace."""
    out = []
    for pid in namespace_pids(host):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"lattice.nodes.agent" in argv and b"--host" in argv:
            out.append(pid)
    return out


def ssh_client(pid: int) -> str:
    """Where the ssh session that runs pid came from (its SSH_CONNECTION's first word)."""
    env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    conn = next(e for e in env if e.startswith(b"SSH_CONNECTION="))
    return conn.split(b"=", 1)[1].split()[0].decode()


def lattice_processes(host: str) -> list[str]:
    """Lattice's processes inside a testbed host: agents, daemons, ranks, the agents' ssh."""
    out = []
    for pid in namespace_pids(host):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if re.search(r"lattice\.nodes\.agent|/ciod |/cnode |^cnk |ciod-worker|hosts_probe", argv):
            out.append(argv)
    return out


def block_networks(m: Machine, host: str, block: str) -> list[str]:
    """The block's network namespaces made by host's agent (lattice.nodes.blocknet: lat-HASH, lat-HASH-nK,
    HASH of the host's private block directory, lattice.nodes.placement.private_dir)."""
    home = hashlib.sha256(str(m.home).encode()).hexdigest()[:12]
    d = Path(f"/tmp/lattice-{os.getuid()}-{home}") / host / block
    digest = hashlib.sha256(str(d.resolve()).encode()).hexdigest()[:12]
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
    return [n for n in names if n == f"lat-{digest}" or n.startswith(f"lat-{digest}-n")]


def test_agents_boot_as_a_tree_and_run_an_mpi_job(tb: Cluster, tree_machine: Machine, probe: str) -> None:
    m = tree_machine
    m.run("boot", "all")
    service, h1 = address(tb, "tbhead"), address(tb, "h1")
    parents = {}
    for h in HOSTS:
        pids = agents(h)
        assert len(pids) == 1, (h, pids)
        parents[h] = ssh_client(pids[0])
    # depth 2: h1 and h2 from the service node, h3 and h4 from h1's agent
    assert parents == {"h1": service, "h2": service, "h3": h1, "h4": h1}, parents
    # the service node holds two launchers (h1's carries h3 and h4): one log each
    logs = sorted(p.name for p in (m.home / "blocks" / "all" / "log").glob("agent-*.log"))
    assert logs == ["agent-h1.log", "agent-h2.log"], logs
    r = m.run("run", "-n", "8", "--block", "all", probe, str(m.work), "-1")
    seen = {int(rank): h for rank, h in RANK_LINE.findall(r.stdout)}
    assert seen == {rank: HOSTS[rank // 2] for rank in range(8)}, r.stdout
    m.run("free", "all")
    # free returns once its launchers here are gone; an agent on a host ends as its channel closes
    for h in HOSTS:
        wait_for(lambda: lattice_processes(h) == [] and block_networks(m, h, "all") == [])


def test_an_agent_lost_below_another_marks_its_nodes_lost(tb: Cluster, tree_machine: Machine) -> None:
    """h3's agent, started by h1's, killed outright after the boot: h1's agent says so ("lost"),
    and the service node's sweep puts the block in Error naming h3's nodes, as it does for a
    host whose own launcher ended."""
    m = tree_machine
    m.run("boot", "all")
    (victim,) = agents("h3")
    os.kill(victim, signal.SIGKILL)
    log = m.home / "blocks" / "all" / "log" / "agent-h1.log"
    wait_for(lambda: '"host": "h3", "event": "lost"' in log.read_text())
    blocks = m.run("blocks").stdout
    assert re.search(r"all\s+Error", blocks), blocks
    ras = m.run("ras").stdout
    assert re.search(r"R00-M0-N00-I:J02.*lost", ras), ras       # h3 runs pset 2
    assert not re.search(r"R00-M0-N00-I:J0[013]\b[^\n]*lost", ras), ras
    for h in ("h1", "h2", "h4"):            # the others' agents stay until the block is freed
        assert len(agents(h)) == 1, h
    m.run("free", "all")
    for h in HOSTS:         # (h3's block network stays: its agent was killed outright, as on one host)
        wait_for(lambda: [a for a in lattice_processes(h) if "/ciod " in a or "/cnode " in a or "agent" in a] == [])


def test_a_second_boot_shares_the_connection_and_skips_hwloc(tb: Cluster, tree_machine: Machine) -> None:
    """The service node's ssh connections stay open between boots (ControlPersist), and an
    agent whose host's cores the service node already knows does not ask hwloc again."""
    m = tree_machine
    home = hashlib.sha256(str(m.home).encode()).hexdigest()[:12]
    control = Path(f"/tmp/lattice-{os.getuid()}-{home}")
    log = m.home / "blocks" / "all" / "log" / "agent-h1.log"
    m.run("boot", "all")
    first = log.read_text()
    m.run("free", "all")
    sockets = sorted(control.glob("ssh-*"))
    assert len(sockets) == 2, sockets                           # h1's and h2's: the tree's roots
    for sock in sockets:                                        # each a live master
        r = tb.run("ssh", "-F", tb.ssh_config, "-o", f"ControlPath={sock}", "-O", "check", "h1", check=False)
        assert "Master running" in r.stderr, r.stderr
    m.run("boot", "all")
    second = log.read_text()
    m.run("free", "all")
    assert '"source": "hwloc' in first and '"source": "hwloc' not in second, second
    assert '"event": "ready"' in second
    for sock in sockets:
        tb.run("ssh", "-F", tb.ssh_config, "-o", f"ControlPath={sock}", "-O", "exit", "h1", check=False)
    # LATTICE_SSH_PERSIST=0: no sharing at all
    env = dict(m.env, LATTICE_SSH_PERSIST="0")
    subprocess.run([*LATTICE, "boot", "all"], env=env, check=True, capture_output=True, stdin=subprocess.DEVNULL)
    assert sorted(control.glob("ssh-*")) == []
    m.run("free", "all")
    r = subprocess.run([*LATTICE, "boot", "all"], env=dict(m.env, LATTICE_SSH_PERSIST="soon"), capture_output=True,
                       text=True, stdin=subprocess.DEVNULL)
    assert r.returncode == 1 and r.stderr.startswith("lattice: error: ") and "LATTICE_SSH_PERSIST" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    m.run("free", "all", check=False)


# last: it leaves h3 without an sshd
def test_a_host_below_another_that_cannot_start_fails_the_boot_cleanly(tb: Cluster, tree_machine: Machine) -> None:
    m = tree_machine
    sshd = daemon_pids(tb)["sshd-h3"]
    os.kill(sshd, signal.SIGTERM)     # h3 refuses every new ssh connection
    wait_for(lambda: not running(sshd))
    r = m.run("boot", "all", check=False)
    assert r.returncode != 0
    assert re.search(r"host h3: cannot start the agent of host h3 over ssh from host h1: .*(refused|closed)",
                     r.stderr), r.stderr
    assert re.search(r"all\s+Error", m.run("blocks").stdout)
    # the boot's command stopped everything: the others booted, and are left clean
    for h in ("h1", "h2", "h4"):
        wait_for(lambda: lattice_processes(h) == [] and block_networks(m, h, "all") == [])
    m.run("free", "all")
