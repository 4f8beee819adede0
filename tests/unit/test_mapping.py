"""Rank mapping on the torus (lattice.jobs.mapping, `lattice run --mode --mapping
--print-map`, MPMD): every mapping rule and every error, checked without
booting anything."""
from __future__ import annotations

import itertools
import random
import re
from pathlib import Path
from typing import Any, Iterator

import pytest

from lattice.nodes import host
from lattice.jobs import job, mapping
from lattice.transport import wire
from lattice.state.blocks import Block
from lattice.errors import LatticeError
from lattice.state.machine import Machine
from lattice.jobs.mapping import App, RankMapping, Slot, map_ranks, process_mapping

from cli_inprocess import home, jobs_not_run, lattice

M = Machine(shape=(2, 2, 2), pset_size=4, memory=256 << 20, cores=2)
WHOLE = Block("W", (0, 0, 0), (2, 2, 2), "Initialized", False, None)
UPPER = Block("U", (0, 0, 1), (2, 2, 1), "Initialized", False, None)   # z = 1 only


def apps(*ns: int) -> list[App]:
    return [App(f"/bin/prog{i}", [str(i)], n) for i, n in enumerate(ns)]


def rel(m: Machine, b: Block, s: Slot) -> tuple[int, int, int, int]:
    """A slot's coordinates relative to the block's corner, and its core."""
    x, y, z = m.coord(s.node)
    return x - b.corner[0], y - b.corner[1], z - b.corner[2], s.t


# --- orders ---------------------------------------------------------------------

def test_xyzt_is_the_default_and_the_formula() -> None:
    p = map_ranks(M, WHOLE, apps(8), "co", None)
    assert (p.mode, p.ppn) == ("co", 1)
    X, Y, Z = WHOLE.shape
    for s in p.slots:
        x, y, z, t = rel(M, WHOLE, s)
        assert s.rank == x + X * (y + Y * (z + Z * t))
    # XYZT in co mode is the block's node order (x fastest), as before mapping existed
    assert [s.node for s in p.slots] == WHOLE.nodes(M)
    assert map_ranks(M, WHOLE, apps(8), "co", "XYZT") == p


@pytest.mark.parametrize("order", ["".join(o) for o in itertools.permutations("XYZT")])
@pytest.mark.parametrize("mode", ["co", "vn"])
def test_every_order_first_letter_fastest(order: str, mode: str) -> None:
    """For all 24 orders: rank = c[o0] + S[o0]*(c[o1] + S[o1]*(c[o2] + S[o2]*c[o3]))."""
    m = Machine(shape=(4, 2, 3), pset_size=2, cores=3)
    b = Block("B", (0, 0, 0), (4, 2, 3), "Free", False, None)
    ppn = 1 if mode == "co" else 3
    p = map_ranks(m, b, apps(b.size * ppn), mode, order)
    size = {"X": 4, "Y": 2, "Z": 3, "T": ppn}
    seen = set()
    for s in p.slots:
        c = dict(zip("XYZT", rel(m, b, s)))
        want = 0
        for letter in reversed(order):
            want = want * size[letter] + c[letter]
        assert s.rank == want, (order, s)
        seen.add((s.node, s.t))
    assert len(seen) == b.size * ppn, "every slot of the block used once"


def test_txyz_fills_a_node_s_cores_first_and_xyzt_spreads() -> None:
    t = map_ranks(M, WHOLE, apps(4), "vn", "TXYZ")
    assert [(s.node, s.t) for s in t.slots] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    x = map_ranks(M, WHOLE, apps(4), "vn", "XYZT")
    assert [(s.node, s.t) for s in x.slots] == [(0, 0), (1, 0), (2, 0), (3, 0)]
    full = map_ranks(M, WHOLE, apps(16), "vn", "XYZT")
    assert [(s.node, s.t) for s in full.slots[8:10]] == [(0, 1), (1, 1)], "T is the slowest in XYZT"


def test_zyxt_walks_z_first() -> None:
    p = map_ranks(M, WHOLE, apps(8), "co", "ZYXT")
    assert [M.coord(s.node) for s in p.slots[:4]] == [(0, 0, 0), (0, 0, 1), (0, 1, 0), (0, 1, 1)]


def test_orders_are_case_insensitive() -> None:
    assert map_ranks(M, WHOLE, apps(8), "vn", "tzyx") == map_ranks(M, WHOLE, apps(8), "vn", "TZYX")


def test_coordinates_are_relative_to_the_block_s_corner() -> None:
    p = map_ranks(M, UPPER, apps(4), "co", "YXZT")
    assert [M.coord(s.node) for s in p.slots] == [(0, 0, 1), (0, 1, 1), (1, 0, 1), (1, 1, 1)]
    assert {s.node for s in p.slots} == set(UPPER.nodes(M))


@pytest.mark.parametrize("order", ["XYZ", "XXYZ", "XYZTT", "XYTT", "T", "xyzz"])
def test_bad_orders(order: str) -> None:
    with pytest.raises(LatticeError, match="bad mapping order .*permutation of X, Y, Z and T"):
        map_ranks(M, WHOLE, apps(2), "co", order)


# --- modes ----------------------------------------------------------------------

def test_mapping_leaves_the_progress_thread_to_the_real_cores() -> None:
    """MPICH's progress thread is decided per node on the host's cores
    (lattice.nodes.cores, tests/unit/test_cores.py), not by the mode alone."""
    for mode in ("co", "vn"):
        assert map_ranks(M, WHOLE, apps(2), mode, None).env == {}


def test_vn_runs_one_rank_per_core() -> None:
    m4 = Machine(shape=(2, 2, 2), pset_size=4, cores=4)
    p = map_ranks(m4, WHOLE, apps(32), "vn", "TXYZ")
    assert p.ppn == 4
    assert [s.t for s in p.slots[:5]] == [0, 1, 2, 3, 0]
    assert mapping.nodes_needed(m4, "vn", 9) == 3 and mapping.nodes_needed(m4, "co", 9) == 9


@pytest.mark.parametrize("mode, n, holds", [("co", 9, 8), ("vn", 17, 16)])
def test_more_ranks_than_the_block_holds(mode: str, n: int, holds: int) -> None:
    with pytest.raises(LatticeError, match=f"{n} ranks do not fit in block W: 8 nodes x .* hold {holds}"):
        map_ranks(M, WHOLE, apps(n), mode, None)
    with pytest.raises(LatticeError, match="do not fit"):
        map_ranks(M, WHOLE, apps(n - 2, 2 + 0) + apps(1), mode, None)    # counted over every program


def test_bad_mode() -> None:
    with pytest.raises(LatticeError, match="bad mode 'smp'"):
        map_ranks(M, WHOLE, apps(1), "smp", None)


# --- MPMD -----------------------------------------------------------------------

def test_mpmd_ranks_are_consecutive_and_app_is_the_program_index() -> None:
    p = map_ranks(M, WHOLE, apps(3, 1, 4), "co", None)
    assert [s.rank for s in p.slots] == list(range(8))
    assert [s.app for s in p.slots] == [0, 0, 0, 1, 2, 2, 2, 2]
    assert [a.exe for a in p.apps] == ["/bin/prog0", "/bin/prog1", "/bin/prog2"]


# --- map files ------------------------------------------------------------------

def write(tmp_path: Path, text: str) -> str:
    f = tmp_path / "map"
    f.write_text(text)
    return str(f)


def test_map_file_places_each_rank(tmp_path: Path) -> None:
    f = write(tmp_path, "# rank 0 on the far corner\n1 1 0 1\n\n0 0 0 0   # rank 1\n  1 0 0 0\n0 1 0 1\n")
    p = map_ranks(M, UPPER, apps(4), "vn", f)
    assert [rel(M, UPPER, s) for s in p.slots] == [(1, 1, 0, 1), (0, 0, 0, 0), (1, 0, 0, 0), (0, 1, 0, 1)]
    assert M.coord(p.slots[0].node) == (1, 1, 1), "relative to the corner 0,0,1"


def test_map_file_may_hold_more_lines_than_ranks(tmp_path: Path) -> None:
    f = write(tmp_path, "0 0 0 0\n1 0 0 0\n0 1 0 0\n")
    assert [rel(M, WHOLE, s) for s in map_ranks(M, WHOLE, apps(2), "co", f).slots] == [(0, 0, 0, 0), (1, 0, 0, 0)]


@pytest.mark.parametrize("text, mode, error", [
    ("0 0 0 0\n", "co", r"places 1 rank but the job has 2: every rank needs a line"),
    ("# nothing\n\n", "co", r"places 0 ranks but the job has 2"),
    ("0 0 0 0\n1 0 0 0\n0 0 0 0\n", "co", r"line 3: 0 0 0 0 repeats line 1"),     # even past the job's ranks
    ("0 0 0 0\n2 0 0 0\n", "co", r"line 2: x=2 is outside the 2x2x1 block \(x must be below 2\)"),
    ("0 0 0 0\n0 2 0 0\n", "co", r"line 2: y=2 is outside the 2x2x1 block"),
    ("0 0 0 0\n0 0 1 0\n", "co", r"line 2: z=1 is outside the 2x2x1 block"),
    ("0 0 0 0\n0 0 0 1\n", "co", r"line 2: t=1 is outside 1 process per node"),
    ("0 0 0 0\n0 0 0 2\n", "vn", r"line 2: t=2 is outside 2 processes per node"),
    ("0 0 0 0\n0 0 0\n", "co", r"line 2: expected `x y z t` \(four numbers\), got '0 0 0'"),
    ("0 0 0 0\n0 0 0 0 0\n", "co", r"line 2: expected `x y z t`"),
    ("0 0 0 0\n-1 0 0 0\n", "co", r"line 2: expected `x y z t`"),
    ("0 0 0 0\nx y z t\n", "co", r"line 2: expected `x y z t`"),
    ("0,0,0,0\n", "co", r"line 1: expected `x y z t`"),
])
def test_bad_map_files(tmp_path: Path, text: str, mode: str, error: str) -> None:
    with pytest.raises(LatticeError, match=error):
        map_ranks(M, UPPER, apps(2), mode, write(tmp_path, text))


def test_unreadable_map_files(tmp_path: Path) -> None:
    with pytest.raises(LatticeError, match="cannot read map file .*nofile: No such file") as e:
        map_ranks(M, WHOLE, apps(1), "co", str(tmp_path / "nofile"))
    assert e.value.long_message and "XYZT" in e.value.long_message
    with pytest.raises(LatticeError, match="cannot read map file .*: Is a directory"):
        map_ranks(M, WHOLE, apps(1), "co", str(tmp_path))
    (tmp_path / "bin").write_bytes(b"\xff\xfe0 0 0 0\n")
    with pytest.raises(LatticeError, match="cannot read map file"):
        map_ranks(M, WHOLE, apps(1), "co", str(tmp_path / "bin"))


# --- PMI_process_mapping --------------------------------------------------------

def mpich_decode(mapping: str, size: int) -> list[int]:
    """Node id of each rank, as MPICH reads a vector mapping (blocks repeat
    when the mapping is shorter than the job)."""
    m = re.fullmatch(r"\(vector,((?:\(\d+,\d+,\d+\),?)+)\)", mapping)
    assert m, mapping
    blocks = [tuple(map(int, t)) for t in re.findall(r"\((\d+),(\d+),(\d+)\)", m[1])]
    out: list[int] = []
    while len(out) < size:
        for start, count, ppn in blocks:
            for node in range(start, start + count):
                out.extend([node] * ppn)
    return out[:size]


def ids(p: RankMapping) -> list[int]:
    first: dict[int, int] = {}
    return [first.setdefault(s.node, len(first)) for s in p.slots]


@pytest.mark.parametrize("n, mode, order, want", [
    (8, "co", "XYZT", "(vector,(0,8,1))"),
    (16, "vn", "TXYZ", "(vector,(0,8,2))"),
    (16, "vn", "XYZT", "(vector,(0,8,1),(0,8,1))"),
    (5, "vn", "TXYZ", "(vector,(0,2,2),(2,1,1))"),
    (1, "co", "XYZT", "(vector,(0,1,1))"),
])
def test_process_mapping_examples(n: int, mode: str, order: str, want: str) -> None:
    p = map_ranks(M, WHOLE, apps(n), mode, order)
    assert process_mapping(p) == want
    assert mpich_decode(want, n) == ids(p)


def test_process_mapping_round_trips_any_mapping(tmp_path: Path) -> None:
    """Random map files on a 4-core machine: MPICH's reading of the string
    gives back exactly which ranks share a node."""
    m = Machine(shape=(2, 2, 2), pset_size=4, cores=4)
    rng = random.Random(4)
    cells = [(x, y, z, t) for x in range(2) for y in range(2) for z in range(2) for t in range(4)]
    for trial in range(200):
        rng.shuffle(cells)
        n = rng.randint(1, len(cells))
        f = tmp_path / f"map{trial}"
        f.write_text("".join(" ".join(map(str, c)) + "\n" for c in cells[:n]))
        p = map_ranks(m, WHOLE, apps(n), "vn", str(f))
        assert mpich_decode(process_mapping(p), n) == ids(p), (trial, process_mapping(p))
    for order in map("".join, itertools.permutations("XYZT")):
        for n in (1, 3, 8, 13, 32):
            p = map_ranks(m, WHOLE, apps(n), "vn", order)
            assert mpich_decode(process_mapping(p), n) == ids(p), (order, n)


def test_process_mapping_of_1024_ranks_and_more() -> None:
    """A regular mapping stays a few triples however many ranks (within
    the 640 characters an I/O node serves, ionode/ciod/pmi_engine.h
    PMI_MAPPING_MAX, so MPICH gets it); an irregular one of 2,048 ranks does
    not, and travels whole in the job message all the same (the I/O node
    decides what a rank may be given: tests/unit/test_pmi_engine.py)."""
    big = Machine(shape=(8, 8, 16), pset_size=64, cores=4)         # 1,024 nodes
    block = Block("B", (0, 0, 0), (8, 8, 16), "Initialized", False, None)
    for n, mode, order in ((1024, "co", "XYZT"), (4096, "vn", "TXYZ"), (4096, "vn", "XYZT"), (4096, "vn", "ZYXT")):
        p = map_ranks(big, block, apps(n), mode, order)
        text = process_mapping(p)
        assert len(text) <= 640 and mpich_decode(text, n) == ids(p), (n, mode, order, text)
    # 2,048 ranks, two on each node, in random order: hundreds of runs
    cells = [(x, y, z, t) for t in range(2) for z in range(16) for y in range(8) for x in range(8)]
    random.Random(15).shuffle(cells)
    p = map_ranks(big, block, apps(2048), "vn", "XYZT")
    p = p._replace(slots=[Slot(r, big.index(c[:3]), c[3], 0) for r, c in enumerate(cells)])
    text = process_mapping(p)
    assert len(text) > wire.PMI_VAL_MAX and mpich_decode(text, 2048) == ids(p)
    payload = wire.placed_job_payload(1, 0, 0, [0], [-1] * 64, 2048, "/", [], 0, 4, [], [("/bin/true", ["true"])],
                                      text)
    assert payload.endswith(wire.cstring(text))


# --- --print-map ----------------------------------------------------------------

def test_map_lines() -> None:
    p = map_ranks(M, UPPER, apps(3, 1), "vn", "TXYZ")
    lines = mapping.map_lines(M, p, "host1")
    assert lines[0].split() == ["rank", "app", "x", "y", "z", "t", "location", "host"]
    with_cpus = mapping.map_lines(M, p, "host1", ["0", "1", "2-3", "2-3"])
    assert with_cpus[0].split()[-1] == "cpus" and [l.split()[-1] for l in with_cpus[1:]] == ["0", "1", "2-3", "2-3"]
    assert [l.split() for l in lines[1:]] == [
        ["0", "0", "0", "0", "1", "0", "R00-M0-N00-C:J04", "host1"],
        ["1", "0", "0", "0", "1", "1", "R00-M0-N00-C:J04", "host1"],
        ["2", "0", "1", "0", "1", "0", "R00-M0-N00-C:J05", "host1"],
        ["3", "1", "1", "0", "1", "1", "R00-M0-N00-C:J05", "host1"]]
    assert len({l.index("location") if i == 0 else l.index("R00") for i, l in enumerate(lines)}) == 1, \
        "columns line up"


# --- `lattice run`: options, MPMD, errors before anything boots -----------------

@pytest.fixture
def machine_home(tmp_path: Path) -> Iterator[Path]:
    with home(tmp_path / "m"):
        assert lattice("init", "--shape", "2x2x2", "--pset-size", "4", "--memory", "256M")[0] == 0
        yield tmp_path


@pytest.fixture
def no_boot() -> Iterator[dict[str, Any]]:
    """`lattice run` up to the job (cli_inprocess.jobs_not_run)."""
    with jobs_not_run() as seen:
        yield seen


def test_print_map_cli(machine_home: Path) -> None:
    assert lattice("block", "create", "B", "--shape", "2x2x1")[0] == 0
    status, out, err = lattice("run", "--block", "B", "--mode", "vn", "--mapping", "TXYZ", "--print-map")
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("# block B (not booted): 2x2x1 at 0,0,0, vn mode, 2 processes per node, 8 ranks")
    assert len(lines) == 2 + 8 and lines[3].split()[:6] == ["1", "0", "0", "0", "0", "1"]
    assert lattice("blocks")[1].count("Free") == 1, "nothing booted"
    # without --block: the Free block B holds the job, and a new box would be no smaller
    mpmd = ("run", "-n", "3", "--mode", "vn", "--print-map", "/bin/true", ":", "-n", "2", "/bin/true")
    status, out, err = lattice(*mpmd)
    assert status == 0 and out.startswith("# block B (not booted): 2x2x1 at 0,0,0"), (out, err)
    assert [l.split()[1] for l in out.splitlines()[2:]] == ["0", "0", "0", "1", "1"]
    status, out, _ = lattice("run", "--block", "B", "-v", "--print-map", "-n", "3")
    lines = out.splitlines()
    assert status == 0 and lines[1] == "# PMI_process_mapping (vector,(0,3,1))"
    # the job's defaults (lattice.jobs.mpienv): hwloc's idle plug-ins and UCX's idle modules left out, UCX's
    # posix under cnk
    idle, ucx = ",".join(host.local().hwloc_idle), host.local().ucx_idle
    env = [f"# env HWLOC_PLUGINS_BLACKLIST={idle}", *([f"# env UCX_MODULES=^{','.join(ucx)}"] if ucx else []),
           "# env UCX_TLS=^posix"]
    k = 2 + len(env)
    assert lines[2:k] == env, lines
    assert lines[k].startswith("# cores: 3 nodes on ") and "of host local" in lines[k], lines
    assert [l.split()[1] for l in lines[k + 1:k + 4]] == ["node"] * 3 and all("CPUs" in l for l in lines[k + 1:k + 4]), lines
    assert lines[k + 4].startswith("rank") and lines[k + 4].split()[-1] == "cpus", lines
    host_cpus = set(host.local().cpus())
    assert all(host.parse_cpulist(l.split()[-1]) <= host_cpus for l in lines[k + 5:]), "a rank's CPUs are the host's"
    status, _, err = lattice("run", "-n", "5", "--print-map", "/bin/true")
    assert status == 1 and "no free block of whole psets holds 5 compute nodes" in err
    assert "auto-" not in lattice("blocks")[1]
    # with no such block: the block lattice run would create, not created
    assert lattice("block", "delete", "B")[0] == 0
    status, out, err = lattice(*mpmd)
    assert status == 0 and "not created yet" in out and "2x2x1 at 0,0,0" in out, (out, err)
    assert "auto-" not in lattice("blocks")[1]


@pytest.mark.parametrize("args, error", [
    (["--mapping", "XZT", "/bin/true"], "bad mapping order 'XZT'"),
    (["--mapping", "/nonexistent/map", "/bin/true"], "cannot read map file /nonexistent/map"),
    (["-n", "9", "/bin/true"], "9 ranks do not fit in the 8 compute nodes of this machine: co mode runs 1 per node, so they need 9"),
    (["-n", "17", "--mode", "vn", "/bin/true"], "17 ranks do not fit in the 8 compute nodes .*vn mode runs 2 per node, so they need 9"),
    (["--block", "B", "-n", "5", "/bin/true"], "5 ranks do not fit in block B: 4 nodes x 1 process"),
    (["--block", "B", "--mode", "vn", "-n", "5", "/bin/true", ":", "-n", "4", "/bin/true"],
     "9 ranks do not fit in block B: 4 nodes x 2 processes per node \\(vn mode\\) hold 8"),
    (["-n", "2", "/bin/true", ":", "/bin/true"], "/bin/true: every program of an MPMD job needs -n N"),
    (["/bin/true", ":", "-n", "2", "/bin/true"], "every program of an MPMD job needs -n N"),
    (["-n", "2", "/bin/true", ":", "-n", "2"], "program 1 of the MPMD job has no executable"),
    (["-n", "2", "/bin/true", ":"], "program 1 of the MPMD job has no executable"),
    (["-n", "2", "/bin/true", ":", "--label", "/bin/true"], "--label: a program after ':' takes only -n N"),
    (["-n", "2", "/bin/true", ":", "-n", "x", "/bin/true"], "-n needs a number of ranks"),
    (["-n", "2", "/bin/true", ":", "-n", "0", "/bin/true"], "-n must be at least 1"),
    (["-n", "2", "/bin/true", ":", "-n", "1", "/no/such/exe"], "/no/such/exe: no such file"),
    (["--print-map", "-n", "0"], "-n must be at least 1"),
    (["-n", "2"], "no program to run"),
])
def test_run_errors_before_anything_boots(machine_home: Path, no_boot: dict[str, Any], args: list[str],
                                          error: str) -> None:
    assert lattice("block", "create", "B", "--shape", "2x2x1")[0] == 0
    status, out, err = lattice("run", *args)
    assert status == 1 and re.search(error, err), err
    assert err.startswith("lattice: error: ")
    assert "booted" not in no_boot and "spec" not in no_boot
    assert "auto-" not in lattice("blocks")[1], "no block created"


def test_mode_choices(machine_home: Path) -> None:
    status, _, err = lattice("run", "--mode", "smp", "/bin/true")
    assert status == 2 and "invalid choice: 'smp'" in err


def test_run_builds_the_spec_from_the_mapping(machine_home: Path, no_boot: dict[str, Any]) -> None:
    status, _, err = lattice("run", "--mode", "vn", "--mapping", "TXYZ", "--env", "A=1", "-n", "3", "/bin/echo",
                             "a", "b", ":", "-n", "2", "/bin/cat", "-u")
    assert status == 0, err
    spec: job.Spec = no_boot["spec"]
    p = spec.mapping
    assert (spec.exe, spec.args, spec.nranks, spec.env) == ("/bin/echo", ["a", "b"], 5, ["A=1"])
    assert [(a.exe, a.args, a.nranks) for a in p.apps] == [("/bin/echo", ["a", "b"], 3), ("/bin/cat", ["-u"], 2)]
    assert (p.mode, p.ppn, [s.app for s in p.slots]) == ("vn", 2, [0, 0, 0, 1, 1])
    b: Block = no_boot["block"]
    assert b.auto and b.size == 4, "an automatic block sized for ceil(5 ranks / 2 per node) nodes"
    assert {s.node for s in p.slots} <= set(b.nodes(Machine(shape=(2, 2, 2), pset_size=4)))
    assert "auto-" not in lattice("blocks")[1], "the automatic block is deleted afterwards"


def test_the_user_s_env_wins_over_the_mode_s(machine_home: Path, no_boot: dict[str, Any]) -> None:
    assert lattice("run", "-n", "2", "/bin/true")[0] == 0
    assert [n.progress for n in no_boot["spec"].cores.nodes] in ([0, 0], [1, 1]), "co mode decides per node"
    assert lattice("run", "-n", "2", "--env", "MPIR_CVAR_ASYNC_PROGRESS=0", "/bin/true")[0] == 0
    assert [n.progress for n in no_boot["spec"].cores.nodes] == [wire.PROGRESS_UNSET] * 2
    assert no_boot["spec"].env == ["MPIR_CVAR_ASYNC_PROGRESS=0"]


def test_block_default_fills_every_slot(machine_home: Path, no_boot: dict[str, Any]) -> None:
    assert lattice("block", "create", "B", "--shape", "2x2x1")[0] == 0
    assert lattice("run", "--block", "B", "/bin/true")[0] == 0
    assert no_boot["spec"].nranks == 4
    assert lattice("run", "--block", "B", "--mode", "vn", "/bin/true")[0] == 0
    assert no_boot["spec"].nranks == 8 and no_boot["booted"] == ["B", "B"]
