"""Placement: which host runs which pset, and how a block's daemons start there.

A pset (its I/O node and its compute nodes) always lives on one host, so a
compute node reaches its I/O node through shared memory and a unix socket;
only the service node's control connections and the I/O nodes' own traffic
cross hosts (TCP, the same authenticated protocol).  Three backends, chosen
at `lattice init` (machine.toml's [placement] hosts) and behind one
interface:

- local: every pset on this host (the default);
- ssh: the hosts of a hostfile (one a line, `NAME [slots=N]`, N the compute
  nodes it may run), psets dealt out to them in turn at `lattice init` and
  recorded in the database (nodes.host of the I/O nodes); each host's agent
  starts over ssh with key login ([placement] ssh: the command, default
  `ssh -o BatchMode=yes`);
- slurm: the hosts of the Slurm allocation `lattice` runs in
  (SLURM_JOB_NODELIST), psets dealt out to them in turn at boot, every host's
  agent started by one `srun` (one task a host).

Each host runs one agent per block (lattice.agent) that starts, reaps and
ends the host's daemons; the process that carries it here (the agent
itself, or its ssh or srun) is recorded in the `agents` table, and its life
is the host's liveness: when the channel closes the agent ends its daemons,
and when the host's daemons end the agent reports it (a line in its log)
and leaves.  The agent's orders, the block key among them, go through the
channel's standard input, never a command line or an environment; the
channel's write end stays open in a shell that waits for the launcher, so
the agent sees end of file exactly when the channel dies.

What every host must share with the service node: the repository (build/
and the Python environment) and LATTICE_HOME at the same paths, as a
cluster's home directories are (the RAS spool and daemon logs go there).
Keys and sockets stay in a private directory on each host.
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

from lattice import machine
from lattice.errors import LatticeError
from lattice.machine import Machine

SSH_DEFAULT = "ssh -o BatchMode=yes"


class Launch(NamedTuple):
    hosts: tuple[str, ...]      # the hosts this launcher carries (None-free: "local" for this host)
    pid: int                    # the local process: agent, ssh or srun
    log: Path                   # what the agents report, one JSON line an event


# ---- which host runs which pset ----

def parse_hostfile(text: str, source: str = "hostfile") -> list[tuple[str, int | None]]:
    """`NAME [slots=N]` or `NAME:N` per line; # comments and blank lines ignored."""
    out: list[tuple[str, int | None]] = []
    for n, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        name, slots = words[0], None
        if ":" in name:
            name, _, s = name.partition(":")
            words = [name, f"slots={s}", *words[1:]]
        for w in words[1:]:
            k, _, v = w.partition("=")
            if k != "slots" or not v.isdigit() or int(v) < 1:
                raise LatticeError(f"{source} line {n}: {w!r} is not slots=N (N >= 1)")
            slots = int(v)
        if not name or any(c in name for c in "/ \t'\"$;&|") or name.startswith("-"):
            raise LatticeError(f"{source} line {n}: {name!r} is not a host name")
        if name in (h for h, _ in out):
            raise LatticeError(f"{source} line {n}: host {name} is listed twice")
        out.append((name, slots))
    if not out:
        raise LatticeError(f"{source} names no host")
    return out


def deal(m: Machine, hosts: list[tuple[str, int | None]]) -> dict[int, str]:
    """Psets dealt to hosts in turn (pset p to the next host with room for
    pset_size more compute nodes), so a block of k psets spans k hosts."""
    room = {h: s for h, s in hosts}
    out: dict[int, str] = {}
    at = 0
    for p in range(m.psets):
        for k in range(len(hosts)):
            h = hosts[(at + k) % len(hosts)][0]
            if room[h] is None or room[h] >= m.pset_size:  # type: ignore[operator]
                out[p] = h
                if room[h] is not None:
                    room[h] -= m.pset_size  # type: ignore[operator]
                at = (at + k + 1) % len(hosts)
                break
        else:
            total = sum(s or 0 for _, s in hosts)
            raise LatticeError(f"the hosts' slots ({total} compute nodes in all) cannot hold {m.psets} psets of "
                               f"{m.pset_size} compute nodes", "give hosts more slots, or list more hosts")
    return out


def slurm_hosts() -> list[str]:
    """The hosts of the Slurm allocation this process runs in."""
    nodelist = os.environ.get("SLURM_JOB_NODELIST") or os.environ.get("SLURM_NODELIST")
    if not nodelist:
        raise LatticeError("placement slurm needs a Slurm allocation, and SLURM_JOB_NODELIST is not set",
                           "run inside one: `salloc -N 4 lattice run ...`, or `lattice` in an sbatch script")
    try:
        p = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise LatticeError(f"cannot expand SLURM_JOB_NODELIST={nodelist}: {e}") from e
    if p.returncode != 0 or not p.stdout.split():
        raise LatticeError(f"scontrol show hostnames {nodelist} failed: {p.stderr.strip()}")
    return p.stdout.split()


def pset_hosts(con: sqlite3.Connection, m: Machine) -> dict[int, str | None]:
    """Which host runs each pset of the machine; None: this host (local)."""
    if m.placement == "local":
        return dict.fromkeys(range(m.psets))
    if m.placement == "slurm":
        return dict(deal(m, [(h, None) for h in slurm_hosts()]))
    rows = con.execute("SELECT pset, host FROM nodes WHERE kind = 'io'").fetchall()
    out: dict[int, str | None] = {r["pset"]: r["host"] for r in rows}
    if any(h is None for h in out.values()):
        raise LatticeError("the machine's ssh placement lost its hosts: run `lattice init --force` again")
    return out


def record_hosts(con: sqlite3.Connection, m: Machine, hosts: list[tuple[str, int | None]]) -> None:
    """`lattice init` of an ssh placement: the hosts, and which pset each runs."""
    where = deal(m, hosts)
    con.executemany("INSERT INTO hosts (name, slots) VALUES (?, ?)", hosts)
    con.executemany("UPDATE nodes SET host = ? WHERE kind = 'io' AND pset = ?", [(h, p) for p, h in where.items()])


# ---- where each host keeps a block's files ----

def private_dir(host: str, block: str) -> Path:
    """The host's own directory for a block's key, personalities and sockets:
    under /tmp on that host (named for the machine and the host, so hosts
    that share a /tmp, like the testbed's, never meet)."""
    digest = hashlib.sha256(str(machine.home()).encode()).hexdigest()[:12]
    return Path(f"/tmp/lattice-{os.getuid()}-{digest}") / host / block


# ---- starting the agents ----

def agent_argv() -> list[str]:
    return [sys.executable, "-m", "lattice.agent"]


def ssh_command(m: Machine) -> list[str]:
    return shlex.split(m.ssh or SSH_DEFAULT)


def _spawn(argv: list[str], orders: bytes, log: Path, hold_channel: bool, env: dict[str, str] | None = None) -> int:
    """argv detached (a session of its own), its output appended to log, orders
    written to its standard input.  hold_channel: the pipe's write end stays
    open in the child too, so the far end sees EOF only when the child dies."""
    r, w = os.pipe()
    if hold_channel:
        # ssh closes every descriptor above 2 as it starts: a shell that waits
        # for it holds the write end instead (not exec'd: "; exit")
        argv = ["sh", "-c", '"$@"; exit $?', "sh", *argv]
    with open(log, "ab") as out:
        try:
            p = subprocess.Popen(argv, stdin=r, stdout=out, stderr=out, start_new_session=True,
                                 pass_fds=(w,) if hold_channel else (), env=env)
        finally:
            os.close(r)
    try:
        with os.fdopen(w, "wb") as fh:
            fh.write(orders)
    except BrokenPipeError:
        pass            # it died at once: its log says why
    return p.pid


def launch(m: Machine, block: str, plan: dict[str | None, list[int]], spec: dict[str, Any],
           log_dir: Path) -> list[Launch]:
    """Start the agents of plan (host -> its psets; None: this host)."""
    out: list[Launch] = []
    if None in plan:
        log = log_dir / "agent.log"
        log.unlink(missing_ok=True)
        orders = dict(spec, hosts={"local": spec["hosts"]["local"]})
        pid = _spawn(agent_argv(), json.dumps(orders).encode() + b"\n", log, hold_channel=False)
        out.append(Launch(("local",), pid, log))
    remote = [h for h in plan if h is not None]
    if not remote:
        return out
    if m.placement == "ssh":
        for h in remote:
            log = log_dir / f"agent-{h}.log"
            log.unlink(missing_ok=True)
            orders = dict(spec, hosts={h: spec["hosts"][h]}, stdin_is_channel=True)
            # the far side's environment is its own: name where the lattice package is
            remote = ["env", f"PYTHONPATH={Path(__file__).resolve().parents[1]}", *agent_argv(), "--host", h]
            argv = [*ssh_command(m), h, shlex.join(remote)]
            out.append(Launch((h,), _spawn(argv, json.dumps(orders).encode() + b"\n", log, hold_channel=True), log))
    else:
        log = log_dir / "agent-slurm.log"
        log.unlink(missing_ok=True)
        orders = dict(spec, stdin_is_channel=True)
        argv = ["srun", f"--nodes={len(remote)}", f"--ntasks={len(remote)}", "--ntasks-per-node=1",
                f"--nodelist={','.join(remote)}", "--input=all", "--overlap", "--kill-on-bad-exit=0",
                f"--job-name=lattice-{block}", *agent_argv()]
        out.append(Launch(tuple(remote), _spawn(argv, json.dumps(orders).encode() + b"\n", log, hold_channel=True),
                          log))
    return out


def read_reports(log: Path, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """The whole JSON report lines in log from offset, and the offset after them;
    other lines (ssh's or srun's own messages) are kept as {"event": "text"}."""
    try:
        with open(log, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except FileNotFoundError:
        return [], offset
    end = data.rfind(b"\n") + 1
    out = []
    for line in data[:end].splitlines():
        try:
            r = json.loads(line)
            if isinstance(r, dict) and "event" in r:
                out.append(r)
                continue
        except ValueError:
            pass
        if line.strip():
            out.append({"event": "text", "text": line.decode(errors="replace")})
    return out, offset + end


def wait_ready(launches: list[Launch], timeout: float, running: Any) -> dict[str, dict[str, Any]]:
    """Every host's "ready" report, or a clear error: an agent's own, or the
    last words of a launcher that ended (ssh could not log in, srun refused)."""
    pending = {h: ln for ln in launches for h in ln.hosts}
    offsets = {ln.log: 0 for ln in launches}
    texts: dict[Path, list[str]] = {ln.log: [] for ln in launches}
    ready: dict[str, dict[str, Any]] = {}
    deadline = time.monotonic() + timeout
    while pending:
        for ln in {id(x): x for x in pending.values()}.values():
            reports, offsets[ln.log] = read_reports(ln.log, offsets[ln.log])
            for r in reports:
                if r["event"] == "ready" and r.get("host") in pending:
                    ready[r["host"]] = r
                    pending.pop(r["host"])
                elif r["event"] == "error":
                    raise LatticeError(f"host {r.get('host', '?')}: {r.get('message', 'failed')}")
                elif r["event"] == "text":
                    texts[ln.log].append(r["text"])
            if not running(ln.pid) and any(h in pending for h in ln.hosts):
                reports, _ = read_reports(ln.log, offsets[ln.log])
                last = "; ".join(texts[ln.log][-3:]) or "no report"
                raise LatticeError(f"the agent of host{'s' if len(ln.hosts) > 1 else ''} "
                                   f"{', '.join(h for h in ln.hosts if h in pending)} ended before it was ready: {last}")
        if pending and time.monotonic() > deadline:
            raise LatticeError(f"timed out after {timeout:.0f} s waiting for host{'s' if len(pending) > 1 else ''} "
                               f"{', '.join(sorted(pending))}")
        if pending:
            time.sleep(0.01)
    return ready


def events(log: Path) -> list[dict[str, Any]]:
    return read_reports(log)[0]
