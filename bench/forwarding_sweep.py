#!/usr/bin/env python3
"""Forwarded read and write throughput vs buffer size (the ZOID paper's
Figures 4-7), and the Python import storm with and without collective I/O.

Sweep: bench/fwd_io sweep moves MIB MiB with write()/read() calls of 4 KiB,
16 KiB ... 4 MiB, by 1, 4 and 8 compute processes of one pset (one I/O node),
  write: to /dev/null, to a tmpfs file, to a disk file
  read:  from /dev/zero, from a tmpfs file, from a disk file (page cache warm)
under cnk (shipped; rendezvous from rdv_min) and, as the baseline, the same
program run directly on Linux by as many concurrent processes.  Throughput
is all processes' bytes over the span from the first one's start to the last
one's end for that buffer size; the processes pass a barrier (files in a
shared directory) before each buffer size, so they really run at the same
time (a sum of each process's own rate would count processes that drifted
apart as concurrent).

Import storm: RANKS ranks run `python3 -c "import json, email, http.client"`
under cnk (every file call shipped), with collective I/O on and off (ciod
started with LATTICE_COLLECTIVE=0): wall time of `lattice run` and the
requests vs file-system calls on the I/O node.

    .venv/bin/python bench/forwarding_sweep.py [--repeat 3] [--mib 64] [--procs 1,4,8] [--min-buf 4096]
        [--storm-ranks 16]
        [--datapath shm|vm|messages]
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import benchlib as bl

ROOT = Path(__file__).resolve().parent.parent
FWD_IO = ROOT / "build" / "bench" / "fwd_io"
STORM = 'import json, email, http.client'
PYTHON = "/usr/bin/python3"     # the distribution's Python 3.11 and its standard library


def rates(out: str) -> dict[int, float]:
    """buf size -> MB/s of the processes whose lines are in out: their bytes over
    the span from the earliest start to the latest end (CLOCK_MONOTONIC is one
    clock for every process on this host)."""
    spans: dict[int, tuple[float, float, float]] = {}     # buf -> (MB, first t0, last t1)
    for line in out.splitlines():
        kv = dict(p.split("=") for p in line.split(": ", 1)[-1].split() if "=" in p)
        if "buf" in kv:
            b, t0, t1 = int(kv["buf"]), float(kv["t0"]), float(kv["t1"])
            mb, lo, hi = spans.get(b, (0.0, t0, t1))
            spans[b] = (mb + float(kv["MBps"]) * (t1 - t0), min(lo, t0), max(hi, t1))
    return {b: mb / max(hi - lo, 1e-9) for b, (mb, lo, hi) in spans.items()}


class Machine:
    def __init__(self, home: Path, nodes: int, env: dict[str, str]) -> None:
        self.env = dict(os.environ, LATTICE_HOME=str(home), **env)
        self.lat = bl.lattice_cmd()
        self.run("init", "--shape", f"1x1x{nodes}", "--pset-size", str(nodes), "--memory", "512M")
        self.run("block", "create", "B", "--shape", f"1x1x{nodes}")
        self.run("boot", "B")

    def run(self, *args: str, capture: bool = False) -> str:
        p = subprocess.run([*self.lat, *args], env=self.env, check=True, capture_output=capture, text=True)
        return p.stdout if capture else ""

    def counters(self) -> dict[str, int]:
        (ion,) = json.loads(self.run("counters", "B", "--json", capture=True))["ionodes"]
        out = dict(ion["stats"])
        out["calls"] = sum(ion["calls"].values())
        return out

    def free(self) -> None:
        subprocess.run([*self.lat, "free", "B"], env=self.env, capture_output=True)


def direct(n: int, args: list[str]) -> str:
    def one(r: int) -> str:
        return subprocess.run([str(FWD_IO), *args], env=dict(os.environ, LATTICE_RANK=str(r), LATTICE_SIZE=str(n)),
                              check=True,
                              capture_output=True, text=True).stdout
    with ThreadPoolExecutor(n) as ex:
        return "".join(ex.map(one, range(n)))


def sweep(a: argparse.Namespace, home: Path) -> None:
    tmpfs = Path(tempfile.mkdtemp(prefix="lattice-sweep-tmpfs-"))
    disk = Path(tempfile.mkdtemp(prefix="lattice-sweep-disk-", dir="/var/tmp"))
    procs = [int(x) for x in a.procs.split(",")]
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={a.mib * max(procs) + 256}m", "tmpfs", str(tmpfs)],
                   check=True)
    os.chmod(tmpfs, 0o777)
    m = Machine(home / "sweep", max(procs), {"LATTICE_DATAPATH": a.datapath} if a.datapath else {})
    # /dev/null and /dev/zero are node devices (compute/shipc/path.c): their rows time the trap, not forwarding
    cases = [("write", "/dev/null", "null (local)"), ("write", str(tmpfs), "tmpfs"), ("write", str(disk), "disk"),
             ("read", "/dev/zero", "zero (local)"), ("read", str(tmpfs), "tmpfs"), ("read", str(disk), "disk")]
    res: dict[tuple[str, str, int, str], dict[int, list[float]]] = {}
    try:
        for i in range(a.repeat):
            for op, where, name in cases:
                for n in procs:
                    for kind in bl.rotations(["direct", "cnk"], i):
                        bar = Path(tempfile.mkdtemp(prefix="bar-", dir=home))
                        os.chmod(bar, 0o777)
                        args = ["sweep", op, where, str(a.mib), str(bar), str(a.min_buf)]
                        out = direct(n, args) if kind == "direct" else m.run(
                            "run", "--block", "B", "-n", str(n), "--kernel", "cnk", "--label", str(FWD_IO), *args,
                            capture=True)
                        for b, v in rates(out).items():
                            res.setdefault((op, name, n, kind), {}).setdefault(b, []).append(v)
                        shutil.rmtree(bar)
                    print(f"  run {i + 1}/{a.repeat} {op} {name} x{n} done", file=sys.stderr)
        print(f"\n### Forwarded throughput vs buffer size ({a.mib} MiB per process, median of {a.repeat}, MB/s of all "
              "processes over their common span; ratio = cnk/direct)\n")
        sizes = sorted({b for v in res.values() for b in v})
        print("| op | target | procs | " + " | ".join(f"{b >> 10} KiB" for b in sizes) + " |")
        print("| --- | --- | --- | " + " | ".join("---" for _ in sizes) + " |")
        for op, _, name in cases:
            for n in procs:
                d, c = res[(op, name, n, "direct")], res[(op, name, n, "cnk")]
                cells = []
                for b in sizes:
                    md, mc = statistics.median(d[b]), statistics.median(c[b])
                    cells.append(f"{mc:.0f} / {md:.0f} ({mc / md:.2f})")
                print(f"| {op} | {name} | {n} | " + " | ".join(cells) + " |")
        print("\ncells: cnk MB/s / direct MB/s (ratio)")
        print("\n" + "\n".join(f"    {k}: {v}" for k, v in m.counters().items() if k.startswith(("rdv", "eager", "shm", "pipe"))))
    finally:
        m.free()
        subprocess.run(["umount", str(tmpfs)])
        os.rmdir(tmpfs)
        subprocess.run(["rm", "-rf", str(disk)])


def storm(a: argparse.Namespace, home: Path) -> None:
    print(f"\n### Python import storm: {a.storm_ranks} ranks, `python3 -c \"{STORM}\"` under cnk\n")
    print("| collective I/O | wall s (median [min-max]) | requests | opens asked / on FS | stats asked / on FS "
          "| reads asked / on FS |")
    print("| --- | --- | --- | --- | --- | --- |")
    for on in ("1", "0"):
        m = Machine(home / f"storm{on}", a.storm_ranks, {"LATTICE_COLLECTIVE": on})
        try:
            walls = []
            first: dict[str, int] = {}
            for i in range(a.repeat):
                before = m.counters()
                t0 = time.monotonic()
                m.run("run", "--block", "B", "-n", str(a.storm_ranks), "--kernel", "cnk", PYTHON, "-c", STORM)
                walls.append(time.monotonic() - t0)
                after = m.counters()
                if i == 0:
                    first = {k: after[k] - before.get(k, 0) for k in after}
            f = first
            print(f"| {'on' if on == '1' else 'off'} | {statistics.median(walls):.2f} [{min(walls):.2f}-{max(walls):.2f}] "
                  f"| {f['calls']} | {f['coll_open_req']} / {f['coll_open_fs']} | {f['coll_stat_req']} / "
                  f"{f['coll_stat_fs']} | {f['coll_read_req']} / {f['coll_read_fs']} |")
        finally:
            m.free()
    print("\n(counts: the first run of each; with collective I/O off the cache is never asked, so every "
          "request is a file-system call)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--mib", type=int, default=64)
    ap.add_argument("--procs", default="1,4,8")
    ap.add_argument("--min-buf", type=int, default=4096,
                    help="smallest buffer of the sweep (x4 up to 4 MiB); e.g. 1048576 with a large --mib "
                         "for long phases at the sizes the 90%% goal is about")
    ap.add_argument("--storm-ranks", type=int, default=16)
    ap.add_argument("--only", choices=["sweep", "storm"])
    ap.add_argument("--datapath", choices=["shm", "vm", "messages"],
                    help="ciod's LATTICE_DATAPATH for the sweep (docs/protocol.md 6.2; default: ciod's, shm)")
    a = ap.parse_args()
    bl.require_root("forwarding_sweep.py")
    bl.require_built(FWD_IO)
    home = Path(tempfile.mkdtemp(prefix="lattice-sweep-"))
    print(bl.header("forwarding_sweep.py", sys.argv[1:]))
    try:
        if a.only != "storm":
            sweep(a, home)
        if a.only != "sweep":
            storm(a, home)
    finally:
        shutil.rmtree(home, ignore_errors=True)     # the machines' homes (logs, database)
    return 0


if __name__ == "__main__":
    sys.exit(main())
