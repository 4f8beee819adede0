"""Making the state true again after something died without saying so.

Each command that reads or changes blocks and jobs first sweeps (`connect()`):

- a job whose `lattice run` (or, submitted, its runner: lattice.jobs.runner)
  is gone (killed with SIGKILL, or its host crashed) is ended in the record,
  with that reason (a Queued job that no process runs yet stays queued); its I/O nodes ended its
  ranks already, the moment the run's control connections closed;
- a block that a `lattice run` booted for itself, and whose run is gone, is
  freed (and deleted if the run created it), as the run would have done; so
  is a block still Booting whose `lattice boot` is gone (killed half-way,
  its agents and daemons would otherwise stay up);
- an Initialized block one of whose daemons (ciod or cnode) is gone goes to
  Error, naming the lost node: it must be freed and booted again.

A process is named by its pid and its start time (field 22 of
/proc/PID/stat), so a recycled pid is never taken for the run that is gone.
"""
from __future__ import annotations

from pathlib import Path

from lattice.state import blocks, db, machine, ras
from lattice.nodes import boot
from lattice import procs
from lattice.errors import LatticeError
from lattice.state.machine import Machine

ACTIVE = ("Queued", "Starting", "Running", "Dying")


def gone(pid: int | None, started: int | None) -> bool:
    """The process recorded as (pid, started) no longer runs."""
    if pid is None or not procs.here(started):
        return False            # recorded before lattice kept the pid, or by another host: nothing to go by
    now = procs.start_time(pid)
    return now is None or (started is not None and not procs.same(now, started))


def connect() -> db.Connection:
    """The machine's database, swept."""
    con = db.connect()
    sweep(con, machine.load())
    return con


def sweep(con: db.Connection, m: Machine) -> None:
    end_orphaned_jobs(con)
    free_orphaned_blocks(con, m)
    mark_lost_nodes(con, m)


def end_orphaned_jobs(con: db.Connection) -> None:
    rows = con.execute(f"SELECT id, block, client_pid, client_start, request FROM jobs WHERE state IN "
                       f"({','.join('?' * len(ACTIVE))}) AND client_pid IS NOT NULL", ACTIVE).fetchall()
    for r in rows:
        if not gone(r["client_pid"], r["client_start"]):
            continue
        who = "lattice run" if r["request"] is None else "runner (lattice submit's)"
        why = (f"its {who} (pid {r['client_pid']}) ended without finishing it (killed, or the host restarted?); "
               f"the I/O nodes ended its ranks when the run's connections closed")
        with db.transaction(con):
            cur = con.execute(f"UPDATE jobs SET state = 'Error', message = ?, ended = ? WHERE id = ? AND state IN "
                              f"({','.join('?' * len(ACTIVE))})", (why, db.now(), r["id"], *ACTIVE))
        if cur.rowcount:
            ras.record(con, "WARNING", "MMCS", r["block"] or "-", f"job {r['id']} ended: {why}", r["id"])


def free_orphaned_blocks(con: db.Connection, m: Machine) -> None:
    rows = con.execute("SELECT name, auto, state, owner_pid, owner_start FROM blocks "
                       "WHERE owner_pid IS NOT NULL").fetchall()
    for r in rows:
        if not gone(r["owner_pid"], r["owner_start"]):
            continue
        with db.transaction(con):   # one sweeper takes it
            cur = con.execute("UPDATE blocks SET owner_pid = NULL, owner_start = NULL WHERE name = ? AND owner_pid = ?",
                              (r["name"], r["owner_pid"]))
        if not cur.rowcount:
            continue
        what = ("the lattice run (pid {p}) that booted it for itself is gone" if r["state"] != "Booting" else
                "the lattice command (pid {p}) that was booting it is gone").format(p=r["owner_pid"])
        ras.record(con, "WARNING", "MMCS", r["name"], f"block {r['name']} freed: {what}")
        try:
            boot.free(con, m, r["name"])
            if r["auto"]:
                blocks.delete(con, r["name"])
        except LatticeError:
            pass                # somebody else is freeing it


def lost_daemons(con: db.Connection, m: Machine, name: str) -> list[str]:
    """Locations of the block's nodes whose daemon is gone: on this host
    from /proc; on another host from its agent, whose channel (the ssh or
    srun here) closing means the host's part is gone, and whose log reports
    each daemon that ended (lattice.nodes.placement)."""
    out = []
    mine = boot.mark(name)

    def where(r: db.Row) -> str:
        return m.io_location(r["node"]) if r["kind"] == "ciod" else m.compute_location(r["node"])
    # the daemons "on this host" are the booting host's: judged there only (its local agent says which)
    booted_here = all(procs.here(a["start"]) for a in
                      con.execute("SELECT start FROM agents WHERE block = ? AND host = 'local'", (name,)).fetchall())
    for r in con.execute("SELECT kind, node, pid FROM daemons WHERE block = ? AND host IS NULL ORDER BY kind, node",
                         (name,)).fetchall() if booted_here else []:
        if not boot.ours(r["pid"], mine):     # gone, a zombie, or its pid taken by another process
            out.append(where(r))
    for a in con.execute("SELECT host, pid, start, log FROM agents WHERE block = ? AND host != 'local'",
                         (name,)).fetchall():
        from lattice.nodes import placement       # here: blocks on this host alone need none of it
        events = placement.events(Path(a["log"]))
        # its launcher gone, or (agents as a tree) the agent that started it lost it (lattice.nodes.agenttree)
        if gone(a["pid"], a["start"]) or any(e["event"] == "lost" and e.get("host") == a["host"] for e in events):
            out += [where(r) for r in con.execute("SELECT kind, node FROM daemons WHERE block = ? AND host = ? "
                                                  "ORDER BY kind, node", (name, a["host"]))]
            continue
        out += [e["location"] for e in events
                if e["event"] == "exited" and e.get("host") == a["host"] and "location" in e]
    return out


def mark_lost_nodes(con: db.Connection, m: Machine) -> None:
    for name in [r["name"] for r in con.execute("SELECT name FROM blocks WHERE state = 'Initialized'")]:
        lost = lost_daemons(con, m, name)
        if not lost:
            continue
        why = f"node{'s' if len(lost) > 1 else ''} {', '.join(lost)} lost (daemon gone): free and boot the block"
        try:
            blocks.set_state(con, name, "Error", why, expect=("Initialized",))
        except LatticeError:
            continue            # its state changed meanwhile
        ras.record(con, "FATAL", "MMCS", lost[0], f"block {name}: {why}")
