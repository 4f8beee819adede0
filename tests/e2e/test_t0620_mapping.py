"""Rank mapping on the torus, end to end: for the orders XYZT, TXYZ, ZYXT and a
map file, in coprocessor and virtual node mode, under cnk and in Linux mode,
every rank reports (from LATTICE_RANK and its personality, read with
liblatpers) exactly the node coordinates and core the mapping says.

The expected places are computed here from the BGLMPI_MAPPING rule itself
(first letter fastest; a map file's line i is rank i), not by the service
node's code.  One 2x2x2 machine (two psets of 4, 2 cores per node, 256 MiB)
with block M booted over all of it serves the whole file.
"""
from __future__ import annotations

import os
import random
import re
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from conftest import BUILD, ROOT, Machine, make_machine
from lattice.nodes import host

SHAPE = (2, 2, 2)
CORES = 2
Place = tuple[int, int, int, int]       # x, y, z, t
MEMORY = 256 << 20
LINE = re.compile(r"rank=(\d+) coords=(\d+),(\d+),(\d+) t=(\d+) mode=(co|vn) app=(\S+) memory=(\d+) async=(\S+)")


@pytest.fixture(scope="module")
def mm(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    m = make_machine(tmp_path_factory.mktemp("mapping"), "--shape", "2x2x2", "--pset-size", "4",
                     "--memory", str(MEMORY), "--cores", str(CORES))
    m.run("block", "create", "M", "--shape", "2x2x2")
    m.run("boot", "M")
    yield m
    m.run("free", "M", check=False)


@pytest.fixture(scope="module")
def probe(mm: Machine) -> Path:
    """tests/e2e/mapping_probe.c against the personality library."""
    lib = BUILD / "lib" / "liblatpers.a"
    assert lib.exists(), f"{lib} missing: run make"
    exe = mm.work / "mapping_probe"
    subprocess.run(["gcc", "-std=c11", "-D_GNU_SOURCE", "-O2", "-Wall", "-Wextra", "-Werror",
                    f"-I{ROOT / 'compute' / 'include'}", "-o", str(exe), str(Path(__file__).with_name("mapping_probe.c")),
                    str(lib)], check=True)
    os.chmod(exe, 0o755)
    return exe


def by_order(order: str, ppn: int, n: int) -> list[Place]:
    """BGLMPI_MAPPING: rank written in mixed radix, the first letter the
    fastest digit."""
    size = {"X": SHAPE[0], "Y": SHAPE[1], "Z": SHAPE[2], "T": ppn}
    out = []
    for rank in range(n):
        c = {}
        for letter in order:
            c[letter], rank = rank % size[letter], rank // size[letter]
        out.append((c["X"], c["Y"], c["Z"], c["T"]))
    return out


def map_file(m: Machine, mode: str) -> tuple[Path, list[Place]]:
    """A shuffled map file covering the block, with comments and blank lines."""
    ppn = 1 if mode == "co" else CORES
    places = [(x, y, z, t) for x in range(2) for y in range(2) for z in range(2) for t in range(ppn)]
    random.Random(620).shuffle(places)
    f = m.work / f"map-{mode}"
    f.write_text("# x y z t, one line per rank\n\n" +
                 "".join(f"{x} {y} {z} {t}   # rank {r}\n" for r, (x, y, z, t) in enumerate(places)))
    return f, places


def co_progress(nodes: int) -> set[str]:
    """MPIR_CVAR_ASYNC_PROGRESS a co-mode node of a job of `nodes` nodes may
    get on this host (docs/architecture.md, "Nodes on cores"): 1 only with
    two real cores of its own (the nodes have 2 modelled cores)."""
    c = len(host.learn().cores)
    least, most = c // nodes, -(-c // nodes)
    return {"1"} if least >= 2 else {"0"} if most < 2 or nodes > c else {"0", "1"}


def reports(stdout: str, async_progress: str | None = None) -> dict[int, tuple[Place, str, str]]:
    """rank -> ((x, y, z, t), mode, app) from the probe's lines; each
    process's memory is the node's share for the mode, and
    MPIR_CVAR_ASYNC_PROGRESS in co mode is what the host's real cores allow
    (co_progress), unset in vn, unless the test gave its own."""
    out: dict[int, tuple[Place, str, str]] = {}
    lines = [LINE.search(l) for l in stdout.splitlines()]
    nodes = len({(g[2], g[3], g[4]) for g in lines if g})
    for line in stdout.splitlines():
        g = LINE.search(line)
        if g:
            r = int(g[1])
            assert r not in out, f"rank {r} reported twice:\n{stdout}"
            out[r] = ((int(g[2]), int(g[3]), int(g[4]), int(g[5])), g[6], g[7])
            assert int(g[8]) == MEMORY // (1 if g[6] == "co" else CORES), f"rank {r}: memory {g[8]} in {g[6]} mode"
            want = {async_progress} if async_progress else co_progress(nodes) if g[6] == "co" else {"-"}
            assert g[9] in want, f"rank {r}: MPIR_CVAR_ASYNC_PROGRESS={g[9]} in {g[6]} mode"
    return out


def printed_map(m: Machine, *args: str) -> list[Place]:
    """What `lattice run --print-map` says, rank by rank."""
    out = m.run("run", "--block", "M", "--print-map", *args).stdout.splitlines()
    assert out[1].split()[:6] == ["rank", "app", "x", "y", "z", "t"], out
    rows = [l.split() for l in out[2:]]
    assert [int(r[0]) for r in rows] == list(range(len(rows)))
    return [(int(r[2]), int(r[3]), int(r[4]), int(r[5])) for r in rows]


@pytest.mark.parametrize("kernel", ["linux", "cnk"])
@pytest.mark.parametrize("mode", ["co", "vn"])
@pytest.mark.parametrize("mapping", ["XYZT", "TXYZ", "ZYXT", "file"])
def test_every_rank_is_where_the_mapping_says(mm: Machine, probe: Path, kernel: str, mode: str,
                                              mapping: str) -> None:
    ppn = 1 if mode == "co" else CORES
    n = 8 * ppn
    if mapping == "file":
        path, want = map_file(mm, mode)
        arg = str(path)
    else:
        arg, want = mapping, by_order(mapping, ppn, n)
    opts = ["--mode", mode, "--mapping", arg, "-n", str(n)]
    assert printed_map(mm, *opts) == want, "--print-map disagrees with the mapping rule"
    p = mm.run("run", "--block", "M", *opts, "--kernel", kernel, "--hugepages", "keep", "--cwd", "/tmp",
               str(probe), "A", check=False, timeout=120)
    got = reports(p.stdout)
    assert p.returncode == 0 and sorted(got) == list(range(n)), \
        f"exit {p.returncode}, ranks {sorted(got)}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    for r in range(n):
        assert got[r] == (want[r], mode, "A"), (r, got[r], want[r])
    assert len({g[0] for g in got.values()}) == n, "two ranks on one core"


def test_the_user_s_async_progress_wins(mm: Machine, probe: Path) -> None:
    p = mm.run("run", "--block", "M", "-n", "2", "--env", "MPIR_CVAR_ASYNC_PROGRESS=0", "--hugepages", "keep",
               "--cwd", "/tmp", str(probe), "A", check=False)
    assert p.returncode == 0 and sorted(reports(p.stdout, "0")) == [0, 1], p.stdout + p.stderr


def test_fewer_ranks_than_slots(mm: Machine, probe: Path) -> None:
    """5 ranks in vn mode, cores first: nodes 0 and 1 full, node 2 half used."""
    p = mm.run("run", "--block", "M", "--mode", "vn", "--mapping", "TXYZ", "-n", "5", "--hugepages", "keep",
               "--cwd", "/tmp", str(probe), "A", check=False)
    got = reports(p.stdout)
    assert p.returncode == 0 and sorted(got) == list(range(5)), p.stdout + p.stderr
    assert [got[r][0] for r in range(5)] == by_order("TXYZ", CORES, 5)


@pytest.mark.parametrize("kernel", ["linux", "cnk"])
def test_mpmd(mm: Machine, probe: Path, kernel: str) -> None:
    """Two programs (here one image with different arguments) as one job:
    ranks numbered across them, each placed by the job's mapping."""
    p = mm.run("run", "--block", "M", "--mapping", "ZYXT", "--kernel", kernel, "--hugepages", "keep",
               "--cwd", "/tmp", "-n", "3", str(probe), "first", ":", "-n", "5", str(probe), "second",
               check=False)
    got = reports(p.stdout)
    assert p.returncode == 0 and sorted(got) == list(range(8)), p.stdout + p.stderr
    want = by_order("ZYXT", 1, 8)
    for r in range(8):
        assert got[r] == (want[r], "co", "first" if r < 3 else "second"), (r, got[r])


def test_bad_mappings_start_nothing(mm: Machine, probe: Path) -> None:
    """Errors come before the job: no job is recorded, the block stays up."""
    jobs = mm.run("jobs").stdout
    bad = mm.work / "bad-map"
    bad.write_text("0 0 0 0\n1 0 0 0\n0 0 0 0\n")
    for args, error in [(["--mapping", "XYZ"], "bad mapping order 'XYZ'"),
                        (["--mapping", str(bad), "-n", "3"], "line 3: 0 0 0 0 repeats line 1"),
                        (["--mapping", str(bad), "-n", "2", "--mode", "co"], "line 3: 0 0 0 0 repeats"),
                        (["--mode", "vn", "-n", "17"], "17 ranks do not fit in block M"),
                        (["--mapping", str(mm.work / "none")], "cannot read map file")]:
        p = mm.run("run", "--block", "M", *args, str(probe), "A", check=False)
        assert p.returncode == 1 and p.stderr.startswith("lattice: error: ") and error in p.stderr, \
            (args, p.stderr)
    assert mm.run("jobs").stdout == jobs
    assert "Initialized" in mm.run("blocks").stdout


@pytest.mark.parametrize("mode, order", [("co", "ZYXT"), ("vn", "TXYZ")])
def test_personality_is_what_the_service_node_says(mm: Machine, mode: str, order: str) -> None:
    """Each process prints its whole personality (lattice_personality_print);
    it is `lattice personality LOCATION --mode M --t T` for the place
    `--print-map` gives that rank."""
    exe = BUILD / "examples" / "cnk" / "personality"
    assert exe.exists(), f"{exe} missing: run make"
    n = 8 * (1 if mode == "co" else CORES)
    opts = ["--mode", mode, "--mapping", order, "-n", str(n)]
    rows = [l.split() for l in mm.run("run", "--block", "M", "--print-map", *opts).stdout.splitlines()[2:]]
    p = mm.run("run", "--block", "M", *opts, "--label", "--hugepages", "keep", "--cwd", "/tmp", str(exe),
               check=False)
    text: dict[int, list[str]] = {}
    for line in p.stdout.splitlines():
        rank, _, rest = line.partition(": ")
        text.setdefault(int(rank), []).append(rest)
    assert p.returncode == 0 and sorted(text) == list(range(n)), p.stdout + p.stderr
    for r, row in enumerate(rows):
        location, t = row[6], row[5]
        want = mm.run("personality", location, "--mode", mode, "--t", t).stdout.splitlines()
        assert text[r] == want, (r, text[r], want)
