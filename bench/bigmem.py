#!/usr/bin/env python3
"""Big memory vs 4 KiB pages vs explicit 1 GiB pages, side by side in one run.

The same unmodified static executables (bench/gups.c, bench/stream_copy.c)
run three ways, interleaved, REPEAT times each:
  4k    plain Linux, THP disabled for the process (the program's --no-thp:
        prctl(PR_SET_THP_DISABLE) before it allocates)
  cnk   a one-rank job under the compute node kernel on a booted 1-node
        block: its malloc'd table is in big memory
  1g    plain Linux, the program's --hugetlb-1g (mmap MAP_HUGETLB|MAP_HUGE_1GB)
and, with --pie, a fourth: the -static-pie build under cnk (which cnk can put
on 1 GiB pages; a fixed-address executable at 0x400000 gets 2 MiB pages).

Measures: GUPS on a 4 GiB table (--table-mib; at 1 GiB the 4 KiB page
tables, 2 MiB of them, still fit in this machine's cache and page walks are
cheap) with the HPCC RandomAccess loop (128 streams) and with
--dependent (one stream, each update waits for the previous load: the
whole miss latency is exposed), ns per update; streaming copy of 16 KiB,
4 MiB, 256 MiB buffers, GB/s.  Prints median [min–max] per configuration,
cnk/1g and 4k/cnk ratios, and the page size each run actually got (from the
program's own /proc/self/smaps and from `lattice run -v`).

The script reserves the huge pages it needs (1 GiB pages first, then 2 MiB
pages for cnk) and restores both pools afterwards; all runs are pinned to
one CPU (--cpu, default the last one; the booted compute node is pinned too).

    .venv/bin/python bench/bigmem.py [--repeat 5] [--table-mib 4096] [--pie] [--configs 4k,cnk,1g] [--quick]
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
from pathlib import Path

import benchlib as bl

GUPS, COPY = bl.BENCH / "gups", bl.BENCH / "stream_copy"
GUPS_PIE, COPY_PIE = bl.BENCH / "gups-spie", bl.BENCH / "stream_copy-spie"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--table-mib", type=int, default=4096, help="GUPS table (default 4096)")
    ap.add_argument("--updates-m", type=int, default=64, help="millions of HPCC-loop updates (default 64)")
    ap.add_argument("--dependent-m", type=int, default=8, help="millions of dependent updates (default 8)")
    ap.add_argument("--copy-kib", default="16,4096,262144", help="stream_copy sizes in KiB")
    ap.add_argument("--pie", action="store_true", help="also run the -static-pie builds under cnk")
    ap.add_argument("--cpu", type=int, default=bl.default_cpu(), help="pin every run here (-1: no pinning)")
    ap.add_argument("--configs", default="4k,cnk,1g", help="which of 4k,cnk,1g to run (default all)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 1 repeat, 1 GiB table, 8 M updates, 1 M dependent")
    a = ap.parse_args()
    if a.quick:
        a.repeat, a.updates_m, a.dependent_m, a.table_mib = 1, 8, 1, 1024
    bl.require_root("bigmem.py")
    bl.require_built(GUPS, COPY, *((GUPS_PIE, COPY_PIE) if a.pie else ()))
    cpu = None if a.cpu < 0 else a.cpu
    sizes = [s for s in a.copy_kib.split(",") if s]

    table_bytes = a.table_mib << 20
    # node memory: the table or the copy buffer, plus room for the program
    need = max(table_bytes, max(int(s) for s in sizes) << 10)
    node_mib = (need >> 20) + 512
    gib_pages = math.ceil(need / (1 << 30))
    node_gib_pages = math.ceil(node_mib / 1024)
    node_2m_pages = math.ceil(node_mib / 2)

    configs = [c for c in a.configs.split(",") if c] + (["cnk-pie"] if a.pie else [])
    if not set(configs) <= {"4k", "cnk", "1g", "cnk-pie"}:
        ap.error(f"unknown configuration in {a.configs!r}")
    gups: dict[str, list[float]] = {c: [] for c in configs}
    dep: dict[str, list[float]] = {c: [] for c in configs}
    copy: dict[str, dict[str, list[float]]] = {s: {c: [] for c in configs} for s in sizes}
    pages: dict[str, set[str]] = {c: set() for c in configs}
    vlines: dict[str, set[str]] = {c: set() for c in configs}

    print(bl.header("bigmem", sys.argv))
    # 1 GiB pages: for the 1g runs (and cnk-pie's big memory); 2 MiB pages:
    # for cnk's big memory under a fixed-address executable
    want_1g = max(gib_pages, node_gib_pages if a.pie else 0)
    with bl.HugePages({1048576: want_1g, 2048: node_2m_pages + 16}) as hp:
        print(f"reserved huge pages: {hp.got.get(1048576, 0)} x 1 GiB, {hp.got.get(2048, 0)} x 2 MiB "
              f"(asked {want_1g} and {node_2m_pages + 16})")
        if "1g" in configs and hp.got.get(1048576, 0) < gib_pages:
            print("bigmem.py: the 1 GiB page pool cannot grow here; the 1g column cannot run", file=sys.stderr)
            return 1
        with bl.OneNode(memory=f"{node_mib}M", cpu=cpu, boot=any(c.startswith("cnk") for c in configs)) as node:
            def run(cfg: str, exe: Path, pie: Path, *args: str) -> str:
                if cfg == "4k":
                    return bl.native(exe, "--no-thp", *args, cpu=cpu)
                if cfg == "1g":
                    return bl.native(exe, "--hugetlb-1g", *args, cpu=cpu)
                out, err = node.run(pie if cfg == "cnk-pie" else exe, *args, kernel="cnk")
                vlines[cfg].add(bl.page_line(err))
                return out

            for i in range(a.repeat):
                for cfg in bl.rotations(configs, i):
                    r = bl.parse_kv(run(cfg, GUPS, GUPS_PIE, str(a.table_mib), str(a.updates_m)))
                    gups[cfg].append(float(r["ns_per_update"]))
                    pages[cfg].add(r.get("page", "?") + " thp=" + r.get("thp", "?"))
                    assert r["errors"] == "0", r
                    r = bl.parse_kv(run(cfg, GUPS, GUPS_PIE, "--dependent", str(a.table_mib), str(a.dependent_m)))
                    dep[cfg].append(float(r["ns_per_update"]))
                    out = run(cfg, COPY, COPY_PIE, *sizes)
                    for line in out.splitlines():
                        if "gbps=" in line:
                            kv = bl.kv_line(line)
                            copy[kv["size_kib"]][cfg].append(float(kv["gbps"]))
                    print(f"  run {i + 1}/{a.repeat} {cfg}: gups {gups[cfg][-1]:.2f} ns, dependent "
                          f"{dep[cfg][-1]:.1f} ns, copy " +
                          " ".join(f"{copy[s][cfg][-1]:.2f}" for s in sizes) + " GB/s", flush=True)

    ratios = [("cnk/1g", "cnk", "1g"), ("4k/cnk", "4k", "cnk")]
    cratios = [("cnk/1g", "cnk", "1g"), ("4k/cnk", "cnk", "4k")]  # GB/s: cnk speed-up over 4k
    if a.pie:
        ratios.append(("cnk-pie/1g", "cnk-pie", "1g"))
        cratios.append(("cnk-pie/1g", "cnk-pie", "1g"))
    rows = [
        (f"GUPS HPCC loop, {a.table_mib} MiB (ns/update)", gups, ratios),
        (f"GUPS dependent, {a.table_mib} MiB (ns/update)", dep, ratios),
        *((f"copy {int(s) // 1024 if int(s) >= 1024 else int(s)} {'MiB' if int(s) >= 1024 else 'KiB'} (GB/s)",
           copy[s], cratios) for s in sizes),
    ]
    print()
    print(bl.table(f"{a.repeat} interleaved runs each, median [min–max]; for ns lower is better, "
                   "4k/cnk = speed-up of cnk over 4 KiB pages (copy rows: cnk/4k)", configs, rows))
    print()
    for c in configs:
        print(f"pages {c}: table {', '.join(sorted(pages[c]))}" +
              (f"; lattice -v: {' | '.join(sorted(vlines[c]))}" if vlines[c] else ""))
    if not {"4k", "cnk", "1g"} <= set(configs):
        return 0
    g_ratio = statistics.median(gups["cnk"]) / statistics.median(gups["1g"])
    d_speed = statistics.median(dep["4k"]) / statistics.median(dep["cnk"])
    h_speed = statistics.median(gups["4k"]) / statistics.median(gups["cnk"])
    print(f"goal cnk within 2% of 1 GiB pages (GUPS HPCC): cnk/1g = {g_ratio:.3f} -> "
          f"{'met' if g_ratio <= 1.02 else 'NOT met'}")
    print(f"goal >= 1.5x faster than 4 KiB pages on random access: HPCC loop {h_speed:.2f}x, "
          f"dependent {d_speed:.2f}x -> {'met' if max(h_speed, d_speed) >= 1.5 else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
