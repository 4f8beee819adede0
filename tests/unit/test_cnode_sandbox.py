"""cnode's node sandbox (compute/cnode/sandbox.c) with the real ciod, driven
by a bare control connection: personalities with and without the host
agent's "sandbox" object, a sandbox that cannot be made, a bad object."""
from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from lattice.transport import wire
from test_cnode_ciod import BUILD, Pset, run_placed

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the node sandbox needs root")


class SandboxPset(Pset):
    """Pset's ciod and two cnodes, with `sandbox` as the personalities' "sandbox" object (None: none)."""

    def __init__(self, tmp: Path, sandbox: dict[str, Any] | None) -> None:   # noqa: super().__init__ starts fixed ones
        self.tmp = tmp
        self.key = os.urandom(32)
        kf = tmp / "key"
        kf.write_text(self.key.hex())
        kf.chmod(0o600)
        self.work = tmp / "work"
        self.work.mkdir()
        self.sock = tmp / "ciod.sock"
        self.ciod = subprocess.Popen(
            [str(BUILD / "bin/ciod"), "--block", "U", "--pset", "0", "--pset-size", "2", "--listen",
             f"unix:{self.sock}", "--key-file", str(kf), "--ras", str(tmp / "ras"), "--location",
             "R00-M0-N00-I:J00"], stderr=subprocess.DEVNULL)
        self.cnodes = [subprocess.Popen([str(BUILD / "bin/cnode"), "--personality", str(self.personality(n, sandbox)),
                                         "--client", str(BUILD / "lib/libcnclient.so")], stderr=subprocess.PIPE,
                                        text=True) for n in range(2)]
        end = time.time() + 600     # a hang guard: until both nodes said hello
        while self.status()[0] != 2:
            assert time.time() < end and all(c.poll() is None for c in self.cnodes)
            time.sleep(0.1)

    def personality(self, n: int, sandbox: dict[str, Any] | None) -> Path:
        pf = self.tmp / f"p{n}.json"
        p: dict[str, Any] = {
            "block": "U", "key": self.key.hex(), "ciod": f"unix:{self.sock}", "node": n, "pset": 0,
            "pset_size": 2, "coords": [0, 0, n], "torus": [1, 1, 2], "memory": 1 << 28, "mode": "co",
            "location": f"R00-M0-N00-C:J0{n}", "ionode_location": "R00-M0-N00-I:J00"}
        if sandbox is not None:
            p["sandbox"] = sandbox
        pf.write_text(json.dumps(p))
        return pf


@pytest.fixture
def make_pset(tmp_path: Path) -> Iterator[Any]:
    made: list[SandboxPset] = []

    def make(sandbox: dict[str, Any] | None) -> SandboxPset:
        tmp = tmp_path / f"pset{len(made)}"
        tmp.mkdir(mode=0o755)
        made.append(SandboxPset(tmp, sandbox))
        return made[-1]
    yield make
    for ps in made:
        try:
            ps.shutdown()
        finally:
            for c in [*ps.cnodes, ps.ciod]:
                if c.poll() is None:
                    c.kill()


def sandboxed(exe: str, *args: str) -> bytes:
    """A placed sandboxed job of two ranks, one on each node."""
    return wire.placed_job_payload(1, os.getuid(), os.getgid(), [], [0, 1], 2, "/tmp", [], wire.JOB_SANDBOX, 1,
                                   [(0, 0, 0, 0), (1, 1, 0, 0)], [(exe, [exe, *args])], "", None)


def test_without_the_agents_object_a_node_gets_loopback_and_its_name(make_pset: Any) -> None:
    ps = make_pset(None)
    err, why, out, texts = run_placed(ps, sandboxed("/bin/sh", "-c", "hostname; cat /proc/net/dev | grep -c :"))
    assert err == 0, why
    assert out == {0: "R00-M0-N00-C:J00\n1\n", 1: "R00-M0-N00-C:J01\n1\n"}, (out, texts)   # lo alone


def test_a_sandbox_that_cannot_be_made_fails_the_launch_in_one_line(make_pset: Any) -> None:
    """Here: the agent's network namespace is missing.  Every rank's end names
    the cause and the way out; the node takes the next job."""
    ps = make_pset({"netns": "/nonexistent/netns", "shm": "/dev/shm"})
    err, why, out, texts = run_placed(ps, sandboxed("/bin/true"))
    assert err == 0, why
    assert texts == ["cannot make the node sandbox: cannot open the node's network namespace /nonexistent/netns: "
                     "No such file or directory; run the job with --no-sandbox"] * 2, texts
    err, why, out, texts = run_placed(ps, wire.placed_job_payload(
        2, os.getuid(), os.getgid(), [], [0, 1], 2, "/tmp", [], 0, 1, [(0, 0, 0, 0), (1, 1, 0, 0)],
        [("/bin/echo", ["/bin/echo", "preloaded"])], "", None))
    assert out == {0: "preloaded\n", 1: "preloaded\n"}, (out, texts)


def test_nodes_given_the_blocks_pid_namespace_share_it(make_pset: Any, tmp_path: Path) -> None:
    """With "pidns" (the host agent's block pid namespace) both nodes' ranks
    are in that namespace, not one of their own, so a rank may name the other
    node's rank by its pid, as MPI's single-copy transfers (process_vm_readv)
    need."""
    ns = tmp_path / "pidns"
    ns.touch()
    init = subprocess.Popen(["unshare", f"--pid={ns}", "--fork", "--kill-child", str(BUILD / "bin" / "lattice-pidns-init")],
                            stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        assert init.stdout is not None and init.stdout.readline() == b"ready\n"
        ps = make_pset({"pidns": str(ns)})
        err, why, out, texts = run_placed(ps, sandboxed("/bin/readlink", "/proc/self/ns/pid"))
        assert err == 0, why
        want = os.readlink(f"/proc/{init.pid}/ns/pid_for_children")
        assert out == {0: want + "\n", 1: want + "\n"}, (out, texts)
    finally:
        init.kill()             # --kill-child: its init with it
        init.wait()
        subprocess.run(["umount", str(ns)], check=False)
    # its pid 1 gone, the namespace takes no process: one clear line, the node takes the next job
    ns2 = tmp_path / "dead"
    ns2.touch()
    subprocess.run(["unshare", f"--pid={ns2}", "--fork", "true"], check=True)
    try:
        ps2 = make_pset({"pidns": str(ns2)})
        err, why, out, texts = run_placed(ps2, sandboxed("/bin/true"))
        assert err == 0, why
        assert texts == ["cannot make the node sandbox: the block's pid namespace has no pid 1 any more (the host "
                         "agent's lattice-pidns-init ended): free and boot the block again: Cannot allocate memory; "
                         "run the job with --no-sandbox"] * 2, texts
    finally:
        subprocess.run(["umount", str(ns2)], check=False)


@pytest.mark.parametrize("sandbox, what", [
    ([], "\"sandbox\" must be an object"),
    ({"netns": "run/netns/x"}, "\"netns\", \"shm\", \"ipcns\" and \"pidns\" are absolute paths"),
    ({"ipcns": "run/lattice/ipc/x"}, "\"netns\", \"shm\", \"ipcns\" and \"pidns\" are absolute paths"),
    ({"pidns": "run/lattice/pid/x"}, "\"netns\", \"shm\", \"ipcns\" and \"pidns\" are absolute paths"),
    ({"ifname": "a,b"}, "\"ifname\" is a network interface name"),
])
def test_a_bad_sandbox_object_is_refused_in_one_line(tmp_path: Path, sandbox: Any, what: str) -> None:
    pf = tmp_path / "p.json"
    pf.write_text(json.dumps({
        "block": "U", "key": "00" * 32, "ciod": "unix:/nonexistent", "node": 0, "pset": 0, "pset_size": 1,
        "coords": [0, 0, 0], "torus": [1, 1, 1], "memory": 1 << 28, "mode": "co", "location": "R00-M0-N00-C:J00",
        "ionode_location": "R00-M0-N00-I:J00", "sandbox": sandbox}))
    p = subprocess.run([str(BUILD / "bin/cnode"), "--personality", str(pf), "--client",
                        str(BUILD / "lib/libcnclient.so")], capture_output=True, text=True, timeout=600)
    assert p.returncode == 1
    assert p.stderr.count("\n") == 1 and what in p.stderr, p.stderr
