"""Boots that survive load (issue 27, "Boots that scale and survive load").

What a loaded host makes slow must not make a boot or a free fail or leave
anything behind:
- an I/O node that starts listening late (here: held until its compute
  nodes have waited past the 30 s that used to be their limit) is waited
  for as long as the host agent lives, which ends a boot only when it stops
  making progress ($LATTICE_BOOT_STALL);
- an agent that takes a while to take the block network down at `lattice
  free` (here: its `ip -force -batch` works 3 s of cpu first, through a
  wrapper on PATH) is waited for while it works: a SIGTERM to its session
  after 2 s killed the ip half-way and left the namespaces behind.
A stalled boot failing with a clear line and leaving nothing is
tests/e2e/test_t0790_failures_clean.py's.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from conftest import BUILD, LATTICE, Machine, make_machine, processes, wait_for

SHAPE = ("--shape", "1x1x4", "--pset-size", "2", "--memory", "256M")
CONNECT_GUARD = 30.0        # seconds cnode gave its ciod before (net_connect's retry window)


def block_processes(m: Machine, block: str) -> list[int]:
    mark = f"{m.home}/blocks/{block}/".encode()
    return [pid for pid, argv in processes() if any(mark in a for a in argv)]


@pytest.fixture
def lm(built: Path, tmp_path: Path) -> Iterator[Machine]:
    m = make_machine(tmp_path, *SHAPE)
    m.env["LATTICE_WARM"] = "0"
    m.run("block", "create", "B", "--shape", "1x1x4")
    yield m
    m.run("free", "B", check=False)
    for pid in block_processes(m, "B"):
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass
    shutil.rmtree(m.work, ignore_errors=True)


def age(pid: int) -> float:
    """Seconds since pid started (0 if it is gone)."""
    try:
        start = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, IndexError, ValueError):
        return 0.0
    return uptime - start / os.sysconf("SC_CLK_TCK")


def late_ciod_prefix(d: Path, flag: Path) -> Path:
    """A build prefix whose ciod of pset 1 starts listening only once flag exists."""
    (d / "bin").mkdir(parents=True)
    for p in ("cnode", "cnk", "lattice-pidns-init"):
        (d / "bin" / p).symlink_to(BUILD / "bin" / p)
    (d / "lib").symlink_to(BUILD / "lib")
    script = d / "bin" / "ciod"
    script.write_text("#!/bin/sh\n"
                      f'case " $* " in *" --pset 1 "*) while [ ! -e {flag} ]; do sleep 0.05; done ;; esac\n'
                      f'exec {BUILD / "bin" / "ciod"} "$@"\n')
    script.chmod(0o755)
    return d


def test_compute_nodes_wait_for_an_io_node_that_listens_late(lm: Machine, tmp_path: Path) -> None:
    flag = tmp_path / "listen"
    prefix = late_ciod_prefix(tmp_path / "prefix", flag)
    env = dict(lm.env, LATTICE_PREFIX=str(prefix), LATTICE_BOOT_STALL="600")
    p = subprocess.Popen([*LATTICE, "boot", "B"], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    try:
        def waiting() -> list[int]:       # the cnodes of pset 1 (nodes 2 and 3), started and still there
            return [pid for pid in block_processes(lm, "B")
                    if any(f"node-{i}.json".encode() in Path(f"/proc/{pid}/cmdline").read_bytes() for i in (2, 3))
                    and b"cnode" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        wait_for(lambda: len(waiting()) == 2 or p.poll() is not None, 300)
        assert p.poll() is None, p.communicate()
        # past the window that used to end them, both still wait, and the boot goes on
        wait_for(lambda: min(age(q) for q in waiting() or [0]) > CONNECT_GUARD + 1 or p.poll() is not None
                 or len(waiting()) < 2, 300)
        assert p.poll() is None and len(waiting()) == 2, p.communicate() if p.poll() is not None else "a cnode left"
        flag.touch()
        out, err = p.communicate(timeout=300)
    finally:
        flag.touch()
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err
    assert "block B Initialized: 4 compute nodes" in out
    assert lm.run("run", "--block", "B", "-n", "4", "--kernel", "linux", "/bin/true").returncode == 0


needs_net = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("nft"),
                               reason="the block network needs root, ip and nft")


def slow_ip(d: Path) -> Path:
    """A directory whose `ip` works 3 s of cpu before a -force batch (the block's teardown), then is ip."""
    d.mkdir(parents=True)
    real = shutil.which("ip")
    script = d / "ip"
    script.write_text(f"#!{sys.executable}\n"
                      "import os, sys, time\n"
                      "if '-force' in sys.argv:\n"
                      "    t = time.process_time()\n"
                      "    while time.process_time() - t < 3.0:\n"
                      "        pass\n"
                      f"os.execv({real!r}, [{real!r}, *sys.argv[1:]])\n")
    script.chmod(0o755)
    return d


@needs_net
def test_free_waits_for_a_slow_network_teardown_and_leaves_nothing(lm: Machine, tmp_path: Path) -> None:
    lm.env["PATH"] = f"{slow_ip(tmp_path / 'path')}:{lm.env['PATH']}"     # the agent's, from its booter
    lm.run("boot", "B")
    container = json.loads((lm.home / "blocks" / "B" / "node-0.json").read_text())["container"]
    h = container.rsplit("-", 1)[1]
    mine = lambda: sorted(n for n in os.listdir("/run/netns") if n == f"lat-{h}" or n.startswith(f"lat-{h}-"))  # noqa: E731
    assert len(mine()) == 5, mine()         # the router and one a compute node
    lm.run("free", "B")
    assert mine() == []
    assert subprocess.run(["ip", "link", "show", f"lu{h}"], capture_output=True).returncode != 0
    assert block_processes(lm, "B") == []
