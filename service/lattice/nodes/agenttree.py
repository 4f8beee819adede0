"""Agents started as a tree over ssh: the shape, and an agent's subtree.

With ssh placement the service node starts the agents of the first k hosts
(k: machine.toml's [placement] fanout, default FANOUT) and each agent starts
the agents of its own k children before its daemons, as Hydra's proxies and
Slurm's slurmds fan out: the hosts are a k-ary heap in hostfile order, the
children of the i-th host (from 0) being hosts k(i+1) .. k(i+1)+k-1, so a
boot costs depth = ⌈log_k⌉-ish hops of ssh instead of one ssh per host from
one process (docs/scaling.md).

Each hop is an ssh key login with the machine's own ssh command (the same
as the service node's: every host must reach its children with it, as
Hydra's tree and pdsh need), the orders on the child's standard input.  The
parent relays (Subtree):

- down: every line of its own channel (the booter's "boot", "commit",
  "stop", "peers", the heartbeats) to each child's standard input, so the
  subtree hears what the service node says; its end of file when the parent
  goes (the parent holds the pipes: a parent killed outright closes them);
- up: each child's report lines, whole, on its own standard output, so the
  service node reads every host's reports from the root's one log;
- a child that ends before every host of its subtree said "ready" (ssh could
  not log in, the host is down) becomes one "error" report naming those
  hosts and ssh's last words: the booter then stops the boot everywhere;
  one that ends later, before its hosts said "done", a "lost" report for
  each of them: the service node's sweep (lattice.state.reclaim) takes it
  as it takes a launcher of its own that ended, and marks their nodes lost.
"""
from __future__ import annotations

import json
import os
import selectors
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable

FANOUT = 16             # default children per agent (Slurm's TreeWidth default): depth 3 for 4,096 hosts
STOP_WAIT = 60.0        # seconds a parent waits for its children to leave after "stop" while they say nothing


def children(hosts: list[str], k: int) -> dict[str | None, list[str]]:
    """The tree over hosts (in order) with fan-out k: parent (None: the service node) -> its children."""
    if k < 1:
        raise ValueError(f"fan-out {k} is not 1 or more")
    out: dict[str | None, list[str]] = {None: hosts[:k]}
    for i, h in enumerate(hosts):
        kids = hosts[k * (i + 1): k * (i + 1) + k]
        if kids:
            out[h] = kids
    return out


def subtree(tree: dict[str | None, list[str]], root: str) -> list[str]:
    """root and every host below it, root first (breadth first)."""
    out, i = [root], 0
    while i < len(out):
        out += tree.get(out[i], [])
        i += 1
    return out


def depth(n: int, k: int) -> int:
    """Levels of agents for n hosts with fan-out k (ssh hops on the longest path)."""
    levels, reached, width = 0, 0, 1
    while reached < n:
        width *= k
        reached += width
        levels += 1
    return levels


def remote_command(host: str) -> str:
    """What ssh runs on host: this agent's interpreter and package at the same
    paths (the far side's environment is its own: name where lattice is)."""
    import shlex
    package = Path(__file__).resolve().parents[2]
    return shlex.join(["env", f"PYTHONPATH={package}", sys.executable, "-m", "lattice.nodes.agent", "--host", host])


def orders_for(spec: dict[str, Any], tree: dict[str | None, list[str]], root: str, parent: str) -> dict[str, Any]:
    """The orders of root's agent: its subtree's hosts and their part of the tree."""
    hosts = subtree(tree, root)
    return dict(spec, hosts={h: spec["hosts"][h] for h in hosts},
                tree={h: tree[h] for h in hosts if h in tree}, parent=parent)


class Child:
    def __init__(self, host: str, hosts: list[str], pid: int, stdin: int, stdout: int) -> None:
        self.host, self.hosts, self.pid = host, hosts, pid
        self.stdin: int | None = stdin      # our write end of its channel (non-blocking)
        self.pending = b""                  # what it has not read yet (its orders, then lines)
        self.waiting = False                # stdin in the agent's selector, for EVENT_WRITE
        self.stdout: int | None = stdout    # its reports (and ssh's own words), to relay
        self.buf = b""
        self.texts: list[str] = []          # ssh's last words (not JSON reports)
        self.ready: set[str] = set()        # hosts of its subtree that said "ready"
        self.done: set[str] = set()         # ... and "done" (their part ended as it should)
        self.status: int | None = None      # its wait status, once reaped


class Subtree:
    """The agents this agent starts (see the module's doc)."""

    def __init__(self, spec: dict[str, Any], host: str, say: Callable[..., None],
                 sel: selectors.BaseSelector) -> None:
        raw = spec.get("tree", {})
        self.sel = sel                      # the agent's: a child's reports wake it
        self.tree: dict[str | None, list[str]] = {str(h): [str(c) for c in cs] for h, cs in raw.items()}
        self.spec, self.host, self.say = spec, host, say
        self.kids: dict[int, Child] = {}    # pid -> child
        self.stopping = False
        self.failed: set[str] = set()       # children already reported as failed

    def start(self) -> None:
        """Start each child's agent over ssh, its orders queued on its channel:
        written as its ssh reads them (pump), so a child that hangs while it
        connects holds up neither this agent nor its siblings."""
        ssh = [str(w) for w in self.spec.get("ssh", ["ssh", "-o", "BatchMode=yes"])]
        for kid in self.tree.get(self.host, []):
            in_r, in_w = os.pipe()
            out_r, out_w = os.pipe()
            try:
                pid = os.posix_spawnp(ssh[0], [*ssh, kid, remote_command(kid)], dict(os.environ), file_actions=[
                    (os.POSIX_SPAWN_DUP2, in_r, 0), (os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, out_w, 2)],
                    setsid=True)
            except OSError as e:
                for fd in (in_r, in_w, out_r, out_w):
                    os.close(fd)
                self.fail_hosts(kid, subtree(self.tree, kid), f"cannot run {ssh[0]}: {e}")
                continue
            os.close(in_r)
            os.close(out_w)
            os.set_blocking(out_r, False)
            os.set_blocking(in_w, False)
            self.kids[pid] = Child(kid, subtree(self.tree, kid), pid, in_w, out_r)
            self.sel.register(out_r, selectors.EVENT_READ, "child")
        for c in self.kids.values():
            self.write(c, json.dumps(orders_for(self.spec, self.tree, c.host, self.host)).encode() + b"\n")

    def write(self, c: Child, data: bytes) -> None:
        """data queued for c, in order, and as much of it written as its pipe takes now."""
        if c.stdin is None:
            return
        c.pending += data
        self.flush(c)

    def flush(self, c: Child) -> None:
        try:
            while c.pending and c.stdin is not None:
                c.pending = c.pending[os.write(c.stdin, c.pending):]
        except BlockingIOError:
            pass
        except OSError:         # its ssh is gone: it hears nothing more (its reports end too)
            c.pending = b""
        if c.stdin is None:
            return
        if bool(c.pending) != c.waiting:       # the agent woken when it can take more
            if c.pending:
                self.sel.register(c.stdin, selectors.EVENT_WRITE, "child")
            else:
                self.sel.unregister(c.stdin)
            c.waiting = bool(c.pending)

    def close_channel(self, c: Child) -> None:
        if c.stdin is None:
            return
        if c.waiting:
            self.sel.unregister(c.stdin)
            c.waiting = False
        c.pending = b""
        os.close(c.stdin)
        c.stdin = None

    def forward(self, data: bytes) -> None:
        """Lines of this agent's channel, to every child's."""
        for c in self.kids.values():
            self.write(c, data)

    def fail_hosts(self, kid: str, hosts: list[str], why: str) -> None:
        self.failed.add(kid)
        names = ", ".join(hosts)
        self.say(kid, "error", hosts=hosts,
                 message=f"cannot start the agent{'s' if len(hosts) > 1 else ''} of host{'s' if len(hosts) > 1 else ''} "
                         f"{names} over ssh from host {self.host}: {why}")

    def pump(self) -> bool:
        """Relay what the children said (True if they said anything); a child
        gone before its subtree was ready is reported."""
        moved = False
        for c in self.kids.values():
            if c.pending:
                self.flush(c)
            while c.stdout is not None:
                try:
                    data = os.read(c.stdout, 65536)
                except BlockingIOError:
                    break
                except OSError:
                    data = b""
                moved = True
                if not data:
                    self.sel.unregister(c.stdout)
                    os.close(c.stdout)
                    c.stdout = None
                    self.ended(c)
                    break
                *lines, c.buf = (c.buf + data).split(b"\n")
                for line in lines:
                    self.relay(c, line)
        return moved

    def relay(self, c: Child, line: bytes) -> None:
        try:
            r = json.loads(line)
        except ValueError:
            r = None
        if isinstance(r, dict) and "event" in r:
            if r["event"] in ("ready", "done"):
                (c.ready if r["event"] == "ready" else c.done).add(str(r.get("host")))
        elif line.strip():
            c.texts = (c.texts + [line.decode(errors="replace").strip()])[-3:]
        try:
            os.write(1, line + b"\n")
        except OSError:
            pass

    def ended(self, c: Child) -> None:
        """c's reports ended (its ssh is gone or going)."""
        self.close_channel(c)
        if self.stopping or c.host in self.failed:
            return
        why = "; ".join(c.texts) or "ssh ended without a word"
        missing = [h for h in c.hosts if h not in c.ready]
        if missing:
            self.fail_hosts(c.host, missing, why)
            return
        for h in c.hosts:       # booted, and gone without ending its part: the sweep marks its nodes lost
            if h not in c.done:
                self.say(h, "lost", message=f"the channel to host {h}'s agent through host {self.host} closed: {why}")

    def reaped(self, pid: int, status: int) -> bool:
        """A child process the agent reaped: one of ours?"""
        c = self.kids.get(pid)
        if c is None:
            return False
        c.status = status
        return True

    def running(self) -> bool:
        return any(c.stdout is not None for c in self.kids.values())

    def stop(self) -> None:
        """The children end their parts ("stop", then the end of their
        channel) and leave; relayed while they report, up to STOP_WAIT
        without a word; then their ssh sessions are ended."""
        self.stopping = True
        for c in self.kids.values():
            self.write(c, b"stop\n")
            self.close_channel(c)       # what it could not take: its end of file says the same
        heard = time.monotonic()
        while self.running() and time.monotonic() - heard < STOP_WAIT:
            if self.pump():
                heard = time.monotonic()
            else:
                time.sleep(0.02)
        # their ssh processes: gone with their output, or ended here (SIGKILL after 2 s)
        for sig, wait in ((0, 2.0), (signal.SIGTERM, 2.0), (signal.SIGKILL, 2.0)):
            left = [c for c in self.kids.values() if c.status is None and not self.reap(c)]
            for c in left:
                if sig:
                    try:
                        os.killpg(c.pid, sig)
                    except (ProcessLookupError, PermissionError):
                        pass
            deadline = time.monotonic() + wait
            while left and time.monotonic() < deadline:
                left = [c for c in left if not self.reap(c)]
                time.sleep(0.01)
            if not left:
                break

    @staticmethod
    def reap(c: Child) -> bool:
        try:
            pid, status = os.waitpid(c.pid, os.WNOHANG)
        except ChildProcessError:
            return True         # reaped already (by the agent: reaped())
        if pid:
            c.status = status
        return bool(pid)
