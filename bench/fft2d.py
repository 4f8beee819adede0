#!/usr/bin/env python3
"""2-D FFT with FFTW: plain Linux vs the compute node kernel, side by side.

The same static executable (bench/fft2d.c, linked with Debian's libfftw3)
runs, interleaved, REPEAT times each:
  linux   plain Linux, as any program runs there (malloc'd array: 4 KiB pages
          unless THP is "always"; the header line says which)
  cnk     a one-rank job under cnk on a booted 1-node block: big memory
and, with --hugetlb, a third: plain Linux with the program's --hugetlb-1g.
Each run times REPEAT_IN forward transforms of an N x N complex array
(default 4096: 256 MiB) and reports the fastest; the table gives median
[min–max] of those over the runs and the cnk/linux time ratio.  The seeds'
figure (seeds/004 Table 5, 5000 x 5000 on BG/P): CNK 11.25 s, Linux 4 KiB
pages 21.43 s, big memory 11.24 s.

    .venv/bin/python bench/fft2d.py [--repeat 5] [--n 4096] [--hugetlb] [--quick]
"""
from __future__ import annotations

import argparse
import math
import sys

import benchlib as bl

FFT = bl.BENCH / "fft2d"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--n", type=int, default=4096, help="array side (default 4096)")
    ap.add_argument("--inner", type=int, default=3, help="transforms per run, the fastest counts")
    ap.add_argument("--hugetlb", action="store_true", help="also plain Linux with explicit 1 GiB pages")
    ap.add_argument("--no-cnk", action="store_true", help="Linux columns only")
    ap.add_argument("--cpu", type=int, default=bl.default_cpu(), help="pin every run here (-1: no pinning)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 1 repeat, N=1024")
    a = ap.parse_args()
    if a.quick:
        a.repeat, a.n, a.inner = 1, 1024, 2
    bl.require_root("fft2d.py")
    bl.require_built(FFT)
    cpu = None if a.cpu < 0 else a.cpu
    array = a.n * a.n * 16
    node_mib = (array >> 20) + 512
    configs = ["linux"] + ([] if a.no_cnk else ["cnk"]) + (["1g"] if a.hugetlb else [])
    best: dict[str, list[float]] = {c: [] for c in configs}
    pages: dict[str, set[str]] = {c: set() for c in configs}
    vlines: dict[str, set[str]] = {c: set() for c in configs}
    print(bl.header("fft2d", sys.argv))
    want = {1048576: math.ceil(array / (1 << 30))} if a.hugetlb else {}
    with bl.HugePages(want), bl.OneNode(memory=f"{node_mib}M", cpu=cpu, boot="cnk" in configs) as node:
        for i in range(a.repeat):
            for cfg in bl.rotations(configs, i):
                args = [str(a.n), str(a.inner)]
                if cfg == "linux":
                    out = bl.native(FFT, *args, cpu=cpu)
                elif cfg == "1g":
                    out = bl.native(FFT, "--hugetlb-1g", *args, cpu=cpu)
                else:
                    out, err = node.run(FFT, *args)
                    vlines[cfg].add(bl.page_line(err))
                r = bl.parse_kv(out)
                best[cfg].append(float(r["best_s"]))
                pages[cfg].add(f"page={r.get('page')} thp={r.get('thp')}")
                print(f"  run {i + 1}/{a.repeat} {cfg}: {best[cfg][-1]:.3f} s ({r.get('page')})", flush=True)
    ratios = [("cnk/linux", "cnk", "linux")] if "cnk" in configs else []
    if a.hugetlb and "cnk" in configs:
        ratios.append(("cnk/1g", "cnk", "1g"))
    print()
    print(bl.table(f"{a.repeat} interleaved runs each, median [min–max] of the fastest of {a.inner} "
                   "transforms; seconds, lower is better", configs,
                   [(f"forward FFT {a.n}x{a.n} complex ({array >> 20} MiB), s", best, ratios)]))
    print()
    for c in configs:
        print(f"pages {c}: {', '.join(sorted(pages[c]))}" +
              (f"; lattice -v: {' | '.join(sorted(vlines[c]))}" if vlines[c] else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
