"""Helpers for the cnk end-to-end tests (test_t05*): ELF surgery for bad
executables, huge page pools that are always restored, parsing of labelled
output, `lattice jobs`, `--trace` lines and /proc/self/smaps reports."""
from __future__ import annotations

import re
import shutil
import struct
import time
from pathlib import Path
from types import TracebackType
from typing import Iterator

from conftest import EXAMPLES, Machine

CNK_EX = EXAMPLES / "cnk"
EM_X86_64, EM_AARCH64 = 62, 183
PT_INTERP = 3
HUGE = Path("/sys/kernel/mm/hugepages")
RESTORE_GUARD = 120.0           # s: HugePagePools waits this long at most for pages to come free


# ---- ELF ----

def elf_header(path: Path) -> dict[str, int]:
    b = path.read_bytes()[:64]
    assert b[:4] == b"\x7fELF" and b[4] == 2, f"{path} is not a 64-bit ELF"
    e_type, e_machine = struct.unpack_from("<HH", b, 16)
    e_phoff, = struct.unpack_from("<Q", b, 32)
    e_phentsize, e_phnum = struct.unpack_from("<HH", b, 54)
    return {"type": e_type, "machine": e_machine, "phoff": e_phoff, "phentsize": e_phentsize,
            "phnum": e_phnum}


def program_headers(path: Path) -> Iterator[tuple[int, int, int, int]]:
    """(p_type, p_offset, p_filesz, file offset of the header) of each segment."""
    data = path.read_bytes()
    h = elf_header(path)
    for i in range(h["phnum"]):
        at = h["phoff"] + i * h["phentsize"]
        p_type, _flags, p_offset, _vaddr, _paddr, p_filesz = struct.unpack_from("<IIQQQQ", data, at)
        yield p_type, p_offset, p_filesz, at


def interpreter(path: Path) -> str | None:
    data = path.read_bytes()
    for p_type, off, size, _ in program_headers(path):
        if p_type == PT_INTERP:
            return data[off:off + size].rstrip(b"\0").decode()
    return None


def copy_exe(src: Path, dst: Path) -> Path:
    shutil.copyfile(src, dst)
    dst.chmod(0o755)
    return dst


def with_machine(src: Path, dst: Path, machine: int) -> Path:
    """A copy of src whose ELF header says it is for another architecture."""
    data = bytearray(src.read_bytes())
    struct.pack_into("<H", data, 18, machine)
    dst.write_bytes(bytes(data))
    dst.chmod(0o755)
    return dst


def with_interpreter(src: Path, dst: Path, interp: str) -> Path:
    """A copy of a dynamic executable whose PT_INTERP names another path
    (no longer than the original one)."""
    data = bytearray(src.read_bytes())
    for p_type, off, size, _ in program_headers(src):
        if p_type == PT_INTERP:
            new = interp.encode()
            assert len(new) < size, f"{interp} is longer than the original interpreter path"
            data[off:off + size] = new + b"\0" * (size - len(new))
            break
    else:
        raise AssertionError(f"{src} has no PT_INTERP")
    dst.write_bytes(bytes(data))
    dst.chmod(0o755)
    return dst


def truncated(src: Path, dst: Path, keep: int) -> Path:
    dst.write_bytes(src.read_bytes()[:keep])
    dst.chmod(0o755)
    return dst


# ---- huge pages ----

class HugePagePools:
    """Set the huge page pools for a `with` (kB page size -> the pool's own
    pages; overcommit: kB page size -> surplus pages allowed), and put back
    what they held before, however the block ends.  Counts are persistent
    pages (nr_hugepages less surplus_hugepages): writing nr_hugepages sets
    those, and a value read with other jobs' surplus pages in it would turn
    their pages into the pool's own."""

    def __init__(self, pages: dict[int, int], overcommit: dict[int, int] | None = None) -> None:
        self.pages = pages
        self.overcommit = overcommit or {}
        self.saved: dict[int, int] = {}
        self.saved_ceiling: dict[int, int] = {}
        self.got: dict[int, int] = {}

    @staticmethod
    def path(kb: int, name: str = "nr_hugepages") -> Path:
        return HUGE / f"hugepages-{kb}kB" / name

    @classmethod
    def nr(cls, kb: int) -> int:
        """The pool's own pages now (0 for a page size this kernel lacks)."""
        if not cls.path(kb).exists():
            return 0
        return int(cls.path(kb).read_text()) - int(cls.path(kb, "surplus_hugepages").read_text())

    @classmethod
    def ceiling(cls, kb: int) -> int:
        p = cls.path(kb, "nr_overcommit_hugepages")
        return int(p.read_text()) if p.exists() else 0

    @classmethod
    def free(cls, kb: int) -> int:
        p = cls.path(kb, "free_hugepages")
        return int(p.read_text()) if p.exists() else 0

    @classmethod
    def surplus(cls, kb: int) -> int:
        p = cls.path(kb, "surplus_hugepages")
        return int(p.read_text()) if p.exists() else 0

    def _set(self, kb: int, n: int) -> int:
        try:
            self.path(kb).write_text(f"{n}\n")
        except OSError:
            pass
        return self.nr(kb)

    def _set_ceiling(self, kb: int, n: int) -> None:
        try:
            self.path(kb, "nr_overcommit_hugepages").write_text(f"{n}\n")
        except OSError:
            pass

    def __enter__(self) -> "HugePagePools":
        for kb, n in self.overcommit.items():
            if self.path(kb).exists():
                self.saved_ceiling[kb] = self.ceiling(kb)
                self._set_ceiling(kb, n)
        for kb in sorted(self.pages, reverse=True):      # 1 GiB pages first: they need contiguity
            if self.path(kb).exists():
                self.saved[kb] = self.nr(kb)
                self.got[kb] = self._set(kb, self.pages[kb])
            else:
                self.got[kb] = 0
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        for kb, n in self.saved.items():
            # a process that just ended may still hold its pages: until they are free (on a loaded
            # host that can take a while; RESTORE_GUARD only so that pages held for good end it)
            deadline = time.monotonic() + RESTORE_GUARD
            while self._set(kb, n) != n and time.monotonic() < deadline:
                time.sleep(0.1)
        for kb, n in self.saved_ceiling.items():
            self._set_ceiling(kb, n)


# ---- output ----

def by_rank(stdout: str) -> dict[int, list[str]]:
    """Lines of `lattice run --label` output, by rank."""
    out: dict[int, list[str]] = {}
    for line in stdout.splitlines():
        m = re.match(r"^(\d+): (.*)$", line)
        if m:
            out.setdefault(int(m.group(1)), []).append(m.group(2))
    return out


def unlabelled(stdout: str) -> list[str]:
    """The non-empty lines of `lattice run --label` output (or a native
    run's) without their labels, sorted: ranks print in any order."""
    return sorted(re.sub(r"^\d+: ", "", line) for line in stdout.splitlines() if line.strip())


def last_job(m: Machine) -> int:
    ids = [int(l.split()[0]) for l in m.run("jobs").stdout.splitlines()[1:] if l.split() and l.split()[0].isdigit()]
    assert ids, "no job recorded"
    return max(ids)


def rank_rows(m: Machine, job: int) -> list[str]:
    lines = m.run("jobs", "--ranks", str(job)).stdout.splitlines()
    return [l for l in lines[1:] if l.strip()]


def class_counts(m: Machine, job: int) -> dict[int, dict[str, int]]:
    """Per-rank system call counts by class from `lattice jobs --ranks JOB`."""
    lines = m.run("jobs", "--ranks", str(job)).stdout.splitlines()
    head = lines[0].split()
    counts: dict[int, dict[str, int]] = {}
    for line in lines[1:]:
        parts = line.split()
        if not parts or not parts[0].isdigit():
            continue
        row: dict[str, int] = {}
        for cls in ("local", "shipped", "unsupported"):
            m1 = re.search(rf"\b{cls}[=:]\s*(\d+)", line)
            if m1:
                row[cls] = int(m1.group(1))
            elif cls in head:
                row[cls] = int(parts[head.index(cls)])
        counts[int(parts[0])] = row
    return counts


TRACE = re.compile(r"^\[cnk (\d+)\] (\w+)\((.*)\) = (-?\w+|\?)(?: \(\w+\))? (local|shipped|unsupported)$")


def trace_lines(text: str) -> list[re.Match[str]]:
    return [m for m in (TRACE.match(re.sub(r"^\d+: ", "", l)) for l in text.splitlines()) if m]


def smaps_report(lines: list[str]) -> dict[str, dict[str, str]]:
    """memmap's lines (WHAT addr=... map=S-E size_kb=... page_kb=...) by WHAT."""
    out: dict[str, dict[str, str]] = {}
    for line in lines:
        parts = line.split()
        if len(parts) > 2 and parts[1].startswith("addr="):
            out[parts[0]] = dict(p.split("=", 1) for p in parts[1:] if "=" in p)
    return out
