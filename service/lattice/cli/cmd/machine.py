from __future__ import annotations

import argparse
import sys
from typing import Any

from lattice import views
from lattice.cli.jsonout import emit
from lattice.state import machine as model
from lattice.state import reclaim
from lattice.state.machine import Machine

description = ("show the machine's nodes: location, coordinates, pset, I/O node, block "
               f"(a summary above {views.SUMMARY_ABOVE} compute nodes)")


def setup_parser(p: argparse.ArgumentParser) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--summary", action="store_true",
                   help=f"counts by state, per pset and per host (the default above {views.SUMMARY_ABOVE} "
                        "compute nodes)")
    g.add_argument("--nodes", action="store_true", help="every node, however many")
    p.add_argument("--json", action="store_true", help="one JSON document (docs/cli.md, JSON output)")


def machine(args: argparse.Namespace) -> int:
    m = model.load()
    con = reclaim.connect()
    summary = args.summary or (not args.nodes and m.nodes > views.SUMMARY_ABOVE)
    if summary and not args.summary:
        print(f"lattice: {m.nodes:,} compute nodes: a summary (--nodes for every node)", file=sys.stderr)
    doc = views.machine_summary(con, m) if summary else views.machine_view(con, m)
    if args.json:
        emit(doc)
    elif summary:
        print_summary(m, doc)
    else:
        print_nodes(m, doc)
    return 0


def header(m: Machine, doc: dict[str, Any]) -> str:
    return (f"{model.shape_str(m.shape)} torus, {m.nodes} compute nodes, {m.psets} I/O nodes "
            f"(psets of {m.pset_size}), {m.memory >> 20} MiB and {m.cores} cores per node, placement {m.placement}, "
            f"huge pages a job touched held by the {doc['pages_held_by']} (--hold-pages {m.hold_pages})")


def print_nodes(m: Machine, doc: dict[str, Any]) -> None:
    out = [header(m, doc),
           f"{'location':<18} {'kind':<8} {'x,y,z':<8} {'pset':>4}  {'I/O node':<18} {'host':<12} block"]
    for n in doc["nodes"]:
        host = n["host"] or "-"        # slurm: hosts at boot
        if n["kind"] == "io":
            out.append(f"{n['location']:<18} {'io':<8} {'-':<8} {n['pset']:>4}  {'-':<18} {host:<12} "
                       + (" LOST (ciod gone)" if n["lost"] else ""))
            continue
        owner = (n["block"] + (" (Error)" if n["state"] == "Error" else "")) if n["block"] else ""
        c = f"{n['x']},{n['y']},{n['z']}"
        out.append(f"{n['location']:<18} {'compute':<8} {c:<8} {n['pset']:>4}  {n['io_node']:<18} {host:<12} {owner}"
                   + (" LOST (cnode gone)" if n["lost"] else ""))
    print("\n".join(out))


def nodes(n: int) -> str:
    return f"{n} node{'' if n == 1 else 's'}"


def counts(by_state: dict[str, int]) -> str:
    return ", ".join(f"{n} {state}" for state, n in by_state.items()) or "none"


def print_summary(m: Machine, doc: dict[str, Any]) -> None:
    print(header(m, doc))
    print(f"compute nodes by state: {counts(doc['by_state'])}"
          + (f"; {nodes(doc['lost'])} LOST (daemon gone)" if doc["lost"] else ""))
    print(f"{'host':<16} {'I/O nodes':>9} {'compute':>9}  compute nodes by state")
    for h in doc["hosts"]:
        print(f"{h['host'] or '-':<16} {h['io_nodes']:>9} {h['compute_nodes']:>9}  {counts(h['by_state'])}")
    print(f"{'psets':<11} {'I/O nodes':<37} {'host':<12} {'block':<16} state")
    for first, last in runs(doc["psets"]):
        a, b = doc["psets"][first], doc["psets"][last]
        ios = a["io_node"] if first == last else f"{a['io_node']}..{b['io_node'].rpartition(':')[2]}"
        span = f"{a['pset']}" if first == last else f"{a['pset']}-{b['pset']}"
        lost = sum(p["lost"] for p in doc["psets"][first:last + 1])
        print(f"{span:<11} {ios:<37} {a['host'] or '-':<12} {a['block'] or '-':<16} {a['state']}"
              + (f", {nodes(lost)} LOST" if lost else ""))


def runs(psets: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """Consecutive psets alike (host, block, state) as (first, last) indices:
    a few lines for a machine of thousands of psets."""
    out: list[tuple[int, int]] = []
    key = None
    for i, p in enumerate(psets):
        k = (p["host"], p["compute_host"], p["block"], p["state"])
        if out and k == key:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
            key = k
    return out
