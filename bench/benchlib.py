"""Shared pieces of the benchmark drivers in bench/: a one-node Lattice machine,
huge page reservations that are always restored, CPU pinning, statistics and
the side-by-side table.

Every driver runs as root from the repository root, e.g.
    .venv/bin/python bench/bigmem.py --quick
"""
from __future__ import annotations

import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import TracebackType

ROOT = Path(__file__).resolve().parent.parent
BUILD = ROOT / "build"
BENCH = BUILD / "bench"
HUGE = Path("/sys/kernel/mm/hugepages")
PAGE_SIZES_KB = (1048576, 2048)


def lattice_cmd() -> list[str]:
    venv = ROOT / ".venv" / "bin" / "lattice"
    if venv.exists():
        return [str(venv)]
    return [sys.executable, "-m", "lattice"]


def require_root(name: str) -> None:
    if os.geteuid() != 0:
        sys.exit(f"{name}: run as root (it reserves huge pages and pins processes)")


def require_built(*paths: Path) -> None:
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        sys.exit(f"missing {', '.join(missing)}: run `make -s all` first")


def parse_kv(out: str) -> dict[str, str]:
    """The last line of key=value pairs in a program's output (rank label dropped)."""
    lines = [l for l in out.splitlines() if re.search(r"\w=\S", l)]
    if not lines:
        raise RuntimeError(f"no key=value line in output:\n{out}")
    return kv_line(lines[-1])


def kv_line(line: str) -> dict[str, str]:
    line = re.sub(r"^\d+: ", "", line.strip())
    return dict(kv.split("=", 1) for kv in line.split() if "=" in kv)


class HugePages:
    """Reserve huge pages for the duration of a `with`, restoring the pools after.

    want maps a page size in kB (1048576 or 2048) to a number of pages. The
    kernel may give fewer (1 GiB pages need contiguous free memory);
    `got[size]` says what it gave.
    """

    def __init__(self, want: dict[int, int]) -> None:
        self.want = want
        self.saved: dict[int, int] = {}
        self.got: dict[int, int] = {}

    @staticmethod
    def path(kb: int) -> Path:
        return HUGE / f"hugepages-{kb}kB" / "nr_hugepages"

    @staticmethod
    def free(kb: int) -> int:
        return int((HUGE / f"hugepages-{kb}kB" / "free_hugepages").read_text())

    @classmethod
    def persistent(cls, kb: int) -> int:
        """The pool's own pages: nr_hugepages counts surplus pages (cnk jobs'
        2 MiB pages) too, and writing such a count back would keep them."""
        p = cls.path(kb)
        return int(p.read_text()) - int(p.with_name("surplus_hugepages").read_text())

    def set(self, kb: int, n: int) -> int:
        p = self.path(kb)
        try:
            p.write_text(f"{n}\n")
        except OSError:
            pass
        return self.persistent(kb)

    def __enter__(self) -> "HugePages":
        for kb in PAGE_SIZES_KB:
            if self.path(kb).exists():
                self.saved[kb] = self.persistent(kb)
        # the biggest first: 1 GiB pages need contiguous memory that 2 MiB
        # pages would fragment
        for kb in PAGE_SIZES_KB:
            if kb in self.want and kb in self.saved:
                self.got[kb] = self.set(kb, self.saved[kb] + self.want[kb]) - self.saved[kb]
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        for kb, n in self.saved.items():
            for _ in range(50):          # pages still mapped by a dying process come back late
                if self.set(kb, n) == n:
                    break
                time.sleep(0.1)
            else:
                print(f"warning: could not restore {self.path(kb)} to {n}", file=sys.stderr)


def thp_mode() -> str:
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
        m = re.search(r"\[(\w+)\]", text)
        return m.group(1) if m else text.strip()
    except OSError:
        return "unknown"


def pin_cmd(cpu: int | None) -> list[str]:
    return ["taskset", "-c", str(cpu)] if cpu is not None else []


def pin_pid_tree(pid: int, cpu: int) -> None:
    """Pin every thread of pid (its future children inherit it)."""
    for t in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(t.name), {cpu})
        except OSError:
            pass


class OneNode:
    """A 1x1x1 Lattice machine in a temporary LATTICE_HOME with block `bench` booted.

    run() launches a one-rank job on it and returns (stdout, stderr).
    """

    def __init__(self, memory: str, cpu: int | None = None, boot: bool = True) -> None:
        self.memory = memory
        self.boot = boot
        self.cpu = cpu
        self.home = Path(tempfile.mkdtemp(prefix="lattice-bench-"))
        self.env = dict(os.environ, LATTICE_HOME=str(self.home),
                        PYTHONPATH=str(ROOT / "service"))
        self.booted = False

    def lattice(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        p = subprocess.run([*lattice_cmd(), *args], env=self.env, capture_output=True, text=True)
        if check and p.returncode != 0:
            raise RuntimeError(f"lattice {' '.join(args)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
        return p

    def __enter__(self) -> "OneNode":
        if not self.boot:          # only native runs: no machine needed
            return self
        self.lattice("init", "--shape", "1x1x1", "--pset-size", "1", "--memory", self.memory)
        self.lattice("block", "create", "bench", "--shape", "1x1x1")
        self.lattice("boot", "bench")
        self.booted = True
        if self.cpu is not None:
            for pid in self.pids("cnode"):
                pin_pid_tree(pid, self.cpu)
        return self

    def pids(self, program: str) -> list[int]:
        found = []
        for d in Path("/proc").iterdir():
            if not d.name.isdigit():
                continue
            try:
                argv = (d / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(program.encode()) and str(self.home).encode() in b" ".join(argv):
                found.append(int(d.name))
        return found

    def run(self, exe: Path, *args: str, kernel: str = "cnk", cwd: Path | None = None,
            verbose: bool = True) -> tuple[str, str]:
        opts = ["--block", "bench", "-n", "1", "--kernel", kernel]
        if verbose:
            opts.append("-v")
        if cwd is not None:
            opts += ["--cwd", str(cwd)]
        p = self.lattice("run", *opts, str(exe), *args)
        return p.stdout, p.stderr

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self.booted:
            self.lattice("free", "bench", check=False)
        shutil.rmtree(self.home, ignore_errors=True)


def native(exe: Path, *args: str, cpu: int | None = None, cwd: Path | None = None) -> str:
    p = subprocess.run([*pin_cmd(cpu), str(exe), *args], capture_output=True, text=True, cwd=cwd)
    if p.returncode != 0:
        raise RuntimeError(f"{exe} {' '.join(args)} exited {p.returncode}:\n{p.stdout}\n{p.stderr}")
    return p.stdout


def page_line(stderr: str) -> str:
    """What `lattice run -v` said about the pages of big memory."""
    lines = [l.strip() for l in stderr.splitlines() if re.search(r"page|huge|THP", l, re.I)]
    return lines[-1] if lines else "(no page size reported by -v)"


def fmt(v: float) -> str:
    a = abs(v)
    if a >= 1000:
        return f"{v:.0f}"
    if a >= 100:
        return f"{v:.1f}"
    if a >= 1:
        return f"{v:.2f}"
    return f"{v:.4f}"


def cell(vals: list[float]) -> str:
    if not vals:
        return "-"
    return f"{fmt(statistics.median(vals))} [{fmt(min(vals))}–{fmt(max(vals))}]"


def table(title: str, columns: list[str], rows: list[tuple[str, dict[str, list[float]], list[tuple[str, str, str]]]]) -> str:
    """A markdown table: one row per measure, median [min–max] per column,
    then ratios (label, numerator column, denominator column) of medians."""
    ratio_names: list[str] = []
    for _, _, ratios in rows:
        for name, _, _ in ratios:
            if name not in ratio_names:
                ratio_names.append(name)
    head = ["measure", *columns, *ratio_names]
    out = [title, "", "| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    for name, data, ratios in rows:
        cells = [name, *(cell(data.get(c, [])) for c in columns)]
        rv = {}
        for rname, num, den in ratios:
            if data.get(num) and data.get(den):
                rv[rname] = f"{statistics.median(data[num]) / statistics.median(data[den]):.3f}"
        cells += [rv.get(r, "") for r in ratio_names]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def rotations(names: list[str], i: int) -> list[str]:
    """The run order of repetition i: each configuration goes first in turn."""
    k = i % len(names)
    return names[k:] + names[:k]


def default_cpu() -> int:
    cpus = sorted(os.sched_getaffinity(0))
    return cpus[-1]


def header(name: str, argv: list[str]) -> str:
    return (f"{name}: {time.strftime('%Y-%m-%d %H:%M')} on {os.uname().release}, {os.cpu_count()} CPUs, "
            f"THP {thp_mode()}\ncommand: {' '.join(argv)}")
