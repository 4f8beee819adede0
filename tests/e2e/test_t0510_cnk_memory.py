"""Big memory under cnk, sized to the node: a program's heap, stack and thread
stacks are one mapping of huge pages in the largest size that fits the node
(1 GiB pages only when its memory is a whole number of GiB, else 2 MiB pages;
transparent huge pages when asked or when the kernel has none) and `-v` says
which and why; more than 1 GiB can be allocated and touched on a node that has
it; malloc beyond the node's memory returns NULL with ENOMEM and the block runs
the next job.

`lattice run` gives back exactly what a job added (the 2 MiB pages' overcommit
ceiling, 1 GiB pool pages): the pools belong to the host and other jobs use
them meanwhile, so the tests compare what this job added and what its book
entry says, not absolute pool sizes.  Their machines say so (--hold-pages
job); a machine whose blocks keep the pages their jobs touched (--hold-pages
block) has tests of its own at the end."""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Callable, Iterator

import pytest

from conftest import ROOT, Machine, make_machine
from cnk_helpers import CNK_EX, HugePagePools, by_rank, smaps_report

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="reserving huge pages needs root")

NODE_MIB = 512                  # the default node
GIB_KB, MIB2_KB = 1048576, 2048
BOOK = Path(os.environ.get("LATTICE_HUGEPAGES_BOOK", "/run/lattice"))
IN_BIG_MEMORY = ["heap", "bigblock", "stack", "thread", "data", "text"]
GUARD = 600             # s: a bound on waits for an event (a line, a book entry, an exit), only so a hang fails


def wait_until(pred: Callable[[], bool]) -> bool:
    """Until pred() holds (the event), GUARD a hang guard: whether it did."""
    deadline = time.monotonic() + GUARD
    while not pred():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def booted(tmp: Path, shape: str, *init: str) -> Machine:
    """A machine of one pset over `shape`, block C booted over all of it;
    each job gives back its pages unless init says otherwise."""
    hold = () if "--hold-pages" in init else ("--hold-pages", "job")
    m = make_machine(tmp, "--shape", shape, "--pset-size", str(math.prod(int(d) for d in shape.split("x"))),
                     *hold, *init)
    m.run("block", "create", "C", "--shape", shape)
    m.run("boot", "C")
    return m


@pytest.fixture(scope="module")
def mem_machine(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    """Two nodes of the default memory (512 MiB)."""
    assert (built / "bin" / "cnk").exists(), "build/bin/cnk missing: the compute node kernel is not built"
    m = booted(tmp_path_factory.mktemp("cnkmem"), "1x1x2")
    yield m
    m.run("free", "C", check=False)


@pytest.fixture(scope="module")
def gib_machine(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    m = booted(tmp_path_factory.mktemp("cnkgib"), "1x1x2", "--memory", "1G")
    yield m
    m.run("free", "C", check=False)


@pytest.fixture(scope="module")
def small_machine(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    m = booted(tmp_path_factory.mktemp("cnksmall"), "1x1x2", "--memory", "128M")
    yield m
    m.run("free", "C", check=False)


@pytest.fixture(scope="module")
def holdmem(small_machine: Machine) -> Path:
    """tests/e2e/holdmem.c, built for the test."""
    return build_holdmem(small_machine.work)


def build_holdmem(where: Path) -> Path:
    exe = where / "holdmem"
    subprocess.run(["gcc", "-std=c11", "-D_GNU_SOURCE", "-O2", "-Wall", "-Wextra", "-Werror",
                    f"-I{ROOT / 'examples' / 'cnk'}", "-o", str(exe), str(Path(__file__).with_name("holdmem.c"))],
                   check=True)
    return exe


def memmap(m: Machine, exe: str, *opts: str, n: int = 2) -> tuple[dict[int, dict[str, dict[str, str]]], str]:
    p = m.run("run", "--block", "C", "-n", str(n), "--label", "--kernel", "cnk", "-v", "--cwd", "/tmp",
              *opts, str(CNK_EX / exe))
    reports = {r: smaps_report(lines) for r, lines in by_rank(p.stdout).items()}
    assert sorted(reports) == list(range(n)), p.stdout
    return reports, p.stderr


def span(rep: dict[str, str]) -> tuple[int, int]:
    s, e = rep["map"].split("-")
    return int(s, 16), int(e, 16)


def assert_one_big_mapping(report: dict[str, dict[str, str]], what: list[str], node_mib: int) -> tuple[int, int]:
    """Every address of `what` lies in one and the same mapping, which is big
    memory: the node's memory in size."""
    for w in what:
        assert w in report and report[w]["map"] != "none", (w, report)
    spans = {w: span(report[w]) for w in what}
    assert len(set(spans.values())) == 1, f"not one mapping: {spans}"
    start, end = next(iter(spans.values()))
    for w in what:
        assert start <= int(report[w]["addr"], 16) < end
    assert end - start >= node_mib << 20, f"mapping {start:#x}-{end:#x} is smaller than the node's memory"
    return start, end


def page_kb(reports: dict[int, dict[str, dict[str, str]]]) -> set[int]:
    return {int(rep[w]["page_kb"]) for rep in reports.values() for w in IN_BIG_MEMORY}


def book() -> dict[str, dict[str, object]]:
    try:
        data = json.loads((BOOK / "hugepages.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def mine(m: Machine, entries: dict[str, dict[str, object]]) -> dict[str, dict[str, object]]:
    """The book's entries of machine m's runs."""
    return {k: e for k, e in entries.items() if k.startswith(f"{m.home.resolve()}:")}


def others(m: Machine) -> dict[str, dict[str, object]]:
    """The book's entries of other machines' runs."""
    return {k: e for k, e in book().items() if not k.startswith(f"{m.home.resolve()}:")}


def others_need_surplus(m: Machine) -> bool:
    """Does a live run of another machine count on the overcommit ceiling?"""
    return any(e.get("overcommit") for e in others(m).values())


# --- the page size fits the node -------------------------------------------------------

@pytest.mark.parametrize("exe", ["memmap", "memmap-static", "memmap-spie"])
def test_default_node_gets_2m_pages(mem_machine: Machine, exe: str) -> None:
    """512 MiB is not a whole number of GiB: 2 MiB pages, and -v says so and why."""
    reports, err = memmap(mem_machine, exe)
    for rep in reports.values():
        assert_one_big_mapping(rep, IN_BIG_MEMORY, NODE_MIB)
    assert page_kb(reports) == {MIB2_KB}, reports
    assert "big memory 512 MiB per rank on 2 MiB pages (512 MiB is not a whole number of GiB" in err, err
    assert re.search(r"huge pages: 2 MiB \(512 MiB per rank is not a whole number of GiB\): 2 ranks take up to "
                     r"512 x 2 MiB at first touch", err), err


def test_128m_node_gets_2m_pages(small_machine: Machine) -> None:
    p = small_machine.run("run", "--block", "C", "-n", "2", "--label", "-v", "--cwd", "/tmp",
                          str(CNK_EX / "bigalloc"), "64")
    assert p.stdout.count("touched 64 MiB ok") == 2 and p.stdout.count("page_kb=2048") == 2, p.stdout
    assert "big memory 128 MiB per rank on 2 MiB pages (128 MiB is not a whole number of GiB" in p.stderr, p.stderr
    assert "2 ranks take up to 128 x 2 MiB at first touch" in p.stderr, p.stderr


@pytest.mark.parametrize("exe", ["memmap", "memmap-spie"])
def test_1g_node_gets_1g_pages_when_the_pool_can_grow(gib_machine: Machine, exe: str) -> None:
    """A position-independent program on 1 GiB nodes goes on 1 GiB pages, the
    pool grown for the job and lowered by as much after it.  When the kernel
    cannot find 1 GiB pages, the ranks go on 2 MiB pages and -v says why."""
    before = HugePagePools.nr(GIB_KB)
    others_before = others(gib_machine)
    reports, err = memmap(gib_machine, exe)
    for rep in reports.values():
        assert_one_big_mapping(rep, IN_BIG_MEMORY, 1024)
    assert not mine(gib_machine, book()), "the run's book entry is gone"
    assert "warning" not in err, err
    short = re.search(r"1 GiB pages for (\d) of 2 ranks \(.*?\); the others on 2 MiB pages", err)
    covered = int(short.group(1)) if short else 2
    per_rank = [{int(rep[w]["page_kb"]) for w in IN_BIG_MEMORY} for _, rep in sorted(reports.items())]
    assert all(len(s) == 1 for s in per_rank), per_rank
    sizes = [s.pop() for s in per_rank]
    # (a job elsewhere on the host may take a free page first: then a rank falls back to 2 MiB)
    assert sizes.count(GIB_KB) <= covered and (covered == 0 or GIB_KB in sizes), (sizes, err)
    if sizes[0] == MIB2_KB:
        assert "big memory 1024 MiB per rank on 2 MiB pages (no free 1 GiB huge pages; 2 MiB hugetlb pages)" in err
    else:
        assert "big memory 1024 MiB per rank on 1 GiB pages (1 GiB fills whole 1 GiB hugetlb pages)" in err, err
    if covered < 2:
        assert re.search(r"2 MiB: (the other )?\d ranks? reserve", err), err
    if covered == 0:
        pytest.skip("the 1 GiB pool cannot grow on this host now: checked the fallback to 2 MiB pages")
    grown = re.search(r"reserved (\d+) x 1 GiB \(pool (\d+) -> (\d+)", err)
    free_ones = "the free pages already hold big memory for 2 ranks" in err
    assert grown or free_ones, err
    if others(gib_machine) == others_before:    # nobody else changed the pool meanwhile
        assert HugePagePools.nr(GIB_KB) == before, "the 1 GiB pool is back where it was"


def test_fixed_address_program_on_a_1g_node_gets_2m_pages(gib_machine: Machine) -> None:
    reports, err = memmap(gib_machine, "memmap-static")
    assert page_kb(reports) == {MIB2_KB}, reports
    assert "(fixed-address program that 1 GiB pages cannot hold; 2 MiB hugetlb pages taken at first touch" in err, err
    assert "a program linked at a fixed address below 1 GiB cannot use 1 GiB pages" in err, err


@pytest.mark.parametrize("exe", ["memmap", "memmap-static", "memmap-spie"])
def test_transparent_huge_pages_when_asked(mem_machine: Machine, exe: str) -> None:
    reports, err = memmap(mem_machine, exe, "--env", "LATTICE_BIGMEM_PAGES=4K")
    for rep in reports.values():
        assert_one_big_mapping(rep, IN_BIG_MEMORY, NODE_MIB)
        thp = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
        if "[never]" not in thp:
            # the 32 MiB block was touched in a region advised for THP
            assert int(rep["bigblock"]["thp_kb"]) > 0, rep
    assert page_kb(reports) == {4}, reports
    assert "on 4 KiB pages (LATTICE_BIGMEM_PAGES=4K; 4 KiB pages with transparent huge pages)" in err, err
    assert "huge pages: none (LATTICE_BIGMEM_PAGES=4K)" in err, err


def test_bad_page_size_is_refused(mem_machine: Machine) -> None:
    p = mem_machine.run("run", "--block", "C", "-n", "1", "--env", "LATTICE_BIGMEM_PAGES=16M",
                        str(CNK_EX / "memmap"), check=False)
    assert p.returncode != 0 and "bad LATTICE_BIGMEM_PAGES '16M': 1G, 2M or 4K" in p.stderr, p.stderr


def test_without_huge_pages_falls_back_to_thp(mem_machine: Machine) -> None:
    """--hugepages keep with no free pool pages and no surplus allowed: cnk
    warns and uses transparent huge pages."""
    with HugePagePools({GIB_KB: 0, MIB2_KB: 0}, overcommit={MIB2_KB: 0}) as pools:
        if any(pools.got.values()) or HugePagePools.ceiling(MIB2_KB):
            pytest.skip(f"huge pages in use elsewhere cannot be released: {pools.got}")
        reports, err = memmap(mem_machine, "memmap", "--hugepages", "keep")
        moved = any(HugePagePools.nr(kb) for kb in (GIB_KB, MIB2_KB)) or HugePagePools.ceiling(MIB2_KB)
    if moved and page_kb(reports) != {4}:
        pytest.skip("another job on the host made huge pages available meanwhile")
    assert page_kb(reports) == {4}, reports
    assert "512 MiB is not a whole number of GiB; no free 2 MiB huge pages; 4 KiB pages with transparent huge " \
           "pages" in err, err
    assert "cnk: warning: no free huge pages for 512 MiB of big memory" in err, err


# --- exactly what the job added comes back ---------------------------------------------

def bigmem_maps(pids: list[int]) -> list[str]:
    """Big memory mappings (cnk's memfd) held by these processes."""
    out = []
    for pid in pids:
        try:
            out += [l for l in Path(f"/proc/{pid}/maps").read_text().splitlines() if "cnk-bigmem" in l]
        except OSError:
            pass
    return out


def test_the_ceiling_comes_back_and_the_pages_go(small_machine: Machine) -> None:
    """A 2 MiB job raises the overcommit ceiling by what its ranks may take;
    after it the ceiling is where it was, the run's book entry is gone, and
    neither the ranks nor ciod hold big memory, so the kernel has freed its
    surplus pages."""
    m = small_machine
    ceiling, surplus = HugePagePools.ceiling(MIB2_KB), HugePagePools.surplus(MIB2_KB)
    p = m.run("run", "--block", "C", "-n", "2", "-v", "--cwd", "/tmp", str(CNK_EX / "bigalloc"), "100")
    assert p.stdout.count("touched 100 MiB ok") == 2 and p.stdout.count("page_kb=2048") == 2, p.stdout
    raised = re.search(r"overcommit ceiling (\d+) -> (\d+)", p.stderr)
    if raised:
        assert int(raised.group(2)) - int(raised.group(1)) == 2 * 64, p.stderr
    else:
        assert others_need_surplus(m), f"the ceiling was not raised and no other run holds it up: {p.stderr}"
    assert not mine(m, book())
    assert bigmem_maps(m.processes("ciod", "C") + m.processes("cnode", "C")) == []
    if not others_need_surplus(m):
        assert HugePagePools.ceiling(MIB2_KB) == ceiling
    assert HugePagePools.surplus(MIB2_KB) <= surplus, "the job's surplus pages were freed"


def test_another_machines_pages_are_untouched(small_machine: Machine, holdmem: Path, tmp_path: Path) -> None:
    """Machine b's job holds huge pages; machine a runs a job from start to
    end meanwhile: b's pages keep their contents, a says nothing about pages
    in use, and the ceiling counts b's job until it ends."""
    b = small_machine
    (tmp_path / "a").mkdir()
    a = booted(tmp_path / "a", "1x1x1", "--memory", "128M")
    go = b.work / "go"
    ceiling = HugePagePools.ceiling(MIB2_KB)
    run_b = b.popen("run", "--block", "C", "-n", "1", "--cwd", "/tmp", str(holdmem), "96", str(go))
    try:
        assert run_b.stdout is not None
        ready = run_b.stdout.readline()
        assert ready.startswith("holdmem: ready page_kb=2048"), (ready, run_b.stderr.read() if run_b.stderr else "")
        held = mine(b, book())
        assert [e.get("overcommit") for e in held.values()] == [{str(MIB2_KB): 64}], held
        during_b = HugePagePools.ceiling(MIB2_KB)
        p = a.run("run", "--block", "C", "-n", "1", "-v", "--cwd", "/tmp", str(CNK_EX / "bigalloc"), "100")
        assert "touched 100 MiB ok" in p.stdout and "page_kb=2048" in p.stdout, p.stdout
        assert "warning" not in p.stderr and "in use" not in p.stderr, p.stderr
        assert not mine(a, book()) and mine(b, book()) == held, "a took its own entry away, not b's"
        assert HugePagePools.ceiling(MIB2_KB) == during_b, "the ceiling still counts b's job"
        go.touch()
        out, err = run_b.communicate(timeout=GUARD)
    finally:
        go.touch()
        if run_b.poll() is None:
            run_b.kill()
            run_b.wait()
        a.run("free", "C", check=False)
    assert run_b.returncode == 0 and "holdmem: intact" in out, (out, err)
    assert not mine(b, book())
    if not others_need_surplus(b):
        assert HugePagePools.ceiling(MIB2_KB) == ceiling


def test_a_job_bigger_than_the_host_takes_pages_at_first_touch(built: Path, tmp_path: Path) -> None:
    """Two nodes of more memory each than the host has: refused before launch
    (tests/e2e/test_t0440_capacity.py) unless the job asks for its pages at
    first touch (--env LATTICE_BIGMEM_RESERVE=0); then it runs as Linux
    processes overcommit: a warning says so, the ranks map 2 MiB pages
    without reserving them, take those they touch, and the ceiling comes
    back after."""
    total_mib = next(int(l.split()[1]) for l in Path("/proc/meminfo").read_text().splitlines()
                     if l.startswith("MemTotal:")) // 1024
    node_mib = total_mib + 1026                 # not a whole number of GiB: 2 MiB pages
    m = booted(tmp_path, "1x1x2", "--memory", f"{node_mib}M")
    ceiling = HugePagePools.ceiling(MIB2_KB)
    try:
        refused = m.run("run", "--block", "C", "-n", "2", "--cwd", "/tmp", str(CNK_EX / "bigalloc"), "64", check=False)
        p = m.run("run", "--block", "C", "-n", "2", "--label", "-v", "--env", "LATTICE_BIGMEM_RESERVE=0", "--cwd",
                  "/tmp", str(CNK_EX / "bigalloc"), "64")
    finally:
        m.run("free", "C", check=False)
    assert refused.returncode == 1 and "their nodes' memory (big memory) is" in refused.stderr, refused
    assert p.stdout.count("touched 64 MiB ok") == 2 and p.stdout.count("page_kb=2048") == 2, p.stdout
    assert re.search(r"warning: big memory of 2 ranks x \d+ MiB \([\d.]+ GiB\) is more than this host can "
                     r"hold .*huge pages are taken at first touch", p.stderr), p.stderr
    assert "2 MiB hugetlb pages taken at first touch (LATTICE_BIGMEM_RESERVE=0)" in p.stderr, p.stderr
    assert not mine(m, book())
    if not others_need_surplus(m):
        assert HugePagePools.ceiling(MIB2_KB) == ceiling


# --- more than 1 GiB, and beyond the node ----------------------------------------------

@pytest.fixture
def big_node(built: Path, tmp_path: Path) -> Iterator[Machine]:
    assert (built / "bin" / "cnk").exists(), "build/bin/cnk missing"
    m = booted(tmp_path, "1x1x2", "--memory", "2G")
    yield m
    m.run("free", "C", check=False)


@pytest.mark.parametrize("exe", ["bigalloc", "bigalloc-static"])
def test_more_than_1gib_allocated_and_touched(big_node: Machine, exe: str) -> None:
    mib = 1200
    p = big_node.run("run", "--block", "C", "-n", "2", "--label", "--kernel", "cnk", "--cwd", "/tmp",
                     str(CNK_EX / exe), str(mib), timeout=GUARD)
    pages = mib * 256
    ranks = by_rank(p.stdout)
    for r in range(2):
        line = ranks.get(r, [""])[-1]
        assert line.startswith(f"bigalloc: touched {mib} MiB ok check={pages * (pages - 1) // 2} "), p.stdout


def test_malloc_beyond_the_node_gets_enomem(mem_machine: Machine) -> None:
    m = mem_machine
    for exe in ("bigalloc", "bigalloc-static"):
        p = m.run("run", "--block", "C", "-n", "2", "--label", "--kernel", "cnk", "--cwd", "/tmp",
                  str(CNK_EX / exe), str(2 * NODE_MIB), check=False)
        assert p.returncode == 12, (p.stdout, p.stderr)
        for r in range(2):
            assert (f"{r}: bigalloc: malloc({2 * NODE_MIB} MiB) failed: ENOMEM (Cannot allocate memory)"
                    in p.stdout), p.stdout
        # what fits still works, on the same booted block
        p = m.run("run", "--block", "C", "-n", "2", "--label", "--kernel", "cnk", "--cwd", "/tmp",
                  str(CNK_EX / exe), str(NODE_MIB // 2))
        assert p.stdout.count(f"touched {NODE_MIB // 2} MiB ok") == 2, p.stdout


# --- a killed run -------------------------------------------------------------------------

def test_a_killed_runs_ceiling_comes_back_after_its_machine_is_gone(built: Path, tmp_path: Path) -> None:
    """The book belongs to the host, like the pools: a `lattice run` killed
    outright whose $LATTICE_HOME is then deleted still has what it asked for
    given back, by the next cnk run of another machine."""
    book_dir = tmp_path / "book"
    machines = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        m = make_machine(tmp_path / name, "--shape", "1x1x1", "--pset-size", "1", "--memory", "128M",
                         "--hold-pages", "job")
        m.env["LATTICE_HUGEPAGES_BOOK"] = str(book_dir)
        m.run("block", "create", "C", "--shape", "1x1x1")
        m.run("boot", "C")
        machines.append(m)
    a, b = machines
    ceiling = HugePagePools.ceiling(MIB2_KB)
    try:
        p = _kill_a_run_then_run_again(a, b, book_dir)
    finally:                                    # no daemons left behind, whatever failed
        for m in machines:
            if m.home.exists():
                m.run("free", "C", check=False)
    assert "gave back the huge pages of an ended run" in p.stderr, p.stderr
    assert json.loads((book_dir / "hugepages.json").read_text()) == {}
    if not others_need_surplus(b):
        assert HugePagePools.ceiling(MIB2_KB) == ceiling, "the ceiling is back where it was"


def _kill_a_run_then_run_again(a: Machine, b: Machine, book_dir: Path) -> subprocess.CompletedProcess[str]:
    """Machine a's cnk run raises the ceiling and is SIGKILLed, a's home
    deleted; then machine b runs a cnk job: its output."""
    run = a.popen("run", "--block", "C", "-n", "1", "--kernel", "cnk", "/bin/sleep", "3600")   # killed below
    try:
        entry: dict[str, object] = {}
        entries: dict[str, dict[str, object]] = {}

        def reserved() -> bool:                 # a's reservation is in the book (or the run ended)
            nonlocal entry, entries
            try:
                entries = json.loads((book_dir / "hugepages.json").read_text())
            except (OSError, ValueError):
                entries = {}
            entry = next((e for k, e in entries.items() if k.startswith(str(a.home.resolve()))), {})
            return bool(entry.get("overcommit")) or run.poll() is not None
        wait_until(reserved)
        assert entry.get("overcommit") == {str(MIB2_KB): 64}, f"no reservation of machine a in the book: {entries}"
    finally:
        run.kill()                              # no chance to give anything back
        run.wait()
    a.run("free", "C", check=False)             # its ranks end; the book still lists the run
    shutil.rmtree(a.home)
    return b.run("run", "--block", "C", "-n", "1", "--kernel", "cnk", "-v", "/bin/true")


# --- a block that keeps the pages its jobs touched (--hold-pages block) ---------------------

def kept(m: Machine, block: str = "C") -> int:
    """2 MiB pages block of machine m holds, by the book."""
    entry = book().get(f"{m.home.resolve()}:block-{block}", {})
    pages = entry.get("pages", {}) if isinstance(entry, dict) else {}
    return int(pages.get(str(MIB2_KB), 0)) if isinstance(pages, dict) else 0


def surplus_to_keep() -> int:
    """How many of holdmem's 48 pages will be surplus pages the block can
    keep: a job takes free pool pages first, and another block's (or an
    administrator's) free 2 MiB pages on the host serve it before those."""
    free = HugePagePools.free(MIB2_KB)
    if free >= 48:
        pytest.skip(f"{free} free 2 MiB pool pages on this host already (another block's or an "
                    "administrator's): the job would take only those, no surplus pages")
    return 48 - free


def hold_96_mib(m: Machine, exe: Path, *opts: str, want: int = 48) -> tuple[int, str]:
    """Run holdmem 96 MiB on block C: the pages the block holds while it runs
    (once it holds `want`), and the run's stderr."""
    go = m.work / "go"
    go.unlink(missing_ok=True)
    run = m.popen("run", "--block", "C", "-n", "1", "--cwd", "/tmp", *opts, str(exe), "96", str(go))
    try:
        assert run.stdout is not None
        ready = run.stdout.readline()
        assert ready.startswith("holdmem: ready page_kb=2048"), (ready, run.stderr.read() if run.stderr else "")
        during = 0

        def holds() -> bool:                    # the block took over the pages: the book says so
            nonlocal during
            during = kept(m)
            return during >= want or run.poll() is not None
        wait_until(holds)
        go.touch()
        out, err = run.communicate(timeout=GUARD)
    finally:
        go.touch()
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 0 and "holdmem: intact" in out, (out, err)
    return during, err


def test_the_block_keeps_the_pages_its_jobs_touched_until_it_is_freed(built: Path, tmp_path: Path) -> None:
    """While a job holds 96 MiB of its 128 MiB node, its block takes over the
    48 surplus pages its rank touched as pool pages (never more than the
    node's 64); they stay in the pool after the job, for the block's next job
    (-v says so, and that job needs no surplus page for them); freeing the
    block gives back exactly them."""
    want = surplus_to_keep()
    before = HugePagePools.nr(MIB2_KB)
    m = booted(tmp_path, "1x1x1", "--memory", "128M", "--hold-pages", "block")
    try:
        assert "held by the block (--hold-pages block)" in m.run("machine").stdout
        exe = build_holdmem(m.work)
        during, _ = hold_96_mib(m, exe, want=want)
        assert want <= during <= 64, book()
        held = kept(m)
        assert held == during and HugePagePools.nr(MIB2_KB) == before + held, "the pool keeps them after the job"
        surplus = HugePagePools.surplus(MIB2_KB)
        during, err = hold_96_mib(m, exe, "-v")
        assert f"the block keeps the pages its jobs touch until it is freed (it holds {held} x 2 MiB" in err, err
        assert kept(m) == held and HugePagePools.nr(MIB2_KB) == before + held, "its own pages served the job"
        assert HugePagePools.surplus(MIB2_KB) <= surplus
    finally:
        m.run("free", "C", check=False)
    assert kept(m) == 0 and f"{m.home.resolve()}:block-C" not in book()
    assert HugePagePools.nr(MIB2_KB) == before, "freeing the block gave its pages back"


def test_pages_of_a_block_whose_daemon_died_go_back_with_the_next_run(built: Path, tmp_path: Path) -> None:
    """The block's ciod is killed outright (the block is not freed): the next
    cnk run of another machine gives back what the block kept."""
    want = surplus_to_keep()
    before = HugePagePools.nr(MIB2_KB)
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    a = booted(tmp_path / "a", "1x1x1", "--memory", "128M", "--hold-pages", "block")
    b = booted(tmp_path / "b", "1x1x1", "--memory", "128M")
    try:
        during, _ = hold_96_mib(a, build_holdmem(a.work), want=want)
        assert during >= want and HugePagePools.nr(MIB2_KB) == before + during
        for pid in a.processes("ciod", "C"):
            os.kill(pid, 9)
        p = b.run("run", "--block", "C", "-n", "1", "-v", "/bin/true")
        assert "gave back the huge pages of a block no longer booted" in p.stderr, p.stderr
        assert kept(a) == 0 and HugePagePools.nr(MIB2_KB) == before
    finally:
        a.run("free", "C", check=False)
        b.run("free", "C", check=False)
