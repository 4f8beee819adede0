"""lattice.hugepages: how many huge pages a cnk job adds to which pool, and
that exactly those are given back, also with several runs at once.

The pools live in a fake sysfs tree (hugepages-<kB>kB/{nr,free,resv}_hugepages)
and a fake /proc/meminfo, both passed to lattice.hugepages.Pools.  FakeKernel
adds what the kernel does when nr_hugepages is written: new pages are free,
a pool may refuse to grow past what it can find, and pages a process still
holds stay until it lets go.
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

from lattice import hugepages
from lattice.hugepages import GIB_KB, MIB2_KB, Pools

ROOT = Path(__file__).resolve().parents[2]
GIB, MIB = 1 << 30, 1 << 20


class FakeKernel(Pools):
    """Pools over a fake tree, with a kernel's reactions to nr_hugepages writes."""

    def __init__(self, d: Path, avail: int = 24 * GIB, cap: dict[int, int] | None = None,
                 sizes: tuple[int, ...] = (GIB_KB, MIB2_KB)) -> None:
        root = d / "sys"
        for kb in sizes:
            p = root / f"hugepages-{kb}kB"
            p.mkdir(parents=True, exist_ok=True)
            for name in ("nr_hugepages", "free_hugepages", "resv_hugepages"):
                (p / name).write_text("0\n")
        (d / "meminfo").write_text(f"MemTotal:  {avail // 512} kB\nMemFree: {avail // 1024} kB\n"
                                   f"MemAvailable:  {avail // 1024} kB\n")
        super().__init__(root, d / "meminfo")
        self.cap = cap or {}            # kB -> most pages the pool can hold
        self.writes: list[tuple[int, int]] = []

    def put(self, kb: int, name: str, n: int) -> None:
        self.path(kb, name).write_text(f"{n}\n")

    def set_nr(self, kb: int, n: int) -> int:
        self.writes.append((kb, n))
        nr, free = self.nr(kb), self.read(kb, "free_hugepages")
        used = nr - free
        n = max(n, used)                # pages in use stay until their process lets go
        n = min(n, self.cap.get(kb, 1 << 40))
        self.put(kb, "nr_hugepages", n)
        self.put(kb, "free_hugepages", n - used)
        return n

    def use(self, kb: int, n: int) -> None:
        """A process maps n free pages."""
        self.put(kb, "free_hugepages", self.read(kb, "free_hugepages") - n)

    def unuse(self, kb: int, n: int) -> None:
        self.put(kb, "free_hugepages", self.read(kb, "free_hugepages") + n)


@pytest.fixture
def k(tmp_path: Path) -> FakeKernel:
    return FakeKernel(tmp_path)


def reserve(k: FakeKernel, home: Path, rid: str, nranks: int, memory: int, **kw: object) -> hugepages.Reservation:
    return hugepages.reserve(home, rid, nranks, memory, pools=k, root=True, **kw)  # type: ignore[arg-type]


# --- arithmetic ---------------------------------------------------------------------

@pytest.mark.parametrize("memory, kb, pages", [
    (GIB, GIB_KB, 1), (512 * MIB, GIB_KB, 1), (GIB + 1, GIB_KB, 2), (3 * GIB, GIB_KB, 3),
    (GIB, MIB2_KB, 512), (512 * MIB, MIB2_KB, 256), (3 * MIB, MIB2_KB, 2), (MIB, MIB2_KB, 1),
])
def test_pages_per_rank(memory: int, kb: int, pages: int) -> None:
    assert hugepages.pages_per_rank(memory, kb) == pages


def test_grows_the_1g_pool_and_gives_back(k: FakeKernel, tmp_path: Path) -> None:
    res = reserve(k, tmp_path / "home", "job-1", nranks=16, memory=GIB)
    assert res.pages == {GIB_KB: 16} and res.warning is None
    assert k.nr(GIB_KB) == 16 and k.nr(MIB2_KB) == 0
    assert any("16 x 1 GiB" in n for n in res.notes)
    assert hugepages.release(res) == []
    assert (k.nr(GIB_KB), k.nr(MIB2_KB)) == (0, 0)
    assert json.loads((tmp_path / "home" / "hugepages.json").read_text()) == {}
    assert hugepages.release(res) == [] and k.nr(GIB_KB) == 0          # twice is harmless


def test_fixed_address_program_uses_the_2m_pool(k: FakeKernel, tmp_path: Path) -> None:
    res = reserve(k, tmp_path / "home", "job-1", nranks=2, memory=512 * MIB, fixed_address=True)
    assert res.pages == {MIB2_KB: 512} and k.nr(GIB_KB) == 0 and k.nr(MIB2_KB) == 512
    hugepages.release(res)
    assert k.nr(MIB2_KB) == 0


def test_free_pages_already_there_are_used_first(k: FakeKernel, tmp_path: Path) -> None:
    # 3 ranks' worth of free 1 GiB pages (2 more are reserved by someone's mapping), 1 rank in 2 MiB pages
    k.put(GIB_KB, "nr_hugepages", 5), k.put(GIB_KB, "free_hugepages", 5), k.put(GIB_KB, "resv_hugepages", 2)
    k.put(MIB2_KB, "nr_hugepages", 600), k.put(MIB2_KB, "free_hugepages", 600)
    res = reserve(k, tmp_path / "home", "a", nranks=4, memory=GIB)
    assert res.pages == {} and res.warning is None and k.writes == []
    # a fifth rank needs one more page: the 1 GiB pool grows by one
    res2 = reserve(k, tmp_path / "home2", "b", nranks=5, memory=GIB)
    assert res2.pages == {GIB_KB: 1} and k.nr(GIB_KB) == 6
    hugepages.release(res2)
    assert k.nr(GIB_KB) == 5 and k.nr(MIB2_KB) == 600


def test_at_most_75_percent_of_memavailable(tmp_path: Path) -> None:
    k = FakeKernel(tmp_path, avail=8 * GIB)             # 6 GiB may be taken
    res = reserve(k, tmp_path / "home", "big", nranks=16, memory=GIB)
    assert res.pages == {GIB_KB: 6} and k.nr(MIB2_KB) == 0
    assert res.warning and "6 of 16 ranks" in res.warning and "75%" in res.warning
    hugepages.release(res)
    assert k.nr(GIB_KB) == 0


def test_limit_in_2m_pages(tmp_path: Path) -> None:
    k = FakeKernel(tmp_path, avail=2 * GIB)             # 1.5 GiB: 3 ranks of 512 MiB
    res = reserve(k, tmp_path / "home", "j", nranks=4, memory=512 * MIB, fixed_address=True)
    assert res.pages == {MIB2_KB: 3 * 256}
    assert res.warning and "3 of 4 ranks" in res.warning


def test_1g_pool_cannot_grow_so_2m(tmp_path: Path) -> None:
    k = FakeKernel(tmp_path, cap={GIB_KB: 0})
    res = reserve(k, tmp_path / "home", "j", nranks=2, memory=GIB)
    assert res.pages == {MIB2_KB: 1024} and res.warning is None
    hugepages.release(res)
    assert (k.nr(GIB_KB), k.nr(MIB2_KB)) == (0, 0)


def test_partial_1g_growth_keeps_whole_ranks_and_covers_the_rest_in_2m(tmp_path: Path) -> None:
    # 1.5 GiB nodes need 2 pages of 1 GiB per rank; the kernel finds only 3 pages
    k = FakeKernel(tmp_path, cap={GIB_KB: 3})
    res = reserve(k, tmp_path / "home", "j", nranks=2, memory=3 * GIB // 2)
    assert res.pages == {GIB_KB: 2, MIB2_KB: 768}, "one rank on 1 GiB pages; the odd page given back"
    assert k.nr(GIB_KB) == 2 and k.nr(MIB2_KB) == 768
    hugepages.release(res)
    assert (k.nr(GIB_KB), k.nr(MIB2_KB)) == (0, 0)


def test_no_pool_can_grow(tmp_path: Path) -> None:
    k = FakeKernel(tmp_path, cap={GIB_KB: 0, MIB2_KB: 100})
    res = reserve(k, tmp_path / "home", "j", nranks=2, memory=GIB)
    assert res.pages == {} and k.nr(MIB2_KB) == 0, "100 pages hold no whole rank: given back"
    assert res.warning and "0 of 2 ranks" in res.warning and "would not grow" in res.warning
    assert hugepages.release(res) == []


def test_not_root_warns_once_and_writes_nothing(k: FakeKernel, tmp_path: Path) -> None:
    res = hugepages.reserve(tmp_path / "home", "j", 2, GIB, pools=k, root=False)
    assert res.pages == {} and k.writes == []
    assert res.warning and res.warning.startswith("not root")
    assert not (tmp_path / "home").exists(), "no bookkeeping without a reservation"
    k.put(GIB_KB, "nr_hugepages", 2), k.put(GIB_KB, "free_hugepages", 2)
    assert hugepages.reserve(tmp_path / "home", "j", 2, GIB, pools=k, root=False).warning is None


def test_no_pools_at_all(tmp_path: Path) -> None:
    k = FakeKernel(tmp_path, sizes=())
    res = reserve(k, tmp_path / "home", "j", nranks=1, memory=GIB)
    assert res.pages == {} and res.warning and "no huge page pools" in res.warning


# --- bookkeeping ------------------------------------------------------------------

def test_two_runs_release_only_their_own(k: FakeKernel, tmp_path: Path) -> None:
    home = tmp_path / "home"
    a = reserve(k, home, "job-1", nranks=2, memory=GIB)
    # a's pages are free until its ranks map them: b must not count them as its own
    b = reserve(k, home, "job-2", nranks=3, memory=GIB)
    assert (a.pages, b.pages, k.nr(GIB_KB)) == ({GIB_KB: 2}, {GIB_KB: 3}, 5)
    book = json.loads((home / "hugepages.json").read_text())
    assert {r: e["pages"] for r, e in book.items()} == {"job-1": {str(GIB_KB): 2}, "job-2": {str(GIB_KB): 3}}
    k.use(GIB_KB, 5)                                    # both jobs run
    k.put(GIB_KB, "nr_hugepages", k.nr(GIB_KB) + 10)    # the administrator adds 10 meanwhile
    k.put(GIB_KB, "free_hugepages", 10)
    k.unuse(GIB_KB, 2)                                  # a ends first
    assert hugepages.release(a) == []
    assert k.nr(GIB_KB) == 13, "a took back its 2, not b's 3 and not the administrator's 10"
    k.unuse(GIB_KB, 3)
    assert hugepages.release(b) == []
    assert k.nr(GIB_KB) == 10
    assert json.loads((home / "hugepages.json").read_text()) == {}


def test_pages_still_held_are_reported(tmp_path: Path) -> None:
    k = FakeKernel(tmp_path)
    res = reserve(k, tmp_path / "home", "j", nranks=2, memory=GIB)
    k.use(GIB_KB, 2)                                    # a rank has not let go yet
    t0 = time.monotonic()
    problems = hugepages.release(res, wait=0.3)
    assert time.monotonic() - t0 >= 0.25, "it waited for the pages"
    assert problems and "still" in problems[0]


def test_a_dead_run_s_pages_are_given_back_by_the_next(k: FakeKernel, tmp_path: Path) -> None:
    home = tmp_path / "home"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    k.put(GIB_KB, "nr_hugepages", 4), k.put(GIB_KB, "free_hugepages", 4)
    home.mkdir()
    (home / "hugepages.json").write_text(json.dumps(
        {"job-7": {"pid": int(dead.stdout), "start": "1", "pages": {str(GIB_KB): 4}}}))
    res = reserve(k, home, "job-8", nranks=1, memory=GIB)
    assert any("ended run (job-7)" in n for n in res.notes)
    assert k.nr(GIB_KB) == 1 and res.pages == {GIB_KB: 1}
    assert set(json.loads((home / "hugepages.json").read_text())) == {"job-8"}
    hugepages.release(res)
    assert k.nr(GIB_KB) == 0


def _worker(d: str, home: str, rid: str, go: str, done: str) -> None:
    k = FakeKernel.__new__(FakeKernel)
    Pools.__init__(k, Path(d) / "sys", Path(d) / "meminfo")
    k.cap, k.writes = {}, []
    res = hugepages.reserve(Path(home), rid, 1, GIB, pools=k, root=True)
    Path(done, rid).write_text(json.dumps(res.pages))
    while not Path(go).exists():
        time.sleep(0.01)
    hugepages.release(res)


def test_concurrent_runs_under_the_lock(tmp_path: Path) -> None:
    """Six processes reserve at once, then release at once: the pool grows to
    exactly six and returns to where it was."""
    k = FakeKernel(tmp_path)
    k.put(GIB_KB, "nr_hugepages", 1)                   # someone else's page, in use
    home, go, done = tmp_path / "home", tmp_path / "go", tmp_path / "done"
    done.mkdir()
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_worker, args=(str(tmp_path), str(home), f"job-{i}", str(go), str(done)))
             for i in range(6)]
    for p in procs:
        p.start()
    for _ in range(500):
        if len(os.listdir(done)) == 6:
            break
        time.sleep(0.02)
    pages = [json.loads((done / f).read_text()) for f in sorted(os.listdir(done))]
    assert pages == [{str(GIB_KB): 1}] * 6
    assert k.nr(GIB_KB) == 7
    go.touch()
    for p in procs:
        p.join(20)
        assert p.exitcode == 0
    assert k.nr(GIB_KB) == 1
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
