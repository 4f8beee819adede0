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
  `ssh -o BatchMode=yes` with ssh heartbeats: SSH_DEFAULT);
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

import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

from lattice import machine
from lattice.errors import LatticeError
from lattice.machine import Machine

SSH_DEFAULT = "ssh -o BatchMode=yes -o ServerAliveInterval=5 -o ServerAliveCountMax=3"


class Launch(NamedTuple):
    hosts: tuple[str, ...]      # the hosts this launcher carries (None-free: "local" for this host)
    pid: int                    # the local process: agent, ssh or srun
    log: Path                   # what the agents report, one JSON line an event


# ---- which host runs which pset ----

ROLES = ("both", "io", "compute")


class HostEntry(NamedTuple):
    name: str
    slots: int | None = None    # compute nodes it may run; None: no limit
    role: str = "both"          # both: whole psets; io: I/O nodes only; compute: compute nodes only


class Where(NamedTuple):
    """Which host runs each pset's I/O node, and which its compute nodes
    (the same one unless the hostfile names I/O hosts); None: this host."""
    io: dict[int, str | None]
    compute: dict[int, str | None]


def parse_hostfile(text: str, source: str = "hostfile") -> list[HostEntry]:
    """`NAME [slots=N] [role=both|io|compute]` or `NAME:N` per line; #
    comments and blank lines ignored."""
    out: list[HostEntry] = []
    for n, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        name, slots, role = words[0], None, "both"
        if ":" in name:
            name, _, s = name.partition(":")
            words = [name, f"slots={s}", *words[1:]]
        for w in words[1:]:
            k, _, v = w.partition("=")
            if k == "slots" and v.isdigit() and int(v) >= 1:
                slots = int(v)
            elif k == "role" and v in ROLES:
                role = v
            else:
                raise LatticeError(f"{source} line {n}: {w!r} is not slots=N (N >= 1) or role={'|'.join(ROLES)}")
        if not name or any(c in name for c in "/ \t'\"$;&|") or name.startswith("-"):
            raise LatticeError(f"{source} line {n}: {name!r} is not a host name")
        if name in (h.name for h in out):
            raise LatticeError(f"{source} line {n}: host {name} is listed twice")
        out.append(HostEntry(name, slots, role))
    if not out:
        raise LatticeError(f"{source} names no host")
    return out


def _deal_psets(m: Machine, hosts: list[HostEntry], what: str) -> dict[int, str]:
    """Psets dealt to hosts in turn (pset p to the next host with room for
    pset_size more compute nodes), so a block of k psets spans k hosts."""
    room = {h.name: h.slots for h in hosts}
    out: dict[int, str] = {}
    at = 0
    for p in range(m.psets):
        for k in range(len(hosts)):
            h = hosts[(at + k) % len(hosts)].name
            left = room[h]
            if left is None or left >= m.pset_size:
                out[p] = h
                if left is not None:
                    room[h] = left - m.pset_size
                at = (at + k + 1) % len(hosts)
                break
        else:
            total = sum(h.slots or 0 for h in hosts)
            raise LatticeError(f"the {what} hosts' slots ({total} compute nodes in all) cannot hold {m.psets} psets "
                               f"of {m.pset_size} compute nodes", "give hosts more slots, or list more hosts")
    return out


def deal(m: Machine, hosts: list[HostEntry]) -> Where:
    """Whole psets dealt to the hosts in turn; or, when the hostfile names
    I/O hosts (role=io), the I/O nodes dealt to them and each pset's compute
    nodes to the other hosts, so compute nodes ship their calls over TCP to
    an I/O node on another host, as on Blue Gene."""
    io_hosts = [h for h in hosts if h.role == "io"]
    compute_hosts = [h for h in hosts if h.role != "io"]
    if not compute_hosts:
        raise LatticeError("every host of the hostfile is role=io: none runs compute nodes")
    compute = _deal_psets(m, compute_hosts, "compute")
    if not io_hosts:
        if any(h.role == "compute" for h in hosts):
            raise LatticeError("role=compute hosts need role=io hosts for their I/O nodes")
        return Where(dict(compute), dict(compute))
    io = {p: io_hosts[p % len(io_hosts)].name for p in range(m.psets)}
    return Where(dict(io), dict(compute))


def slurm_hosts() -> list[str]:
    """The hosts of the Slurm allocation this process runs in."""
    import subprocess       # here, as json, shlex and hashlib below: `lattice run` on this host needs none
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


def of(con: sqlite3.Connection, m: Machine) -> Where:
    """Which hosts run each pset of the machine; None: this host (local)."""
    if m.placement == "local":
        none: dict[int, str | None] = dict.fromkeys(range(m.psets))
        return Where(none, dict(none))
    if m.placement == "slurm":
        return deal(m, [HostEntry(h) for h in slurm_hosts()])
    io: dict[int, str | None] = {}
    compute: dict[int, str | None] = {}
    for r in con.execute("SELECT kind, pset, host FROM nodes WHERE kind = 'io' OR host IS NOT NULL"):
        (io if r["kind"] == "io" else compute)[r["pset"]] = r["host"]
    if len(io) != m.psets or any(h is None for h in io.values()):
        raise LatticeError("the machine's ssh placement lost its hosts: run `lattice init --force` again")
    return Where(io, {p: compute.get(p, io[p]) for p in io})


def record_hosts(con: sqlite3.Connection, m: Machine, hosts: list[HostEntry]) -> None:
    """`lattice init` of an ssh placement: the hosts, and which run each pset
    (the I/O nodes' rows; the compute nodes' too when they run elsewhere)."""
    where = deal(m, hosts)
    con.executemany("INSERT INTO hosts (name, slots, role) VALUES (?, ?, ?)",
                    [(h.name, h.slots, h.role) for h in hosts])
    con.executemany("UPDATE nodes SET host = ? WHERE kind = 'io' AND pset = ?", [(h, p) for p, h in where.io.items()])
    con.executemany("UPDATE nodes SET host = ? WHERE kind = 'compute' AND pset = ?",
                    [(h, p) for p, h in where.compute.items() if h != where.io[p]])


# ---- where each host keeps a block's files ----

def private_dir(host: str, block: str) -> Path:
    """The host's own directory for a block's key, personalities and sockets:
    under /tmp on that host (named for the machine and the host, so hosts
    that share a /tmp, like the testbed's, never meet).  Only named here:
    the host's agent makes it, refusing one another user made
    (lattice.safepath)."""
    from lattice import safepath
    return Path(safepath.runtime_dir(str(machine.home()))) / host / block


# ---- starting the agents ----

def agent_argv() -> list[str]:
    return [sys.executable, "-m", "lattice.agent"]


def ssh_command(m: Machine) -> list[str]:
    import shlex
    return shlex.split(m.ssh or SSH_DEFAULT)


def _spawn(argv: list[str], orders: bytes, log: Path, hold_channel: bool, env: dict[str, str] | None = None) -> int:
    """argv detached (a session of its own), its output appended to log, orders
    written to its standard input.  hold_channel: the pipe's write end stays
    open in the child too, so the far end sees EOF only when the child dies."""
    import subprocess
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


def launch(m: Machine, block: str, plan: dict[str | None, Any], spec: dict[str, Any],
           log_dir: Path, phase: str = "") -> list[Launch]:
    """Start the agents of the hosts of plan (None: this host); phase names
    the srun's log of a second launch in one boot."""
    import json
    import shlex
    out: list[Launch] = []
    if None in plan:
        from lattice import agent
        log = log_dir / "agent.log"
        log.unlink(missing_ok=True)
        out.append(Launch(("local",), agent.fork(dict(spec, hosts={"local": spec["hosts"]["local"]}), "local", log),
                          log))
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
        log = log_dir / f"agent-slurm{phase}.log"
        log.unlink(missing_ok=True)
        orders = dict(spec, hosts={h: spec["hosts"][h] for h in remote}, stdin_is_channel=True)
        argv = ["srun", f"--nodes={len(remote)}", f"--ntasks={len(remote)}", "--ntasks-per-node=1",
                f"--nodelist={','.join(remote)}", "--input=all", "--overlap", "--kill-on-bad-exit=0",
                f"--job-name=lattice-{block}", *agent_argv()]
        out.append(Launch(tuple(remote), _spawn(argv, json.dumps(orders).encode() + b"\n", log, hold_channel=True),
                          log))
    return out


def read_reports(log: Path, offset: int = 0) -> tuple[list[dict[str, Any]], int]:
    """The whole JSON report lines in log from offset, and the offset after them;
    other lines (ssh's or srun's own messages) are kept as {"event": "text"}."""
    import json
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


class Reports:
    """What the agents of some launches have reported, read as it comes."""

    def __init__(self, launches: list[Launch], running: Any) -> None:
        self.launches: list[Launch] = []
        self.running = running                  # pid -> bool: the launcher still runs
        self.offsets: dict[Path, int] = {}
        self.texts: dict[Path, list[str]] = {}
        self.seen: dict[tuple[str, str], dict[str, Any]] = {}   # (host, event) -> its report
        self.add(launches)

    def add(self, launches: list[Launch]) -> None:
        for ln in launches:
            self.launches.append(ln)
            self.offsets.setdefault(ln.log, 0)
            self.texts.setdefault(ln.log, [])

    def wait(self, event: str, hosts: list[str], timeout: float) -> dict[str, dict[str, Any]]:
        """Each host's `event` report, or a clear error: an agent's own, or
        the last words of a launcher that ended (ssh could not log in, srun
        refused)."""
        deadline = time.monotonic() + timeout
        rounds = 0
        while True:
            rounds += 1
            for ln in {id(x): x for x in self.launches}.values():
                if self.grew(ln.log):
                    reports, self.offsets[ln.log] = read_reports(ln.log, self.offsets[ln.log])
                    for r in reports:
                        if r["event"] == "error":
                            raise LatticeError(f"host {r.get('host', '?')}: {r.get('message', 'failed')}")
                        if r["event"] == "text":
                            self.texts[ln.log].append(r["text"])
                        elif "host" in r:
                            self.seen[r["host"], r["event"]] = r
                waiting = [h for h in ln.hosts if h in hosts and (h, event) not in self.seen]
                # a launcher's life from /proc every 20th round: a stat a host a round is all else
                if waiting and rounds % 20 == 0 and not self.running(ln.pid) and not self.grew(ln.log):
                    last = "; ".join(self.texts[ln.log][-3:]) or "no report"
                    raise LatticeError(f"the agent of host{'s' if len(waiting) > 1 else ''} {', '.join(waiting)} "
                                       f"ended before it was ready: {last}")
            pending = [h for h in hosts if (h, event) not in self.seen]
            if not pending:
                return {h: self.seen[h, event] for h in hosts}
            if time.monotonic() > deadline:
                raise LatticeError(f"timed out after {timeout:.0f} s waiting for host{'s' if len(pending) > 1 else ''} "
                                   f"{', '.join(sorted(pending))}")
            time.sleep(0.01)

    def grew(self, log: Path) -> bool:
        """The log has bytes not read yet."""
        try:
            return log.stat().st_size > self.offsets[log]
        except FileNotFoundError:
            return False


def events(log: Path) -> list[dict[str, Any]]:
    return read_reports(log)[0]
