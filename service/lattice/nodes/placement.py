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
  recorded in the database (nodes.host of the I/O nodes); the agents start
  over ssh with key login ([placement] ssh: the command, default
  `ssh -o BatchMode=yes` with ssh heartbeats: SSH_DEFAULT) as a tree: this
  node starts the first [placement] fanout hosts' agents, each agent its
  children's (lattice.nodes.agenttree), this node's connections shared and
  kept a while (ssh_sharing);
- slurm: the hosts of the Slurm allocation `lattice` runs in
  (SLURM_JOB_NODELIST), psets dealt out to them in turn at boot, every host's
  agent started by one `srun` (one task a host).

Each host runs one agent per block (lattice.nodes.agent) that starts, reaps and
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
import sys
import time
from pathlib import Path
from typing import Any, NamedTuple

from lattice.cli import progress
from lattice.state import db, machine
from lattice.errors import LatticeError
from lattice.state.machine import Machine

SSH_DEFAULT = "ssh -o BatchMode=yes -o ServerAliveInterval=5 -o ServerAliveCountMax=3"
PROGRESS_TTY = 2.0      # a boot says its progress on a terminal after this many seconds, in place,
PROGRESS_LONG = 10.0    # elsewhere (a pipe, a log) only when it is this long, a line
PROGRESS_EVERY = 5.0    # every this many seconds


class Launch(NamedTuple):
    hosts: tuple[str, ...]      # the hosts this launcher carries (None-free: "local" for this host)
    pid: int                    # the local process: agent, ssh or srun
    log: Path                   # what the agents report, one JSON line an event
    channel: int | None = None  # the booter's write end of the agents' channel (lattice.nodes.agent.Channel)


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


def of(con: db.Connection, m: Machine) -> Where:
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


def record_hosts(con: db.Connection, m: Machine, hosts: list[HostEntry]) -> None:
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
    return [sys.executable, "-m", "lattice.nodes.agent"]


def ssh_command(m: Machine) -> list[str]:
    import shlex
    return shlex.split(m.ssh or SSH_DEFAULT)


# The service node's ssh connections to the hosts are shared and kept open
# for SSH_PERSIST seconds after their last session (OpenSSH's ControlMaster
# and ControlPersist): a key exchange costs 0.3-0.6 s here, and a cold
# `lattice run` pays it on every host at every boot otherwise.  The master
# runs detached, as the machine owner, its socket in the machine's private
# runtime directory (0700, lattice.safepath); $LATTICE_SSH_PERSIST (seconds)
# sets the window, 0 turns sharing off; a [placement] ssh command that names
# its own Control* options is left as it is.  The agents' own ssh to their
# children never persists (nothing of a block stays on a host after it).
SSH_PERSIST = 120


def ssh_sharing(m: Machine) -> list[str]:
    """The options that share the service node's connections (see above), or none."""
    text = os.environ.get("LATTICE_SSH_PERSIST")
    try:
        persist = int(text) if text else SSH_PERSIST
    except ValueError:
        raise LatticeError(f"bad LATTICE_SSH_PERSIST {text!r}: a whole number of seconds (0: no sharing)") from None
    if persist <= 0 or any("control" in w.lower() for w in ssh_command(m)):
        return []
    from lattice import safepath
    d = Path(safepath.runtime_dir(str(machine.home())))
    safepath.private_dir(d)
    return ["-o", "ControlMaster=auto", "-o", f"ControlPath={d}/ssh-%C", "-o", f"ControlPersist={persist}"]


def cores_known(hosts: list[str]) -> dict[str, str]:
    """The fingerprint of each host's cores as the service node keeps them (lattice.nodes.host):
    an agent whose host still has it does not ask hwloc again."""
    from lattice.nodes import host as hostmod
    out = {}
    for h in hosts:
        cached = hostmod.load(h)
        if cached is not None:
            out[h] = cached[1]
    return out


def fanout(m: Machine) -> int:
    """How many agents each starts over ssh: machine.toml's [placement] fanout, else agenttree.FANOUT."""
    from lattice.nodes import agenttree
    return m.fanout or agenttree.FANOUT


# The launcher's shell: it holds the channel's write end for as long as ssh or
# srun runs (ssh closes every descriptor above 2 as it starts), so the far end
# sees EOF only when the launcher dies; and it writes an empty line on it every
# HEARTBEAT seconds, so an agent whose service node vanished without closing
# the connection (its link down) hears nothing and ends its daemons
# (lattice.nodes.agent.HEARTBEAT_LOST).  Its sleep holds no channel.  bash, not sh:
# the channel's descriptor may be 10 or more (a booter of several hosts holds
# one each), which dash cannot name in a redirection ("Bad fd number": no
# heartbeat, and the far agent ends the block after HEARTBEAT_LOST).
HOLD = ('fd=$1 beat=$2; shift 2; '
        '( while eval "sleep $beat $fd>&-"; do echo >&"$fd" || exit 0; done ) & b=$!; '
        '"$@"; s=$?; kill "$b" 2>/dev/null; exit $s')


def _spawn(argv: list[str], orders: bytes, log: Path, hold_channel: bool,
           env: dict[str, str] | None = None) -> tuple[int, int | None]:
    """argv detached (a session of its own), its output appended to log, orders
    written to its standard input.  hold_channel: the pipe's write end stays
    open in the child too, with heartbeats (HOLD), and the booter keeps one
    to tell the agents "boot", "commit" or "stop" (returned with the pid)."""
    import subprocess
    from lattice.nodes import agent
    r, w = os.pipe()
    if hold_channel:
        argv = ["bash", "-c", HOLD, "bash", str(w), f"{agent.HEARTBEAT:g}", *argv]
    with open(log, "ab") as out:
        try:
            p = subprocess.Popen(argv, stdin=r, stdout=out, stderr=out, start_new_session=True,
                                 pass_fds=(w,) if hold_channel else (), env=env)
        finally:
            os.close(r)
    try:
        view = memoryview(orders)
        while view:
            view = view[os.write(w, view):]
    except BrokenPipeError:
        pass            # it died at once: its log says why
    if not hold_channel:
        os.close(w)
        return p.pid, None
    os.set_blocking(w, False)       # the booter's lines never wait on a stuck launcher
    return p.pid, w


def launch(m: Machine, block: str, plan: dict[str | None, Any], spec: dict[str, Any],
           log_dir: Path, phase: str = "") -> list[Launch]:
    """Start the agents of the hosts of plan (None: this host); phase names
    the srun's log of a second launch in one boot."""
    import json
    out: list[Launch] = []
    if None in plan:
        from lattice.nodes import agent
        log = log_dir / "agent.log"
        log.unlink(missing_ok=True)
        pid, w = agent.fork(dict(spec, hosts={"local": spec["hosts"]["local"]}), "local", log)
        os.set_blocking(w, False)
        out.append(Launch(("local",), pid, log, w))
    remote = [h for h in plan if h is not None]
    if not remote:
        return out
    spec = dict(spec, cores_known=cores_known(remote))
    if m.placement == "ssh":     # a tree: the first hosts here, each agent starting its children (agenttree)
        from lattice.nodes import agenttree
        tree = agenttree.children(remote, fanout(m))
        tree_spec = dict(spec, ssh=ssh_command(m))
        sharing = ssh_sharing(m)
        for h in tree[None]:
            log = log_dir / f"agent-{h}.log"
            log.unlink(missing_ok=True)
            orders = agenttree.orders_for(tree_spec, tree, h, "")
            argv = [*ssh_command(m), *sharing, h, agenttree.remote_command(h)]
            pid, channel = _spawn(argv, json.dumps(orders).encode() + b"\n", log, hold_channel=True)
            out.append(Launch(tuple(orders["hosts"]), pid, log, channel))
    else:
        log = log_dir / f"agent-slurm{phase}.log"
        log.unlink(missing_ok=True)
        orders = dict(spec, hosts={h: spec["hosts"][h] for h in remote})
        argv = ["srun", f"--nodes={len(remote)}", f"--ntasks={len(remote)}", "--ntasks-per-node=1",
                f"--nodelist={','.join(remote)}", "--input=all", "--overlap", "--kill-on-bad-exit=0",
                f"--job-name=lattice-{block}", *agent_argv()]
        pid, channel = _spawn(argv, json.dumps(orders).encode() + b"\n", log, hold_channel=True)
        out.append(Launch(tuple(remote), pid, log, channel))
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
    """What the agents of some launches have reported, read as it comes; and
    the booter's side of their channels (lattice.nodes.agent.Channel)."""

    BEAT = 5.0                  # seconds between the booter's "boot" lines to its agents (less for a short stall)

    def __init__(self, launches: list[Launch], running: Any, block: str | None = None, nodes: int = 0,
                 stall: float = 60.0) -> None:
        self.launches: list[Launch] = []
        self.running = running                  # pid -> bool: the launcher still runs
        self.offsets: dict[Path, int] = {}
        self.texts: dict[Path, list[str]] = {}
        self.seen: dict[tuple[str, str], dict[str, Any]] = {}   # (host, event) -> its report
        self.heard: dict[str, float] = {}       # host -> when it last reported anything
        self.up: dict[str, int] = {}            # host -> compute nodes up at its I/O nodes, as it last said
        self.block, self.nodes = block, nodes   # for the progress line
        self.t0 = time.monotonic()
        self.line = progress.Line()             # on a terminal: "booting B: N/M compute nodes up", in place
        self.next_line = self.t0 + (PROGRESS_TTY if self.line.tty else PROGRESS_LONG)
        self.beat_every = min(self.BEAT, stall / 4)     # the agents' stall window: they stop after it
        self.next_beat = self.t0
        self.add(launches)

    def add(self, launches: list[Launch]) -> None:
        for ln in launches:
            self.launches.append(ln)
            self.offsets.setdefault(ln.log, 0)
            self.texts.setdefault(ln.log, [])

    def read(self, ln: Launch) -> None:
        """The new reports of ln's log; an agent's error raises."""
        if not self.grew(ln.log):
            return
        reports, self.offsets[ln.log] = read_reports(ln.log, self.offsets[ln.log])
        now = time.monotonic()
        for r in reports:
            if r["event"] == "error":
                raise LatticeError(f"host {r.get('host', '?')}: {r.get('message', 'failed')}")
            if r["event"] == "text":
                self.texts[ln.log].append(r["text"])
            elif "host" in r:
                self.seen[r["host"], r["event"]] = r
                self.heard[r["host"]] = now
                if isinstance(r.get("up"), int):
                    self.up[r["host"]] = r["up"]

    def wait(self, event: str, hosts: list[str], stall: float) -> dict[str, dict[str, Any]]:
        """Each host's `event` report, or a clear error: an agent's own, the
        last words of a launcher that ended (ssh could not log in, srun
        refused), or a host that reported nothing (no progress) for stall
        seconds.  A boot that goes on moving is never cut off."""
        start = time.monotonic()
        for h in hosts:
            self.heard.setdefault(h, start)
        rounds = 0
        while True:
            rounds += 1
            for ln in {id(x): x for x in self.launches}.values():
                self.read(ln)
                waiting = [h for h in ln.hosts if h in hosts and (h, event) not in self.seen]
                # a launcher's life from /proc every 20th round: a stat a host a round is all else
                if waiting and rounds % 20 == 0 and not self.running(ln.pid) and not self.grew(ln.log):
                    last = "; ".join(self.texts[ln.log][-3:]) or "no report"
                    raise LatticeError(f"the agent of host{'s' if len(waiting) > 1 else ''} {', '.join(waiting)} "
                                       f"ended before it was ready: {last}")
            pending = [h for h in hosts if (h, event) not in self.seen]
            if not pending:
                return {h: self.seen[h, event] for h in hosts}
            now = time.monotonic()
            stalled = sorted(h for h in pending if now - self.heard[h] > stall)
            if stalled:
                counted = f"{self.count()}; " if self.block is not None else ""
                raise LatticeError(f"timed out waiting for host{'s' if len(stalled) > 1 else ''} "
                                   f"{', '.join(stalled)}: no progress for {stall:g} s ({counted}the stall window "
                                   f"is $LATTICE_BOOT_STALL)")
            self.beat(now)
            self.show(now)
            time.sleep(0.01)

    def count(self) -> str:
        return f"{sum(self.up.values())}/{self.nodes} compute nodes up"

    def show(self, now: float) -> None:
        """The progress of a boot over PROGRESS_TTY s on a terminal, updated
        in place as nodes come up; elsewhere a line every PROGRESS_EVERY s
        of a boot over PROGRESS_LONG s."""
        if self.block is None or now < self.next_line:
            return
        if self.line.tty:
            self.line.show(f"booting {self.block}: {self.count()}")
            return
        self.next_line = now + PROGRESS_EVERY
        print(f"lattice: boot {self.block}: {self.count()} after {now - self.t0:.0f} s", file=sys.stderr, flush=True)

    def tell(self, line: bytes, close: bool = False) -> None:
        """A line to every agent's channel (never waits: a stuck launcher misses it)."""
        for ln in self.launches:
            if ln.channel is None:
                continue
            try:
                os.write(ln.channel, line)
            except OSError:
                pass        # the launcher is gone, or its pipe is full: it hears of it by other means
            if close:
                os.close(ln.channel)
        if close:
            self.launches = [ln._replace(channel=None) for ln in self.launches]

    def beat(self, now: float) -> None:
        """The booter is still there: "boot" to the agents every BEAT s
        (an agent whose booter fell silent for its stall window stops)."""
        if now >= self.next_beat:
            self.next_beat = now + self.beat_every
            self.tell(b"boot\n")

    def commit(self) -> None:
        """The boot is done: the agents keep their daemons after the booter ends."""
        self.line.clear()
        self.tell(b"commit\n", close=True)

    def stop(self, stall: float) -> list[Launch]:
        """The boot failed: every agent ends its daemons ("stop"; an agent
        that errored did already) and leaves.  Waits while they report
        progress; the launchers still running after stall seconds without a
        word are returned (to be killed)."""
        self.line.clear()       # the error that follows starts its own line
        self.tell(b"stop\n", close=True)
        left = list({id(x): x for x in self.launches}.values())
        heard = time.monotonic()
        while left:
            for ln in left:
                size = self.offsets.get(ln.log, 0)
                try:
                    self.read(ln)
                except LatticeError:
                    pass            # an error said while stopping: the boot's own error is the one reported
                if self.offsets.get(ln.log, 0) != size:
                    heard = time.monotonic()
            left = [ln for ln in left if self.running(ln.pid)]
            if time.monotonic() - heard > stall:
                break
            time.sleep(0.02)
        return left

    def grew(self, log: Path) -> bool:
        """The log has bytes not read yet."""
        try:
            return log.stat().st_size > self.offsets[log]
        except FileNotFoundError:
            return False


def events(log: Path) -> list[dict[str, Any]]:
    return read_reports(log)[0]
