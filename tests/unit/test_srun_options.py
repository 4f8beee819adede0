"""srun/mpiexec conventions of `lattice run` that need no machine (issue 14
item 2): the time limit's formats, --export, the layout of -n/-N/
--ntasks-per-node, -o/-e patterns, --stdin, the option spellings and
`lattice --version`.  tests/e2e/test_t0310_srun.py runs them on a block."""
from __future__ import annotations

import os
import re
import tomllib
from pathlib import Path

import pytest

import lattice
from lattice.jobs import distribution, jobenv, jobinput, mapping, outfiles, timelimit
from lattice.transport import wire
from lattice.state.blocks import Block
from lattice.cli.main import parser
from lattice.errors import LatticeError
from lattice.state.machine import Machine
from lattice.jobs.mapping import App

from cli_inprocess import lattice as run_lattice

ROOT = Path(__file__).resolve().parents[2]
M = Machine(shape=(2, 2, 2), pset_size=4, memory=256 << 20, cores=2)


# ---- -t/--time ----

@pytest.mark.parametrize("text, seconds", [
    ("5", 300), ("0:30", 30), ("1:30", 90), ("1:02:03", 3723), ("2-0", 2 * 86400), ("1-2", 93600),
    ("1-2:3", 93600 + 180), ("1-2:3:4", 93600 + 184), ("90", 5400),
])
def test_time_limit_formats_are_srun_s(text: str, seconds: int) -> None:
    assert timelimit.parse(text) == seconds


@pytest.mark.parametrize("text", ["0", "UNLIMITED", "infinite"])
def test_time_no_limit(text: str) -> None:
    assert timelimit.parse(text) is None


@pytest.mark.parametrize("text", ["", "1:2:3:4", "x", "1-", "-1", "1.5", "0:00", "1-2:3:4:5"])
def test_time_bad_forms_say_which_are_good(text: str) -> None:
    with pytest.raises(LatticeError, match="bad --time"):
        timelimit.parse(text)


def test_time_words() -> None:
    assert timelimit.words(3723) == "01:02:03"
    assert timelimit.words(93784) == "1-02:03:04"


# ---- --export ----

CALLER = {"PATH": "/bin", "FOO": "1", "PMI_RANK": "3", "PMIX_NAMESPACE": "x", "LATTICE_HOME": "/h",
          "MPIR_CVAR_ASYNC_PROGRESS": "1", "MPIR_CVAR_CH3_NOLOCAL": "1", "OMPI_MCA_x": "caller"}


def test_export_all_passes_everything_but_another_job_s_and_lattice_s() -> None:
    out, given = jobenv.exported("ALL", CALLER, {"OMPI_MCA_x"})
    assert given == {}
    assert sorted(out) == ["FOO=1", "MPIR_CVAR_CH3_NOLOCAL=1", "PATH=/bin"]   # OMPI_MCA_x: Lattice sets it


def test_export_none_and_list_and_values() -> None:
    assert jobenv.exported("NONE", CALLER, set()) == ([], {})
    out, given = jobenv.exported("FOO,MISSING,BAR=2", CALLER, set())
    assert out == ["FOO=1"] and given == {"BAR": "2"}
    out, given = jobenv.exported("ALL,FOO=9", CALLER, set())
    assert "FOO=1" not in out and "PATH=/bin" in out and given == {"FOO": "9"}     # the value given wins
    out, _ = jobenv.exported("PMI_RANK,LATTICE_HOME", CALLER, set())
    assert out == []                                  # never exported, even by name


@pytest.mark.parametrize("value", ["", ",", "FOO,ALL", "NONE,FOO", "1BAD", "A-B=1"])
def test_export_bad_values(value: str) -> None:
    with pytest.raises(LatticeError):
        jobenv.parse_export(value)


def test_size_limits_of_the_job_message() -> None:
    jobenv.check_size(["/bin/true", "/tmp"], [f"V{i}=x" for i in range(4000)])
    with pytest.raises(LatticeError, match=r"environment variable BIG is \d+ bytes") as e:
        jobenv.check_size(["/bin/true"], ["BIG=" + "x" * (128 << 10)])
    assert "--export" in (e.value.long_message or "")
    with pytest.raises(LatticeError, match="4201 strings"):
        jobenv.check_size(["/bin/true"], [f"V{i}=x" for i in range(4200)])
    with pytest.raises(LatticeError, match="too large") as e:
        jobenv.check_size(["/bin/true"], [f"V{i}=" + "y" * 100_000 for i in range(11)])
    assert "V0 (100003 bytes)" in (e.value.long_message or "")


# ---- -n, -N, --ntasks-per-node ----

@pytest.mark.parametrize("mode, n, nodes, per, size, want", [
    (None, None, None, None, None, ("co", None, None)),
    (None, 4, None, None, None, ("co", None, 4)),
    (None, None, 3, None, None, ("co", 3, 3)),
    (None, 6, 3, None, None, ("vn", 3, 6)),           # two per node: virtual node mode
    (None, 5, 3, None, None, ("vn", 3, 5)),
    (None, None, 2, 2, None, ("vn", 2, 4)),
    (None, 3, None, 2, None, ("vn", 2, 3)),
    (None, None, None, 2, 8, ("vn", 8, 16)),          # the whole block
    ("vn", 2, 2, 1, None, ("vn", 2, 2)),
])
def test_layout(mode: str | None, n: int | None, nodes: int | None, per: int | None, size: int | None,
                want: tuple[str, int | None, int | None]) -> None:
    assert tuple(distribution.layout(M, mode, n, nodes, per, size)) == want


@pytest.mark.parametrize("mode, n, nodes, per, size, says", [
    ("co", 4, 2, None, None, "need virtual node mode"),
    (None, 6, 2, None, None, "at most 2"),
    (None, None, 2, 3, None, "at most 2"),
    (None, 2, 4, None, None, "cannot use -N 4 nodes"),
    (None, 5, 2, 2, None, "do not fit"),
    (None, None, 9, None, 8, "the block has 8"),
    (None, None, 0, None, None, "-N must be at least 1"),
])
def test_layout_refusals(mode: str | None, n: int | None, nodes: int | None, per: int | None, size: int | None,
                         says: str) -> None:
    with pytest.raises(LatticeError, match=says):
        distribution.layout(M, mode, n, nodes, per, size)


def test_nodes_spread_ranks_in_blocks() -> None:
    """-N: consecutive ranks share a node, the first nodes one more."""
    b = Block("W", (0, 0, 0), (2, 2, 2), "Initialized", False, None)
    p = mapping.map_ranks(M, b, [App("/bin/x", [], 5)], "vn", None, nodes=3)
    assert [(M.coord(s.node), s.t) for s in p.slots] == [
        ((0, 0, 0), 0), ((0, 0, 0), 1), ((1, 0, 0), 0), ((1, 0, 0), 1), ((0, 1, 0), 0)]
    with pytest.raises(LatticeError, match="more than -N 2"):
        mapping.map_ranks(M, b, [App("/bin/x", [], 4)], "co", "XYZT", nodes=2)


# ---- -o/-e ----

def test_output_patterns() -> None:
    assert outfiles.expand("o-%j.%t.%n.%N.%u.%%", 7, 3, 1, "R00-M0-N00-C:J01", "ann") == \
        "o-7.3.1.R00-M0-N00-C:J01.ann.%"
    assert outfiles.check("plain.txt", "-o") == "plain.txt"
    for bad in ("x-%q", "x%"):
        with pytest.raises(LatticeError, match="is not a pattern"):
            outfiles.check(bad, "-o")


def test_output_files_are_made_before_the_ranks_run(tmp_path: Path) -> None:
    me = outfiles.Owner("me", os.getuid(), os.getgid(), [])
    routes = outfiles.Plan("out-%t", None, str(tmp_path), me).open(5, [0, 0, 1], ["A", "A", "B"])
    try:
        assert sorted(f.name for f in tmp_path.iterdir()) == ["out-0", "out-1", "out-2"]
        assert routes.stream(1, wire.STDERR) is routes.stream(1, wire.STDOUT)     # -o alone: both
    finally:
        routes.close()
    routes = outfiles.Plan(None, "err-%n", str(tmp_path), me).open(5, [0, 0, 1], ["A", "A", "B"])
    try:
        assert routes.stream(0, wire.STDOUT) is None                              # the run's own stdout
        assert routes.stream(0, wire.STDERR) is routes.stream(1, wire.STDERR)      # one node, one file
    finally:
        routes.close()
    with pytest.raises(LatticeError, match="cannot create output file .*no-such-dir"):
        outfiles.Plan("no-such-dir/o", None, str(tmp_path), me).open(1, [0], ["A"])


# ---- --stdin ----

def test_stdin_values() -> None:
    assert jobinput.parse("none") is None
    assert jobinput.parse("ALL") == wire.STDIN_ALL
    assert jobinput.parse("3") == 3
    with pytest.raises(ValueError, match="all, none or a rank"):
        jobinput.parse("-1")


# ---- spellings ----

def test_srun_and_mpiexec_spellings() -> None:
    a = parser("run").parse_args(["run", "-np", "4", "-N", "2", "--ntasks-per-node", "2", "-l", "-D", "/tmp",
                                  "-t", "5", "-o", "o", "-e", "e", "--export=NONE", "--stdin=all", "a.out", "-l"])
    assert (a.n, a.nodes, a.ntasks_per_node, a.label, a.cwd, a.time, a.output, a.error, a.export, a.stdin) == \
        (4, 2, 2, True, "/tmp", "5", "o", "e", "NONE", "all")
    assert (a.exe, a.args) == ("a.out", ["-l"])          # the program's own options stay its own
    assert parser("run").parse_args(["run", "-n4", "x"]).n == 4
    assert parser("run").parse_args(["run", "--chdir", "/d", "--ntasks", "3", "x"]).cwd == "/d"


def test_version_is_the_package_s() -> None:
    status, out, _ = run_lattice("--version")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert status == 0 and out.strip() == f"lattice {project['version']} (wire protocol {wire.VERSION})"
    assert lattice.__version__ == project["version"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", lattice.__version__)
