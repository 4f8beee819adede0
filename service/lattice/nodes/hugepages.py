"""Huge pages for cnk's big memory, sized to the node (docs/architecture.md,
"Huge pages").

A rank's big memory M (the node's memory divided by its processes) goes on
1 GiB pages only when M is a whole number of GiB and the program is not
linked at a fixed address below 1 GiB (a 1 GiB page at address 0 cannot
hold it); else on 2 MiB pages.  cnk makes the same choice by itself
(compute/cnk/bigmem.c), falling back to smaller pages when the kernel has
none to give; LATTICE_BIGMEM_PAGES=1G|2M|4K in the job's environment caps
the page size (the user's --env, honoured here too), and the service node
adds LATTICE_BIGMEM_RESERVE=0 when the ranks are to take their pages at
first touch (below).

- 2 MiB pages are the kernel's *surplus* pages.  `reserve` only raises the
  2 MiB pool's overcommit ceiling (nr_overcommit_hugepages) by what the job
  may take; each rank's hugetlb mapping then takes its pages at first touch
  (LATTICE_BIGMEM_RESERVE=0, MAP_NORESERVE: free pool pages first, then
  surplus pages from free memory), and the kernel frees exactly those when
  the rank and its I/O node let go.  Nothing is resized and nothing anybody
  else holds is taken.  Reserving them all at mmap instead (the user's
  --env LATTICE_BIGMEM_RESERVE=1; and when the ceiling cannot be raised, so
  that cnk falls back rather than meet SIGBUS) allocates the node's whole
  memory before main: 6-8 ms a rank of 512 MiB.  A job bigger than LIMIT
  (75 %) of MemAvailable, plus the free pool pages, gets one warning
  (lattice.nodes.capacity refuses, before launch, one bigger than the host).
- 1 GiB (gigantic) pages cannot be surplus: free pool pages first, then the
  pool grows for the ranks not covered (whole ranks, within LIMIT of
  MemAvailable) and `release` lowers it by exactly that.  Ranks still not
  covered fall back to 2 MiB pages, as above.

Pages held by the block (`lattice init --hold-pages`, lattice.jobs.job): on a
host whose free memory is reported to its hypervisor (a virtio balloon with
free page reporting, as on this VM: lattice.nodes.host.free_memory_reported), a
2 MiB page fresh from free memory is supplied again by the hypervisor at
first touch, 2-5x slower than a pool page touched before (1 GiB in
0.9-1.3 s against 0.2 s, measured).  There a booted block keeps the pages its
jobs touched, as a Blue Gene block owns its nodes' memory: while a job runs,
`keep_touched` turns surplus pages into pool pages the block holds (writing
nr_hugepages turns surplus pages in use into persistent ones, nothing is
allocated), never more than the job's ranks' memory on this host, and its
1 GiB pages stay too; the block's next jobs find them in the pool.  `forget`
gives them all back when the block is freed, and a block whose daemon is
gone is reaped like an ended run.  Surplus pages are counted host-wide: while
another machine's job runs at the same time, a block may keep pages that job
touched, never more than its own ranks' memory.

Bookkeeping: book_dir()/hugepages.json, under an flock on
book_dir()/hugepages.lock (both 0600 in a 0700 directory of root's, made or
checked so that no other user can plant it or open the lock: see _locked),
lists each running job (pid and start time of its `lattice run`) with what
it added to the 1 GiB pool ("pages") and the 2 MiB pages its ranks may take
as surplus ("overcommit").  The ceiling is
base + the sum over live runs, where base (the value before any run raised
it) is kept in book_dir()/hugepages-overcommit.json and written back when no
live run needs more.  A block that holds pages has an entry too ("pages":
what it holds), under the pid and start time of a daemon that lives as long
as the block is booted.  The pools belong to the host, so the book does too:
a run killed outright, or a block whose daemon died, is reaped by the next
run of any machine on the host.

The host's huge page files are read and written here only (Pools); the
rest of the host (cores, /dev/shm) is lattice.nodes.host's.
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

from lattice import procs

SYSFS = Path("/sys/kernel/mm/hugepages")
MEMINFO = Path("/proc/meminfo")
GIB_KB = 1 << 20
MIB2_KB = 2 << 10
PAGE_KB = 4
GIB = 1 << 30
LIMIT = 0.75            # of MemAvailable, at most, for what a job reserves
RELEASE_WAIT = 3.0      # seconds to wait for pages a just-ended process still holds
CEILING_FILE = "hugepages-overcommit.json"
ENV_PAGES, ENV_RESERVE = "LATTICE_BIGMEM_PAGES", "LATTICE_BIGMEM_RESERVE"
PAGE_WORDS = {"1G": GIB_KB, "2M": MIB2_KB, "4K": PAGE_KB}


def book_dir() -> Path:
    """Where the book is: host-wide, like the pools."""
    return Path(os.environ.get("LATTICE_HUGEPAGES_BOOK", "/run/lattice"))


def page_name(kb: int) -> str:
    return f"{kb >> 20} GiB" if kb >= GIB_KB else f"{kb >> 10} MiB" if kb >= 1024 else f"{kb} KiB"


def parse_page(text: str) -> int:
    """LATTICE_BIGMEM_PAGES's value (1G, 2M, 4K) as kB."""
    if text.upper() not in PAGE_WORDS:
        raise ValueError(f"bad {ENV_PAGES} {text!r}: 1G, 2M or 4K")
    return PAGE_WORDS[text.upper()]


class Pools:
    """The kernel's huge page pools: SYSFS/hugepages-<kB>kB/{nr,free,resv,surplus,nr_overcommit}_hugepages
    and MemAvailable from /proc/meminfo.  Tests pass a fake directory tree."""

    def __init__(self, root: Path = SYSFS, meminfo: Path = MEMINFO) -> None:
        self.root = root
        self.meminfo = meminfo

    def path(self, kb: int, name: str) -> Path:
        return self.root / f"hugepages-{kb}kB" / name

    def has(self, kb: int) -> bool:
        return self.path(kb, "nr_hugepages").exists()

    def read(self, kb: int, name: str, missing: int | None = None) -> int:
        try:
            return int(self.path(kb, name).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            if missing is None:
                raise
            return missing

    def persistent(self, kb: int) -> int:
        """The pool's own pages: nr_hugepages counts surplus pages too, and
        writing nr_hugepages sets the persistent count (turning surplus pages
        into persistent ones when it grows), so all arithmetic is on this.
        Read until nr_hugepages stands still around surplus_hugepages: a rank
        freeing a surplus page in between lowers both, and a count read half
        before and half after is one too many (a write of it grows the pool
        by a page nobody booked)."""
        for _ in range(100):
            nr = self.read(kb, "nr_hugepages")
            surplus = self.read(kb, "surplus_hugepages", 0)
            if self.read(kb, "nr_hugepages") == nr:
                break
        return nr - surplus

    def free(self, kb: int) -> int:
        """Pages nobody has mapped or reserved yet."""
        return max(0, self.read(kb, "free_hugepages") - self.read(kb, "resv_hugepages", 0))

    def set_persistent(self, kb: int, n: int) -> int:
        """Ask for n pages of the pool's own; return how many it has now."""
        try:
            self.path(kb, "nr_hugepages").write_text(f"{max(0, n)}\n")
        except OSError:
            pass        # EPERM, or a partial allocation the kernel reports as an error: read what is there
        return self.persistent(kb)

    def overcommit(self, kb: int) -> int:
        return self.read(kb, "nr_overcommit_hugepages", 0)

    def set_overcommit(self, kb: int, n: int) -> int:
        try:
            self.path(kb, "nr_overcommit_hugepages").write_text(f"{max(0, n)}\n")
        except OSError:
            pass
        return self.overcommit(kb)

    def mem_available(self) -> int:
        """Bytes the kernel says can be allocated without swapping."""
        for line in self.meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
        raise ValueError(f"no MemAvailable in {self.meminfo}")


class Reservation:
    """What one job asked of the host: 1 GiB pages it added to the pool, 2 MiB
    pages its ranks may take as surplus, the environment that tells cnk,
    and what to tell the user.
    (Not a dataclass: a cnk `lattice run` imports this module, see lattice.state.machine.Machine.)"""

    def __init__(self, id: str, home: Path | None = None, pools: Pools | None = None) -> None:
        self.id = id
        self.pages: dict[int, int] = {}         # kB -> pages added to that pool
        self.surplus = 0                        # 2 MiB pages the ranks may take as surplus
        self.page_kb = 0                        # the largest page size cnk is told to try
        self.at_start = True                    # cnk reserves its pages at mmap (else at first touch)
        self.env: list[str] = []
        self.warning: str | None = None
        self.notes: list[str] = []
        self.home = home
        self.pools = pools
        self.recorded = False   # an entry in the book that release() must remove
        self.block: str | None = None           # the book entry of the block that keeps the pages
        self.holder = 0                         # the pid of a daemon that lives as long as that block is booted
        self.keep_2m = 0                        # at most this many 2 MiB pages stay with the block
        self.kept_2m = 0                        # as many as it holds, at the last look


def pages_per_rank(memory: int, kb: int) -> int:
    size = kb << 10
    return -(-memory // size)


def choose(memory: int, fixed_address: bool, largest: int, has_1g: bool) -> tuple[int, str]:
    """The page size for big memory of `memory` bytes per rank, and why."""
    mib = memory >> 20
    if largest <= PAGE_KB:
        return PAGE_KB, f"{ENV_PAGES}=4K"
    if largest < GIB_KB:
        return MIB2_KB, f"{ENV_PAGES}=2M"
    if memory % GIB:
        return MIB2_KB, f"{mib} MiB per rank is not a whole number of GiB"
    if fixed_address:
        return MIB2_KB, "a program linked at a fixed address below 1 GiB cannot use 1 GiB pages"
    if not has_1g:
        return MIB2_KB, "this kernel has no 1 GiB pages"
    return GIB_KB, f"{memory >> 30} GiB per rank fills whole 1 GiB pages"


# --- bookkeeping --------------------------------------------------------------

def _start_time(pid: int) -> str | None:
    """A process's start time as the book keeps it, None if it is gone."""
    t = procs.ticks(pid)
    return None if t is None else str(t)


def _alive(entry: dict[str, object]) -> bool:
    pid, start = entry.get("pid"), entry.get("start")
    return isinstance(pid, int) and start is not None and _start_time(pid) == start


def _read_json(path: Path) -> dict[str, dict[str, object]]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write_json(path: Path, data: object) -> None:
    """path replaced whole by data, as a file only root (the book's owner) reads."""
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w") as fh:
        os.fchmod(fd, 0o600)        # whatever an older lattice left, whatever the umask
        fh.write(json.dumps(data, indent=1, sort_keys=True) + "\n")
    os.replace(tmp, path)


def _book(home: Path) -> int:
    """A descriptor of the book's directory: root's own, mode 0700, made or
    checked without following links below its nearest existing ancestor, which
    only root may change (lattice.safepath); a PermissionError naming it if
    another user could have planted it."""
    from lattice import safepath
    from lattice.errors import LatticeError
    base = home.parent
    while not base.exists() and base != base.parent:
        base = base.parent
    try:
        return safepath.open_private_dir(home, base)
    except LatticeError as e:
        raise PermissionError(e.message) from e


@contextmanager
def _locked(home: Path) -> Iterator[dict[str, dict[str, object]]]:
    """The book of reservations, exclusively, with SIGINT/SIGTERM held back so a
    Ctrl-C cannot land between changing a pool and writing down the change.
    The lock is a 0600 file in a 0700 directory of root's: no other user can
    open it, so none can hold it and stall every cnk job of the host."""
    d = _book(home)
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        lock = os.open("hugepages.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=d)
        try:
            os.fchmod(lock, 0o600)      # an older lattice made it 0644
            fcntl.flock(lock, fcntl.LOCK_EX)
            book_path = home / "hugepages.json"
            book = _read_json(book_path)
            try:
                yield book
            finally:            # also when the body failed half-way: what it changed is written down
                _write_json(book_path, book)
        finally:
            os.close(lock)
    finally:
        os.close(d)
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _counts(entry: dict[str, object], key: str) -> dict[int, int]:
    """An entry's {kB: pages} under key ("pages": added to a pool, "overcommit": surplus allowed)."""
    pages = entry.get(key)
    if not isinstance(pages, dict):
        return {}
    try:
        return {int(k): int(v) for k, v in pages.items()}
    except (TypeError, ValueError):
        return {}


def _give_back(pools: Pools, pages: dict[int, int], wait: float) -> list[str]:
    """Lower each pool by what was added; problems as messages."""
    problems = []
    for kb, n in sorted(pages.items()):
        if n <= 0 or not pools.has(kb):
            continue
        try:
            target = max(0, pools.persistent(kb) - n)
            deadline = time.monotonic() + wait
            while pools.set_persistent(kb, target) > target and time.monotonic() < deadline:
                time.sleep(0.05)    # a process that just ended may still hold its pages
            if pools.persistent(kb) > target:
                problems.append(f"the {page_name(kb)} pool is still at {pools.persistent(kb)} pages, not "
                                f"{target}: pages still in use")
        except (OSError, ValueError) as e:
            problems.append(f"cannot shrink the {page_name(kb)} pool: {e}")
    return problems


def _ceiling(home: Path, book: dict[str, dict[str, object]], pools: Pools) -> tuple[str | None, list[str]]:
    """Set the 2 MiB overcommit ceiling to base + what the live runs in the book
    may take (base: its value before any run raised it, written back when
    none needs more).  Returns ("old -> new" if it changed, problems)."""
    kb = MIB2_KB
    if not pools.has(kb):
        return None, []
    need = sum(_counts(e, "overcommit").get(kb, 0) for e in book.values())
    path = home / CEILING_FILE
    state = _read_json(path)
    saved = state.get(str(kb))
    cur = pools.overcommit(kb)
    if not isinstance(saved, dict) or not all(isinstance(saved.get(k), int) for k in ("base", "set")):
        if need == 0:
            return None, []
        saved = {"base": cur, "set": cur}
    elif cur != saved["set"]:
        saved["base"] = cur         # someone else set it since: theirs is the value to come back to
    base = int(saved["base"])       # type: ignore[call-overload]
    target = base + need
    got = cur if cur == target else pools.set_overcommit(kb, target)
    if need:
        state[str(kb)] = {"base": base, "set": got}
    else:
        state.pop(str(kb), None)
    _write_json(path, state)
    problems = [] if got == target else [
        f"cannot set the 2 MiB pages' overcommit ceiling to {target} (it is {got})"]
    return (f"{cur} -> {got}" if got != cur else None), problems


def _reap(home: Path, book: dict[str, dict[str, object]], pools: Pools) -> list[str]:
    """Give back what runs that no longer exist had added."""
    notes = []
    for rid in [r for r, e in book.items() if not _alive(e)]:
        entry = book.pop(rid)
        pages = _counts(entry, "pages")
        if any(pages.values()) or any(_counts(entry, "overcommit").values()):
            what = "a block no longer booted" if entry.get("block") else "an ended run"
            notes.append(f"gave back the huge pages of {what} ({rid})")
            notes += _give_back(pools, pages, 0.0)
    return notes


# --- the policy --------------------------------------------------------------

def reserve(home: Path, rid: str, nranks: int, memory: int, fixed_address: bool = False,
            largest: int = GIB_KB, pools: Pools | None = None, root: bool | None = None,
            block: tuple[str, int] | None = None) -> Reservation:
    """Make room for a cnk job's big memory (nranks x memory bytes); never raises
    for pool trouble (the job runs anyway, cnk falls back): read .env, .warning
    and .notes.  block: (its book entry, the pid of a daemon that lives as long
    as it is booted) when the block keeps the pages its jobs touch."""
    pools = pools or Pools()
    root = os.geteuid() == 0 if root is None else root
    res = Reservation(rid, home=home, pools=pools)
    kb, why = choose(memory, fixed_address, largest, pools.has(GIB_KB))
    if kb == PAGE_KB:
        res.page_kb = kb
        res.notes.append(f"huge pages: none ({why}): big memory on transparent huge pages")
        return res
    if not pools.has(MIB2_KB) and kb == MIB2_KB:
        res.page_kb = PAGE_KB
        res.warning = (f"this kernel has no 2 MiB huge pages ({pools.root}): "
                       "big memory falls back to transparent huge pages")
        return res
    res.page_kb = kb        # cnk comes to the same choice by itself (compute/cnk/bigmem.c)
    try:
        if not root:
            _unprivileged(pools, kb, nranks, memory, res)
            return res
        with _locked(home) as book:
            reaped = _reap(home, book, pools)
            if reaped:
                res.notes += reaped + _ceiling(home, book, pools)[1]
            if block is not None:
                res.notes += _hold(book, pools, block, res)
            others: dict[int, int] = {}
            for bid, e in book.items():
                if bid != res.block:    # free pages the block keeps are its jobs' to take
                    for k, n in _counts(e, "pages").items():
                        others[k] = others.get(k, 0) + n
            book[rid] = {"pid": os.getpid(), "start": _start_time(os.getpid()), "pages": {}, "overcommit": {}}
            res.recorded = True
            try:
                left = nranks
                if kb == GIB_KB:
                    left -= _gigantic(pools, others, nranks, memory, why, res)
                if res.block is not None:   # the ranks on 2 MiB pages: their pages, at most, stay
                    res.keep_2m = left * pages_per_rank(memory, MIB2_KB)
                if left and pools.has(MIB2_KB):
                    _surplus(home, book, pools, left, nranks, memory, why if kb == MIB2_KB else "", res,
                             gigantic=kb == GIB_KB)
            finally:
                book[rid]["pages"] = {str(k): n for k, n in res.pages.items()}
                book[rid]["overcommit"] = {str(MIB2_KB): res.surplus} if res.surplus else {}
    except (OSError, ValueError) as e:
        res.warning = f"cannot reserve huge pages for big memory: {e}; cnk falls back to smaller pages"
    return res


def _hold(book: dict[str, dict[str, object]], pools: Pools, block: tuple[str, int], res: Reservation) -> list[str]:
    """Let the block keep the pages this job's ranks touch (its book entry is
    made when it first keeps some).  Notes to tell."""
    bid, pid = block
    notes = []
    entry = book.get(bid)
    if entry is not None and (entry.get("pid") != pid or not _alive(entry)):
        notes += _give_back(pools, _counts(book.pop(bid), "pages"), 0.0)       # an earlier boot's
        entry = None
    res.block, res.holder = bid, pid
    held = {k: n for k, n in _counts(entry or {}, "pages").items() if n}
    res.kept_2m = held.get(MIB2_KB, 0)
    notes.append("huge pages: the block keeps the pages its jobs touch until it is freed (it holds "
                 + (", ".join(f"{n} x {page_name(k)}" for k, n in sorted(held.items())) or "none yet")
                 + "; lattice init --hold-pages)")
    return notes


def _block_entry(book: dict[str, dict[str, object]], res: Reservation) -> dict[str, object] | None:
    """The book entry of the block that keeps res's pages, made if need be;
    None when its daemon is gone (freed meanwhile: the pages go back)."""
    assert res.block is not None
    entry = book.get(res.block) or {"pid": res.holder, "start": _start_time(res.holder), "pages": {}, "block": True}
    if not _alive(entry):
        return None
    book[res.block] = entry
    return entry


def _unprivileged(pools: Pools, kb: int, nranks: int, memory: int, res: Reservation) -> None:
    """Not root: nothing can be changed; say whether what is there covers the job."""
    room = pools.free(kb)
    if kb == MIB2_KB:
        room += max(0, pools.overcommit(kb) - pools.read(kb, "surplus_hugepages", 0))
    covered = min(nranks, room // pages_per_rank(memory, kb))
    if covered < nranks:
        res.warning = (f"not root: cannot make room for huge pages for big memory ({nranks - covered} of "
                       f"{nranks} ranks not covered by free {page_name(kb)} pages); cnk falls back to "
                       f"smaller pages")


def _gigantic(pools: Pools, others: dict[int, int], nranks: int, memory: int, why: str,
              res: Reservation) -> int:
    """1 GiB pages from the pool, grown for ranks the free pages do not cover:
    the number of ranks covered."""
    per = pages_per_rank(memory, GIB_KB)
    # pages other live runs added may still be free only because their ranks
    # have not mapped them yet: they are not ours to count
    free = max(0, pools.free(GIB_KB) - others.get(GIB_KB, 0))
    covered = min(nranks, free // per)
    if covered == nranks:
        res.notes.append(f"huge pages: 1 GiB ({why}); the free pages already hold big memory for "
                         f"{nranks} ranks")
        return covered
    ask = min((nranks - covered) * per, int(pools.mem_available() * LIMIT) // GIB)
    ask -= ask % per            # whole ranks only
    got = 0
    if ask > 0:
        before = pools.persistent(GIB_KB)
        got = max(0, pools.set_persistent(GIB_KB, before + ask) - before)
        spare = got % per       # pages no whole rank can use: give them back at once
        if spare:
            got = max(0, pools.set_persistent(GIB_KB, before + got - spare) - before)
        if got:
            res.pages[GIB_KB] = got
            res.notes.append(f"huge pages: 1 GiB ({why}): reserved {got} x 1 GiB (pool {before} -> "
                             f"{before + got}; given back after the job)")
    covered += got // per
    if covered < nranks:
        reason = ("the pool may take at most {}% of MemAvailable".format(int(LIMIT * 100))
                  if ask < (nranks - covered) * per else "the kernel would not grow the pool (memory too "
                  "fragmented?)")
        res.notes.append(f"huge pages: 1 GiB pages for {covered} of {nranks} ranks ({reason}); the others "
                         f"on 2 MiB pages")
    return covered


def _surplus(home: Path, book: dict[str, dict[str, object]], pools: Pools, left: int, nranks: int,
             memory: int, why: str, res: Reservation, gigantic: bool = False) -> None:
    """2 MiB pages for `left` ranks: raise the overcommit ceiling; pages taken
    at first touch, or reserved at start where a rank must be able to fall
    back (gigantic: cnk tries 1 GiB pages first, and only a reservation that
    fails tells it the pool has none; a ceiling that could not be raised)."""
    need = left * pages_per_rank(memory, MIB2_KB)
    size = need * (MIB2_KB << 10)
    room = int(pools.mem_available() * LIMIT) + pools.free(MIB2_KB) * (MIB2_KB << 10)
    res.surplus = need
    book[res.id]["overcommit"] = {str(MIB2_KB): need}
    change, problems = _ceiling(home, book, pools)
    ranks = (f"{left} rank{'s' if left > 1 else ''}" if left == nranks
             else f"the other {left} rank{'s' if left > 1 else ''}")
    ceiling = f"overcommit ceiling {change}" if change else f"overcommit ceiling {pools.overcommit(MIB2_KB)}"
    after = ("the block keeps those they touch" if res.block else "the kernel frees those when the ranks end")
    if (problems or gigantic) and size <= room:
        # a page the ranks touch could find none (SIGBUS): they reserve at
        # start, and cnk falls back to smaller pages if the pool says no
        res.notes.append(f"huge pages: 2 MiB{f' ({why})' if why else ''}: {ranks} reserve "
                         f"{need} x 2 MiB as they start, free pool pages first, then surplus pages from "
                         f"free memory ({ceiling}); {after}")
    elif size <= room:
        # Reserving at mmap would allocate every page of the node's memory before
        # main (6-8 ms a rank of 512 MiB, measured) and hold it whether the
        # program uses it or not; taken at first touch, pages come as the program
        # uses them, as any process's memory does.  The job fits the host (and
        # lattice.nodes.capacity refused, before launch, one that does not).
        res.at_start = False
        res.env.append(f"{ENV_RESERVE}=0")
        res.notes.append(f"huge pages: 2 MiB{f' ({why})' if why else ''}: {ranks} take up to {need} x 2 MiB "
                         f"at first touch, free pool pages first, then surplus pages from free memory "
                         f"({ceiling}); {after} (--env {ENV_RESERVE}=1: "
                         f"reserve them all at start)")
    else:
        res.at_start = False
        res.env.append(f"{ENV_RESERVE}=0")
        res.notes.append(f"huge pages: 2 MiB{f' ({why})' if why else ''}: {ranks} take their pages at "
                         f"first touch ({ceiling})")
        res.warning = (f"big memory of {left} ranks x {memory >> 20} MiB ({size / GIB:.1f} GiB) is more than "
                       f"this host can hold ({room / GIB:.1f} GiB: {int(LIMIT * 100)}% of MemAvailable and "
                       f"the free 2 MiB pages): huge pages are taken at first touch, and a rank that touches a "
                       f"page when the host has none left gets SIGBUS")
    if problems:    # the ranks get what the free pages and the old ceiling allow, then smaller pages
        res.warning = "; ".join([*problems, "cnk falls back to smaller pages"])


def keep_touched(res: Reservation) -> int:
    """While the job runs: turn the surplus 2 MiB pages its ranks touched into
    pool pages its block holds, up to the ranks' memory.  Called often, so a
    look at one file when there is nothing to do.  Returns the pages kept now."""
    if res.block is None or res.home is None or res.pools is None or not res.recorded or res.kept_2m >= res.keep_2m:
        return 0
    kb, pools = MIB2_KB, res.pools
    try:
        if pools.read(kb, "surplus_hugepages", 0) <= 0:
            return 0
        with _locked(res.home) as book:
            held = _counts(book.get(res.block, {}), "pages")
            n = min(pools.read(kb, "surplus_hugepages", 0), res.keep_2m - held.get(kb, 0))
            entry = _block_entry(book, res) if n > 0 else None
            if entry is None:
                return 0
            before = pools.persistent(kb)
            got = max(0, pools.set_persistent(kb, before + n) - before)
            held[kb] = res.kept_2m = held.get(kb, 0) + got
            entry["pages"] = {str(k): v for k, v in held.items()}
            return got
    except (OSError, ValueError):
        return 0        # the pages go back with the job, as without a block that keeps them


def block_entry(machine_home: Path, name: str) -> str:
    """The book's name for a block: the book is the host's, names repeat across machines."""
    return f"{machine_home.resolve()}:block-{name}"


def forget(home: Path, block: str, pools: Pools | None = None, wait: float = RELEASE_WAIT) -> list[str]:
    """The block is freed: give back the pages it kept; problems as messages."""
    if block not in _read_json(home / "hugepages.json"):
        return []                   # it kept none (a look without the lock: only its own runs add it)
    pools = pools or Pools()
    try:
        with _locked(home) as book:
            entry = book.pop(block, None)
            return _give_back(pools, _counts(entry, "pages"), wait) if entry else []
    except OSError as e:
        return [f"cannot give back the huge pages block {block} kept: {e}"]


def release(res: Reservation, wait: float = RELEASE_WAIT) -> list[str]:
    """Give back what `reserve` added (idempotent), or leave it with the block
    that keeps its pages; problems as messages."""
    if res.home is None or res.pools is None or not res.recorded:
        return []
    problems: list[str] = []
    try:
        with _locked(res.home) as book:
            entry = book.pop(res.id, None)
            added = _counts(entry, "pages") if entry else {}
            kept = _block_entry(book, res) if res.block and any(added.values()) else None
            if kept is not None:
                held = _counts(kept, "pages")
                for k, n in added.items():
                    held[k] = held.get(k, 0) + n
                kept["pages"] = {str(k): v for k, v in held.items()}
            else:
                problems += _give_back(res.pools, added, wait)
            problems += _ceiling(res.home, book, res.pools)[1]
    except OSError as e:
        problems.append(f"cannot give back huge pages: {e}")
    res.pages = {}
    res.surplus = 0
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
