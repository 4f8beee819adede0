"""`lattice run --kernel linux` in the node sandbox (issue 25): the job flag
LAT_JOB_SANDBOX by default, --no-sandbox, the job's file trees
(LATTICE_FS_TREES, lattice.jobs.trees), the MPI defaults of a sandboxed job, and
the record of which mode ran; checked without booting anything."""
from __future__ import annotations

import os
import pwd
import sqlite3
from pathlib import Path
from typing import Any, Iterator
from unittest import mock

import pytest

from lattice.state import db
from lattice.jobs import job, mapping, mpienv, trees
from lattice.transport import wire
from lattice.state.blocks import Block
from lattice.errors import LatticeError
from lattice.state.machine import Machine
from lattice.jobs.mapping import App

from cli_inprocess import home, jobs_not_run, lattice


@pytest.fixture(params=["sqlite", "postgresql"])
def machine_home(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Path]:
    """A 2x1x1 machine with block B, its database on each backend in turn."""
    database = "sqlite" if request.param == "sqlite" else request.getfixturevalue("pg_url")
    with home(tmp_path / "m"):
        assert lattice("init", "--shape", "2x1x1", "--pset-size", "2", "--memory", "64M",
                       "--database", database)[0] == 0
        assert lattice("block", "create", "B", "--shape", "2x1x1")[0] == 0
        yield tmp_path


@pytest.fixture
def no_boot() -> Iterator[dict[str, Any]]:
    """`lattice run` up to the job (cli_inprocess.jobs_not_run)."""
    with jobs_not_run() as seen:
        yield seen


def env_of(spec: job.Spec) -> dict[str, str]:
    return dict(spec.mapping.env)


# --- options ---------------------------------------------------------------------

def test_linux_is_sandboxed_by_default(machine_home: Path, no_boot: dict[str, Any]) -> None:
    status, _, err = lattice("run", "--block", "B", "--kernel", "linux", "--cwd", str(machine_home), "/bin/true")
    assert status == 0, err
    spec = no_boot["spec"]
    assert spec.sandbox is True
    assert env_of(spec)[trees.VAR].split(":")[0] == str(machine_home)


def test_no_sandbox_keeps_the_preload_client(machine_home: Path, no_boot: dict[str, Any]) -> None:
    status, _, err = lattice("run", "--block", "B", "--kernel", "linux", "--no-sandbox", "/bin/true")
    assert status == 0, err
    spec = no_boot["spec"]
    assert spec.sandbox is False
    assert trees.VAR not in env_of(spec)
    assert not set(mpienv.SANDBOX_DEFAULTS) & set(env_of(spec))


def test_cnk_is_never_sandboxed(machine_home: Path, no_boot: dict[str, Any]) -> None:
    status, _, err = lattice("run", "--block", "B", "--kernel", "cnk", "/bin/true")
    assert status == 0, err
    assert no_boot["spec"].sandbox is False and trees.VAR not in env_of(no_boot["spec"])


@pytest.mark.parametrize("args, words", [
    (["--kernel", "cnk", "--no-sandbox"], "--no-sandbox is for --kernel linux"),
    (["--no-sandbox"], "--no-sandbox is for --kernel linux"),          # cnk is the default kernel
    (["--kernel", "cnk", "--tree", "/tmp"], "--tree is for --kernel linux"),
    (["--kernel", "linux", "--no-sandbox", "--tree", "/tmp"], "--tree needs the sandbox"),
    (["--kernel", "linux", "--tree", "/no/such/dir"], "is not a directory"),
    (["--kernel", "linux", "--tree", "/tmp/a:b"], "may not hold ':'"),
    (["--kernel", "linux", "--tree", "/"], "the root directory cannot be a tree"),
    (["--kernel", "linux", "--env", "LATTICE_FS_TREES=/etc"], "name the job's trees with --tree"),
])
def test_bad_sandbox_options_say_one_line(machine_home: Path, no_boot: dict[str, Any], args: list[str],
                                          words: str) -> None:
    status, out, err = lattice("run", "--block", "B", *args, "/bin/true")
    assert status != 0 and "spec" not in no_boot
    lines = err.strip().splitlines()
    assert words in lines[0] and "Traceback" not in err, err
    assert len([l for l in lines if l.startswith("lattice:")]) == 1, err


def test_trees_given_and_the_owner_home(machine_home: Path, no_boot: dict[str, Any], tmp_path: Path) -> None:
    (tmp_path / "data" / "inner").mkdir(parents=True)
    (tmp_path / "work").mkdir()
    os.chdir(tmp_path)
    status, _, err = lattice("run", "--block", "B", "--kernel", "linux", "--cwd", "work", "--tree", "data",
                             "--tree", "data/inner", "--tree", str(tmp_path / "data") + "/", "/bin/true")
    assert status == 0, err
    got = env_of(no_boot["spec"])[trees.VAR].split(":")
    assert got[0] == str(tmp_path / "work")
    assert str(tmp_path / "data") in got and str(tmp_path / "data" / "inner") not in got
    assert got.count(str(tmp_path / "data")) == 1
    owner_home = pwd.getpwuid(os.getuid()).pw_dir
    if os.path.isdir(owner_home) and not any(trees.inside(owner_home, t) and t != owner_home for t in got):
        assert owner_home in got or trees.inside(owner_home, got[0])


def test_the_machine_default_trees(tmp_path: Path) -> None:
    (tmp_path / "shared").mkdir()
    (tmp_path / "work").mkdir()
    with home(tmp_path / "m"):
        assert lattice("init", "--shape", "2x1x1", "--pset-size", "2", "--memory", "64M",
                       "--linux-trees", f"{tmp_path}/shared")[0] == 0
        assert "trees = [" in (tmp_path / "m" / "machine.toml").read_text()
        from lattice.state import machine
        assert machine.load().linux_trees == (f"{tmp_path}/shared",)
        assert lattice("block", "create", "B", "--shape", "2x1x1")[0] == 0
        seen: dict[str, Any] = {}
        with mock.patch("lattice.nodes.boot.boot", lambda con, m, name, owner=None: __import__(
                "lattice.state.blocks").state.blocks.get(con, name)), mock.patch("lattice.nodes.boot.free"), \
                mock.patch("lattice.jobs.job.run", lambda con, m, b, spec, wait=False: seen.setdefault("spec", spec) and 0), \
                mock.patch("lattice.jobs.launch.need_kernel"):
            status, _, err = lattice("run", "--block", "B", "--kernel", "linux", "--cwd", f"{tmp_path}/work",
                                     "/bin/true")
        assert status == 0, err
        assert env_of(seen["spec"])[trees.VAR] == f"{tmp_path}/work:{tmp_path}/shared"      # no home: the list replaces it
    with home(tmp_path / "n"):
        status, _, err = lattice("init", "--linux-trees", "relative/path")
        assert status != 0 and "neither absolute nor ~" in err


# --- lattice.jobs.trees -----------------------------------------------------------------

def test_trees_normalised_deduplicated_nested_dropped(tmp_path: Path) -> None:
    for d in ("a/b", "c", "home/u/w"):
        (tmp_path / d).mkdir(parents=True)
    t = str(tmp_path)
    got = trees.job_trees(f"{t}/home/u/w/", [f"{t}/a/./b", "a", f"{t}/c//", "c", f"{t}/home/u/w/x/.."],
                          ["~"], f"{t}/home/u", base=t)
    # cwd first even inside the home; a inside nothing, a/b inside a, c once, cwd's inside dropped
    assert got == [f"{t}/home/u/w", f"{t}/home/u", f"{t}/a", f"{t}/c"]
    assert trees.env_value(got).count(":") == 3


def test_trees_inside_the_cwd_are_dropped(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    assert trees.job_trees(str(tmp_path), [str(tmp_path / "sub")], [], None, "/") == [str(tmp_path)]


def test_a_missing_home_is_left_out(tmp_path: Path) -> None:
    assert trees.job_trees(str(tmp_path), [], ["~"], "/nonexistent", "/") == [str(tmp_path)]
    assert trees.job_trees(str(tmp_path), [], ["~"], None, "/") == [str(tmp_path)]


def test_unchecked_trees_on_other_hosts() -> None:
    assert trees.job_trees("/w", ["/not/here"], [], None, "/", check=False) == ["/w", "/not/here"]


@pytest.mark.parametrize("cwd", ["/", "//", "/a:b"])
def test_bad_working_directories(cwd: str) -> None:
    with pytest.raises(LatticeError):
        trees.job_trees(cwd, [], [], None, "/")


def test_parse_setting() -> None:
    assert trees.parse_setting("") == ()
    assert trees.parse_setting("~:/data:/scratch") == ("~", "/data", "/scratch")
    with pytest.raises(LatticeError):
        trees.parse_setting("data")


# --- the job flag --------------------------------------------------------------------

@pytest.mark.parametrize("kernel, sandbox, want", [
    ("linux", True, wire.JOB_SANDBOX), ("linux", False, 0), ("cnk", False, wire.JOB_CNK)])
def test_the_job_message_carries_the_flag(kernel: str, sandbox: bool, want: int) -> None:
    m = Machine(shape=(2, 1, 1), pset_size=2, memory=64 << 20)
    b = Block("B", (0, 0, 0), (2, 1, 1), "Initialized", False, None)
    p = mapping.map_ranks(m, b, [App("/bin/true", [], 2)], "co", None)
    spec = job.Spec(exe="/bin/true", args=[], cwd="/tmp", env=[], nranks=2, uid=0, gid=0, groups=[], user="u",
                    mapping=p, kernel=kernel, sandbox=sandbox)
    seen: list[int] = []

    class Stop(Exception):
        pass

    def payload(*a: Any) -> bytes:
        seen.append(a[8])           # flags
        raise Stop

    class FakeCiod:
        pset, location = 0, "I:J00"

    fake = FakeCiod()
    with mock.patch("lattice.nodes.boot.ciods", return_value=[fake]), \
            mock.patch("lattice.transport.wire.placed_job_payload", payload), pytest.raises(Stop):
        job.Run(sqlite3.connect(":memory:"), m, b, spec, 1).start()
    assert seen[0] & (wire.JOB_SANDBOX | wire.JOB_CNK) == want


def test_run_refuses_a_sandboxed_cnk_spec() -> None:
    m = Machine(shape=(2, 1, 1), pset_size=2, memory=64 << 20)
    b = Block("B", (0, 0, 0), (2, 1, 1), "Initialized", False, None)
    p = mapping.map_ranks(m, b, [App("/bin/true", [], 1)], "co", None)
    spec = job.Spec(exe="/bin/true", args=[], cwd="/tmp", env=[], nranks=1, uid=0, gid=0, groups=[], user="u",
                    mapping=p, kernel="cnk", sandbox=True)
    with pytest.raises(LatticeError, match="sandbox is for --kernel linux"):
        job.run(sqlite3.connect(":memory:"), m, b, spec)


# --- MPI -----------------------------------------------------------------------------

def test_sandboxed_mpi_defaults(machine_home: Path, no_boot: dict[str, Any]) -> None:
    status, _, err = lattice("run", "--block", "B", "--kernel", "linux", "/bin/true")
    assert status == 0, err
    env = env_of(no_boot["spec"])
    assert env["OMPI_MCA_btl_vader_single_copy_mechanism"] == "none"
    assert env["UCX_POSIX_USE_PROC_LINK"] == "n"
    assert env["UCX_TLS"] == mpienv.UCX_TLS_SANDBOX_ONE_HOST == "self,sm"    # a job on one host
    status, _, err = lattice("run", "--block", "B", "--kernel", "linux", "--env", "UCX_TLS=tcp", "/bin/true")
    assert status == 0, err
    assert "UCX_TLS" not in env_of(no_boot["spec"]) and "UCX_TLS=tcp" in no_boot["spec"].env
    assert "UCX_TLS" not in mpienv.sandbox_defaults({}, one_host=False)      # across hosts: TCP too
    # the user's choice wins, whether given with --env or exported
    status, _, err = lattice("run", "--block", "B", "--kernel", "linux", "--env",
                             "OMPI_MCA_btl_vader_single_copy_mechanism=cma", "/bin/true")
    assert status == 0, err
    assert "OMPI_MCA_btl_vader_single_copy_mechanism" not in env_of(no_boot["spec"])
    assert "OMPI_MCA_btl_vader_single_copy_mechanism=cma" in no_boot["spec"].env


def test_open_mpi_files_in_the_sandbox_shm(tmp_path: Path) -> None:
    env = {"FLUX_PMI_LIBRARY_PATH": "/x"}
    with mpienv.OpenMpiJob(env, [], os.getuid(), os.getgid(), shm=tmp_path, sandbox=True) as o:
        assert o.dir is not None and o.dir.parent == tmp_path       # the id is still reserved on the host
        assert env["OMPI_MCA_btl_vader_backing_directory"] == "/dev/shm"
        assert env["OMPI_MCA_osc_sm_backing_directory"] == "/dev/shm"
        assert env["OMPI_MCA_orte_tmpdir_base"] == "/dev/shm"       # never a tree: /tmp is one under --cwd /tmp
        assert "sandbox" in (o.describe() or "")
    env = {"FLUX_PMI_LIBRARY_PATH": "/x"}
    with mpienv.OpenMpiJob(env, [], os.getuid(), os.getgid(), shm=tmp_path) as o:
        assert env["OMPI_MCA_btl_vader_backing_directory"] == str(o.dir)


# --- the record ------------------------------------------------------------------------

def test_jobs_says_which_mode_ran(machine_home: Path) -> None:
    con = db.connect()
    for kernel, sandbox in (("linux", 1), ("linux", 0), ("cnk", None), ("linux", None)):
        con.execute("INSERT INTO jobs (block, user, uid, exe, args, cwd, nranks, state, submitted, kernel, sandbox) "
                    "VALUES ('B', 'u', 0, '/bin/true', 'true', '/', 1, 'Terminated', 0, ?, ?)", (kernel, sandbox))
    con.close()                 # every statement was committed as it ran (either backend)
    status, out, err = lattice("jobs")
    assert status == 0, err
    kernels = [line.split()[4] for line in out.splitlines()[1:]]
    assert kernels == ["linux/sandbox", "linux/preload", "cnk", "linux"]


def test_summary_names_the_mode() -> None:
    assert "linux/sandbox" in job.summary("linux", {}, None, sandbox=True)[0]
    assert "preload" in job.summary("linux", {}, None, sandbox=False)[0]


def test_open_mpi_cliques_are_nodes_in_the_sandbox(tmp_path: Path) -> None:
    """Ranks of two nodes have the same pids in the sandbox: Open MPI shares
    memory only within a node there, and crosses nodes over TCP."""
    lib = tmp_path / "lib" / "libpmi.so"
    lib.parent.mkdir()
    lib.write_bytes(b"")
    m = Machine(shape=(2, 1, 1), pset_size=2, memory=64 << 20, cores=2)
    b = Block("B", (0, 0, 0), (2, 1, 1), "Initialized", False, None)
    p = mapping.map_ranks(m, b, [App("/x", [], 4)], "vn", None)
    with mock.patch("lattice.jobs.mpienv.is_open_mpi", return_value=True), \
            mock.patch("lattice.jobs.mpienv.prefix", return_value=tmp_path):
        host = mpienv.mpi_env("/x", m, p)
        node = mpienv.mpi_env("/x", m, p, sandbox=True)
        one = mpienv.mpi_env("/x", m, mapping.map_ranks(m, b, [App("/x", [], 2)], "vn", "TXYZ"), sandbox=True)
    assert host[mpienv.HOST_MAPPING] == "(vector,(0,1,4))" and host["OMPI_MCA_btl"] == "self,vader"
    assert node[mpienv.HOST_MAPPING] == mapping.process_mapping(p) == "(vector,(0,2,1),(0,2,1))"
    assert node["OMPI_MCA_btl"] == "self,vader,tcp"
    assert one["OMPI_MCA_btl"] == "self,vader"          # both ranks on one node
