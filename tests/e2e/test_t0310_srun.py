"""What srun and mpiexec users expect of `lattice run` (issue 14 item 2):
the caller's environment, standard input to rank 0, -N/--ntasks-per-node,
-np/-D/-l, a wall-clock limit and output files.  One booted 1x1x4 block in
psets of 2, so that every rank-spanning case crosses two I/O nodes."""
from __future__ import annotations

import os
import re
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from conftest import EXAMPLES, LATTICE, Machine, booted_block

KERNELS = ("cnk", "linux")


@pytest.fixture(scope="module")
def sm(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    yield from booted_block(tmp_path_factory.mktemp("srun"), "S", "1x1x4", "--pset-size", "2", "--memory", "256M")


@pytest.fixture(scope="module")
def probe(sm: Machine) -> str:
    """tests/e2e/stdio_probe.c."""
    exe = sm.work / "stdio_probe"
    subprocess.run(["gcc", "-std=c11", "-D_GNU_SOURCE", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(exe),
                    str(Path(__file__).with_name("stdio_probe.c"))], check=True)
    os.chmod(exe, 0o755)
    return str(exe)


def fnv(data: bytes) -> str:
    h = 1469598103934665603
    for b in data:
        h = ((h ^ b) * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def run_bytes(m: Machine, args: list[str], data: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*LATTICE, *args], env=m.env, input=data, capture_output=True, timeout=300)


def last_job(m: Machine) -> int:
    return max(int(line.split()[0]) for line in m.run("jobs").stdout.splitlines()[1:])


# ---- standard input ----

@pytest.mark.parametrize("kernel", KERNELS)
def test_stdin_reaches_rank_0_once(sm: Machine, kernel: str) -> None:
    p = sm.run("run", "--block", "S", "--kernel", kernel, "-n", "2", "cat", input="hello\n")
    assert p.stdout == "hello\n", (p.stdout, p.stderr)


@pytest.mark.parametrize("kernel", KERNELS)
def test_stdin_all_one_rank_or_none(sm: Machine, kernel: str) -> None:
    base = ["run", "--block", "S", "--kernel", kernel, "-n", "4", "-l"]
    p = sm.run(*base, "--stdin=all", "cat", input="hi\n")
    assert sorted(p.stdout.splitlines()) == [f"{r}: hi" for r in range(4)], p.stdout    # both I/O nodes
    p = sm.run(*base, "--stdin", "3", "cat", input="hi\n")
    assert p.stdout == "3: hi\n", p.stdout
    p = sm.run(*base, "--stdin=none", "cat", input="hi\n")
    assert p.stdout == "", p.stdout


@pytest.mark.parametrize("kernel", KERNELS)
def test_stdin_large_binary_input_arrives_whole(sm: Machine, probe: str, kernel: str) -> None:
    """Many times the window: the flow control has to work, byte for byte."""
    data = os.urandom(3 << 20)
    p = run_bytes(sm, ["run", "--block", "S", "--kernel", kernel, "-n", "2", probe, "sum"], data)
    assert p.returncode == 0, p.stderr
    assert sorted(p.stdout.decode().splitlines()) == [f"rank 0 read {len(data)} bytes fnv {fnv(data)}",
                                                      f"rank 1 read 0 bytes fnv {fnv(b'')}"]   # 1: end of file
    # the same bytes out again through cat: the output is not changed either
    p = run_bytes(sm, ["run", "--block", "S", "--kernel", kernel, "-n", "1", "cat"], data)
    assert p.returncode == 0 and p.stdout == data, p.stderr


@pytest.mark.parametrize("kernel", KERNELS)
def test_reading_rank_waits_while_the_others_run(sm: Machine, probe: str, kernel: str) -> None:
    """Rank 0 waits in poll and read for input that has not come; rank 1 on
    the same I/O node (and ranks 2, 3 on the other) are served and end
    meanwhile; then the input comes and rank 0 reads it and its end."""
    p = subprocess.Popen([*LATTICE, "run", "--block", "S", "--kernel", kernel, "-l", "-n", "1", probe, "poll", "100",
                          ":", "-n", "3", probe, "streams"], env=sm.env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdin is not None and p.stdout is not None
    seen = b""
    deadline = time.monotonic() + 120          # a guard against a hang, not a timing
    while not all(f"{r}: out {r}\n".encode() in seen for r in (1, 2, 3)) or b"0: rank 0 poll 0\n" not in seen:
        assert time.monotonic() < deadline, seen
        if select.select([p.stdout], [], [], 1.0)[0]:
            chunk = os.read(p.stdout.fileno(), 4096)
            assert chunk, seen
            seen += chunk
    assert b"read" not in seen                 # rank 0 still waits for its input
    p.stdin.write(b"late input\n")
    out, err = p.communicate(timeout=120)      # flushes and closes the input: its end
    seen += out
    assert p.returncode == 0, err
    assert b"0: rank 0 poll 1\n" in seen
    assert f"0: rank 0 read 11 bytes fnv {fnv(b'late input' + bytes([10]))}\n".encode() in seen, seen


# ---- environment ----

def rank_env(m: Machine, *args: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """Rank 0's environment as /usr/bin/env prints it."""
    p = subprocess.run([*LATTICE, "run", "--block", "S", "-n", "1", *args, "/usr/bin/env"],
                       env={**m.env, **(env or {})}, capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr
    return dict(line.split("=", 1) for line in p.stdout.splitlines() if "=" in line)


def test_caller_environment_reaches_the_ranks(sm: Machine) -> None:
    caller = {"FOO": "bar baz", "PMI_KVSNAME": "outer-job", "PMIX_RANK": "9", "LATTICE_TEST_X": "1"}
    env = rank_env(sm, env=caller)
    assert env["FOO"] == "bar baz" and env["PATH"] == sm.env["PATH"]
    # another job's process manager and the service node's settings stay out
    assert "PMI_KVSNAME" not in env and "PMIX_RANK" not in env and "LATTICE_TEST_X" not in env
    assert env["PMI_RANK"] == "0" and env["LATTICE_RANK"] == "0"


def test_a_value_that_is_not_utf8_passes_as_it_is(sm: Machine) -> None:
    p = subprocess.run([*LATTICE, "run", "--block", "S", "-n", "1", "/usr/bin/env"],
                       env={**sm.env, "RAW": "a\udcffb"}, capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    assert p.returncode == 0 and b"\nRAW=a\xffb\n" in p.stdout, p.stderr


def test_export_none_and_a_list(sm: Machine) -> None:
    env = rank_env(sm, "--export=NONE", env={"FOO": "bar"})
    assert "FOO" not in env and "PATH" not in env and env["LATTICE_RANK"] == "0"
    env = rank_env(sm, "--export=FOO,BAZ=1", env={"FOO": "bar", "QUX": "no"})
    assert env["FOO"] == "bar" and env["BAZ"] == "1"
    assert "QUX" not in env and "PATH" not in env


def test_which_value_wins(sm: Machine) -> None:
    """--env over everything it may set; Lattice's job variables over an
    exported value (MPIR_CVAR_ASYNC_PROGRESS is decided per node); the
    node's own (PMI_RANK) over everything."""
    caller = {"FOO": "exported", "MPIR_CVAR_ASYNC_PROGRESS": "7", "PMI_RANK": "5"}
    env = rank_env(sm, env=caller)
    assert env["FOO"] == "exported" and env.get("MPIR_CVAR_ASYNC_PROGRESS") in ("0", "1")
    assert env["PMI_RANK"] == "0"
    env = rank_env(sm, "--env", "FOO=given", "--env", "MPIR_CVAR_ASYNC_PROGRESS=1", env=caller)
    assert env["FOO"] == "given" and env["MPIR_CVAR_ASYNC_PROGRESS"] == "1"


def test_cnk_leaves_ucx_posix_out_unless_the_job_chooses(sm: Machine) -> None:
    """Under cnk UCX_TLS is ^posix (fewer trapped calls per peer at MPI_Init, mpienv.UCX_TLS_CNK); a
    UCX_TLS of the user's, given or exported, wins; the preload client sets none, the node sandbox
    UCX's shared memory only on one host (mpienv.UCX_TLS_SANDBOX_ONE_HOST)."""
    assert rank_env(sm, env={})["UCX_TLS"] == "^posix"
    assert rank_env(sm, "--export=NONE", env={})["UCX_TLS"] == "^posix"
    assert rank_env(sm, env={"UCX_TLS": "self,sysv,tcp"})["UCX_TLS"] == "self,sysv,tcp"
    assert rank_env(sm, "--env", "UCX_TLS=tcp", env={"UCX_TLS": "self"})["UCX_TLS"] == "tcp"
    assert "UCX_TLS" not in rank_env(sm, "--kernel", "linux", "--no-sandbox", env={})
    assert rank_env(sm, "--kernel", "linux", env={})["UCX_TLS"] == "self,sm"
    assert rank_env(sm, "--kernel", "linux", "--env", "UCX_TLS=tcp", env={})["UCX_TLS"] == "tcp"


def test_hwloc_plugins_with_nothing_to_find_are_left_out_unless_the_job_chooses(sm: Machine) -> None:
    """Every job's ranks get HWLOC_PLUGINS_BLACKLIST naming the plug-ins idle on this host
    (lattice.nodes.host.idle_hwloc_plugins), under either kernel; the job's own value wins."""
    from lattice.nodes import host
    idle = ",".join(host.idle_hwloc_plugins())
    assert idle, "pci and xml_libxml are idle on any Linux host"
    for kernel in KERNELS:
        assert rank_env(sm, "--kernel", kernel, env={})["HWLOC_PLUGINS_BLACKLIST"] == idle
    assert rank_env(sm, "--env", "HWLOC_PLUGINS_BLACKLIST=", env={})["HWLOC_PLUGINS_BLACKLIST"] == ""
    assert rank_env(sm, env={"HWLOC_PLUGINS_BLACKLIST": "hwloc_gl.so"})["HWLOC_PLUGINS_BLACKLIST"] == "hwloc_gl.so"
    p = sm.run("run", "--block", "S", "-n", "1", "-v", "/usr/bin/true")
    assert f"lattice: hwloc plug-ins that find nothing on the job's hosts left out: HWLOC_PLUGINS_BLACKLIST={idle}" \
        in p.stderr, p.stderr


TOPOLOGY = {"HWLOC_XMLFILE": f"/dev/shm/lattice-hwloc-{os.geteuid()}.xml", "HWLOC_THISSYSTEM": "1",
            "HWLOC_THISSYSTEM_ALLOWED_RESOURCES": "1"}
SANDBOX_TOPOLOGY = "/run/lattice-hwloc.xml"    # the host's file, bound there in the node sandbox (sandbox.h)
# cnk, Linux mode in the node sandbox, and with the preload client
TOPOLOGY_KERNELS = {"cnk": ["--kernel", "cnk"], "linux": ["--kernel", "linux"],
                    "preload": ["--kernel", "linux", "--no-sandbox"]}


def topology_vars(env: dict[str, str]) -> dict[str, str]:
    return {k: env[k] for k in TOPOLOGY if k in env}


@pytest.mark.parametrize("kernel", list(TOPOLOGY_KERNELS))
def test_ranks_load_the_hosts_topology_unless_the_job_names_one(sm: Machine, kernel: str) -> None:
    """The node points each rank's hwloc at the topology file the host's cores were learnt
    with (lattice.nodes.host.export_topology; in the node sandbox the same file bound at
    /run/lattice-hwloc.xml, the host's /dev/shm being out of sight); a job's own topology
    variable wins; an unsafe file (writable by others, or not the daemon's user's) is not used."""
    f = Path(TOPOLOGY["HWLOC_XMLFILE"])
    assert f.is_file(), "booting the block learnt the host's cores and left the topology"
    opts = TOPOLOGY_KERNELS[kernel]
    want = {**TOPOLOGY, "HWLOC_XMLFILE": SANDBOX_TOPOLOGY} if kernel == "linux" else TOPOLOGY
    assert topology_vars(rank_env(sm, *opts, env={})) == want
    assert topology_vars(rank_env(sm, *opts, "--env", "HWLOC_COMPONENTS=linux", env={})) == {}
    assert topology_vars(rank_env(sm, *opts, env={"HWLOC_XMLFILE": "/tmp/mine.xml"})) == \
        {"HWLOC_XMLFILE": "/tmp/mine.xml"}
    text = f.read_bytes()
    try:
        f.chmod(0o666)
        assert topology_vars(rank_env(sm, *opts, env={})) == {}, "writable by anyone: not used"
        f.chmod(0o644)
        os.chown(f, 65534, 65534)
        assert topology_vars(rank_env(sm, *opts, env={})) == {}, "another user's: not used"
        f.unlink()
        copy = Path(sm.work) / "topology.xml"
        copy.write_bytes(text)
        f.symlink_to(copy)
        assert topology_vars(rank_env(sm, *opts, env={})) == {}, "a link: not used"
    finally:
        f.unlink(missing_ok=True)
        f.write_bytes(text)
        f.chmod(0o644)


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_ranks_hwloc_reads_the_file_and_sees_the_host(sm: Machine, kernel: str) -> None:
    """hwloc in a rank (lstopo as the program) loads the topology from the file, not from
    /proc and /sys, and sees what hwloc sees on the host."""
    lstopo = shutil.which("lstopo-no-graphics")
    assert lstopo, "hwloc-nox is not installed (scripts/setup.sh installs it)"

    def objects(xml: str) -> list[tuple[str, str, str]]:
        import xml.etree.ElementTree as ET
        return sorted((o.get("type", ""), o.get("os_index", ""), o.get("name", ""))
                      for o in ET.fromstring(xml).iter("object"))

    p = sm.run("run", "--block", "S", "-n", "1", "--kernel", kernel, "--env", "HWLOC_COMPONENTS_VERBOSE=1",
               lstopo, "--of", "xml", "--whole-io", "-")
    assert "Enabling discovery component `xml'" in p.stderr and "Enabling discovery component `linux'" \
        not in p.stderr, p.stderr
    native = subprocess.run([lstopo, "--of", "xml", "--whole-io", "-"], capture_output=True, text=True,
                            check=True).stdout
    assert objects(p.stdout) == objects(native)


def test_huge_environment_is_a_clear_error(sm: Machine) -> None:
    jobs_before = sm.run("jobs").stdout
    # too many strings; too many bytes (a single variable over 128 KiB could
    # not even reach `lattice`: tests/unit/test_srun_options.py checks that one)
    for extra in ({f"V{i}": "y" for i in range(4200)}, {f"V{i}": "y" * 1000 for i in range(1100)}):
        p = subprocess.run([*LATTICE, "run", "--block", "S", "-n", "1", "/usr/bin/true"], env={**sm.env, **extra},
                           capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        assert p.returncode == 1, p.stderr
        assert p.stderr.startswith("lattice: error: the job's arguments and environment are too large")
        assert "Traceback" not in p.stderr
        assert "--export" in p.stderr                  # says what to do
        # without the caller's environment the same job runs
        ok = subprocess.run([*LATTICE, "run", "--block", "S", "-n", "1", "--export=NONE", "/usr/bin/true"],
                            env={**sm.env, **extra}, capture_output=True, text=True, timeout=120,
                            stdin=subprocess.DEVNULL)
        assert ok.returncode == 0, ok.stderr
    assert len(sm.run("jobs").stdout.splitlines()) == len(jobs_before.splitlines()) + 2   # refused ones: no job


# ---- ranks and nodes, working directory, labels ----

def test_nodes_and_tasks_per_node(sm: Machine) -> None:
    p = sm.run("run", "--block", "S", "-N", "2", "--ntasks-per-node", "2", "-l", str(EXAMPLES / "hello"))
    where = dict(re.findall(r"^(\d): hello from rank \d of 4 on (\S+)$", p.stdout, re.M))
    assert where == {"0": "R00-M0-N00-C:J00", "1": "R00-M0-N00-C:J00",
                     "2": "R00-M0-N00-C:J01", "3": "R00-M0-N00-C:J01"}, p.stdout
    p = sm.run("run", "--block", "S", "-N", "3", "-l", str(EXAMPLES / "hello"))     # one per node
    assert len(re.findall(r"of 3 on", p.stdout)) == 3
    p = sm.run("run", "--block", "S", "-N", "2", "--ntasks-per-node", "3", "--print-map", check=False)
    assert p.returncode == 1 and "at most 2" in p.stderr, p.stderr


def test_np_chdir_and_label(sm: Machine) -> None:
    p = sm.run("run", "--block", "S", "-np", "2", "-D", str(sm.work), "-l", "/bin/pwd")
    assert sorted(p.stdout.splitlines()) == [f"0: {sm.work}", f"1: {sm.work}"], p.stdout


# ---- wall-clock limit ----

def test_time_limit_ends_the_job_everywhere(sm: Machine) -> None:
    p = sm.run("run", "--block", "S", "-n", "4", "-t", "0:02", str(EXAMPLES / "sleeper"), "300", check=False,
               timeout=200)
    assert p.returncode == 124, (p.stdout, p.stderr)
    assert p.stderr.count("lattice:") == 1 and "reached its time limit of 00:00:02" in p.stderr, p.stderr
    job = last_job(sm)
    assert re.search(rf"job {job} reached its time limit", sm.run("ras").stdout)
    row = sm.run("jobs").stdout.splitlines()[-1].split()
    assert row[0] == str(job) and row[5:7] == ["Terminated", "124"], row
    ranks = sm.run("jobs", "--ranks", str(job)).stdout.splitlines()[1:]
    assert len(ranks) == 4 and all("time limit" in line for line in ranks), ranks
    sm.run("run", "--block", "S", "-n", "4", str(EXAMPLES / "hello"))      # the block is ready again


def test_bad_time_limit_is_refused_before_anything_runs(sm: Machine) -> None:
    p = sm.run("run", "--block", "S", "-t", "1:2:3:4", "/usr/bin/true", check=False)
    assert p.returncode == 1 and "bad --time" in p.stderr and "HH:MM:SS" in p.stderr, p.stderr


# ---- output files ----

def test_output_and_error_files(sm: Machine, probe: str, tmp_path: Path) -> None:
    cwd = tmp_path / "files"
    cwd.mkdir()
    p = subprocess.run([*LATTICE, "run", "--block", "S", "-n", "4", "-o", "out-%j-%t.txt", "-e", "err-%n-%%.txt",
                        probe, "streams"], env=sm.env, cwd=cwd, capture_output=True, text=True, timeout=120,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 0 and p.stdout == "" and p.stderr == "", p
    job = last_job(sm)
    names = sorted(f.name for f in cwd.iterdir())
    assert names == sorted([f"out-{job}-{r}.txt" for r in range(4)] + [f"err-{n}-%.txt" for n in range(4)])
    for r in range(4):
        assert (cwd / f"out-{job}-{r}.txt").read_text() == f"out {r}\n"
        assert (cwd / f"err-{r}-%.txt").read_text() == f"err {r}\n"     # one rank per node here
    # -o alone takes standard error too; one name for every rank: one file, whole lines
    p = subprocess.run([*LATTICE, "run", "--block", "S", "-n", "4", "-l", "-o", "all.txt", probe, "streams"],
                       env=sm.env, cwd=cwd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr
    lines = sorted((cwd / "all.txt").read_text().splitlines())
    assert lines == sorted([f"{r}: out {r}" for r in range(4)] + [f"{r}: err {r}" for r in range(4)]), lines
    p = sm.run("run", "--block", "S", "-o", "x-%q", "/usr/bin/true", check=False)
    assert p.returncode == 1 and "%q is not a pattern" in p.stderr, p.stderr


# ---- lattice jobs --running ----

def test_jobs_running_shows_the_running_job(sm: Machine) -> None:
    busy = sm.popen("run", "--block", "S", "-n", "1", str(EXAMPLES / "sleeper"), "300")
    assert busy.stdout is not None
    try:
        assert "sleeping" in busy.stdout.readline()
        lines = sm.run("jobs", "--running").stdout.splitlines()
        assert len(lines) == 2, lines                  # the header and this job only
        row = lines[1].split()
        assert row[5:7] == ["Running", "-"] and re.fullmatch(r"\d\d:\d\d:\d\d", row[9]), row
        assert row[10].endswith("sleeper")
    finally:
        busy.terminate()
        busy.communicate(timeout=120)
    assert len(sm.run("jobs", "--running").stdout.splitlines()) == 1


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a job as another user")
def test_output_files_belong_to_the_job_owner(sm: Machine) -> None:
    import pwd
    nobody = pwd.getpwnam("nobody")
    shared, private = sm.work / "out-shared", sm.work / "out-private"     # sm.work: others may reach it
    shared.mkdir()
    os.chmod(shared, 0o777)
    private.mkdir(mode=0o755)                  # root's: nobody may not create files there
    args = ["run", "--block", "S", "-n", "1", "--user", "nobody", "-D", "/tmp", "-o"]
    sm.run(*args, str(shared / "out-%u"), str(EXAMPLES / "hello"))
    made = shared / "out-nobody"
    assert made.read_text().startswith("hello from rank 0")
    assert (made.stat().st_uid, made.stat().st_gid) == (nobody.pw_uid, nobody.pw_gid)
    p = sm.run(*args, str(private / "out"), str(EXAMPLES / "hello"), check=False)
    assert p.returncode == 1 and "cannot create output file" in p.stderr and "Permission denied" in p.stderr, p
    assert not (private / "out").exists()
