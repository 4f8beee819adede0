from __future__ import annotations

import argparse

from lattice import views
from lattice.cli.jsonout import emit
from lattice.state import blocks, db, machine
from lattice.nodes import boot
from lattice.transport.ciodclient import Counters

description = "show the calls each I/O node of a booted block has executed, and its data path"


def setup_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("name", help="block")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="bytes, mean and percentile latencies of each call, and its latency histogram")
    p.add_argument("--json", action="store_true",
                   help="everything, as one JSON document with one object per I/O node (docs/cli.md, JSON output)")


def percentile(hist: list[int], q: float) -> int:
    """Upper bound (ns) of the log2 bucket holding the q-quantile call."""
    total = sum(hist)
    if not total:
        return 0
    seen = 0
    for b, n in enumerate(hist):
        seen += n
        if seen >= q * total:
            return 2 << b
    return 2 << (len(hist) - 1)


def human_ns(ns: float) -> str:
    return f"{ns / 1000:.1f}us" if ns < 1e6 else f"{ns / 1e6:.2f}ms"


def sparkline(hist: list[int]) -> str:
    """Buckets 2^8 ns .. 2^28 ns as digits 0-9 (share of calls, 9 = most)."""
    top = max(hist) or 1
    return "".join(" " if not n else str(min(9, 1 + 8 * n // top)) for n in hist[8:29])


def show(loc: str, c: Counters, verbose: bool) -> None:
    for call, n in c.calls.items():
        if not verbose:
            print(f"{loc:<18} {call:<12} {n}")
        elif n:
            h = c.hist.get(call, [])
            mean = c.ns.get(call, 0) / n
            print(f"{loc:<18} {call:<12} {n:>10} calls {c.bytes.get(call, 0):>14} B  mean {human_ns(mean):>8}"
                  f"  p50<{human_ns(percentile(h, .5)):>8}  p99<{human_ns(percentile(h, .99)):>8}"
                  f"  |{sparkline(h)}|")
    if verbose and c.stats:
        print(f"{loc:<18} {'':<12} histogram columns: 256 ns .. 256 ms, x2 each")
    s = c.stats
    if not s:
        return
    if not verbose:     # one "location name value" line each, like the calls
        for name, v in s.items():
            print(f"{loc:<18} {name:<12} {v}")
        return

    def saved(req: str, fs: str) -> int:
        return max(0, s.get(req, 0) - s.get(fs, 0))

    print(f"{loc:<18} data path    eager_max={s.get('eager_max', 0)} rdv_min={s.get('rdv_min', 0)}"
          f" collective={'on' if s.get('collective') else 'off'}")
    for name in ("eager", "eager_bytes", "rdv", "rdv_bytes", "rdv_fault", "rdv_buf_max"):
        print(f"{loc:<18} {name:<12} {s.get(name, 0)}")
    for kind in ("open", "stat", "read"):
        print(f"{loc:<18} coll_{kind:<7} {s.get(f'coll_{kind}_req', 0)} asked, {s.get(f'coll_{kind}_fs', 0)} on the "
              f"file system, {saved(f'coll_{kind}_req', f'coll_{kind}_fs')} saved")
    for name in ("coll_revalidate", "coll_invalidate", "coll_bytes"):
        print(f"{loc:<18} {name:<12} {s.get(name, 0)}")


def counters(args: argparse.Namespace) -> int:
    m = machine.load()
    con = db.connect()
    if args.json:
        emit(views.counters_view(con, m, args.name))
        return 0
    for c in boot.ciods(con, blocks.get(con, args.name), m):
        with c:
            show(c.location, c.counters_full(), args.verbose)
    return 0
