"""The multi-host testbed (scripts/testbed.sh, issue 15 item 5): four hosts on this
machine, each its own network namespace, address and hostname, with a real sshd
(key login) and a real slurmd under one slurmctld; and nothing left after `down`."""
from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from testbed import SCRIPT, Cluster, alive, cluster_up, daemon_pids, leftovers, namespace_pids, running, script

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: namespaces, a bridge, daemons")

HOSTS = ["h1", "h2", "h3", "h4"]


@pytest.fixture(scope="module")
def tb() -> Iterator[Cluster]:
    with cluster_up(4) as t:
        yield t


def address(tb: Cluster, host: str) -> str:
    """The host's IPv4 address as it sees it inside its namespace (eth0)."""
    out = tb.in_host(host, "ip", "-o", "-4", "addr", "show", "dev", "eth0").stdout.split()
    return out[out.index("inet") + 1].split("/")[0]


def test_each_host_has_its_own_hostname_and_address(tb: Cluster) -> None:
    assert tb.hosts == HOSTS
    addresses = {h: address(tb, h) for h in tb.hosts}
    assert len(set(addresses.values())) == 4, addresses
    for h in tb.hosts:
        assert tb.in_host(h, "hostname").stdout.strip() == h
        # its name resolves to that address in the root namespace and inside another host
        assert tb.run("getent", "hosts", h).stdout.split()[0] == addresses[h]
        other = "h1" if h != "h1" else "h2"
        assert tb.in_host(other, "getent", "hosts", h).stdout.split()[0] == addresses[h]
    # the root namespace keeps its own name
    assert tb.run("hostname").stdout.strip() not in tb.hosts


CONNECT = """
import errno, socket, sys
s = socket.socket()
s.settimeout(5)
try:
    s.connect((sys.argv[1], int(sys.argv[2])))
    print("connected", s.recv(8).decode())
except OSError as e:
    print(errno.errorcode.get(e.errno, e))
"""


def test_hosts_reach_each_other_but_not_outside(tb: Cluster) -> None:
    # h1 reaches h2's sshd over the bridge
    assert tb.in_host("h1", "python3", "-c", CONNECT, "h2", "22").stdout.startswith("connected SSH-2.0")
    # no default route: neither the machine's own network nor the internet
    assert "default" not in tb.in_host("h1", "ip", "route").stdout
    gateway = tb.run("ip", "route", "show", "default").stdout.split()
    outside = [gateway[2]] if len(gateway) > 2 else []
    for target in [*outside, "1.1.1.1"]:
        assert tb.in_host("h1", "python3", "-c", CONNECT, target, "53").stdout.strip() == "ENETUNREACH", target


def test_ssh_key_login_runs_in_that_host(tb: Cluster, tmp_path: Path) -> None:
    for h in tb.hosts:
        p = tb.ssh(h, "hostname; ip -o addr")
        name, addrs = p.stdout.split("\n", 1)
        assert name == h
        # the session's view of the network is the host's namespace, not the root's
        assert addrs == tb.in_host(h, "ip", "-o", "addr").stdout
        assert address(tb, h) in addrs
    # key only: with another key the server refuses, and offers no other way in
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    p = tb.run("ssh", "-F", "/dev/null", "-i", str(other), "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes",
               "-o", f"UserKnownHostsFile={tb.dir / 'ssh' / 'known_hosts'}", "-o", "StrictHostKeyChecking=yes",
               "root@h2", "true", check=False)
    assert p.returncode == 255
    assert "Permission denied (publickey)." in p.stderr
    assert oct(os.stat(tb.dir / "ssh").st_mode & 0o777) == "0o700"


def test_srun_runs_one_task_on_each_host(tb: Cluster) -> None:
    p = tb.run("srun", "-N4", "-n4", "hostname")
    assert sorted(p.stdout.split()) == HOSTS
    # each task is inside its host's network namespace
    p = tb.run("srun", "-N4", "-n4", "sh", "-c", 'echo "$(hostname) $(ip -o -4 addr show dev eth0)"')
    for line in p.stdout.splitlines():
        host, rest = line.split(" ", 1)
        assert f"inet {address(tb, host)}/" in rest


def job_state(tb: Cluster, job: str) -> str:
    out = tb.run("scontrol", "show", "job", job).stdout
    return out.split("JobState=")[1].split()[0]


def test_sbatch_runs_a_two_node_script(tb: Cluster, tmp_path: Path) -> None:
    out = tmp_path / "job.out"
    batch = tmp_path / "job.sh"
    batch.write_text(f"#!/bin/sh\n#SBATCH -N2\n#SBATCH -o {out}\nsrun hostname\n")
    job = tb.run("sbatch", "--parsable", str(batch)).stdout.strip()
    deadline = time.monotonic() + 60
    while job_state(tb, job) in ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING"):
        assert time.monotonic() < deadline, f"job {job} still {job_state(tb, job)}"
        time.sleep(0.1)
    assert job_state(tb, job) == "COMPLETED"
    names = out.read_text().split()
    assert len(names) == 2 and len(set(names)) == 2 and set(names) <= set(HOSTS), names


def test_salloc_then_srun_inside_the_allocation(tb: Cluster) -> None:
    p = tb.run("salloc", "-N2", "sh", "-c",
               'echo $(scontrol show hostnames "$SLURM_JOB_NODELIST"); srun hostname')
    allocated, *ran = p.stdout.splitlines()
    assert len(set(ran)) == 2 and set(ran) <= set(HOSTS), p.stdout
    # the tasks ran on the hosts the allocation names
    assert sorted(ran) == allocated.split()


def test_down_leaves_nothing_even_after_a_partial_up(tb: Cluster) -> None:
    daemons = daemon_pids(tb)
    assert {"slurmctld", "munged", *(f"sshd-{h}" for h in HOSTS), *(f"slurmd-{h}" for h in HOSTS)} <= set(daemons)
    inside = {h: namespace_pids(h) for h in HOSTS}
    assert all(inside.values()), inside

    p = script("down")
    assert p.returncode == 0, p.stderr
    assert leftovers(HOSTS) == []
    assert [n for n, pid in daemons.items() if alive(pid)] == []
    assert [pid for pids in inside.values() for pid in pids if running(pid)] == []
    assert script("status").returncode == 3

    # an `up` killed outright half-way (no chance to clean up after itself)
    up = subprocess.Popen([str(SCRIPT), "up", "4"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not (tb.dir / "pids" / "sshd-h1").exists() and up.poll() is None:
        time.sleep(0.01)
    up.send_signal(signal.SIGKILL)
    up.wait()
    started = daemon_pids(tb) if (tb.dir / "pids").exists() else {}
    assert script("down").returncode == 0
    assert leftovers(HOSTS) == []
    assert [n for n, pid in started.items() if alive(pid)] == []
