from __future__ import annotations

import argparse
import time

from lattice import reclaim

description = "list jobs with their kernel, state and exit status"


def setup_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ranks", type=int, metavar="JOB",
                   help="show how each rank of one job ended, with its node's report (kernel, pages, calls)")


def jobs(args: argparse.Namespace) -> int:
    con = reclaim.connect()
    if args.ranks is not None:
        print(f"{'rank':>5} {'location':<18} {'how':<7} {'value':>5}  message / report")
        for r in con.execute("SELECT * FROM ranks WHERE job = ? ORDER BY rank", (args.ranks,)):
            text = "  ".join(t for t in (r["message"], r["report"]) if t)
            print(f"{r['rank']:>5} {r['location']:<18} {r['how'] or '':<7} {r['value'] if r['value'] is not None else '':>5}"
                  f"  {text}")
        return 0
    print(f"{'id':>5} {'block':<14} {'user':<10} {'ranks':>5} {'kernel':<6} {'state':<10} {'status':>6} "
          f"{'started':<19}  command")
    for j in con.execute("SELECT * FROM jobs ORDER BY id"):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(j["started"] or j["submitted"]))
        status = "" if j["status"] is None else str(j["status"])
        print(f"{j['id']:>5} {j['block'] or '':<14} {j['user']:<10} {j['nranks']:>5} {j['kernel'] or '-':<6} "
              f"{j['state']:<10} {status:>6} {when:<19}  {j['args']}" + (f"  # {j['message']}" if j["message"] else ""))
    return 0
