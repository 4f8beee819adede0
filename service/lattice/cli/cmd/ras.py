from __future__ import annotations

import argparse

from lattice import views
from lattice.cli.jsonout import emit
from lattice.state import db
from lattice.state import ras as model
from lattice.text import printable

description = "show RAS events (the I/O nodes' spooled events are imported first)"


def setup_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--severity", choices=model.SEVERITIES, help="only this severity and worse")
    p.add_argument("--job", type=int, help="only events of this job")
    p.add_argument("--json", action="store_true", help="one JSON document (docs/cli.md, JSON output)")


def ras(args: argparse.Namespace) -> int:
    con = db.connect()
    model.ingest(con)
    if args.json:
        emit(views.document("ras", views.ras_view(con, severity=args.severity, job=args.job)))
        return 0
    worse = model.SEVERITIES[model.SEVERITIES.index(args.severity):] if args.severity else model.SEVERITIES
    for e in model.events(con, worse, args.job):
        # escaped again as shown: a record stored by an older lattice may hold a job's raw text
        print(f"{printable(str(e['time']))}  {e['severity']:<7} {printable(str(e['component'])):<7} "
              f"{printable(str(e['location'])):<18} {printable(str(e['message']))}")
    return 0
