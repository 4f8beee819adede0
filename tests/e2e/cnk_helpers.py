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
    """Set the huge page pools for a `with` (kB page size -> pages), and put
    back what they held before, however the block ends."""

    def __init__(self, pages: dict[int, int]) -> None:
        self.pages = pages
        self.saved: dict[int, int] = {}
        self.got: dict[int, int] = {}

    @staticmethod
    def path(kb: int) -> Path:
        return HUGE / f"hugepages-{kb}kB" / "nr_hugepages"

    @classmethod
    def nr(cls, kb: int) -> int:
        """Pages in the pool now (0 for a page size this kernel lacks)."""
        return int(cls.path(kb).read_text()) if cls.path(kb).exists() else 0

    def _set(self, kb: int, n: int) -> int:
        try:
            self.path(kb).write_text(f"{n}\n")
        except OSError:
            pass
        return int(self.path(kb).read_text())

    def __enter__(self) -> "HugePagePools":
        for kb in sorted(self.pages, reverse=True):      # 1 GiB pages first: they need contiguity
            if self.path(kb).exists():
                self.saved[kb] = int(self.path(kb).read_text())
                self.got[kb] = self._set(kb, self.pages[kb])
            else:
                self.got[kb] = 0
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None,
                 tb: TracebackType | None) -> None:
        for kb, n in self.saved.items():
            for _ in range(100):      # a process that just ended may still hold its pages
                if self._set(kb, n) == n:
                    break
                time.sleep(0.1)


# ---- output ----

def by_rank(stdout: str) -> dict[int, list[str]]:
    """Lines of `lattice run --label` output, by rank."""
    out: dict[int, list[str]] = {}
    for line in stdout.splitlines():
        m = re.match(r"^(\d+): (.*)$", line)
        if m:
            out.setdefault(int(m.group(1)), []).append(m.group(2))
    return out


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
