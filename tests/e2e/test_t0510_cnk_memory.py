"""Big memory under cnk: a program's heap, stack and thread stacks are one
mapping of huge pages (hugetlb when reserved, else transparent huge pages and
`-v` says why); more than 1 GiB can be allocated and touched on a node that
has it; malloc beyond the node's memory returns NULL with ENOMEM and the
block runs the next job.

The huge page pools are global: each test sets them for its own jobs (as root)
and puts back what they held before."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from conftest import Machine, make_machine
from cnk_helpers import CNK_EX, HugePagePools, by_rank, smaps_report

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="reserving huge pages needs root")

NODE_MIB = 512
GIB_KB, MIB2_KB = 1048576, 2048


@pytest.fixture(scope="module")
def mem_machine(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    assert (built / "bin" / "cnk").exists(), "build/bin/cnk missing: the compute node kernel is not built"
    m = make_machine(tmp_path_factory.mktemp("cnkmem"), "--shape", "1x1x2", "--pset-size", "2",
                     "--memory", f"{NODE_MIB}M")
    m.run("block", "create", "C", "--shape", "1x1x2")
    m.run("boot", "C")
    yield m
    m.run("free", "C", check=False)


def memmap(m: Machine, exe: str, n: int = 2, pages: str = "keep") -> tuple[dict[int, dict[str, dict[str, str]]], str]:
    """Run memmap; by default with the pools exactly as the test set them."""
    p = m.run("run", "--block", "C", "-n", str(n), "--label", "--kernel", "cnk", "-v", "--cwd", "/tmp",
              "--hugepages", pages, str(CNK_EX / exe))
    reports = {r: smaps_report(lines) for r, lines in by_rank(p.stdout).items()}
    assert sorted(reports) == list(range(n)), p.stdout
    return reports, p.stderr


def span(rep: dict[str, str]) -> tuple[int, int]:
    s, e = rep["map"].split("-")
    return int(s, 16), int(e, 16)


def assert_one_big_mapping(report: dict[str, dict[str, str]], what: list[str]) -> tuple[int, int]:
    """Every address of `what` lies in one and the same mapping, which is big
    memory: at least the node's memory in size."""
    for w in what:
        assert w in report and report[w]["map"] != "none", (w, report)
    spans = {w: span(report[w]) for w in what}
    assert len(set(spans.values())) == 1, f"not one mapping: {spans}"
    start, end = next(iter(spans.values()))
    for w in what:
        assert start <= int(report[w]["addr"], 16) < end
    assert end - start >= NODE_MIB << 20, f"mapping {start:#x}-{end:#x} is smaller than the node's memory"
    return start, end


IN_BIG_MEMORY = ["heap", "bigblock", "stack", "thread", "data", "text"]


@pytest.mark.parametrize("exe", ["memmap", "memmap-static", "memmap-spie"])
def test_memory_on_2m_hugetlb_pages(mem_machine: Machine, exe: str) -> None:
    with HugePagePools({MIB2_KB: 2 * NODE_MIB // 2 + 64}) as pools:
        if pools.got[MIB2_KB] < 2 * NODE_MIB // 2:
            pytest.skip(f"the 2 MiB page pool grew only to {pools.got[MIB2_KB]} pages")
        reports, err = memmap(mem_machine, exe)
    for r, rep in reports.items():
        assert_one_big_mapping(rep, IN_BIG_MEMORY)
        assert int(rep["heap"]["page_kb"]) >= MIB2_KB, (r, rep)
    # -v names the page size of big memory
    assert re.search(r"2 ?M(i?B)?\b|2048 ?kB", err), err


@pytest.mark.parametrize("exe", ["memmap", "memmap-spie"])
def test_memory_on_1g_hugetlb_pages(mem_machine: Machine, exe: str) -> None:
    """A position-independent program goes on 1 GiB pages when they are free.
    (A fixed-address one at 0x400000 cannot: a 1 GiB page there would start at 0.)"""
    with HugePagePools({GIB_KB: 2}) as pools:
        if pools.got[GIB_KB] < 2:
            pytest.skip(f"the 1 GiB page pool cannot grow to 2 pages here (got {pools.got[GIB_KB]})")
        reports, err = memmap(mem_machine, exe)
    for r, rep in reports.items():
        assert_one_big_mapping(rep, IN_BIG_MEMORY)
        assert int(rep["heap"]["page_kb"]) == GIB_KB, (r, rep)
    assert re.search(r"1 ?G(i?B)?\b|1048576 ?kB", err), err


@pytest.mark.parametrize("exe", ["memmap", "memmap-static", "memmap-spie"])
def test_memory_without_huge_pages_falls_back_to_thp(mem_machine: Machine, exe: str) -> None:
    with HugePagePools({GIB_KB: 0, MIB2_KB: 0}) as pools:
        if any(pools.got.values()):
            pytest.skip(f"huge pages in use elsewhere cannot be released: {pools.got}")
        reports, err = memmap(mem_machine, exe)
    for r, rep in reports.items():
        assert_one_big_mapping(rep, IN_BIG_MEMORY)
        assert int(rep["heap"]["page_kb"]) == 4, (r, rep)
        thp = open("/sys/kernel/mm/transparent_hugepage/enabled").read()
        if "[never]" not in thp:
            # the 32 MiB block was touched in a region advised for THP
            assert int(rep["bigblock"]["thp_kb"]) > 0, (r, rep)
    # -v says which pages and why
    assert re.search(r"transparent|THP", err, re.I), err
    assert re.search(r"no .*(huge ?pages?|hugetlb)|huge ?pages?.*(not|un)available|hugetlb.*fail", err, re.I), err


def test_lattice_reserves_huge_pages_and_gives_them_back(mem_machine: Machine) -> None:
    """With empty pools, `lattice run` (as root) grows a pool for the job's big
    memory, the ranks land on huge pages, and the pool is back to empty after."""
    with HugePagePools({GIB_KB: 0, MIB2_KB: 0}) as pools:
        if any(pools.got.values()):
            pytest.skip(f"huge pages in use elsewhere cannot be released: {pools.got}")
        reports, err = memmap(mem_machine, "memmap", pages="reserve")
        after = {kb: int(open(f"/sys/kernel/mm/hugepages/hugepages-{kb}kB/nr_hugepages").read())
                 for kb in (GIB_KB, MIB2_KB)}
    for r, rep in reports.items():
        assert_one_big_mapping(rep, IN_BIG_MEMORY)
        assert int(rep["heap"]["page_kb"]) >= MIB2_KB, (r, rep)
    assert "reserved" in err, err
    assert after == {GIB_KB: 0, MIB2_KB: 0}, f"pools not given back: {after}"


@pytest.fixture
def big_node(built: Path, tmp_path: Path) -> Iterator[Machine]:
    assert (built / "bin" / "cnk").exists(), "build/bin/cnk missing"
    m = make_machine(tmp_path, "--shape", "1x1x2", "--pset-size", "2", "--memory", "2G")
    m.run("block", "create", "C", "--shape", "1x1x2")
    m.run("boot", "C")
    yield m
    m.run("free", "C", check=False)


@pytest.mark.parametrize("exe", ["bigalloc", "bigalloc-static"])
def test_more_than_1gib_allocated_and_touched(big_node: Machine, exe: str) -> None:
    mib = 1200
    p = big_node.run("run", "--block", "C", "-n", "2", "--label", "--kernel", "cnk", "--cwd", "/tmp",
                     str(CNK_EX / exe), str(mib), timeout=60)
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


def test_pages_of_a_killed_run_come_back_after_its_machine_is_gone(built: Path, tmp_path: Path) -> None:
    """The book of reservations belongs to the host, like the pools: a `lattice
    run` killed outright whose $LATTICE_HOME is then deleted still has its pages
    given back, by the next cnk run of another machine."""
    book = tmp_path / "book"
    machines = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        m = make_machine(tmp_path / name, "--shape", "1x1x1", "--pset-size", "1", "--memory", f"{NODE_MIB}M")
        m.env["LATTICE_HUGEPAGES_BOOK"] = str(book)
        m.run("block", "create", "C", "--shape", "1x1x1")
        m.run("boot", "C")
        machines.append(m)
    a, b = machines
    try:
        p, after = _kill_a_run_then_run_again(a, b, book)
    finally:                                    # no daemons left behind, whatever failed
        for m in machines:
            if m.home.exists():
                m.run("free", "C", check=False)
    assert "gave back the huge pages of an ended run" in p.stderr, p.stderr
    assert after == {GIB_KB: 0, MIB2_KB: 0}, f"pools not given back: {after}"
    assert json.loads((book / "hugepages.json").read_text()) == {}


def _kill_a_run_then_run_again(a: Machine, b: Machine, book: Path) -> tuple[subprocess.CompletedProcess[str], dict[int, int]]:
    """Machine a's cnk run reserves pages and is SIGKILLed, a's home deleted;
    then machine b runs a cnk job: its output and the pools after it."""
    with HugePagePools({GIB_KB: 0, MIB2_KB: 0}) as pools:
        if any(pools.got.values()):
            pytest.skip(f"huge pages in use elsewhere cannot be released: {pools.got}")
        run = a.popen("run", "--block", "C", "-n", "1", "--kernel", "cnk", "--hugepages", "reserve",
                      "/bin/sleep", "60")
        try:
            entry: dict[str, object] = {}
            for _ in range(200):                # until a's reservation is in the book
                try:
                    entries = json.loads((book / "hugepages.json").read_text())
                except (OSError, ValueError):
                    entries = {}
                entry = next((e for k, e in entries.items() if k.startswith(str(a.home.resolve()))), {})
                if entry.get("pages"):
                    break
                time.sleep(0.05)
            if entry and not entry.get("pages") and sum(HugePagePools.nr(kb) for kb in (GIB_KB, MIB2_KB)):
                pytest.skip("another job's free huge pages covered the run: nothing was reserved")
            assert entry.get("pages"), f"no reservation of machine a in the book: {entries}"
            assert sum(HugePagePools.nr(kb) for kb in (GIB_KB, MIB2_KB)) > 0
        finally:
            run.kill()                          # no chance to give anything back
            run.wait()
        a.run("free", "C", check=False)         # its ranks end; the book still lists the pages
        shutil.rmtree(a.home)
        p = b.run("run", "--block", "C", "-n", "1", "--kernel", "cnk", "--hugepages", "reserve", "-v",
                  "/bin/true")
        after = {kb: HugePagePools.nr(kb) for kb in (GIB_KB, MIB2_KB)}
    return p, after
