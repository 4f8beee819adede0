from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

from lattice.state import db, machine
from lattice.nodes import placement
from lattice.jobs import trees
from lattice.errors import LatticeError
from lattice.state.machine import Machine

description = "write a new machine description and database in $LATTICE_HOME"


def setup_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--shape", default="2x2x4", help="torus of compute nodes, XxYxZ (default 2x2x4)")
    p.add_argument("--pset-size", type=int, default=machine.DEFAULT_PSET,
                   help="compute nodes per I/O node (default 8)")
    p.add_argument("--memory", default=f"{machine.DEFAULT_MEMORY >> 20}M",
                   help=f"memory per compute node (default {machine.DEFAULT_MEMORY >> 20}M, as on Blue Gene/L)")
    p.add_argument("--cores", type=int, default=machine.DEFAULT_CORES,
                   help=f"cores per compute node (default {machine.DEFAULT_CORES}, as on Blue Gene/L)")
    p.add_argument("--hold-pages", choices=machine.HOLD_PAGES, default="auto",
                   help="who holds the huge pages a cnk job's ranks touched: the job (given back when it "
                        "ends), the block (kept for its next jobs until it is freed, as a Blue Gene block "
                        "owns its nodes' memory), or auto (the default): the block where this host reports "
                        "free memory to a hypervisor, so that fresh huge pages are slow to touch; else the job")
    p.add_argument("--hide", action="append", default=[], metavar="PATH",
                   help="a path compute nodes must not see locally (repeatable)")
    p.add_argument("--linux-trees", default=":".join(trees.DEFAULT), metavar="PATHS",
                   help="the file trees a sandboxed Linux-mode job sees besides its working directory and its "
                        "--tree's: absolute paths separated by ':', ~ for the job owner's home (the default); "
                        "'' for none")
    p.add_argument("--placement", choices=machine.PLACEMENTS, default="local",
                   help="which hosts run the psets: local (this host, the default), ssh (the hosts of "
                        "--hostfile, reached with key login) or slurm (the hosts of the allocation "
                        "`lattice` runs in)")
    p.add_argument("--hostfile", metavar="FILE",
                   help="ssh placement: the hosts, one a line: NAME [slots=N] (N: compute nodes it may run)")
    p.add_argument("--ssh-command", metavar="CMD", default="",
                   help=f"ssh placement: how to reach a host (default {placement.SSH_DEFAULT!r}), "
                        "e.g. 'ssh -F /path/config'")
    p.add_argument("--database", default="sqlite", metavar="URL",
                   help="where the machine's state lives: sqlite (the default: a file in LATTICE_HOME, one "
                        "host) or postgresql://USER@HOST[:PORT]/DBNAME (a server every login host reaches; "
                        "a password goes in ~/.pgpass or $PGPASSFILE, never in the URL)")
    p.add_argument("--force", action="store_true", help="replace an existing machine that runs no block")


def refuse_booted(blocks_dir: Path) -> None:
    """The old machine's block directories (logs) may go unless one still
    has a key: that block was booted, and its daemons may still run."""
    if not blocks_dir.is_dir():
        return
    booted = sorted(d.name for d in blocks_dir.iterdir() if (d / "key").exists())
    if booted:
        raise LatticeError(f"block{'s' if len(booted) > 1 else ''} {', '.join(booted)} of the old machine "
                           f"{'look' if len(booted) > 1 else 'looks'} booted ({blocks_dir}/NAME/key): "
                           f"`lattice free {' '.join(booted)}` first")


def read_hosts(args: argparse.Namespace) -> list[placement.HostEntry]:
    """The hosts of an ssh placement, from --hostfile."""
    if args.placement != "ssh":
        if args.hostfile or args.ssh_command:
            raise LatticeError(f"--hostfile and --ssh-command are for --placement ssh, not {args.placement}")
        return []
    if not args.hostfile:
        raise LatticeError("--placement ssh needs --hostfile FILE (one host a line: NAME [slots=N])")
    try:
        text = Path(args.hostfile).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise LatticeError(f"cannot read the hostfile {args.hostfile}: {e}") from e
    return placement.parse_hostfile(text, args.hostfile)


def busy_blocks(con: db.Connection) -> None:
    busy = [r["name"] for r in con.execute("SELECT name FROM blocks WHERE state != 'Free'")]
    if busy:
        con.close()
        raise LatticeError(f"blocks {', '.join(busy)} are not Free: `lattice free` them first")


def holds_machine(url: str, force: bool) -> bool:
    """Whether the PostgreSQL database at url holds a machine's tables; they
    may be replaced only with --force, and only while no block runs."""
    from lattice.state import postgres
    con = postgres.connect(url, db.busy_wait())
    try:
        if not con.has_table("schema_version"):
            return False
        if not force:
            raise LatticeError(f"the database {postgres.redact(url)} already holds a machine "
                               "(use --force to replace it)")
        if con.has_table("blocks"):
            busy_blocks(con)
        return True
    finally:
        con.close()


def drop_tables(url: str) -> None:
    from lattice.state import postgres
    con = postgres.connect(url, db.busy_wait())
    try:
        postgres.reset(con, db.tables())
    finally:
        con.close()


def old_database() -> str:
    """Where the machine being replaced keeps its state ("sqlite" if unreadable)."""
    try:
        return machine.load().database if machine.machine_file().exists() else "sqlite"
    except LatticeError:
        return "sqlite"


def init(args: argparse.Namespace) -> int:
    if args.database != "sqlite":
        from lattice.state import postgres
        postgres.check_url(args.database)
    m = Machine(shape=machine.parse_shape(args.shape), pset_size=args.pset_size,
                memory=machine.parse_size(args.memory), cores=args.cores, hold_pages=args.hold_pages,
                hide=tuple(os.path.abspath(h) for h in args.hide),
                placement=args.placement, ssh=args.ssh_command,
                linux_trees=trees.parse_setting(args.linux_trees), database=args.database)
    hosts = read_hosts(args)
    if hosts:
        placement.deal(m, hosts)        # fits, before anything is replaced
    home = machine.home()
    exists = machine.machine_file().exists() or db.path().exists()  # a database alone: a broken machine
    if exists and not args.force:
        raise LatticeError(f"a machine already exists in {home} (use --force to replace it)")
    # every check before anything is replaced
    old = old_database() if exists else "sqlite"
    drop = [u for u in dict.fromkeys((old, args.database)) if u != "sqlite" and holds_machine(u, args.force)]
    if exists:
        if db.path().exists():
            con = db.connect(db.path())
            busy_blocks(con)
            con.close()
        refuse_booted(home / "blocks")
    for url in drop:
        drop_tables(url)
    if exists:
        if (home / "blocks").is_dir():
            shutil.rmtree(home / "blocks")
        for suffix in db.SUFFIXES:
            (home / f"lattice.db{suffix}").unlink(missing_ok=True)
    try:
        home.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise LatticeError(f"cannot create {home}: {e}") from e
    m.save(machine.machine_file())
    con = db.connect()
    with db.transaction(con):
        for i in range(m.nodes):
            x, y, z = m.coord(i)
            con.execute("INSERT INTO nodes (id, kind, x, y, z, pset, location) VALUES (?, 'compute', ?, ?, ?, ?, ?)",
                        (i, x, y, z, m.pset_of(i), m.compute_location(i)))
        for p in range(m.psets):
            con.execute("INSERT INTO nodes (id, kind, x, y, z, pset, location) VALUES (?, 'io', NULL, NULL, NULL, ?, ?)",
                        (-1 - p, p, m.io_location(p)))
        if hosts:
            placement.record_hosts(con, m, hosts)
    print(f"machine in {home}: {machine.shape_str(m.shape)} torus, {m.nodes} compute nodes, "
          f"{m.psets} I/O nodes (psets of {m.pset_size}), {m.memory >> 20} MiB and {m.cores} cores per node"
          + (f", placement {m.placement}" + (f" on {len(hosts)} hosts" if hosts else "")
             if m.placement != "local" else ""))
    return 0
