#!/usr/bin/env python3
"""The job's files through the FUSE client (lattice-fs in the node sandbox)
beside the host's own calls and the preload client, in one run.

    .venv/bin/python bench/fuse_io.py [--repeat 5] [--mib 256] [--files 2000] [--disk DIR]

Four ways run build/bench/fuse_io in one tmpfs directory (or, with
--disk, a new directory inside DIR: the host's disk), interleaved
(each goes first in turn), --repeat times:
  direct    the program on the host;
  fuse      a sandboxed job (`--kernel linux`): its working directory is a
            tree served by lattice-fs, every call shipped to the I/O node;
            writes go through the node's page cache (write-through), so the
            file is read back from it;
  fuse-dw   the same with LATTICE_FS_WRITES=direct: writes bypass the page
            cache, the file is read back from the I/O node;
  preload   `--kernel linux --no-sandbox`: libcnclient ships the calls.
The program says which file system its working directory is on, and the
driver checks: FUSE for fuse and fuse-dw only.

Measures: a sequential 1 MiB write of --mib MiB with fsync, and its read
back; small files per second (create, write 4 KiB, close, stat, unlink).
Prints median [min-max] and the ratios fuse/direct and fuse/preload.
Goals (issue 25): large >= 0.8x direct, small-file rate >= 0.5x preload.
Run as root (it mounts a tmpfs) from the repository root.
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchlib import BENCH, OneNode, header, kv_line, native, require_built, require_root, rotations, table

PROG = BENCH / "fuse_io"
FUSE_MAGIC = "0x65735546"
WAYS = ["direct", "fuse", "fuse-dw", "preload"]


def kv(out: str) -> dict[str, str]:
    lines = [l for l in out.splitlines() if "fstype=" in l]
    if not lines:
        raise RuntimeError(f"no fuse_io line in:\n{out}")
    return kv_line(lines[-1])


class Ways:
    """The three ways of running one fuse_io command in dir."""

    def __init__(self, node: OneNode, data: Path) -> None:
        self.node, self.data = node, data
        base = ["run", "--block", "bench", "-n", "1", "--kernel", "linux", "--cwd", str(data)]
        self.cmd = {"fuse": base, "fuse-dw": [*base, "--env", "LATTICE_FS_WRITES=direct"],
                    "preload": [*base, "--no-sandbox"]}

    def run(self, way: str, *args: str) -> dict[str, str]:
        if way == "direct":
            r = kv(native(PROG, *args, cwd=self.data))
        else:
            r = kv(self.node.lattice(*self.cmd[way], str(PROG), *args).stdout)
        fuse = way.startswith("fuse")
        if (r["fstype"] == FUSE_MAGIC) != fuse:
            raise RuntimeError(f"{way}: the working directory is on file system {r['fstype']}, "
                               f"{'not ' if fuse else ''}FUSE: the job did not run the way it should")
        return r


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--files", type=int, default=2000)
    ap.add_argument("--disk", type=Path, help="work in a new directory here instead of a tmpfs")
    a = ap.parse_args()
    require_root("fuse_io.py")
    require_built(PROG, BENCH.parent / "bin" / "lattice-fs")
    data = Path(tempfile.mkdtemp(prefix="lattice-bench-fuse-", dir=a.disk))
    if not a.disk:
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={a.mib * 2 + 64}m", "tmpfs", str(data)], check=True)
    data.chmod(0o755)
    wr: dict[str, list[float]] = {w: [] for w in WAYS}
    rd: dict[str, list[float]] = {w: [] for w in WAYS}
    sm: dict[str, list[float]] = {w: [] for w in WAYS}
    try:
        with OneNode("1G") as node:
            ways = Ways(node, data)
            for i in range(a.repeat):
                for w in rotations(WAYS, i):
                    r = ways.run(w, "seq", str(a.mib))
                    wr[w].append(float(r["write_MBps"]))
                    rd[w].append(float(r["read_MBps"]))
                    sm[w].append(float(ways.run(w, "small", str(a.files))["files_per_s"]))
    finally:
        if not a.disk:
            subprocess.run(["umount", str(data)])
        shutil.rmtree(data, ignore_errors=True)
    ratios = [("fuse/direct", "fuse", "direct"), ("fuse/preload", "fuse", "preload"),
              ("fuse-dw/direct", "fuse-dw", "direct")]
    print(header("fuse_io", sys.argv))
    where = f"a directory in {a.disk}" if a.disk else "a tmpfs"
    print(table(f"{a.repeat} interleaved runs in {where}, median [min–max]", WAYS, [
        (f"{a.mib} MiB write + fsync (MB/s)", wr, ratios),
        (f"{a.mib} MiB read back (MB/s)", rd, ratios),
        ("small files (create, 4 KiB, close, stat, unlink) per s", sm, ratios),
    ]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
