"""Huge pages for cnk's big memory: grow the kernel's pools for a job, give
back exactly what was added when it ends.

Policy (docs/architecture.md, "Huge pages"): a cnk job of R ranks on nodes of
M bytes needs, per rank, ceil(M / 1 GiB) pages of 1 GiB or ceil(M / 2 MiB)
pages of 2 MiB.  Ranks that free pages already cover cost nothing.  For the
rest, `reserve` grows the 1 GiB pool (not for a program linked at a fixed
address below 1 GiB: cnk cannot put it on 1 GiB pages), then the 2 MiB pool
for ranks still uncovered, never taking more than LIMIT (75 %) of
MemAvailable.  What the kernel would not give, and everything when we are
not root, is left to cnk's fallback (2 MiB pages, then transparent huge
pages) with one warning line.

Bookkeeping: BOOK_DIR/hugepages.json, under an flock on
BOOK_DIR/hugepages.lock, lists each running job's additions (with the
pid and start time of the `lattice run` that made them).  The pools belong to
the host, not to one machine, so the book does too: a run of a machine whose
$LATTICE_HOME was deleted after it was killed is still reaped by the next run
of any machine on the host.  Release lowers a
pool by this job's addition only, so concurrent runs never trample each
other, and what a run killed outright had added is given back by the next
run that takes the lock.
"""
from __future__ import annotations

import fcntl
import json
import os
import signal
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

SYSFS = Path("/sys/kernel/mm/hugepages")
MEMINFO = Path("/proc/meminfo")
GIB_KB = 1 << 20
MIB2_KB = 2 << 10
LIMIT = 0.75            # of MemAvailable, at most, for what a job adds
RELEASE_WAIT = 3.0      # seconds to wait for pages a just-ended process still holds
BOOK_DIR = Path(os.environ.get("LATTICE_HUGEPAGES_BOOK", "/run/lattice"))   # host-wide, like the pools


def page_name(kb: int) -> str:
    return f"{kb >> 20} GiB" if kb >= GIB_KB else f"{kb >> 10} MiB" if kb >= 1024 else f"{kb} KiB"


class Pools:
    """The kernel's huge page pools: SYSFS/hugepages-<kB>kB/{nr,free,resv}_hugepages
    and MemAvailable from /proc/meminfo.  Tests pass a fake directory tree."""

    def __init__(self, root: Path = SYSFS, meminfo: Path = MEMINFO) -> None:
        self.root = root
        self.meminfo = meminfo

    def path(self, kb: int, name: str) -> Path:
        return self.root / f"hugepages-{kb}kB" / name

    def has(self, kb: int) -> bool:
        return self.path(kb, "nr_hugepages").exists()

    def read(self, kb: int, name: str) -> int:
        return int(self.path(kb, name).read_text().split()[0])

    def nr(self, kb: int) -> int:
        return self.read(kb, "nr_hugepages")

    def free(self, kb: int) -> int:
        """Pages nobody has mapped or reserved yet."""
        try:
            resv = self.read(kb, "resv_hugepages")
        except (OSError, ValueError, IndexError):
            resv = 0
        return max(0, self.read(kb, "free_hugepages") - resv)

    def set_nr(self, kb: int, n: int) -> int:
        """Ask for n pages; return how many the pool has now."""
        try:
            self.path(kb, "nr_hugepages").write_text(f"{max(0, n)}\n")
        except OSError:
            pass        # EPERM, or a partial allocation the kernel reports as an error: read what is there
        return self.nr(kb)

    def mem_available(self) -> int:
        """Bytes the kernel says can be allocated without swapping."""
        for line in self.meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
        raise ValueError(f"no MemAvailable in {self.meminfo}")


class Reservation:
    """What one job added to the pools (kB page size -> pages), and what to tell the user.
    (Not a dataclass: a cnk `lattice run` imports this module, see lattice.machine.Machine.)"""

    def __init__(self, id: str, home: Path | None = None, pools: Pools | None = None) -> None:
        self.id = id
        self.pages: dict[int, int] = {}
        self.warning: str | None = None
        self.notes: list[str] = []
        self.home = home
        self.pools = pools
        self.recorded = False   # an entry in the book that release() must remove


def pages_per_rank(memory: int, kb: int) -> int:
    size = kb << 10
    return -(-memory // size)


# --- bookkeeping --------------------------------------------------------------

def _start_time(pid: int) -> str | None:
    """A process's start time (field 22 of /proc/PID/stat), None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return fields[19] if fields[0] != "Z" else None


def _alive(entry: dict[str, object]) -> bool:
    pid = entry.get("pid")
    return isinstance(pid, int) and _start_time(pid) == entry.get("start")


@contextmanager
def _locked(home: Path) -> Iterator[dict[str, dict[str, object]]]:
    """The book of reservations, exclusively, with SIGINT/SIGTERM held back so a
    Ctrl-C cannot land between changing a pool and writing down the change."""
    home.mkdir(parents=True, exist_ok=True)
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        with open(home / "hugepages.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            book_path = home / "hugepages.json"
            try:
                book = json.loads(book_path.read_text())
                if not isinstance(book, dict):
                    book = {}
            except (OSError, ValueError):
                book = {}
            try:
                yield book
            finally:            # also when the body failed half-way: what it changed is written down
                tmp = book_path.with_suffix(".tmp")
                tmp.write_text(json.dumps(book, indent=1, sort_keys=True) + "\n")
                os.replace(tmp, book_path)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _entry_pages(entry: dict[str, object]) -> dict[int, int]:
    pages = entry.get("pages")
    if not isinstance(pages, dict):
        return {}
    return {int(k): int(v) for k, v in pages.items()}


def _give_back(pools: Pools, pages: dict[int, int], wait: float) -> list[str]:
    """Lower each pool by what was added; problems as messages."""
    problems = []
    for kb, n in sorted(pages.items()):
        if n <= 0 or not pools.has(kb):
            continue
        try:
            target = max(0, pools.nr(kb) - n)
            deadline = time.monotonic() + wait
            while pools.set_nr(kb, target) > target and time.monotonic() < deadline:
                time.sleep(0.05)    # a process that just ended may still hold its pages
            if pools.nr(kb) > target:
                problems.append(f"the {page_name(kb)} pool is still at {pools.nr(kb)} pages, not {target}: "
                                f"pages still in use")
        except (OSError, ValueError) as e:
            problems.append(f"cannot shrink the {page_name(kb)} pool: {e}")
    return problems


def _reap(book: dict[str, dict[str, object]], pools: Pools) -> list[str]:
    """Give back what runs that no longer exist had added."""
    notes = []
    for rid in [r for r, e in book.items() if not _alive(e)]:
        pages = _entry_pages(book.pop(rid))
        if any(pages.values()):
            notes.append(f"gave back the huge pages of an ended run ({rid})")
            notes += _give_back(pools, pages, 0.0)
    return notes


# --- the policy --------------------------------------------------------------

def reserve(home: Path, rid: str, nranks: int, memory: int, fixed_address: bool = False,
            pools: Pools | None = None, root: bool | None = None) -> Reservation:
    """Make room in the pools for a cnk job; never raises for pool trouble
    (the job runs anyway, cnk falls back): read .warning and .notes."""
    pools = pools or Pools()
    root = os.geteuid() == 0 if root is None else root
    res = Reservation(rid, home=home, pools=pools)
    sizes = [kb for kb in (GIB_KB, MIB2_KB) if pools.has(kb) and not (kb == GIB_KB and fixed_address)]
    if not sizes:
        res.warning = (f"this kernel has no huge page pools ({pools.root}): "
                       "big memory falls back to transparent huge pages")
        return res
    try:
        if not root:
            covered = _covered(pools, sizes, {}, nranks, memory)
            if covered < nranks:
                res.warning = (f"not root: cannot reserve huge pages for big memory "
                               f"({nranks - covered} of {nranks} ranks not covered by free huge pages); "
                               f"cnk falls back to smaller pages")
            return res
        with _locked(home) as book:
            res.notes += _reap(book, pools)
            others: dict[int, int] = {}
            for e in book.values():
                for kb, n in _entry_pages(e).items():
                    others[kb] = others.get(kb, 0) + n
            book[rid] = {"pid": os.getpid(), "start": _start_time(os.getpid()), "pages": {}}
            res.recorded = True
            try:
                _grow(pools, sizes, others, nranks, memory, res)
            finally:
                book[rid]["pages"] = {str(kb): n for kb, n in res.pages.items()}
    except (OSError, ValueError) as e:
        res.warning = f"cannot reserve huge pages for big memory: {e}; cnk falls back to smaller pages"
    return res


def _covered(pools: Pools, sizes: list[int], others: dict[int, int], nranks: int, memory: int) -> int:
    """Ranks the free pages already cover (pages other runs added count as taken)."""
    left = nranks
    for kb in sizes:
        # pages other live runs added may still be free only because their ranks
        # have not mapped them yet: they are not ours to count
        free = max(0, pools.free(kb) - others.get(kb, 0))
        left -= min(left, free // pages_per_rank(memory, kb))
    return nranks - left


def _grow(pools: Pools, sizes: list[int], others: dict[int, int], nranks: int, memory: int,
          res: Reservation) -> None:
    left = nranks - _covered(pools, sizes, others, nranks, memory)
    if left == 0:
        res.notes.append(f"huge pages: the free pages already hold big memory for {nranks} ranks")
        return
    budget = int(pools.mem_available() * LIMIT)
    limited = False
    for kb in sizes:
        if left == 0:
            break
        per = pages_per_rank(memory, kb)
        page = kb << 10
        ask = min(left * per, budget // page)
        if ask < left * per:
            limited = True
        ask -= ask % per            # whole ranks only
        if ask <= 0:
            continue
        before = pools.nr(kb)
        got = max(0, pools.set_nr(kb, before + ask) - before)
        spare = got % per           # pages no whole rank can use: give them back at once
        if spare:
            pools.set_nr(kb, before + got - spare)
            got -= spare
        if got:
            res.pages[kb] = got
            budget -= got * page
            left -= got // per
            res.notes.append(f"huge pages: reserved {got} x {page_name(kb)} for big memory "
                             f"(pool {before} -> {before + got}; given back after the job)")
    if left:
        why = (f"the reservation is limited to {int(LIMIT * 100)}% of MemAvailable" if limited
               else "the kernel would not grow the pools (memory too fragmented?)")
        res.warning = (f"huge pages for big memory cover {nranks - left} of {nranks} ranks: {why}; "
                       f"the others fall back to smaller pages")


def release(res: Reservation, wait: float = RELEASE_WAIT) -> list[str]:
    """Give back what `reserve` added (idempotent); problems as messages."""
    if res.home is None or res.pools is None or not res.recorded:
        return []
    problems: list[str] = []
    try:
        with _locked(res.home) as book:
            entry = book.pop(res.id, None)
            pages = _entry_pages(entry) if entry is not None else {}
            problems += _give_back(res.pools, pages, wait)
    except OSError as e:
        problems.append(f"cannot give back huge pages: {e}")
    res.pages = {}
    res.recorded = False
    return problems


def fixed_below_1g(path: str) -> bool:
    """Is this an ELF executable linked at a fixed address below 1 GiB
    (ET_EXEC), which cnk cannot put on 1 GiB pages?"""
    try:
        with open(path, "rb") as fh:
            head = fh.read(64)
            if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2 or head[5] != 1:
                return False
            e_type = int.from_bytes(head[16:18], "little")
            if e_type != 2:
                return False
            phoff = int.from_bytes(head[32:40], "little")
            phentsize = int.from_bytes(head[54:56], "little")
            phnum = int.from_bytes(head[56:58], "little")
            if phentsize < 56 or phnum > 256:
                return True
            fh.seek(phoff)
            table = fh.read(phentsize * phnum)
    except OSError:
        return False
    lows = [int.from_bytes(table[i * phentsize + 16:i * phentsize + 24], "little")
            for i in range(phnum) if len(table) >= (i + 1) * phentsize
            and int.from_bytes(table[i * phentsize:i * phentsize + 4], "little") == 1]   # PT_LOAD
    return not lows or min(lows) < 1 << 30
