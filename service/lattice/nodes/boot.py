"""Booting and freeing a block: one ciod per pset, one cnode per compute node.

Boot writes the block's key and each node's personality (mode 0600), starts
the daemons detached (their own sessions, logs under blocks/NAME/log/),
records their pids, and waits until every ciod reports all of its compute
nodes connected.  Free asks each ciod to shut down and kills what is left.

The key file blocks/NAME/key is the only place the service node keeps a
block's key (the database has none): whoever needs it reads the file, which
only the machine directory's owner can, and free removes it.  The daemons
get its path, never the key itself, so no command line or environment
holds it.  blocks/, blocks/NAME/, ras/ and the socket directory are 0700.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from lattice.state import blocks, db, machine, ras
from lattice import procs
from lattice.state import personality as personalities
from lattice.state.blocks import Block
from lattice.transport.ciodclient import Ciod, CiodError
from lattice.errors import LatticeError
from lattice.state.machine import Machine

if TYPE_CHECKING:
    from lattice.nodes import capacity

STOP_WAIT = 30.0        # seconds a stop waits for processes that neither die nor report progress
STALL = 60.0            # default seconds a boot may go without progress before it fails ($LATTICE_BOOT_STALL)


class Interrupted(BaseException):
    """SIGTERM or SIGHUP to a booting command: the boot stops what it started, then the command ends."""


def block_dir(name: str) -> Path:
    return machine.home() / "blocks" / name


def key_file(name: str) -> Path:
    return block_dir(name) / "key"


def read_key(name: str) -> bytes | None:
    """The block's key from its key file; None if it has none (not booted)."""
    f = key_file(name)
    try:
        text = f.read_text().strip()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise LatticeError(f"cannot read the key of block {name} ({f}): {e.strerror}",
                           "`lattice` is run by the owner of the machine directory") from e
    try:
        key = bytes.fromhex(text)
    except ValueError:
        key = b""
    if len(key) != 32:
        raise LatticeError(f"{f} is not a block key (64 hex digits)", f"free the block (`lattice free {name}`)")
    return key


def block_key(b: Block) -> bytes:
    """The key of a booted block (a clear error if it has none)."""
    key = read_key(b.name)
    if key is None:
        raise LatticeError(f"block {b.name} is {b.state}: boot it first (`lattice boot {b.name}`)")
    return key


def private_dir(d: Path) -> None:
    """d exists and only its owner can list or enter it."""
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    if d.stat().st_mode & 0o077:
        os.chmod(d, 0o700)


def ciods(con: db.Connection, b: Block, m: Machine, timeout: float = 10.0) -> list[Ciod]:
    """Open a CONTROL connection to every I/O node of a booted block."""
    key = block_key(b)
    rows = con.execute("SELECT node, address FROM daemons WHERE block = ? AND kind = 'ciod' ORDER BY node",
                       (b.name,)).fetchall()
    out: list[Ciod] = []
    try:
        for r in rows:      # every hello out before any answer is awaited
            out.append(Ciod(r["address"], key, m.io_location(r["node"]), timeout, wait=False))
        for c in out:
            c.welcome()
    except LatticeError:
        for c in out:
            c.close()
        raise
    return out


def plugin_options(m: Machine) -> list[str]:
    """--plugin for each of [ionode] plugins; a relative path is the repository's."""
    out = []
    for spec in m.plugins:
        path = spec if spec.startswith("/") else str(machine.prefix().parent / spec)
        out += ["--plugin", path]
    return out


def boot(con: db.Connection, m: Machine, name: str, owner: tuple[int, int] | None = None) -> Block:
    """Boot block name; owner (pid, start time): the `lattice run` that boots
    it for itself, so that the block is freed if that run dies (lattice.state.reclaim).

    Each host that runs psets of the block gets one agent (lattice.nodes.agent,
    started by lattice.nodes.placement), which starts that host's daemons, waits
    for their readiness and reports; so the service node does per host what
    it did per node, and reaps nothing."""
    import secrets
    from lattice.nodes import capacity, placement
    stall = boot_stall()
    if m.placement == "local":      # this host runs every daemon: one clear error before any starts
        capacity.check_boot(m, blocks.get(con, name))
    # the private directories first: one that another user planted refuses
    # the boot here, with the block still Free (lattice.safepath)
    d = block_dir(name)
    private_dir(d.parent)
    private_dir(d)
    private_dir(d / "log")
    private_dir(ras.spool_dir())
    private_dir(machine.socket_dir())
    blocks.set_state(con, name, "Allocated", expect=("Free",))
    # while it boots, the block is this command's: killed half-way, it leaves
    # agents and daemons that the next command's sweep frees (lattice.state.reclaim)
    booter = owner or procs.me()
    con.execute("UPDATE blocks SET owner_pid = ?, owner_start = ? WHERE name = ?", (*booter, name))
    b = blocks.get(con, name)
    key = secrets.token_bytes(32)
    keyfile = key_file(name)
    keyfile.unlink(missing_ok=True)
    fd = os.open(keyfile, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    os.write(fd, key.hex().encode() + b"\n")
    os.close(fd)
    began = time.monotonic()        # the boot's duration goes in its RAS event (lattice serve's metrics)
    with db.transaction(con):
        con.execute("UPDATE blocks SET state = 'Booting', message = NULL, changed = ? WHERE name = ?",
                    (db.now(), name))
        con.execute("DELETE FROM daemons WHERE block = ?", (name,))
        con.execute("DELETE FROM agents WHERE block = ?", (name,))
    reports: placement.Reports | None = None
    handlers = interruptible()
    try:
        where = placement.of(con, m)
        plan: dict[str | None, list[dict[str, object]]] = {}     # host -> what it runs of each pset
        for p in b.psets(m):
            io, comp = where.io[p], where.compute[p]
            plan.setdefault(io, []).append({"pset": p, "ciod": True, "nodes": io == comp})
            if comp != io:
                plan.setdefault(comp, []).append({"pset": p, "ciod": False, "nodes": True})
        spec = orders(m, b, key, plan)
        # hosts that run I/O nodes first: the compute nodes elsewhere need their addresses
        first = {h: e for h, e in plan.items() if any(x["ciod"] for x in e)}
        reports = placement.Reports([], alive, name, b.size, stall)
        reports.add(placement.launch(m, name, first, spec, d / "log"))
        record_agents(con, name, reports.launches)
        rest = {h: e for h, e in plan.items() if h not in first}
        # the agents' own stall checks name the psets: they come first, the booter's catch a silent host
        if rest:
            listening = reports.wait("listening", [h or "local" for h in first], stall + 10)
            spec["ciod_addresses"] = {p: a for r in listening.values() for p, a in r["ciods"].items()}
            more = placement.launch(m, name, rest, spec, d / "log", phase="-compute")
            reports.add(more)
            record_agents(con, name, more)
        ready = reports.wait("ready", [h or "local" for h in plan], stall + 10)
        for h in ready:         # a block network that could be made here and was not (lattice.nodes.blocknet)
            w = reports.seen.get((h, "warning"), {})
            if w.get("failed"):
                print(f"lattice: warning: host {h}: {w.get('message')}", file=sys.stderr, flush=True)
                ras.record(con, "WARNING", "MMCS", name, f"host {h}: {w.get('message')}")
        parts = {h: r["subnet"] for h, r in ready.items() if h != "local" and "subnet" in r}
        if len(parts) > 1:      # the block network's parts on the hosts route to each other (lattice.nodes.blocknet)
            import json
            reports.tell(b"peers " + json.dumps(parts).encode() + b"\n")
            for h, r in reports.wait("peered", list(parts), stall + 10).items():
                for problem in r.get("problems", []):
                    print(f"lattice: warning: host {h}: {problem}", file=sys.stderr, flush=True)
        with db.transaction(con):
            for h, r in ready.items():
                host = None if h == "local" else h
                for p, c in r["ciods"].items():
                    con.execute("INSERT INTO daemons (block, kind, node, pid, address, host) "
                                "VALUES (?, 'ciod', ?, ?, ?, ?)", (name, int(p), c["pid"], c["address"], host))
                con.executemany("INSERT INTO daemons (block, kind, node, pid, host) VALUES (?, 'cnode', ?, ?, ?)",
                                [(name, int(i), pid, host) for i, pid in r["cnodes"].items()])
                if "cores" in r:
                    remember_cores(h, r["cores"])
                if "capacity" in r:
                    remember_capacity(h, r["capacity"])
        reports.commit()        # the agents keep the daemons from now on
    except BaseException as e:
        restore(handlers)
        failed(con, name, e, reports, stall, owner is None)
        if isinstance(e, (LatticeError, OSError)):
            why = e.message if isinstance(e, LatticeError) else str(e)
            raise LatticeError(f"boot of block {name} failed: {why}", f"daemon logs are in {d / 'log'}") from e
        if isinstance(e, (KeyboardInterrupt, Interrupted)):
            sig = e.args[0] if isinstance(e, Interrupted) and e.args else signal.SIGINT
            raise LatticeError(f"boot of block {name} interrupted ({signal.Signals(sig).name}): the daemons it "
                               f"started were stopped", status=128 + sig) from e
        raise
    restore(handlers)
    blocks.set_state(con, name, "Initialized")
    if owner is None:       # booted for whoever runs jobs on it: nobody's to free
        con.execute("UPDATE blocks SET owner_pid = NULL, owner_start = NULL WHERE name = ?", (name,))
    hosts = sorted({h for h in plan if h is not None})
    ras.record(con, "INFO", "MMCS", name, f"block {name} initialized ({b.size} compute nodes, "
                                          f"{len(b.psets(m))} I/O nodes"
                                          + (f" on host{'s' if len(hosts) > 1 else ''} {', '.join(hosts)}" if hosts else "")
                                          + f") in {time.monotonic() - began:.3f} s")
    return blocks.get(con, name)


def record_agents(con: db.Connection, name: str, launches: list) -> None:  # type: ignore[type-arg]
    with db.transaction(con):
        for ln in launches:
            for h in ln.hosts:
                con.execute("INSERT INTO agents (block, host, pid, start, log) VALUES (?, ?, ?, ?, ?)",
                            (name, h, ln.pid, procs.start_time(ln.pid), str(ln.log)))


def boot_stall() -> float:
    """The stall window: a boot whose hosts report no progress (a compute
    node up, a daemon started) for this many seconds fails; one that keeps
    moving goes on however long it takes.  $LATTICE_BOOT_STALL, default 60."""
    text = os.environ.get("LATTICE_BOOT_STALL")
    try:
        value = float(text) if text else STALL
    except ValueError:
        raise LatticeError(f"bad LATTICE_BOOT_STALL {text!r}: a number of seconds") from None
    if not value > 0:
        raise LatticeError(f"bad LATTICE_BOOT_STALL {text!r}: a number of seconds above 0")
    return value


def interruptible() -> dict[int, object]:
    """SIGTERM and SIGHUP end a boot as SIGINT does (the boot stops what it
    started first), where they would kill the command outright; the
    handlers they had."""
    def on(signum: int, _frame: object) -> None:
        raise Interrupted(signum)
    old: dict[int, object] = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) == signal.SIG_DFL:
            old[sig] = signal.signal(sig, on)
    return old


def restore(handlers: dict[int, object]) -> None:
    for sig, h in handlers.items():
        signal.signal(sig, h)  # type: ignore[arg-type]


def failed(con: db.Connection, name: str, e: BaseException, reports: object, stall: float,
           disown: bool) -> None:
    """A boot that failed or was interrupted: every daemon it started, on
    every host, is stopped before it reports (its agents end theirs; what
    is left on this host is killed), and the block says what happened."""
    from lattice.nodes import placement
    if isinstance(e, LatticeError):
        why = e.message
    elif isinstance(e, (KeyboardInterrupt, Interrupted)):
        sig = e.args[0] if isinstance(e, Interrupted) and e.args else signal.SIGINT
        why = f"interrupted ({signal.Signals(sig).name})"
    else:
        why = str(e) or type(e).__name__
    left: list[placement.Launch] = []
    if isinstance(reports, placement.Reports):
        left = reports.stop(stall)
    hosts = kill_launchers(left)
    kill_daemons(con, name, sweep=True)
    con.execute("DELETE FROM agents WHERE block = ?", (name,))
    unsure = [h for h in hosts if h != "local"]
    ras.record(con, "FATAL" if not isinstance(e, (KeyboardInterrupt, Interrupted)) else "WARNING", "MMCS", name,
               f"boot of block {name} failed: {why}; its daemons were stopped"
               + (f" (host{'s' if len(unsure) > 1 else ''} {', '.join(unsure)} did not confirm: their agents end "
                  f"theirs when their channel closes)" if unsure else ""))
    if isinstance(e, (KeyboardInterrupt, Interrupted)) and not unsure:
        with db.transaction(con):       # nothing of it runs any more: Free says the truth
            con.execute("UPDATE blocks SET state = 'Free', message = NULL, owner_pid = NULL, owner_start = NULL, "
                        "changed = ? WHERE name = ?", (db.now(), name))
        for f in block_dir(name).glob("*"):
            if f.is_file():
                f.unlink()
        return
    blocks.set_state(con, name, "Error", f"boot failed: {why}")
    if disown:   # the failure is on record; only `lattice free` leaves Error
        con.execute("UPDATE blocks SET owner_pid = NULL, owner_start = NULL WHERE name = ?", (name,))


def outlive(pids: list[int], wait: float) -> list[int]:
    """Those of pids still alive after up to wait seconds (the rest are gone)."""
    deadline = time.monotonic() + wait
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.02)
    return [p for p in pids if alive(p)]


def kill_launchers(launches: list) -> list[str]:  # type: ignore[type-arg]
    """End launchers (agent, ssh, srun) that did not leave when told: SIGTERM
    to their sessions (an agent ends its daemons on it; ssh's far end sees
    its channel close), SIGKILL after STOP_WAIT; the hosts they carried."""
    hosts: list[str] = []
    pids = [ln.pid for ln in launches]
    for ln in launches:
        hosts += ln.hosts
    for sig, wait in ((signal.SIGTERM, STOP_WAIT), (signal.SIGKILL, 2.0)):
        for pid in pids:
            try:
                os.killpg(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        pids = outlive(pids, wait)
        if not pids:
            break
    return hosts


def orders(m: Machine, b: Block, key: bytes, plan: dict[str | None, list[dict[str, object]]]) -> dict[str, object]:
    """What every host's agent is told (lattice.nodes.agent): the key, and per host
    what it runs of each pset (its I/O node, its compute nodes, or both) with
    each node's personality (the agent adds key and I/O node address)."""
    from lattice.nodes import placement
    hosts: dict[str, list[dict[str, object]]] = {}
    for h, entries in plan.items():
        hosts[h or "local"] = [{
            "pset": e["pset"], "location": m.io_location(e["pset"]), "ciod": e["ciod"],  # type: ignore[arg-type]
            "nodes": [{"index": i, "personality": personality(m, b, None, i, None)}
                      for i in m.pset_nodes(e["pset"])] if e["nodes"] else [],  # type: ignore[arg-type]
        } for e in entries]
    psets = {e["pset"] for es in plan.values() for e in es}
    locations = {f"ciod-{p}": m.io_location(p) for p in psets}  # type: ignore[arg-type]
    locations.update({f"cnode-{i}": m.compute_location(i) for p in psets for i in m.pset_nodes(p)})  # type: ignore[arg-type]
    remote = any(h is not None for h in plan)
    return {
        "block": b.name, "key": key.hex(), "prefix": str(machine.prefix()), "pset_size": m.pset_size,
        "ras_dir": str(ras.spool_dir()), "plugins": plugin_options(m), "hosts": hosts,
        "tcp": remote, "report_cores": remote, "secrets_on_disk": not remote,
        "stall": boot_stall(),
        "dirs": {h or "local": str(block_dir(b.name) if h is None else placement.private_dir(h, b.name)) for h in plan},
        "socket_dirs": {h or "local": str(machine.socket_dir() if h is None else placement.private_dir(h, b.name))
                        for h in plan},
        "log_dirs": {h or "local": str(block_dir(b.name) / "log" / (h or "")).rstrip("/") for h in plan},
        "locations": locations,
        # settings the daemons read from their environment (LATTICE_RAS_WINDOW, LATTICE_MAX_CONNS...)
        "env": {k: v for k, v in os.environ.items() if k.startswith("LATTICE_") and k != "LATTICE_HOME"},
    }


def capacity_file(h: str) -> Path:
    return machine.home() / "hosts" / f"{h}.capacity"


def remember_capacity(h: str, facts: str) -> None:
    """Keep what a host's agent read of its limits at boot (lattice.nodes.capacity):
    `lattice run` checks each host's ranks against it."""
    f = capacity_file(h)
    f.parent.mkdir(parents=True, exist_ok=True)
    tmp = f.with_name(f".{f.name}.{os.getpid()}")
    tmp.write_text(facts)
    tmp.replace(f)


def host_capacity(h: str) -> capacity.Host | None:
    """What h's agent read of its limits at its last boot, or None."""
    from lattice.nodes import capacity
    try:
        return capacity.Host.from_json(capacity_file(h).read_text())
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remember_cores(h: str, report: dict[str, object]) -> None:
    """Keep what a host's agent said of its cores (lattice.nodes.host's cache)."""
    from lattice.nodes import host as hostmod
    cores = tuple(hostmod.Core(int(c[0]), tuple(int(x) for x in c[1:])) for c in report["cores"])  # type: ignore[attr-defined]
    idle, ucx = report.get("hwloc_idle", []), report.get("ucx_idle", [])
    if cores:
        hostmod.save(hostmod.Host(h, cores, str(report.get("source", "agent")),
                                  tuple(str(x) for x in idle) if isinstance(idle, list) else (),
                                  tuple(str(x) for x in ucx) if isinstance(ucx, list) else ()),
                     str(report.get("fingerprint", "agent")))     # the agent skips hwloc while it matches


def personality(m: Machine, b: Block, key: bytes | None, i: int, addr: str | None) -> dict[str, object]:
    """Node i's personality file: what cnode needs (key, ciod, hide) and the
    fields it passes to jobs as LATTICE_PERSONALITY (lattice.state.personality)."""
    p = personalities.of_node(m, b.name, i)
    return {
        "block": p.block, **({"key": key.hex()} if key else {}), **({"ciod": addr} if addr else {}),
        "node": p.rank_in_pset, "pset": p.pset,
        "pset_size": p.pset_size, "coords": list(p.coords), "torus": list(p.torus),
        "memory": p.memory, "cores": p.cores, "mode": p.mode, "location": p.location,
        "ionode_location": p.ionode, "hide": list(m.hide),
    }


def ciods_one(con: db.Connection, b: Block, m: Machine, pset: int) -> Ciod:
    r = con.execute("SELECT address FROM daemons WHERE block = ? AND kind = 'ciod' AND node = ?",
                    (b.name, pset)).fetchone()
    return Ciod(r["address"], block_key(b), m.io_location(pset), timeout=5.0)


def alive(pid: int) -> bool:
    """True while pid runs (reaping it if it is our exited child)."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def ours(pid: int, block: str | bytes) -> bool:
    """The pid still runs one of this block's daemons (not a recycled pid,
    not a zombie: its command line would be empty).  block may be its
    mark(), which a caller checking many pids computes once."""
    want = block if isinstance(block, bytes) else mark(block)
    try:
        fd = os.open(f"/proc/{pid}/cmdline", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return want in os.read(fd, 65536)
    except OSError:
        return False
    finally:
        os.close(fd)


def mark(block: str) -> bytes:
    """What every daemon of the block has in its command line: the block's directory."""
    return str(block_dir(block)).encode()


def leftovers(name: str) -> list[int]:
    """Every process on this host whose command line names the block's
    directory (its ciods and cnodes: a key file, a personality), recorded or
    not: what a boot killed half-way or an agent killed outright leaves."""
    want = mark(name) + b"/"
    me = os.getpid()
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit() and int(d) != me and ours(int(d), want):
            out.append(int(d))
    return out


def sweep_block_networks() -> None:
    """The block networks agents killed outright left on this host (lattice.nodes.blocknet): only root
    makes them, so only root pays for the look."""
    if os.geteuid() == 0:
        from lattice.nodes import blocknet
        blocknet.sweep_after_free()


def kill_daemons(con: db.Connection, name: str, grace: float = 5.0, sweep: bool = False) -> None:
    """End the block's daemons on this host, then its agents (each ends what
    is left on its host when its channel closes or it is told to stop).
    sweep (or an agent that had to be killed): then every process of the
    block on this host, recorded or not (leftovers), is killed too."""
    rows = con.execute("SELECT pid FROM daemons WHERE block = ? AND host IS NULL", (name,)).fetchall()
    me = mark(name)
    pids = [r["pid"] for r in rows if ours(r["pid"], me)]
    deadline = time.monotonic() + grace
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    for p in pids:
        if alive(p) and ours(p, me):
            try:
                os.killpg(p, signal.SIGKILL)  # its session: the daemon and any job it started
            except ProcessLookupError:
                pass
    for p in pids:
        for _ in range(100):
            if not alive(p):
                break
            time.sleep(0.02)
    if stop_agents(con, name, grace) or sweep:
        kill_leftovers(name)
    con.execute("DELETE FROM daemons WHERE block = ?", (name,))


def kill_leftovers(name: str) -> int:
    """SIGKILL to every leftover daemon of the block on this host (its
    session: the jobs it started go too), and wait until they are gone; how
    many there were.  The wait goes on while they keep dying (a host at a
    load of hundreds reaps thousands slowly), up to STOP_WAIT without one."""
    found = leftovers(name)
    pids = list(found)
    moved = time.monotonic()
    while pids:
        for p in pids:
            try:
                if os.getpgid(p) == p:
                    os.killpg(p, signal.SIGKILL)
                else:
                    os.kill(p, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.02)
        still = [p for p in pids if alive(p)]
        if len(still) < len(pids):
            moved = time.monotonic()
        elif time.monotonic() - moved > STOP_WAIT:
            break
        pids = still
    return len(found)


def stop_agents(con: db.Connection, name: str, grace: float) -> bool:
    """An agent whose daemons have all ended leaves by itself (and its ssh or
    srun with it), once it has taken the block's network down; one that
    made no progress for a moment is told to (SIGTERM: it ends its daemons),
    then killed.  Progress is its log growing (daemons reaped) or it and
    its tools (ip, nft) using cpu: every wait follows it, not a fixed total,
    for a block of thousands of nodes takes its agent a while to end on a
    loaded host.  The SIGTERM goes to this host's agent alone, not its
    session: its tools, killed half-way, would leave namespaces behind."""
    rows = con.execute("SELECT pid, start, log, host FROM agents WHERE block = ?", (name,)).fetchall()
    mine = {r["pid"]: (r["log"], r["host"] == "local") for r in rows
            if procs.same(procs.start_time(r["pid"]), r["start"])}
    signalled = False
    for sig, wait in ((0, 2.0), (signal.SIGTERM, grace), (signal.SIGKILL, 2.0)):
        signalled |= bool(sig and mine)
        for pid, (_, local) in mine.items():
            try:
                if sig == signal.SIGTERM and local:
                    os.kill(pid, sig)
                elif sig:
                    os.killpg(pid, sig)   # its session: the agent, or the shell, ssh or srun that carry it
            except ProcessLookupError:
                pass
        left = outlive_progress({pid: log for pid, (log, _) in mine.items()}, wait)
        mine = {pid: mine[pid] for pid in left}
        if not mine:
            break
    con.execute("DELETE FROM agents WHERE block = ?", (name,))
    return signalled


def cpu_ticks(pid: int) -> int:
    """pid's user + system cpu ticks so far (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            f = fh.read().rsplit(")", 1)[1].split()
        return int(f[11]) + int(f[12])
    except (OSError, IndexError, ValueError):
        return 0


def children(pid: int) -> list[int]:
    """pid's children (those of its main thread: an agent's tools)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(c) for c in fh.read().split()]
    except (OSError, ValueError):
        return []


def outlive_progress(agents: dict[int, str | None], quiet: float) -> list[int]:
    """Those of the agents (pid -> its log) still alive once none has made
    progress (its log grew, it or its children used cpu) for quiet seconds."""
    def state() -> list[int]:
        out = []
        for pid, log in agents.items():
            try:
                out.append(os.stat(log).st_size if log else 0)
            except OSError:
                out.append(0)
            out.append(sum(cpu_ticks(p) for p in [pid, *children(pid)]))
        return out
    seen, moved = state(), time.monotonic()
    pids = list(agents)
    while pids and time.monotonic() - moved < quiet:
        time.sleep(0.05)
        pids = [p for p in pids if alive(p)]
        now = state()
        if now != seen:
            seen, moved = now, time.monotonic()
    return [p for p in pids if alive(p)]


def free(con: db.Connection, m: Machine, name: str, why: str | None = None) -> None:
    """Shut the block down; why (e.g. "freed by `lattice free --force`") is
    its message while it terminates: a run whose job dies of it says so."""
    b = blocks.get(con, name)
    if b.state == "Free":       # yet daemons of it may run: a boot killed half-way, an agent killed outright
        stop_agents(con, name, 5.0)
        n = kill_leftovers(name)
        if n:
            ras.record(con, "WARNING", "MMCS", name, f"block {name} was Free, yet {n} of its daemons ran on this "
                                                     f"host: killed")
            print(f"lattice: block {name}: killed {n} daemon{'s' if n > 1 else ''} left running", file=sys.stderr)
        sweep_block_networks()
        return
    clean = b.state == "Initialized"
    blocks.set_state(con, name, "Terminating", why,
                     expect=("Allocated", "Booting", "Initialized", "Error", "Terminating"))
    try:
        booted = read_key(name) is not None
    except LatticeError:
        booted = False      # a key nobody can use: the daemons are killed below
    if booted:
        for p in b.psets(m):
            try:
                with ciods_one(con, b, m, p) as c:
                    c.call(0x0103)  # LAT_CTL_SHUTDOWN
            except (LatticeError, OSError, TypeError):
                pass  # dead or never started: killed below
    kill_daemons(con, name, sweep=not clean)    # a block that was not up as recorded may have unrecorded daemons
    sweep_block_networks()
    from lattice.nodes import hugepages            # the pages the block's jobs touched, if it kept them
    for problem in hugepages.forget(hugepages.book_dir(), hugepages.block_entry(machine.home(), name)):
        print(f"lattice: warning: {problem}", file=sys.stderr, flush=True)
    for f in block_dir(name).glob("*"):
        if f.is_file():
            f.unlink()  # key and personalities: secrets of a block that no longer runs
    with db.transaction(con):
        con.execute("UPDATE blocks SET state = 'Free', message = NULL, owner_pid = NULL, owner_start = NULL, "
                    "changed = ? WHERE name = ?", (db.now(), name))
    ras.record(con, "INFO", "MMCS", name, f"block {name} freed")
