"""lattice.nodes.hugepages: which page size a cnk job's big memory gets, what it asks
of the host (1 GiB pages added to the pool; 2 MiB pages through the overcommit
ceiling), and that exactly that is given back, also with several runs at once.

The pools live in a fake sysfs tree (hugepages-<kB>kB/{nr,free,resv,surplus,
nr_overcommit}_hugepages) and a fake /proc/meminfo, both passed to
lattice.nodes.hugepages.Pools.  FakeKernel adds what the kernel does: pages added
to a pool are free and come out of MemAvailable, a pool may refuse to grow
past what it can find, pages a process still holds stay until it lets go,
and a 2 MiB mapping reserves free pool pages first, then surplus pages up to
the ceiling, which go back to free memory when it is unmapped.
"""
from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lattice.nodes import hugepages
from lattice.nodes.hugepages import GIB_KB, MIB2_KB, PAGE_KB, Pools

ROOT = Path(__file__).resolve().parents[2]
GIB, MIB = 1 << 30, 1 << 20
FILES = ("nr_hugepages", "free_hugepages", "resv_hugepages", "surplus_hugepages", "nr_overcommit_hugepages")


class FakeKernel(Pools):
    """Pools over a fake tree, with a kernel's reactions."""

    def __init__(self, d: Path, avail: int = 24 * GIB, cap: dict[int, int] | None = None,
                 sizes: tuple[int, ...] = (GIB_KB, MIB2_KB)) -> None:
        root = d / "sys"
        for kb in sizes:
            p = root / f"hugepages-{kb}kB"
            p.mkdir(parents=True, exist_ok=True)
            for name in FILES:
                if not (p / name).exists():
                    (p / name).write_text("0\n")
        if not (d / "meminfo").exists():
            self._meminfo(d / "meminfo", avail)
        super().__init__(root, d / "meminfo")
        self.cap = cap or {}            # kB -> most pages the pool can hold
        self.writes: list[tuple[int, int]] = []         # nr_hugepages writes
        self.ceilings: list[tuple[int, int]] = []       # nr_overcommit_hugepages writes

    @staticmethod
    def _meminfo(path: Path, avail: int) -> None:
        path.write_text(f"MemTotal:  {avail // 512} kB\nMemFree: {avail // 1024} kB\nMemAvailable:  {avail // 1024} kB\n")

    def put(self, kb: int, name: str, n: int) -> None:
        self.path(kb, name).write_text(f"{n}\n")

    def get(self, kb: int, name: str) -> int:
        return self.read(kb, name)

    def take_memory(self, nbytes: int) -> None:
        self._meminfo(self.meminfo, self.mem_available() - nbytes)

    def set_persistent(self, kb: int, n: int) -> int:
        self.writes.append((kb, n))
        nr, free, surplus = self.get(kb, "nr_hugepages"), self.get(kb, "free_hugepages"), self.get(kb, "surplus_hugepages")
        used = nr - free
        persistent = nr - surplus
        turned = min(surplus, max(0, n - persistent))     # surplus pages become persistent first, as they are
        surplus, persistent = surplus - turned, persistent + turned
        self.put(kb, "surplus_hugepages", surplus)
        n = max(n, used - surplus)      # pages in use stay until their process lets go
        n = min(n, self.cap.get(kb, 1 << 40))
        self.take_memory((n - persistent) * kb * 1024)
        self.put(kb, "nr_hugepages", n + surplus)
        self.put(kb, "free_hugepages", n + surplus - used)
        return self.persistent(kb)

    def set_overcommit(self, kb: int, n: int) -> int:
        self.ceilings.append((kb, n))
        self.put(kb, "nr_overcommit_hugepages", n)
        return n

    def use(self, kb: int, n: int) -> None:
        """A process maps n free pages."""
        self.put(kb, "free_hugepages", self.get(kb, "free_hugepages") - n)

    def unuse(self, kb: int, n: int) -> None:
        self.put(kb, "free_hugepages", self.get(kb, "free_hugepages") + n)

    def map_2m(self, n: int) -> bool:
        """A rank's reserved mapping of n 2 MiB pages: free pool pages, then surplus pages."""
        kb = MIB2_KB
        short = max(0, n - self.free(kb))
        if self.get(kb, "surplus_hugepages") + short > self.overcommit(kb):
            return False
        for name in ("nr_hugepages", "free_hugepages", "surplus_hugepages"):
            self.put(kb, name, self.get(kb, name) + short)
        self.put(kb, "resv_hugepages", self.get(kb, "resv_hugepages") + n)
        self.take_memory(short * 2 * MIB)
        return True

    def unmap_2m(self, n: int) -> None:
        """Its pages go back: surplus pages to free memory, the rest to the pool."""
        kb = MIB2_KB
        gone = min(n, self.get(kb, "surplus_hugepages"))
        for name in ("nr_hugepages", "free_hugepages", "surplus_hugepages"):
            self.put(kb, name, self.get(kb, name) - gone)
        self.put(kb, "resv_hugepages", self.get(kb, "resv_hugepages") - n)
        self.take_memory(-gone * 2 * MIB)


@pytest.fixture
def k(tmp_path: Path) -> FakeKernel:
    return FakeKernel(tmp_path)


def reserve(k: FakeKernel, home: Path, rid: str, nranks: int, memory: int, **kw: object) -> hugepages.Reservation:
    return hugepages.reserve(home, rid, nranks, memory, pools=k, root=True, **kw)  # type: ignore[arg-type]


def ceiling_state(home: Path) -> dict[str, object]:
    p = home / hugepages.CEILING_FILE
    return json.loads(p.read_text()) if p.exists() else {}


# --- which page size ------------------------------------------------------------------

@pytest.mark.parametrize("memory, fixed, largest, has_1g, kb, why", [
    (512 * MIB, False, GIB_KB, True, MIB2_KB, "512 MiB per rank is not a whole number of GiB"),
    (128 * MIB, False, GIB_KB, True, MIB2_KB, "not a whole number"),
    (3 * GIB // 2, False, GIB_KB, True, MIB2_KB, "1536 MiB per rank is not a whole number of GiB"),
    (GIB, False, GIB_KB, True, GIB_KB, "1 GiB per rank fills whole 1 GiB pages"),
    (2 * GIB, False, GIB_KB, True, GIB_KB, "2 GiB per rank fills"),
    (GIB, True, GIB_KB, True, MIB2_KB, "fixed address"),
    (GIB, False, GIB_KB, False, MIB2_KB, "no 1 GiB pages"),
    (GIB, False, MIB2_KB, True, MIB2_KB, "LATTICE_BIGMEM_PAGES=2M"),
    (GIB, False, PAGE_KB, True, PAGE_KB, "LATTICE_BIGMEM_PAGES=4K"),
])
def test_page_size_fits_the_node(memory: int, fixed: bool, largest: int, has_1g: bool, kb: int, why: str) -> None:
    got, reason = hugepages.choose(memory, fixed, largest, has_1g)
    assert got == kb and why in reason


@pytest.mark.parametrize("memory, kb, pages", [
    (GIB, GIB_KB, 1), (2 * GIB, GIB_KB, 2), (GIB, MIB2_KB, 512), (512 * MIB, MIB2_KB, 256),
    (3 * MIB, MIB2_KB, 2), (MIB, MIB2_KB, 1),
])
def test_pages_per_rank(memory: int, kb: int, pages: int) -> None:
    assert hugepages.pages_per_rank(memory, kb) == pages


def test_parse_page() -> None:
    assert [hugepages.parse_page(t) for t in ("1G", "2m", "4K")] == [GIB_KB, MIB2_KB, PAGE_KB]
    with pytest.raises(ValueError, match="1G, 2M or 4K"):
        hugepages.parse_page("16M")


# --- 2 MiB pages: the overcommit ceiling -------------------------------------------------

def test_2m_job_raises_the_ceiling_only_and_puts_it_back(k: FakeKernel, tmp_path: Path) -> None:
    home = tmp_path / "home"
    res = reserve(k, home, "job-1", nranks=16, memory=512 * MIB)
    # pages at first touch: reserving them at mmap would allocate 8 GiB before main
    assert res.env == ["LATTICE_BIGMEM_RESERVE=0"] and res.page_kb == MIB2_KB and not res.at_start
    assert res.warning is None and any("at first touch" in n and "RESERVE=1" in n for n in res.notes), res.notes
    assert res.surplus == 16 * 256 and res.pages == {}
    assert k.writes == [], "no pool is resized"
    assert k.overcommit(MIB2_KB) == 4096
    assert any("2 MiB (512 MiB per rank is not a whole number of GiB)" in n and "0 -> 4096" in n
               for n in res.notes), res.notes
    # the ranks reserve their pages as surplus pages, and the kernel frees them as they end
    assert all(k.map_2m(256) for _ in range(16))
    assert k.get(MIB2_KB, "surplus_hugepages") == 4096
    for _ in range(16):
        k.unmap_2m(256)
    assert hugepages.release(res) == []
    assert k.overcommit(MIB2_KB) == 0 and ceiling_state(home) == {}
    assert json.loads((home / "hugepages.json").read_text()) == {}
    assert hugepages.release(res) == [] and k.overcommit(MIB2_KB) == 0     # twice is harmless


def test_ceiling_counts_every_live_run_and_comes_back_to_its_base(k: FakeKernel, tmp_path: Path) -> None:
    home = tmp_path / "home"
    k.put(MIB2_KB, "nr_overcommit_hugepages", 10)       # the administrator's
    a = reserve(k, home, "a", nranks=2, memory=512 * MIB)
    b = reserve(k, home, "b", nranks=1, memory=256 * MIB)
    assert k.overcommit(MIB2_KB) == 10 + 512 + 128
    assert hugepages.release(a) == [] and k.overcommit(MIB2_KB) == 10 + 128
    assert hugepages.release(b) == [] and k.overcommit(MIB2_KB) == 10
    assert ceiling_state(home) == {}


def test_a_ceiling_someone_else_changed_is_theirs(k: FakeKernel, tmp_path: Path) -> None:
    home = tmp_path / "home"
    a = reserve(k, home, "a", nranks=2, memory=512 * MIB)
    assert k.overcommit(MIB2_KB) == 512
    k.put(MIB2_KB, "nr_overcommit_hugepages", 1000)     # the administrator, meanwhile
    b = reserve(k, home, "b", nranks=1, memory=256 * MIB)
    assert k.overcommit(MIB2_KB) == 1000 + 512 + 128
    hugepages.release(a), hugepages.release(b)
    assert k.overcommit(MIB2_KB) == 1000, "their value, not ours, is what comes back"


def test_other_machines_pages_are_not_touched(k: FakeKernel, tmp_path: Path) -> None:
    """Another machine (or anyone) holds 2 MiB and 1 GiB pool pages: a 2 MiB job
    starts and ends without changing a pool, and its ranks cannot take pages
    somebody has reserved."""
    k.put(MIB2_KB, "nr_hugepages", 300), k.put(MIB2_KB, "free_hugepages", 300), k.put(MIB2_KB, "resv_hugepages", 300)
    k.put(GIB_KB, "nr_hugepages", 3), k.put(GIB_KB, "free_hugepages", 1)
    res = reserve(k, tmp_path / "home", "j", nranks=4, memory=512 * MIB)
    assert all(k.map_2m(256) for _ in range(4))
    assert k.get(MIB2_KB, "surplus_hugepages") == 1024, "all from free memory: the others' pages are reserved"
    for _ in range(4):
        k.unmap_2m(256)
    hugepages.release(res)
    assert k.writes == []
    assert [k.get(MIB2_KB, f) for f in ("nr_hugepages", "free_hugepages", "resv_hugepages")] == [300, 300, 300]
    assert (k.get(GIB_KB, "nr_hugepages"), k.get(GIB_KB, "free_hugepages")) == (3, 1)


def test_a_job_bigger_than_the_host_takes_pages_at_first_touch(tmp_path: Path) -> None:
    k = FakeKernel(tmp_path, avail=8 * GIB)             # 6 GiB may be reserved
    res = reserve(k, tmp_path / "home", "big", nranks=256, memory=128 * MIB)    # 32 GiB
    assert res.env == ["LATTICE_BIGMEM_RESERVE=0"] and not res.at_start
    assert res.warning and "first touch" in res.warning and "32.0 GiB" in res.warning and "6.0 GiB" in res.warning
    assert k.overcommit(MIB2_KB) == 256 * 64, "the ranks may still take each page they touch"
    hugepages.release(res)
    assert k.overcommit(MIB2_KB) == 0


def test_free_2m_pool_pages_count_as_room(tmp_path: Path) -> None:
    k = FakeKernel(tmp_path, avail=GIB)
    k.put(MIB2_KB, "nr_hugepages", 2048), k.put(MIB2_KB, "free_hugepages", 2048)   # 4 GiB, free
    res = reserve(k, tmp_path / "home", "j", nranks=4, memory=512 * MIB)
    assert res.warning is None and any("take up to 1024 x 2 MiB at first touch" in n for n in res.notes), res.notes


def test_user_asks_for_4k(k: FakeKernel, tmp_path: Path) -> None:
    res = reserve(k, tmp_path / "home", "j", nranks=2, memory=GIB, largest=PAGE_KB)
    assert res.page_kb == PAGE_KB and res.env == [] and k.writes == [] and k.ceilings == []
    assert not res.recorded and any("transparent" in n for n in res.notes)


def test_user_caps_1g_node_at_2m(k: FakeKernel, tmp_path: Path) -> None:
    res = reserve(k, tmp_path / "home", "j", nranks=2, memory=GIB, largest=MIB2_KB)
    assert res.page_kb == MIB2_KB and k.writes == [] and k.overcommit(MIB2_KB) == 1024
    hugepages.release(res)


# --- 1 GiB pages: the pool ---------------------------------------------------------------

def test_1g_node_grows_the_1g_pool_and_gives_back(k: FakeKernel, tmp_path: Path) -> None:
    home = tmp_path / "home"
    res = reserve(k, home, "job-1", nranks=16, memory=GIB)
    assert res.env == [] and res.page_kb == GIB_KB
    assert res.pages == {GIB_KB: 16} and res.surplus == 0 and res.warning is None
    assert k.persistent(GIB_KB) == 16 and k.overcommit(MIB2_KB) == 0
    assert any("1 GiB (1 GiB per rank fills whole 1 GiB pages): reserved 16 x 1 GiB" in n for n in res.notes)
    assert hugepages.release(res) == []
    assert k.persistent(GIB_KB) == 0
    assert json.loads((home / "hugepages.json").read_text()) == {}


def test_fixed_address_program_goes_on_2m(k: FakeKernel, tmp_path: Path) -> None:
    res = reserve(k, tmp_path / "home", "j", nranks=2, memory=GIB, fixed_address=True)
    assert res.page_kb == MIB2_KB and k.writes == [] and k.overcommit(MIB2_KB) == 1024
    hugepages.release(res)
    assert k.overcommit(MIB2_KB) == 0


def test_free_1g_pages_already_there_are_used_first(k: FakeKernel, tmp_path: Path) -> None:
    # 3 ranks' worth of free 1 GiB pages (2 more are reserved by someone's mapping)
    k.put(GIB_KB, "nr_hugepages", 5), k.put(GIB_KB, "free_hugepages", 5), k.put(GIB_KB, "resv_hugepages", 2)
    res = reserve(k, tmp_path / "home", "a", nranks=3, memory=GIB)
    assert res.pages == {} and res.surplus == 0 and k.writes == [] and k.ceilings == []
    # a fourth rank needs one more page: the pool grows by one
    res2 = reserve(k, tmp_path / "home2", "b", nranks=4, memory=GIB)
    assert res2.pages == {GIB_KB: 1} and k.persistent(GIB_KB) == 6
    hugepages.release(res2)
    assert k.persistent(GIB_KB) == 5


def test_1g_pool_cannot_grow_so_2m(tmp_path: Path) -> None:
    k = FakeKernel(tmp_path, cap={GIB_KB: 0})
    res = reserve(k, tmp_path / "home", "j", nranks=2, memory=GIB)
    assert res.pages == {} and res.surplus == 1024 and res.at_start
    assert res.page_kb == GIB_KB and res.env == [], "cnk still tries 1 GiB pages first"
    assert any("1 GiB pages for 0 of 2 ranks" in n and "would not grow" in n for n in res.notes), res.notes
    assert k.overcommit(MIB2_KB) == 1024
    hugepages.release(res)
    assert (k.persistent(GIB_KB), k.overcommit(MIB2_KB)) == (0, 0)


def test_partial_1g_growth_keeps_whole_ranks_and_the_rest_go_on_2m(tmp_path: Path) -> None:
    # 2 GiB per rank: 2 pages of 1 GiB each; the kernel finds only 3 pages
    k = FakeKernel(tmp_path, cap={GIB_KB: 3})
    res = reserve(k, tmp_path / "home", "j", nranks=2, memory=2 * GIB)
    assert res.pages == {GIB_KB: 2}, "one rank on 1 GiB pages; the odd page given back"
    assert res.surplus == 1024 and k.overcommit(MIB2_KB) == 1024
    assert any("the other 1 rank reserve" in n for n in res.notes), res.notes
    hugepages.release(res)
    assert (k.persistent(GIB_KB), k.overcommit(MIB2_KB)) == (0, 0)


def test_1g_growth_within_75_percent_of_memavailable(tmp_path: Path) -> None:
    k = FakeKernel(tmp_path, avail=8 * GIB)             # 6 GiB may be taken
    res = reserve(k, tmp_path / "home", "big", nranks=16, memory=GIB)
    assert res.pages == {GIB_KB: 6}
    assert any("6 of 16 ranks" in n and "75%" in n for n in res.notes), res.notes
    # the other 10 ranks (10 GiB) do not fit in what is left: their 2 MiB pages come at first touch
    assert res.surplus == 10 * 512 and not res.at_start and res.warning and "first touch" in res.warning
    hugepages.release(res)
    assert (k.persistent(GIB_KB), k.overcommit(MIB2_KB)) == (0, 0)


# --- without root, without pools -----------------------------------------------------------

def test_not_root_warns_once_and_writes_nothing(k: FakeKernel, tmp_path: Path) -> None:
    res = hugepages.reserve(tmp_path / "home", "j", 2, 512 * MIB, pools=k, root=False)
    assert k.writes == [] and k.ceilings == [] and res.env == []
    assert res.warning and res.warning.startswith("not root") and "2 of 2 ranks" in res.warning
    assert not (tmp_path / "home").exists(), "no bookkeeping without a reservation"
    k.put(MIB2_KB, "nr_overcommit_hugepages", 512)      # the administrator allows surplus pages
    assert hugepages.reserve(tmp_path / "home", "j", 2, 512 * MIB, pools=k, root=False).warning is None


def test_no_pools_at_all(tmp_path: Path) -> None:
    k = FakeKernel(tmp_path, sizes=())
    res = reserve(k, tmp_path / "home", "j", nranks=1, memory=GIB)
    assert res.pages == {} and res.warning and "no 2 MiB huge pages" in res.warning


# --- bookkeeping ------------------------------------------------------------------

def test_two_runs_release_only_their_own_1g_pages(k: FakeKernel, tmp_path: Path) -> None:
    home = tmp_path / "home"
    a = reserve(k, home, "job-1", nranks=2, memory=GIB)
    # a's pages are free until its ranks map them: b must not count them as its own
    b = reserve(k, home, "job-2", nranks=3, memory=GIB)
    assert (a.pages, b.pages, k.persistent(GIB_KB)) == ({GIB_KB: 2}, {GIB_KB: 3}, 5)
    book = json.loads((home / "hugepages.json").read_text())
    assert {r: e["pages"] for r, e in book.items()} == {"job-1": {str(GIB_KB): 2}, "job-2": {str(GIB_KB): 3}}
    k.use(GIB_KB, 5)                                    # both jobs run
    k.put(GIB_KB, "nr_hugepages", k.get(GIB_KB, "nr_hugepages") + 10)     # the administrator adds 10
    k.put(GIB_KB, "free_hugepages", 10)
    k.unuse(GIB_KB, 2)                                  # a ends first
    assert hugepages.release(a) == []
    assert k.persistent(GIB_KB) == 13, "a took back its 2, not b's 3 and not the administrator's 10"
    k.unuse(GIB_KB, 3)
    assert hugepages.release(b) == []
    assert k.persistent(GIB_KB) == 10
    assert json.loads((home / "hugepages.json").read_text()) == {}


def test_pages_still_held_are_reported(tmp_path: Path) -> None:
    k = FakeKernel(tmp_path)
    res = reserve(k, tmp_path / "home", "j", nranks=2, memory=GIB)
    k.use(GIB_KB, 2)                                    # a rank has not let go yet
    t0 = time.monotonic()
    problems = hugepages.release(res, wait=0.3)
    assert time.monotonic() - t0 >= 0.25, "it waited for the pages"
    assert problems and "still" in problems[0]


def test_a_dead_run_s_pages_and_ceiling_are_given_back_by_the_next(k: FakeKernel, tmp_path: Path) -> None:
    home = tmp_path / "home"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    k.put(GIB_KB, "nr_hugepages", 4), k.put(GIB_KB, "free_hugepages", 4)
    k.put(MIB2_KB, "nr_overcommit_hugepages", 512)
    home.mkdir()
    (home / "hugepages.json").write_text(json.dumps(
        {"job-7": {"pid": int(dead.stdout), "start": "1", "pages": {str(GIB_KB): 4}},
         "job-6": {"pid": int(dead.stdout), "start": "1", "pages": {}, "overcommit": {str(MIB2_KB): 512}}}))
    (home / hugepages.CEILING_FILE).write_text(json.dumps({str(MIB2_KB): {"base": 0, "set": 512}}))
    res = reserve(k, home, "job-8", nranks=1, memory=GIB)
    assert any("ended run (job-7)" in n for n in res.notes) and any("ended run (job-6)" in n for n in res.notes)
    assert k.persistent(GIB_KB) == 1 and res.pages == {GIB_KB: 1}
    assert k.overcommit(MIB2_KB) == 0 and ceiling_state(home) == {}
    assert set(json.loads((home / "hugepages.json").read_text())) == {"job-8"}
    hugepages.release(res)
    assert k.persistent(GIB_KB) == 0


def test_old_book_entries_are_understood(k: FakeKernel, tmp_path: Path) -> None:
    """A book written by an older lattice (no "overcommit") on the same host."""
    home = tmp_path / "home"
    home.mkdir()
    me = {"pid": os.getpid(), "start": hugepages._start_time(os.getpid())}
    (home / "hugepages.json").write_text(json.dumps({"old": {**me, "pages": {str(MIB2_KB): 300}}}))
    res = reserve(k, home, "new", nranks=1, memory=512 * MIB)
    assert k.overcommit(MIB2_KB) == 256
    hugepages.release(res)
    assert k.overcommit(MIB2_KB) == 0 and set(json.loads((home / "hugepages.json").read_text())) == {"old"}


def _worker(d: str, home: str, rid: str, memory: int, go: str, done: str) -> None:
    k = FakeKernel(Path(d))
    res = hugepages.reserve(Path(home), rid, 1, memory, pools=k, root=True)
    Path(done, rid).write_text(json.dumps([res.pages, res.surplus]))
    while not Path(go).exists():
        time.sleep(0.01)
    hugepages.release(res)


# --- pages the block keeps ---------------------------------------------------------------

def alive_pid() -> int:
    """A daemon of the block: this test process lives as long as the test."""
    return os.getpid()


def test_the_block_keeps_what_its_jobs_touched_and_gives_it_back_when_freed(k: FakeKernel, tmp_path: Path) -> None:
    home, block = tmp_path / "home", ("m:block-B", alive_pid())
    res = reserve(k, home, "job-1", nranks=2, memory=512 * MIB, block=block)
    assert any("the block keeps the pages" in n and "none yet" in n for n in res.notes), res.notes
    assert res.keep_2m == 512 and "m:block-B" not in json.loads((home / "hugepages.json").read_text())
    assert hugepages.keep_touched(res) == 0, "nothing touched yet"
    assert k.map_2m(100) and k.map_2m(60)                 # the ranks touch 160 pages, as surplus
    assert hugepages.keep_touched(res) == 160
    assert k.persistent(MIB2_KB) == 160 and k.get(MIB2_KB, "surplus_hugepages") == 0
    k.unmap_2m(100), k.unmap_2m(60)
    assert k.free(MIB2_KB) == 160, "the ranks ended: their pages went to the pool, not to free memory"
    assert hugepages.release(res) == []
    book = json.loads((home / "hugepages.json").read_text())
    assert set(book) == {"m:block-B"} and book["m:block-B"]["pages"] == {str(MIB2_KB): 160}
    assert k.overcommit(MIB2_KB) == 0, "the ceiling is back: the block's pages are pool pages"
    # the block's next job finds them in the pool and keeps no more than its ranks' memory
    res = reserve(k, home, "job-2", nranks=1, memory=512 * MIB, block=block)
    assert any("it holds 160 x 2 MiB" in n for n in res.notes), res.notes
    assert k.map_2m(256) and k.get(MIB2_KB, "surplus_hugepages") == 96, "pool pages first"
    assert hugepages.keep_touched(res) == 96 and k.persistent(MIB2_KB) == 256
    assert hugepages.keep_touched(res) == 0
    k.unmap_2m(256)
    hugepages.release(res)
    assert hugepages.forget(home, "m:block-B", pools=k) == []
    assert k.persistent(MIB2_KB) == 0 and json.loads((home / "hugepages.json").read_text()) == {}
    assert hugepages.forget(home, "m:block-B", pools=k) == [], "twice is harmless"


def test_the_block_keeps_at_most_its_ranks_memory(k: FakeKernel, tmp_path: Path) -> None:
    """Surplus pages are counted host-wide: another machine's job holds 1000."""
    k.put(MIB2_KB, "nr_overcommit_hugepages", 1000)
    assert k.map_2m(1000)
    res = reserve(k, tmp_path / "home", "job-1", nranks=1, memory=128 * MIB, block=("m:block-B", alive_pid()))
    assert hugepages.keep_touched(res) == 64 and k.persistent(MIB2_KB) == 64


def test_without_a_block_that_keeps_them_nothing_is_kept(k: FakeKernel, tmp_path: Path) -> None:
    res = reserve(k, tmp_path / "home", "job-1", nranks=1, memory=128 * MIB)
    assert k.map_2m(64)
    assert hugepages.keep_touched(res) == 0 and k.persistent(MIB2_KB) == 0


def test_a_block_freed_under_its_job_keeps_nothing(k: FakeKernel, tmp_path: Path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    res = reserve(k, tmp_path / "home", "job-1", nranks=1, memory=128 * MIB, block=("m:block-B", int(gone.stdout)))
    assert k.map_2m(64)
    assert hugepages.keep_touched(res) == 0 and k.persistent(MIB2_KB) == 0


def test_a_block_no_longer_booted_is_reaped_by_the_next_run(k: FakeKernel, tmp_path: Path) -> None:
    home = tmp_path / "home"
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    k.set_persistent(MIB2_KB, 100)
    home.mkdir()
    (home / "hugepages.json").write_text(json.dumps(
        {"old:block-B": {"pid": int(gone.stdout), "start": "1", "pages": {str(MIB2_KB): 100}, "block": True}}))
    res = reserve(k, home, "job-1", nranks=1, memory=128 * MIB)
    assert any("a block no longer booted (old:block-B)" in n for n in res.notes), res.notes
    assert k.persistent(MIB2_KB) == 0


def test_a_rebooted_block_gives_back_what_its_earlier_boot_kept(k: FakeKernel, tmp_path: Path) -> None:
    home = tmp_path / "home"
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        k.set_persistent(MIB2_KB, 100)
        home.mkdir()
        start = hugepages._start_time(helper.pid)
        (home / "hugepages.json").write_text(json.dumps(
            {"m:block-B": {"pid": helper.pid, "start": start, "pages": {str(MIB2_KB): 100}, "block": True}}))
        res = reserve(k, home, "job-1", nranks=1, memory=128 * MIB, block=("m:block-B", alive_pid()))
        assert k.persistent(MIB2_KB) == 0 and any("none yet" in n for n in res.notes), res.notes
    finally:
        helper.kill()
        helper.wait()


def test_the_block_keeps_its_1g_pages_and_other_blocks_keep_theirs(k: FakeKernel, tmp_path: Path) -> None:
    home = tmp_path / "home"
    a = reserve(k, home, "job-1", nranks=1, memory=GIB, block=("m:block-A", alive_pid()))
    assert a.pages == {GIB_KB: 1}
    k.put(MIB2_KB, "nr_overcommit_hugepages", 100)
    assert k.map_2m(100)        # another machine's job: its rank on 2 MiB pages
    assert hugepages.keep_touched(a) == 0, "a rank on a 1 GiB page keeps no 2 MiB pages besides"
    k.unmap_2m(100)
    hugepages.release(a)
    assert k.persistent(GIB_KB) == 1 and k.free(GIB_KB) == 1, "block A keeps its page, free in the pool"
    # block B's job does not count A's free page as its own: the pool grows
    b = reserve(k, home, "job-2", nranks=1, memory=GIB, block=("m:block-B", alive_pid()))
    assert b.pages == {GIB_KB: 1} and k.persistent(GIB_KB) == 2
    hugepages.release(b)
    # A's next job finds its page
    a2 = reserve(k, home, "job-3", nranks=1, memory=GIB, block=("m:block-A", alive_pid()))
    assert a2.pages == {} and any("already hold" in n for n in a2.notes), a2.notes
    hugepages.release(a2)
    assert hugepages.forget(home, "m:block-A", pools=k) == [] and k.persistent(GIB_KB) == 1
    assert hugepages.forget(home, "m:block-B", pools=k) == [] and k.persistent(GIB_KB) == 0


def test_concurrent_runs_under_the_lock(tmp_path: Path) -> None:
    """Six processes reserve at once (three on 1 GiB pages, three on 2 MiB),
    then release at once: the 1 GiB pool grows by exactly three, the ceiling
    by the three 2 MiB jobs, and both return to where they were."""
    k = FakeKernel(tmp_path)
    k.put(GIB_KB, "nr_hugepages", 1)                   # someone else's page, in use
    k.put(MIB2_KB, "nr_overcommit_hugepages", 7)
    home, go, done = tmp_path / "home", tmp_path / "go", tmp_path / "done"
    done.mkdir()
    ctx = multiprocessing.get_context("fork")
    jobs = [(f"job-{i}", GIB if i % 2 else 256 * MIB) for i in range(6)]
    procs = [ctx.Process(target=_worker, args=(str(tmp_path), str(home), rid, mem, str(go), str(done)))
             for rid, mem in jobs]
    for p in procs:
        p.start()
    for _ in range(500):
        if len(os.listdir(done)) == 6:
            break
        time.sleep(0.02)
    got = {f: json.loads((done / f).read_text()) for f in sorted(os.listdir(done))}
    assert got == {rid: ([{str(GIB_KB): 1}, 0] if mem == GIB else [{}, 128]) for rid, mem in jobs}
    assert k.persistent(GIB_KB) == 4 and k.overcommit(MIB2_KB) == 7 + 3 * 128
    go.touch()
    for p in procs:
        p.join(20)
        assert p.exitcode == 0
    assert k.persistent(GIB_KB) == 1 and k.overcommit(MIB2_KB) == 7
    assert json.loads((home / "hugepages.json").read_text()) == {}


# --- which programs may use 1 GiB pages -----------------------------------------------

def test_fixed_address_detection(tmp_path: Path) -> None:
    ex = ROOT / "build" / "examples" / "cnk"
    if not (ex / "stdio_malloc-static").exists():
        pytest.skip("examples not built (make)")
    assert hugepages.fixed_below_1g(str(ex / "stdio_malloc-static"))       # ET_EXEC at 0x400000
    assert not hugepages.fixed_below_1g(str(ex / "stdio_malloc"))          # PIE
    assert not hugepages.fixed_below_1g(str(ex / "stdio_malloc-spie"))     # static PIE
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\n")
    assert not hugepages.fixed_below_1g(str(script))
    assert not hugepages.fixed_below_1g(str(tmp_path / "missing"))


def test_a_surplus_page_freed_while_the_pool_is_read_does_not_grow_it(k: FakeKernel, tmp_path: Path) -> None:
    """A rank frees a surplus page between the reads of nr_hugepages and
    surplus_hugepages: the pool's own count must not come out one too high
    (written back, it would grow the pool by a page nobody booked)."""
    k.put(MIB2_KB, "nr_overcommit_hugepages", 10)
    k.set_persistent(MIB2_KB, 4)
    assert k.map_2m(10)                          # 4 pool pages and 6 surplus ones
    read = k.read
    freed = []

    def racing_read(kb: int, name: str, missing: int | None = None) -> int:
        if name == "surplus_hugepages" and not freed:
            freed.append(1)
            k.unmap_2m(1)                        # both nr_hugepages and surplus_hugepages drop
        return read(kb, name, missing)

    k.read = racing_read                         # type: ignore[method-assign]
    assert k.persistent(MIB2_KB) == 4
