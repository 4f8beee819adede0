"""The host agent: starts, watches and ends one block's daemons on one host.

The placement (lattice.nodes.placement) starts one agent per host and block: on
this host as a child of `lattice boot`, on another through ssh (as a tree: an
agent whose orders name children starts their agents first and relays their
channel and reports: lattice.nodes.agenttree), in a Slurm allocation through
one srun for all hosts.  The agent reads its orders as
one JSON line on standard input, the block key among them, so the key
reaches a host only over the launcher's own channel (ssh's, Slurm's), never
on a command line, in an environment or on a shared file system.  Then it:

- gives each daemon the key (ciod) or its personality (cnode), which holds
  it: on this host in files of the block's directory (0700; files 0600),
  where the service node keeps them anyway; on another host on the
  daemon's standard input (a pipe), so the key never touches that host's
  disk;
- starts each pset's ciod (listening on a unix socket for its compute nodes
  and, for a service node on another host, on a TCP port it picks) and its
  cnodes, every one in a session of its own;
- waits for each ciod's "ready" (all its compute nodes connected), an event
  on a pipe (ciod --notify-fd), and reaps children as they end: boot costs
  the same per node however many there are;
- reports one JSON line on standard output: the ciods' addresses and every
  daemon's pid (or an error, after ending what it started);
- then stays, as the host's part of the block: a daemon that ends is
  reported (a line), and when the launcher's channel closes (standard
  input at end of file: the ssh or srun is gone), on SIGTERM/SIGHUP, or when
  its daemons have all ended (the block was freed), it ends the rest (each
  daemon's session: the jobs it started go too), removes its secrets and
  exits;
- before it starts the daemons and after they have ended, it sweeps the
  block's job containers (lattice.nodes.container): whatever a cnode killed
  outright left there is killed, and the cgroups removed;
- before it starts the cnodes it makes the block's network and /dev/shm on
  this host (lattice.nodes.blocknet: the I/O node's namespace, one per compute
  node, the firewall), named in each personality's "sandbox" object, and
  removes them after the daemons have ended (a "warning" report, and no
  "sandbox" object, where it cannot: not root, no ip or nft).

Reports are JSON lines: {"host", "event": "listening"|"progress"|"ready"|"error"|"exited"|"swept"|"warning"|"stopping"|
"channel-closed"|"peered"|"done", ...}; "progress" (compute nodes up, daemons started) at most every
PROGRESS_EVERY seconds while something moves, so the booter cuts off a boot that stalls, not one
that is slow (lattice.nodes.boot).

The channel (Channel) is how the booting `lattice` reaches the agent after the orders: the agent's
standard input on another host, a pipe from the booter on this one.  Lines on it: "boot" (the booter
is still there, every few seconds), "commit" (the boot succeeded: the block stays after the booter
ends), "stop" (end the daemons: the boot failed or was interrupted), and empty lines, the heartbeat
that the launcher's shell on the service node sends every HEARTBEAT seconds over ssh or srun; and
"peers {host: subnet}" before "commit", when the block's network has parts on several hosts: the
agent routes to the others' (lattice.nodes.blocknet) and reports "peered".  Until
"commit" the agent ends its daemons when the booter is gone (the pipe closes, or no "boot" line for
the stall window); after it, an agent on another host ends them when no line at all came for
HEARTBEAT_LOST seconds: its service node vanished without closing the connection (a link down).
"""
from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

from lattice.errors import LatticeError

if TYPE_CHECKING:
    import threading

    from lattice.nodes import agenttree, blocknet

STOP_GRACE = 2.0        # seconds between SIGTERM and SIGKILL when the agent ends its daemons
STOP_STALL = 60.0       # after SIGKILL, how long the agent waits for daemons that do not die (D state)
PROGRESS_EVERY = 1.0    # seconds between progress reports while the boot or the stop moves
HEARTBEAT = 5.0         # seconds between heartbeat lines on a remote agent's channel (lattice.nodes.placement)
HEARTBEAT_LOST = 20.0   # no line for this long: the service node is gone, the agent ends its daemons
STALL = 60.0            # default stall window of a boot (lattice.nodes.boot: $LATTICE_BOOT_STALL)


class Channel:
    """The booter's line to the agent (see the module's doc): read without
    blocking, a line at a time."""

    def __init__(self, fd: int, remote: bool, stall: float, rest: bytes = b"") -> None:
        self.fd, self.remote, self.stall = fd, remote, stall
        self.buf = rest
        self.closed = False
        self.committed = False
        self.stop = False
        self.peers: dict[str, str] | None = None        # the block's parts on the hosts: {host: subnet}
        self.forward: Callable[[bytes], None] | None = None     # to the agents this one started (agenttree)
        self.heard = self.booter = time.monotonic()     # the last line, the last line from the booter
        os.set_blocking(fd, False)
        self.take(b"")

    def poll(self) -> None:
        while not self.closed:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self.closed = True
                return
            if self.forward is not None:
                self.forward(data)
            self.take(data)

    def take(self, data: bytes) -> None:
        *lines, self.buf = (self.buf + data).split(b"\n")
        now = time.monotonic()
        for line in lines:
            self.heard = now
            word = line.strip()
            if word in (b"boot", b"commit"):
                self.booter = now
            self.committed |= word == b"commit"
            self.stop |= word == b"stop"
            if word.startswith(b"peers "):
                try:
                    parts = json.loads(word[6:])
                    self.peers = {str(h): str(n) for h, n in parts.items()}
                except (ValueError, AttributeError):
                    self.peers = {}

    def why_stop(self) -> str | None:
        """Why the agent must end its daemons now, if it must."""
        now = time.monotonic()
        if self.stop:
            return "told to stop by the service node"
        if self.closed and (self.remote or not self.committed):
            return ("its channel to the service node closed" if self.remote else
                    "the lattice command that was booting the block is gone")
        if not self.committed and now - self.booter > self.stall:
            return f"no word from the lattice command booting the block for {self.stall:.0f} s"
        if self.remote and now - self.heard > HEARTBEAT_LOST:
            return f"no heartbeat from the service node for {HEARTBEAT_LOST:.0f} s (its link is down?)"
        return None


class Daemon(NamedTuple):
    kind: str           # "ciod" or "cnode"
    node: int           # pset (ciod) or compute node index (cnode)
    pid: int


def say(host: str, event: str, **fields: Any) -> None:
    """One report line; a launcher that went away costs nothing here."""
    try:
        os.write(1, (json.dumps({"host": host, "event": event, **fields}) + "\n").encode())
    except OSError:
        pass


def private_file(path: Path, data: bytes) -> None:
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def private_dir(d: Path, tighten: bool = True) -> None:
    """d exists and only this agent's user may use it.  A directory Lattice
    names under /tmp (the socket directory of a deep home; a block's
    directory on another host), and with tighten=False any directory under
    /tmp (the logs, on another host where the machine directory is only a
    path), is made afresh or checked component by component, never through a
    link, and one another user made is refused (lattice.safepath); tighten=False
    leaves what exists on the way as it is.  A machine directory is the
    user's own: made as before."""
    from lattice import safepath
    if safepath.runtime(d) or (not tighten and safepath.under(d)):
        safepath.private_dir(d, tighten=tighten)
        return
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    if tighten:
        os.chmod(d, 0o700)


def spawn(argv: list[str], log: Path, env: dict[str, str], notify: int | None = None,
          stdin: int | None = None) -> int:
    """argv in a session of its own, stdin /dev/null (or the descriptor
    stdin), stdout and stderr to log; notify (a pipe's write end) becomes its
    descriptor 3."""
    actions: list[tuple[Any, ...]] = [
        (os.POSIX_SPAWN_DUP2, stdin, 0) if stdin is not None else (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
        (os.POSIX_SPAWN_OPEN, 1, str(log), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600),
        (os.POSIX_SPAWN_DUP2, 1, 2),
    ]
    if notify is not None:
        actions.append((os.POSIX_SPAWN_DUP2, notify, 3))
    return os.posix_spawn(argv[0], argv, env, file_actions=actions, setsid=True)


class Agent:
    def __init__(self, spec: dict[str, Any], host: str) -> None:
        self.spec = spec
        self.host = host
        self.psets: list[dict[str, Any]] = spec["hosts"][host]
        self.dir = Path(spec["dirs"][host])
        self.log_dir = Path(spec["log_dirs"][host])
        # this host's copy of the block's files: on its disk only where the
        # service node keeps them anyway (this host); elsewhere, on pipes
        self.on_disk = bool(spec.get("secrets_on_disk", True))
        self.daemons: dict[int, Daemon] = {}          # pid -> daemon, while it runs
        self.stopping = False
        self.status_text = ""                         # how the last reaped daemon ended
        self.sel = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)
        os.set_blocking(self.wake_r, False)
        self.sel.register(self.wake_r, selectors.EVENT_READ, "signal")
        from lattice.nodes import container
        self.container = container.name(str(spec["block"]), self.dir)   # the block's cgroups (cnode's "container")
        self.channel: Channel | None = None
        self.subtree: agenttree.Subtree | None = None     # the agents this one started over ssh (a tree)
        self.net: blocknet.Net | None = None          # the block's network and /dev/shm here (lattice.nodes.blocknet)
        self.teardown: dict[str, float] = {}
        self.up = 0                                   # compute nodes connected to this host's ciods
        self.said_progress = time.monotonic()
        self.last_progress: dict[str, Any] = {}

    def listen_to(self, channel: Channel) -> None:
        self.channel = channel
        self.sel.register(channel.fd, selectors.EVENT_READ, "channel")

    def progress(self, event: str = "progress", **fields: Any) -> None:
        """A progress report when something moved, at most every
        PROGRESS_EVERY seconds: the service node takes a report for
        progress, so one that says nothing new is not sent."""
        fields = {"up": self.up, **fields} if event == "progress" else fields
        if fields != self.last_progress and time.monotonic() - self.said_progress >= PROGRESS_EVERY:
            self.said_progress = time.monotonic()
            self.last_progress = fields
            say(self.host, event, **fields)

    def must_stop(self) -> str | None:
        """Why the boot must end now (a signal, the booter gone or saying stop)."""
        if self.stopping:
            return "asked to stop"
        if self.subtree is not None:
            self.subtree.pump()
        if self.channel is not None:
            self.channel.poll()
            return self.channel.why_stop()
        return None

    def start_subtree(self) -> None:
        """The agents of this host's children in the tree, first: they boot while this one does."""
        from lattice.nodes import agenttree
        if self.spec.get("tree", {}).get(self.host):
            self.subtree = agenttree.Subtree(self.spec, self.host, say, self.sel)
            if self.channel is not None:
                self.channel.forward = self.subtree.forward
            self.subtree.start()

    def stop_subtree(self) -> None:
        if self.subtree is not None:
            self.subtree.stop()

    # ---- start ----

    def prepare(self) -> tuple[Path, str | None]:
        """The host's private directory with the key file; the cnk to use, if built."""
        private_dir(self.dir)
        private_dir(self.log_dir, tighten=False)     # on another host, where no machine directory is
        private_dir(Path(self.spec["socket_dirs"][self.host]))
        keyfile = self.dir / "key"
        if self.on_disk:
            private_file(keyfile, self.spec["key"].encode() + b"\n")
        cnk = Path(self.spec["prefix"]) / "bin" / "cnk"
        return keyfile, (str(cnk) if os.access(cnk, os.X_OK) else None)

    def check_capacity(self) -> None:
        """Can this host hold its daemons (lattice.nodes.capacity)?  Said before any starts."""
        from lattice.nodes import capacity
        need = capacity.daemons(f"block {self.spec['block']}", sum(len(ps["nodes"]) for ps in self.psets),
                                len(self.psets), int(self.spec["pset_size"]), os.geteuid())
        found = capacity.problems(capacity.read_host(memory=False, name=self.host), [need])
        if found:
            raise RuntimeError("; and ".join(found))

    def limits(self) -> str:
        """This host's limits as its compute nodes' processes see them (the
        ranks inherit a cnode's rlimits and cgroup): for `lattice run`'s check."""
        from lattice.nodes import capacity
        cnode = next((d.pid for d in self.daemons.values() if d.kind == "cnode"), None)
        return capacity.read_host(pid=cnode or "self", name=self.host).to_json()

    def sweep_containers(self) -> None:
        """What jobs left in the block's cgroups (a cnode killed outright) killed, the cgroups removed."""
        from lattice.nodes import container
        env = {**os.environ, **self.spec.get("env", {})}        # the cnodes'
        problems = container.sweep(self.container, cgroup_want(env.get("LATTICE_CGROUP", "")))
        if problems:
            say(self.host, "swept", problems=problems)

    def start(self) -> None:
        """The host's daemons: each pset's ciod at once, while a thread sweeps the block's
        containers and makes its network (it mostly waits on `ip` and `nft`: the ciods start
        meanwhile), then, the network there, the compute nodes."""
        import threading
        spec, prefix = self.spec, Path(self.spec["prefix"])
        keyfile, cnk = self.prepare()
        for k, v in spec.get("env", {}).items():      # the booter's LATTICE_BLOCKNET* settings, on every host
            if k.startswith("LATTICE_BLOCKNET"):
                os.environ[k] = str(v)
        env = {**os.environ, **spec.get("env", {})}
        failed: list[BaseException] = []

        def network() -> None:
            try:
                self.sweep_containers()
                nodes = [n["index"] for ps in self.psets for n in ps["nodes"]]
                if nodes:
                    from lattice.nodes import blocknet
                    hosts = [str(h) for h in spec.get("dirs", spec["hosts"])]     # every host of the block
                    blocknet.progress = lambda n: self.progress(network=n)    # the booter sees a long build move
                    self.net = blocknet.boot(str(spec["block"]), self.container, nodes, hosts,
                                             lambda m, failed: say(self.host, "warning", message=m, failed=failed),
                                             init=prefix / "bin" / "lattice-pidns-init")
            except BaseException as e:      # raised in the agent's own thread, below
                failed.append(e)
        netting = threading.Thread(target=network, daemon=True)
        netting.start()
        self.notify: dict[int, int] = {}              # pset -> its notify pipe's read end
        socks: dict[int, str] = {}                    # pset -> where its compute nodes reach its ciod
        try:
            why = self.must_stop()
            if why:
                raise RuntimeError(f"boot ended while the daemons started: {why}")
            for ps in self.psets:
                p = ps["pset"]
                if ps.get("ciod", True):
                    sock = "unix:" + str(Path(spec["socket_dirs"][self.host]) / f"{spec['block']}-{p}.sock")
                    argv = [str(prefix / "bin" / "ciod"), "--block", spec["block"], "--pset", str(p),
                            "--pset-size", str(spec["pset_size"]), "--listen", sock,
                            *(["--listen", "tcp:0.0.0.0:0"] if spec.get("tcp") else []),
                            "--key-file", str(keyfile) if self.on_disk else "/dev/stdin",
                            "--ras", str(Path(spec["ras_dir"]) / f"{spec['block']}-ionode{p}.log"),
                            "--location", ps["location"], "--notify-fd", "3", *spec.get("plugins", [])]
                    r, w = os.pipe()
                    key_in = None if self.on_disk else self.pipe_with(spec["key"].encode() + b"\n")
                    try:
                        pid = spawn(argv, self.log_dir / f"ciod-{p}.log", env, notify=w, stdin=key_in)
                    finally:
                        os.close(w)
                        if key_in is not None:
                            os.close(key_in)
                    self.daemons[pid] = Daemon("ciod", p, pid)
                    self.notify[p] = r
                    self.sel.register(r, selectors.EVENT_READ, p)
                else:       # the I/O node is on another host: ship over TCP (no shared memory)
                    sock = spec["ciod_addresses"][str(p)]
                socks[p] = sock
        finally:
            netting.join()
        if failed:
            raise failed[0]
        started = sum(bool(x.get("ciod", True)) for x in self.psets)
        total = started + sum(len(x["nodes"]) for x in self.psets)
        for ps in self.psets:
            why = self.must_stop()
            if why:
                raise RuntimeError(f"boot ended while the daemons started: {why}")
            self.progress(started=started, of=total)
            started += len(ps["nodes"])
            sock = socks[ps["pset"]]
            for node in ps["nodes"]:
                i = node["index"]
                text = json.dumps({**node["personality"], "key": spec["key"], "ciod": sock, "container": self.container,
                                   **({"sandbox": self.net.sandbox(i)} if self.net else {})}, indent=1).encode()
                if self.on_disk:
                    pfile, stdin = str(self.dir / f"node-{i}.json"), None
                    private_file(Path(pfile), text)
                else:   # on its standard input: the key never touches this host's disk
                    pfile, stdin = "/dev/stdin", self.pipe_with(text)
                argv = [str(prefix / "bin" / "cnode"), "--personality", pfile,
                        "--client", str(prefix / "lib" / "libcnclient.so"), *(["--cnk", cnk] if cnk else [])]
                try:
                    pid = spawn(argv, self.log_dir / f"cnode-{i}.log", env, stdin=stdin)
                finally:
                    if stdin is not None:
                        os.close(stdin)
                self.daemons[pid] = Daemon("cnode", i, pid)

    @staticmethod
    def pipe_with(data: bytes) -> int:
        """A pipe's read end holding data and then end of file (data fits its buffer)."""
        r, w = os.pipe()
        try:
            os.write(w, data)
        finally:
            os.close(w)
        return r

    def wait_ready(self, stall: float) -> dict[int, str]:
        """Until every ciod says "ready": each pset's advertised address.  A
        boot that makes no progress (no compute node connects, no ciod says
        anything) for stall seconds fails; a slow one goes on."""
        pending = {ps["pset"] for ps in self.psets if ps.get("ciod", True)}
        unheard = set(pending)          # ciods that have not said where they listen
        listening: dict[int, list[str]] = {}
        partial: dict[int, bytes] = {}
        moved = time.monotonic()
        while pending:
            if time.monotonic() - moved > stall:
                raise RuntimeError(f"no progress for {stall:.0f} s ({self.up} compute nodes up) waiting for the "
                                   f"compute nodes of pset{'s' if len(pending) > 1 else ''} "
                                   f"{', '.join(map(str, sorted(pending)))}")
            for key, _ in self.sel.select(1.0):
                if key.data in ("signal", "channel", "child"):
                    self.drain_wakeups()
                    continue
                moved = time.monotonic()
                p, fd = key.data, key.fd
                data = os.read(fd, 4096)
                if not data:
                    self.sel.unregister(fd)
                    continue        # the ciod ended: reaped below
                lines = (partial.pop(p, b"") + data).split(b"\n")
                partial[p] = lines.pop()
                for line in lines:
                    word, _, rest = line.decode(errors="replace").partition(" ")
                    if word == "listening":
                        listening.setdefault(p, []).append(rest)
                        if len(listening[p]) == (2 if self.spec.get("tcp") else 1):
                            unheard.discard(p)
                            if not unheard:     # compute nodes on other hosts may start now
                                say(self.host, "listening",
                                    ciods={str(q): self.advertise(a) for q, a in listening.items()})
                    elif word == "ready":
                        pending.discard(p)
                    elif word == "node":
                        self.up += 1
            for d in self.reap():
                raise RuntimeError(f"{d.kind} of {self.location(d)} exited during boot ({self.status_text})")
            why = self.must_stop()
            if why:
                raise RuntimeError(f"boot ended: {why}")
            self.progress()
        return {p: self.advertise(addrs) for p, addrs in listening.items()}

    def advertise(self, addrs: list[str]) -> str:
        """The address the service node uses: the TCP one under this host's
        name when the service node is elsewhere, else the unix socket."""
        for a in addrs:
            if a.startswith("tcp:"):
                return f"tcp:{self.host}:{a.rsplit(':', 1)[1]}"
        return addrs[0]

    def location(self, d: Daemon) -> str:
        loc = self.spec.get("locations", {})
        return str(loc.get(f"{d.kind}-{d.node}", f"{d.kind} {d.node}"))

    # ---- watch ----

    def reap(self) -> list[Daemon]:
        """The daemons that ended since the last call (each waited for once)."""
        out = []
        while self.daemons:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            d = self.daemons.pop(pid, None)
            if d is not None:
                self.status_text = describe(status)
                out.append(d)
            elif self.subtree is not None:
                self.subtree.reaped(pid, status)
        return out

    def drain_wakeups(self) -> None:
        try:
            while os.read(self.wake_r, 512):
                pass
        except BlockingIOError:
            pass

    def on_signal(self, signum: int, _frame: object) -> None:
        if signum != signal.SIGCHLD:
            self.stopping = True

    def await_commit(self) -> str | None:
        """After "ready": until the booter says the boot is done ("commit");
        why not, if the booter is gone or says stop (the daemons then end)."""
        while self.channel is not None and not self.channel.committed:
            why = self.must_stop()
            if why:
                return why
            if self.channel.committed:
                break
            if self.channel.peers is not None:      # the block's parts on other hosts (lattice.nodes.blocknet)
                problems = self.net.peer(self.channel.peers, self.host) if self.net else []
                self.channel.peers = None
                say(self.host, "peered", **({"problems": problems} if problems else {}))
            for key, _ in self.sel.select(1.0):
                if key.data == "signal":
                    self.drain_wakeups()
            for d in self.reap():
                say(self.host, "exited", kind=d.kind, node=d.node, location=self.location(d), status=self.status_text)
        return None

    def watch(self) -> None:
        """The block's life on this host: report daemons that end; stop when
        asked, when the channel closes, or when its heartbeat stops."""
        for fd in list(self.notify.values()):
            try:
                self.sel.unregister(fd)
            except (KeyError, ValueError):
                pass
            os.close(fd)
        ch = self.channel
        if ch is not None and not ch.remote:        # this host's booter is done with us: nothing more comes
            self.sel.unregister(ch.fd)
            os.close(ch.fd)
            self.channel = ch = None
        while self.daemons and not self.stopping:
            for key, _ in self.sel.select(HEARTBEAT):
                if key.data == "signal":
                    self.drain_wakeups()
            why = self.must_stop()
            if why:
                self.stopping = True
                say(self.host, "channel-closed", message=why)
            for d in self.reap():
                say(self.host, "exited", kind=d.kind, node=d.node, location=self.location(d), status=self.status_text)

    def carry_subtree(self) -> None:
        """After its own part ended (and was taken down): a parent stays while its children
        run, as it carries their channel and reports, until it is told to stop or its own
        channel closes."""
        while self.subtree is not None and self.subtree.running() and not self.stopping:
            for key, _ in self.sel.select(HEARTBEAT):
                if key.data == "signal":
                    self.drain_wakeups()
            why = self.must_stop()
            if why:
                self.stopping = True
                say(self.host, "channel-closed", message=why)
            self.reap()

    def stop(self) -> None:
        """End every daemon still running (its whole session), then reap
        them all: SIGTERM, SIGKILL after STOP_GRACE, then as long as they
        take to die (a "stopping" report as their number falls keeps the
        service node waiting), up to STOP_STALL without one dying."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in list(self.daemons):
                try:
                    os.killpg(pid, sig)
                    if sig == signal.SIGTERM:
                        os.killpg(pid, signal.SIGCONT)      # a stopped one takes its SIGTERM now
                except (ProcessLookupError, PermissionError):
                    pass
            grace = STOP_GRACE if sig == signal.SIGTERM else STOP_STALL
            moved = time.monotonic()
            while self.daemons and time.monotonic() - moved < grace:
                if self.reap():
                    moved = time.monotonic() if sig == signal.SIGKILL else moved
                if self.daemons:
                    self.progress("stopping", left=len(self.daemons))
                    if self.subtree is None or not self.subtree.pump():
                        time.sleep(0.02)
            if not self.daemons:
                break
        t0 = time.monotonic()
        self.sweep_containers()
        t1 = time.monotonic()
        if self.net is not None:        # after the daemons: nothing of the block is in its namespaces now
            problems = self.net.down()
            self.net = None
            if problems:
                say(self.host, "swept", problems=problems)
        # the teardown's parts, for the "done" report (bench/coldstart_stages.py reads them)
        self.teardown = {"containers": round(t1 - t0, 4), "network": round(time.monotonic() - t1, 4)}

    def forget_secrets(self) -> None:
        for f in [self.dir / "key", *self.dir.glob("node-*.json")]:
            f.unlink(missing_ok=True)


CGROUP2_SUPER_MAGIC = 0x63677270
CGROUP2_USUAL = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified")


def cgroup_want(want: str) -> str:
    """LATTICE_CGROUP for lattice.nodes.container, the v2 hierarchy named where a statfs finds it at
    its usual places, as cnode finds it (compute/cnode/container.c): otherwise container.root reads
    /proc/self/mountinfo, 0.28 s at a boot and again at a free on a host with 8,000 mounts (every
    block's network makes some)."""
    if want not in ("", "v2"):
        return want
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(256)          # struct statfs: f_type first, a long
    for path in CGROUP2_USUAL:
        if libc.statfs(path.encode(), buf) == 0 and int.from_bytes(buf.raw[:8], sys.byteorder) == CGROUP2_SUPER_MAGIC:
            return path
    return want


def describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        try:
            return f"signal {signal.Signals(os.WTERMSIG(status)).name}"
        except ValueError:
            return f"signal {os.WTERMSIG(status)}"
    return f"status {os.waitstatus_to_exitcode(status)}"


def my_host(spec: dict[str, Any], argv: list[str]) -> str:
    """Which of the spec's hosts this is: --host NAME, else Slurm's name for
    this node, else the host name; a spec for one host needs none."""
    if "--host" in argv:
        return argv[argv.index("--host") + 1]
    hosts = [str(h) for h in spec["hosts"]]
    for name in (os.environ.get("SLURMD_NODENAME"), socket.gethostname(), socket.gethostname().split(".")[0]):
        if name is not None and name in hosts:
            return name
    if len(hosts) == 1:
        return hosts[0]
    raise RuntimeError(f"this host ({socket.gethostname()}) is none of {', '.join(hosts)}")


def read_orders(fd: int) -> tuple[bytes, bytes]:
    """The first non-empty line of fd (heartbeats may come first), and what
    was read after it (the channel's next lines)."""
    buf = b""
    while True:
        buf = buf.lstrip(b"\n")
        line, nl, rest = buf.partition(b"\n")
        if nl:
            return line, rest
        data = os.read(fd, 1 << 20)
        if not data:
            return buf, b""
        buf += data


def main(argv: list[str] | None = None) -> int:
    """The agent as a program (on another host, over ssh or srun): its
    orders are the first line of its standard input, which stays its channel."""
    argv = sys.argv[1:] if argv is None else argv
    line, rest = read_orders(0)
    try:
        spec = json.loads(line)
        host = my_host(spec, argv)
    except (ValueError, KeyError, IndexError, RuntimeError) as e:
        say(socket.gethostname(), "error", message=f"bad orders on standard input: {e}")
        return 2
    return serve(spec, host, Channel(0, True, float(spec.get("stall", STALL)), rest))


def fork(spec: dict[str, Any], host: str, log: Path) -> tuple[int, int]:
    """The agent of this host as a forked child of `lattice` (no new
    interpreter to start: 50 ms less per boot), in a session of its own,
    its reports appended to log; its pid, and the write end of its channel
    (a pipe: closed before "commit", the agent ends what it started)."""
    out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    r, w = os.pipe()
    pid = os.fork()
    if pid:
        os.close(out)
        os.close(r)
        return pid, w
    code = 1
    try:
        os.setsid()
        os.dup2(out, 1)
        os.dup2(out, 2)
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(r, 3)
        os.closerange(4, 65536)     # the database, the channel's write end and anything else of the parent's
        code = serve(spec, host, Channel(3, False, float(spec.get("stall", STALL))))
    finally:
        os._exit(code)


def serve(spec: dict[str, Any], host: str, channel: Channel | None = None) -> int:
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    cores: dict[str, Any] = {}
    learning = None
    if spec.get("report_cores"):     # hwloc takes tens of ms: while the daemons start
        import threading
        known = str(spec.get("cores_known", {}).get(host, ""))
        learning = threading.Thread(target=lambda: cores.update(host_cores(known)), daemon=True)
        learning.start()
    a = Agent(spec, host)
    if channel is not None:
        a.listen_to(channel)
    signal.set_wakeup_fd(a.wake_w)
    for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGCHLD):
        signal.signal(s, a.on_signal)
    t0 = time.monotonic()
    try:
        a.start_subtree()
        a.check_capacity()
        a.start()
        spawned = time.monotonic() - t0
        addresses = a.wait_ready(float(spec.get("stall", STALL)))
    except (OSError, RuntimeError, LatticeError) as e:
        a.stop()
        a.forget_secrets()
        say(host, "error", message=e.message if isinstance(e, LatticeError) else str(e))
        a.stop_subtree()
        return 1
    say(host, "ready", up=a.up, ciods={str(p): {"address": addresses[p],
                                       "pid": next(d.pid for d in a.daemons.values() if d.kind == "ciod" and d.node == p)}
                              for p in addresses},
        cnodes={str(d.node): d.pid for d in a.daemons.values() if d.kind == "cnode"},
        seconds={"spawn": round(spawned, 4), "ready": round(time.monotonic() - t0, 4),
                 **({"network": round(a.net.seconds, 4)} if a.net else {})},
        **({"subnet": str(a.net.plan.subnet)} if a.net else {}),
        **({"capacity": a.limits()} if spec.get("report_cores") else {}),
        **({"cores": cores} if joined(learning) and cores else {}))
    why = a.await_commit()
    if why is None:
        a.watch()
    else:
        say(host, "stopping", message=f"boot not completed: {why}", left=len(a.daemons))
    t0 = time.monotonic()
    a.stop()
    a.forget_secrets()
    t1 = time.monotonic()
    if why is None:     # its part is down: its children's go on (or end) as they do, at once
        a.carry_subtree()
    a.stop_subtree()
    say(host, "done", seconds={"stop": round(t1 - t0, 4), **a.teardown, "subtree": round(time.monotonic() - t1, 4)})
    return 0


def joined(t: threading.Thread | None) -> bool:
    """Thread t (if any) has finished: waited for here."""
    if t is not None:
        t.join()
    return True


def host_cores(known: str = "") -> dict[str, Any]:
    """This host's cores as lattice.nodes.host learns them, for the service node's cache; nothing
    when that cache's fingerprint (known) is this host's and hwloc's file for the ranks is here:
    hwloc (a process and an XML parse) is not on every cold boot."""
    from lattice.nodes import host as hostmod
    fp = hostmod.fingerprint()
    if known == fp and hostmod.topology_file().is_file():
        return {}
    h = hostmod.learn(socket.gethostname())
    return {"source": h.source, "cores": [[c.os_index, *c.pus] for c in h.cores], "hwloc_idle": list(h.hwloc_idle),
            "ucx_idle": list(h.ucx_idle), "fingerprint": fp}


if __name__ == "__main__":
    sys.exit(main())
