"""The machine's state as JSON-ready values: the one place that decides what
`lattice ... --json`, the web console and its API show (docs/cli.md, "JSON
output").

Every value is a dict, list, str, int, float, bool or None.  Conventions:
keys are snake_case and never renamed within a schema version; a time is an
ISO 8601 UTC string with microseconds (`2026-12-06T07:30:12.123456Z`), a
duration a number of seconds, a size a number of bytes; a field that does
not apply is null, never absent.  Strings are as stored (json.dumps escapes
any control character in them).  The functions returning a dict carry their
schema (`"schema": "lattice.NAME/VERSION"`); a list is wrapped by
`document()`.  Nothing here writes the database: a caller that wants the I/O
nodes' spooled RAS events imports them first (lattice.state.ras.ingest).
"""
from __future__ import annotations

import datetime as dt
import os
import pwd
import time
from typing import Any, Iterable, NamedTuple

from lattice.errors import LatticeError
from lattice.nodes import placement
from lattice.state import blocks as blockstate
from lattice.state import personality as personalitystate
from lattice.state import ras as rasstate
from lattice.state import db, reclaim
from lattice.state.blocks import Block
from lattice.state.machine import Machine

Doc = dict[str, Any]

# schema name -> version; a change that renames or drops a key, or changes a
# value's type or meaning, takes a new version (adding a key does not)
SCHEMAS = {"machine": 1, "machine.summary": 1, "blocks": 1, "jobs": 1, "ranks": 1, "ras": 1, "counters": 1,
           "personality": 1}

NO_BLOCK = "Unassigned"         # the state of a node that no block holds
NODE_STATES = (NO_BLOCK, "Free", "Allocated", "Booting", "Initialized", "Terminating", "Error")
SUMMARY_ABOVE = 1024            # `lattice machine` sums up a machine of more compute nodes (--nodes lists them)


def schema(name: str) -> str:
    return f"lattice.{name}/{SCHEMAS[name]}"


LIST_KEYS = {"ras": "events"}    # the key of a listing's items, when not its schema's name


def document(name: str, items: list[Doc], **fields: Any) -> Doc:
    """A listing as one document: {"schema": ..., **fields, "jobs"|"blocks"|"ranks"|"events": items}."""
    return {"schema": schema(name), **fields, LIST_KEYS.get(name, name): items}


def iso(t: float | None) -> str | None:
    """Epoch seconds as the one time format (RAS's), or None."""
    if t is None:
        return None
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime(rasstate.FORMAT)


def iso_text(text: str) -> str:
    """A stored ISO 8601 time in the one format; a text that is not one stays as it is."""
    return rasstate.normal_time(text) or text


# ---- the machine -----------------------------------------------------------

def machine_header(m: Machine) -> Doc:
    """What the machine is: shape, node counts, psets, memory, cores, placement."""
    return {"shape": list(m.shape), "compute_nodes": m.nodes, "io_nodes": m.psets, "pset_size": m.pset_size,
            "memory": m.memory, "cores": m.cores, "placement": m.placement, "hold_pages": m.hold_pages,
            "pages_held_by": "block" if m.block_holds_pages() else "job"}


class NodeState(NamedTuple):
    """Who holds each pset and where it runs, read once for a whole listing."""
    owner: dict[int, Block]             # pset -> the block holding it
    lost: set[str]                      # locations whose daemon is gone
    io_host: dict[int, str | None]      # pset -> host of its I/O node (None: not known yet)
    compute_host: dict[int, str | None]  # pset -> host of its compute nodes
    booted: dict[tuple[str, int], str]  # (ciod|cnode, pset|index) -> host of a daemon placed on another host


def node_state(con: db.Connection, m: Machine) -> NodeState:
    every = blockstate.all_blocks(con)
    owner = {p: b for b in every for p in b.psets(m)}
    lost = {loc for b in every if b.state != "Free" for loc in reclaim.lost_daemons(con, m, b.name)}
    try:
        planned = placement.of(con, m)
    except LatticeError:            # slurm outside an allocation: hosts come at boot
        planned = placement.Where({}, {})
    local = "local" if m.placement == "local" else None     # else not known until the block boots
    io = {p: planned.io.get(p) or local for p in range(m.psets)}
    compute = {p: planned.compute.get(p) or local for p in range(m.psets)}
    booted = {(r["kind"], r["node"]): r["host"] for r in con.execute(
        "SELECT kind, node, host FROM daemons WHERE host IS NOT NULL")}
    return NodeState(owner, lost, io, compute, booted)


def pset_host(ns: NodeState, m: Machine, pset: int, kind: str = "ciod") -> str | None:
    """The host of a pset's I/O node (kind ciod) or of its compute nodes
    (kind cnode: the first's, as a pset's compute nodes run together)."""
    if kind == "ciod":
        return ns.booted.get(("ciod", pset)) or ns.io_host[pset]
    return ns.booted.get(("cnode", pset * m.pset_size)) or ns.compute_host[pset]


def machine_view(con: db.Connection, m: Machine) -> Doc:
    """The machine and every node: each I/O node followed by its pset's compute nodes."""
    ns = node_state(con, m)
    nodes: list[Doc] = []
    for p in range(m.psets):
        b = ns.owner.get(p)
        block, state = (b.name, b.state) if b else (None, NO_BLOCK)
        io = m.io_location(p)
        nodes.append({"location": io, "kind": "io", "x": None, "y": None, "z": None, "pset": p, "io_node": None,
                      "host": pset_host(ns, m, p), "block": block, "state": state, "lost": io in ns.lost})
        compute_host = ns.compute_host[p]
        for i in m.pset_nodes(p):
            x, y, z = m.coord(i)
            loc = m.compute_location(i)
            nodes.append({"location": loc, "kind": "compute", "x": x, "y": y, "z": z, "pset": p, "io_node": io,
                          "host": ns.booted.get(("cnode", i)) or compute_host, "block": block, "state": state,
                          "lost": loc in ns.lost})
    return {"schema": schema("machine"), **machine_header(m), "nodes": nodes}


def location_pset(m: Machine, location: str) -> int | None:
    """The pset of a node named by its location (R00-M0-N00-C:Jnn or -I:Jnn)."""
    head, sep, num = location.rpartition(":J")
    if not sep or not num.isdigit():
        return None
    return int(num) if head.endswith("-I") else m.pset_of(int(num))


def machine_summary(con: db.Connection, m: Machine) -> Doc:
    """Counts, not nodes: compute nodes by state, then each pset and each
    host with its counts (a 64x64x16 machine is 1,024 psets, not 66,560 rows)."""
    ns = node_state(con, m)
    lost_by_pset: dict[int, int] = {}
    for loc in ns.lost:
        p = location_pset(m, loc)
        if p is not None:
            lost_by_pset[p] = lost_by_pset.get(p, 0) + 1
    by_state = dict.fromkeys(NODE_STATES, 0)
    psets: list[Doc] = []
    hosts: dict[str, Doc] = {}

    def host_row(h: str | None) -> Doc:
        key = h or "-"
        if key not in hosts:
            hosts[key] = {"host": h, "io_nodes": 0, "compute_nodes": 0, "by_state": dict.fromkeys(NODE_STATES, 0)}
        return hosts[key]
    for p in range(m.psets):
        b = ns.owner.get(p)
        state = b.state if b else NO_BLOCK
        by_state[state] += m.pset_size
        io_host, compute_host = pset_host(ns, m, p), pset_host(ns, m, p, "cnode")
        psets.append({"pset": p, "io_node": m.io_location(p), "host": io_host, "compute_host": compute_host,
                      "block": b.name if b else None, "state": state, "compute_nodes": m.pset_size,
                      "lost": lost_by_pset.get(p, 0)})
        host_row(io_host)["io_nodes"] += 1
        row = host_row(compute_host)
        row["compute_nodes"] += m.pset_size
        row["by_state"][state] += m.pset_size
    for row in hosts.values():
        row["by_state"] = {s: n for s, n in row["by_state"].items() if n}
    return {"schema": schema("machine.summary"), **machine_header(m),
            "by_state": {s: n for s, n in by_state.items() if n}, "lost": len(ns.lost),
            "hosts": list(hosts.values()), "psets": psets}


# ---- blocks ----------------------------------------------------------------

def process_user(pid: int | None) -> str | None:
    """The user running pid (a block's owner), or None if it is gone."""
    if pid is None:
        return None
    try:
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def blocks_view(con: db.Connection, m: Machine | None = None) -> list[Doc]:
    """Every block, by name."""
    if m is None:
        from lattice.state import machine
        m = machine.load()
    hosts: dict[str, set[str]] = {}
    for r in con.execute("SELECT block, host FROM daemons"):
        hosts.setdefault(r["block"], set()).add(r["host"] or "local")
    out = []
    for r in con.execute("SELECT * FROM blocks ORDER BY name"):
        b = Block.from_row(r)
        psets = b.psets(m)
        out.append({"name": b.name, "state": b.state, "shape": list(b.shape), "corner": list(b.corner),
                    "nodes": b.size, "io_nodes": len(psets), "psets": psets, "auto": b.auto,
                    "owner_pid": r["owner_pid"], "owner": process_user(r["owner_pid"]),
                    "created": iso(r["created"]), "changed": iso(r["changed"]),
                    "booted": iso(r["changed"]) if b.state == "Initialized" else None,
                    "message": b.message, "hosts": sorted(hosts.get(b.name, ()))})
    return out


# ---- jobs ------------------------------------------------------------------

def job_kernel(kernel: str | None, sandbox: int | None) -> str | None:
    """cnk, linux/sandbox or linux/preload; plain linux for a job older than the record of it."""
    if kernel == "linux" and sandbox is not None:
        return "linux/sandbox" if sandbox else "linux/preload"
    return kernel


def job_view(j: db.Row, now: float) -> Doc:
    started, ended = j["started"], j["ended"]
    calls = None
    if j["calls_local"] is not None or j["calls_shipped"] is not None or j["calls_unsupported"] is not None:
        calls = {"local": j["calls_local"], "shipped": j["calls_shipped"], "unsupported": j["calls_unsupported"]}
    return {"id": j["id"], "block": j["block"], "user": j["user"], "ranks": j["nranks"],
            "kernel": job_kernel(j["kernel"], j["sandbox"]), "state": j["state"], "status": j["status"],
            "submitted": iso(j["submitted"]), "started": iso(started), "ended": iso(ended),
            "elapsed": max(0.0, (ended or now) - started) if started else None,
            "command": j["args"], "message": j["message"], "calls": calls,
            # why a Queued job waits: the queue's column (lattice.jobs.queue), absent from older schemas
            "reason": j["reason"] if j["state"] == "Queued" and "reason" in j.keys() else None}


def jobs_view(con: db.Connection, *, running: bool = False, job: int | None = None,
              limit: int | None = None) -> list[Doc]:
    """Jobs by id (running: those not ended; job: that one; limit: the last N)."""
    where: list[str] = []
    params: list[object] = []
    if running:
        where.append(f"state IN ({','.join('?' * len(reclaim.ACTIVE))})")
        params += reclaim.ACTIVE
    if job is not None:
        where.append("id = ?")
        params.append(job)
    q = "SELECT * FROM jobs" + (" WHERE " + " AND ".join(where) if where else "")
    if limit is not None:
        q = f"SELECT * FROM ({q} ORDER BY id DESC LIMIT ?) AS recent"   # PostgreSQL wants the alias
        params.append(max(0, limit))
    now = time.time()
    return [job_view(j, now) for j in con.execute(q + " ORDER BY id", params)]


def report_fields(report: str | None) -> dict[str, str] | None:
    """A rank's node report (`kernel=cnk pages=2M ... why=TEXT`) as its fields."""
    if not report:
        return None
    from lattice.jobs.job import parse_report
    return parse_report(report)


def ranks_view(con: db.Connection, job: int) -> list[Doc]:
    """How each rank of a job ended (recorded when the job ends: none before)."""
    return [{"rank": r["rank"], "location": r["location"], "how": r["how"], "value": r["value"],
             "message": r["message"], "report": r["report"], "report_fields": report_fields(r["report"])}
            for r in con.execute("SELECT * FROM ranks WHERE job = ? ORDER BY rank", (job,))]


# ---- RAS -------------------------------------------------------------------

def block_locations(con: db.Connection, m: Machine, name: str) -> list[str]:
    """The block's name and its nodes' locations (how RAS events name them)."""
    b = blockstate.get(con, name)
    return [name, *(m.io_location(p) for p in b.psets(m)), *(m.compute_location(i) for i in b.nodes(m))]


def ras_view(con: db.Connection, *, severity: str | None = None, block: str | None = None,
             job: int | None = None, limit: int | None = None, m: Machine | None = None) -> list[Doc]:
    """RAS events, oldest first.  severity: that one and worse; block: events
    at the block or its nodes, or of its jobs; job: that job's; limit: the
    last N."""
    q = "SELECT * FROM ras"
    where: list[str] = []
    params: list[object] = []
    if severity is not None:
        if severity not in rasstate.SEVERITIES:
            raise LatticeError(f"bad severity {severity!r}: one of {', '.join(rasstate.SEVERITIES)}")
        worse = rasstate.SEVERITIES[rasstate.SEVERITIES.index(severity):]
        where.append(f"severity IN ({','.join('?' * len(worse))})")
        params += worse
    locs: set[str] | None = None
    jobs: set[int] = set()
    if block is not None:         # matched here: a big block's locations are too many for one query
        if m is None:
            from lattice.state import machine
            m = machine.load()
        locs = set(block_locations(con, m, block))
        jobs = {r["id"] for r in con.execute("SELECT id FROM jobs WHERE block = ?", (block,))}
    if job is not None:
        where.append("job = ?")
        params.append(job)
    if where:
        q += " WHERE " + " AND ".join(where)
    # sorted here, by the time in the one format: rows stored by an older
    # lattice or ciod in another precision do not sort by their text
    out = sorted(({"id": e["id"], "time": iso_text(e["time"]), "severity": e["severity"],
                   "component": e["component"], "location": e["location"], "job": e["job"],
                   "message": e["message"]} for e in con.execute(q, params)
                  if locs is None or e["location"] in locs or e["job"] in jobs), key=lambda e: (e["time"], e["id"]))
    return out if limit is None else out[max(0, len(out) - limit):]


# ---- I/O node counters -----------------------------------------------------

HIST_NOTE = "hist[op][b] counts calls that took [2^b, 2^(b+1)) ns"


def ionode_counters(location: str, c: Any) -> Doc:
    """One I/O node's LAT_CTL_COUNTERS reply (lattice.transport.ciodclient.Counters)."""
    return {"location": location, "calls": dict(c.calls), "bytes": dict(c.bytes), "ns": dict(c.ns),
            "hist": {k: list(v) for k, v in c.hist.items()}, "stats": dict(c.stats)}


def counters_document(block: str, per_ionode: Iterable[tuple[str, Any]]) -> Doc:
    return {"schema": schema("counters"), "block": block, "hist_buckets": HIST_NOTE,
            "ionodes": [ionode_counters(loc, c) for loc, c in per_ionode]}


def counters_view(con: db.Connection, m: Machine, block: str) -> Doc:
    """What each I/O node of a booted block has executed, asked of the I/O nodes."""
    from lattice.nodes import boot
    got = []
    for c in boot.ciods(con, blockstate.get(con, block), m):
        with c:
            got.append((c.location, c.counters_full()))
    return counters_document(block, got)


# ---- personality -----------------------------------------------------------

def personality_document(p: personalitystate.Personality) -> Doc:
    return {"schema": schema("personality"), "block": p.block, "location": p.location, "coords": list(p.coords),
            "torus": list(p.torus), "pset": p.pset, "pset_size": p.pset_size, "rank_in_pset": p.rank_in_pset,
            "ionode": p.ionode, "memory": p.memory, "cores": p.cores, "mode": p.mode, "t": p.t}


def personality_view(con: db.Connection, m: Machine, location: str, mode: str = "co", t: int = 0) -> Doc:
    """The personality process t of a job in `mode` gets on the node at location."""
    return personality_document(personalitystate.lookup(con, m, location, mode, t))
