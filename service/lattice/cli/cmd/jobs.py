from __future__ import annotations

import argparse
import time

from lattice.state import db, machine, reclaim
from lattice.text import printable
from lattice import views
from lattice.cli.jsonout import emit

description = ("list jobs with their kernel, state, exit status and time, queued ones with why they wait "
               "(--running: those not ended yet)")
ACTIVE = reclaim.ACTIVE


def setup_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="one JSON document (docs/cli.md, JSON output)")
    p.add_argument("--ranks", type=int, metavar="JOB",
                   help="show how each rank of one job ended, with its node's report (kernel, pages, calls)")
    p.add_argument("--running", action="store_true",
                   help="only the jobs that have not ended (queued, with why they wait; starting; running), with "
                        "how long they have run")


def elapsed(seconds: float) -> str:
    """[D-]HH:MM:SS, as srun's and squeue's TIME."""
    s = max(0, int(seconds))
    d, s = divmod(s, 86400)
    return (f"{d}-" if d else "") + f"{s // 3600:02d}:{s // 60 % 60:02d}:{s % 60:02d}"


def kernel(j: db.Row) -> str:
    """cnk, linux/sandbox or linux/preload; plain linux for a job older than the record of it."""
    return views.job_kernel(j["kernel"], j["sandbox"]) or "-"


def jobs(args: argparse.Namespace) -> int:
    con = reclaim.connect()
    if args.ranks is not None and args.json:
        emit(views.document("ranks", views.ranks_view(con, args.ranks), job=args.ranks))
        return 0
    if args.ranks is not None:
        print(f"{'rank':>5} {'location':<18} {'how':<7} {'value':>5}  message / report")
        for r in con.execute("SELECT * FROM ranks WHERE job = ? ORDER BY rank", (args.ranks,)):
            text = printable("  ".join(t for t in (r["message"], r["report"]) if t))   # the job's words, maybe
            print(f"{r['rank']:>5} {printable(r['location']):<18} {r['how'] or '':<7} {r['value'] if r['value'] is not None else '':>5}"
                  f"  {text}")
        return 0
    from lattice.jobs import queue          # here: --ranks needs none of it
    queue.dispatch_quietly(con, machine.load())     # a runner gone meanwhile may have made room
    if args.json:       # after anything that brings the records up to date
        emit(views.document("jobs", views.jobs_view(con, running=args.running)))
        return 0
    where = f"WHERE state IN ({','.join('?' * len(ACTIVE))})" if args.running else ""
    rows = con.execute(f"SELECT * FROM jobs {where} ORDER BY id", ACTIVE if args.running else ())
    print(f"{'id':>5} {'block':<14} {'user':<10} {'ranks':>5} {'kernel':<13} {'state':<10} {'status':>6} "
          f"{'started':<19} {'time':>10}  command")
    now = time.time()
    for j in rows:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(j["started"] or j["submitted"]))
        status = "-" if j["status"] is None else str(j["status"])
        ran = elapsed((j["ended"] or now) - j["started"]) if j["started"] else "-"
        # the command line and the reason may hold anything a job or its user wrote: escaped
        block = j["block"] or (f"({j['need_block']})" if j["need_block"] else "")     # a queued job's: wanted
        print(f"{j['id']:>5} {printable(block):<14} {printable(j['user']):<10} {j['nranks']:>5} "
              f"{kernel(j):<13} {j['state']:<10} {status:>6} {when:<19} {ran:>10}  {printable(j['args'])}"
              + (f"  # {printable(j['message'])}" if j["message"] else "")
              + (f"  # {printable(j['reason'])}" if j["state"] == "Queued" and j["reason"] else ""))
    return 0
