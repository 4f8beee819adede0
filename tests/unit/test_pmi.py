"""PMI-1 and PMI-2 served hierarchically (cnode -> ciod -> lattice run), spoken
raw by a scripted client (tests/unit/pmi/pmi_client.c) run as the job on a
booted 1x1x4 machine in psets of 2: puts, fences and gets across psets,
appnum (MPMD), PMI_process_mapping, malformed lines, abort, and PMI_FD as a
local descriptor under cnk."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from tests.conftest import Machine, make_machine

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pmi") / "pmi_client"
    subprocess.run(["gcc", "-std=c11", "-O2", "-Wall", "-Wextra", "-o", str(out),
                    str(HERE / "pmi" / "pmi_client.c")], check=True)
    out.parent.chmod(0o755)
    return out


@pytest.fixture(scope="module", params=["own", "relayed"])
def machine(request: pytest.FixtureRequest, built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    """Each process's PMI_FD its own connection to ciod (the default), or
    relayed by its cnode (LATTICE_PMI_RELAY=1 at boot): every test runs both."""
    m = make_machine(tmp_path_factory.mktemp(f"pmi-{request.param}-"), "--shape", "1x1x4", "--pset-size", "2", "--memory", "256M")
    m.run("block", "create", "S", "--shape", "1x1x4")
    if request.param == "relayed":
        m.env["LATTICE_PMI_RELAY"] = "1"
    m.run("boot", "S")
    m.env.pop("LATTICE_PMI_RELAY", None)
    yield m
    m.run("free", "S", check=False)


def replies(out: str) -> dict[int, list[str]]:
    by: dict[int, list[str]] = {}
    for line in out.splitlines():
        rank, sep, text = line.partition("> ")
        if sep and rank.isdigit():
            by.setdefault(int(rank), []).append(text)
    return by


INIT1 = "1:cmd=init pmi_version=1 pmi_subversion=1"


def test_pmi1_put_fence_get_across_psets(machine: Machine, client: Path) -> None:
    # "peer:" names the PMI connection's far end from /proc: the host's view (--no-sandbox)
    p = machine.run("run", "--block", "S", "-n", "4", "--kernel", "linux", "--no-sandbox", str(client), "env:",
                    "peer:", INIT1,
                    "1:cmd=get_maxes", "1:cmd=get_appnum", "1:cmd=get_universe_size", "1:cmd=get_my_kvsname",
                    "1:cmd=put kvsname=%j key=card-%r value=addr-%r-x=y/z", "1:cmd=barrier_in",
                    "1:cmd=get kvsname=%j key=card-%o", "1:cmd=get kvsname=%j key=PMI_process_mapping",
                    "1:cmd=get kvsname=%j key=nosuchkey",
                    "1:cmd=put kvsname=%j key=second-%r value=%r", "1:cmd=barrier_in",
                    "1:cmd=get kvsname=%j key=second-%o", "1:cmd=finalize")
    by = replies(p.stdout)
    assert sorted(by) == [0, 1, 2, 3], p.stdout
    for r, lines in by.items():
        o = (r + 1) % 4
        assert lines[0].startswith(f"PMI_FD=8 PMI_RANK={r} PMI_SIZE=4 PMI_JOBID=lattice-")
        kvs = lines[0].rsplit("=", 1)[1]
        # PMI_FD's other end: ciod itself, or the cnode that relays
        assert lines[1] == f"peer={'ciod' if 'pmi-own-' in str(machine.home) else 'cnode'}", lines
        assert lines[2:] == [
            "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1",
            "cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024",
            "cmd=appnum rc=0 appnum=0", "cmd=universe_size rc=0 size=4", f"cmd=my_kvsname rc=0 kvsname={kvs}",
            "cmd=put_result rc=0", "cmd=barrier_out rc=0",
            f"cmd=get_result rc=0 msg=success value=addr-{o}-x=y/z",
            "cmd=get_result rc=0 msg=success value=(vector,(0,4,1))",
            "cmd=get_result rc=1 msg=key_not_found",
            "cmd=put_result rc=0", "cmd=barrier_out rc=0", f"cmd=get_result rc=0 msg=success value={o}",
            "cmd=finalize_ack rc=0"], lines


def test_pmi2_lines(machine: Machine, client: Path) -> None:
    p = machine.run("run", "--block", "S", "-n", "4", "--mode", "vn", "--kernel", "linux", str(client),
                    "1:cmd=init pmi_version=2 pmi_subversion=0", "2:cmd=fullinit;pmirank=%r;threaded=FALSE;",
                    "2:cmd=job-getid;", "2:cmd=info-getjobattr;key=PMI_process_mapping;",
                    "2:cmd=kvs-put;key=bc-%r;value=v%r;", "2:cmd=kvs-fence;", "2:cmd=kvs-get;jobid=%j;key=bc-%o;",
                    "2:cmd=kvs-get;jobid=%j;key=missing;",
                    "2:cmd=info-putnodeattr;key=shm-%r;value=seg%r;", "2:cmd=info-getnodeattr;key=shm-%r;wait=FALSE;",
                    "2:cmd=no-such-thing;", "2:cmd=finalize;")
    by = replies(p.stdout)
    assert sorted(by) == [0, 1, 2, 3], p.stdout
    for r, lines in by.items():
        o = (r + 1) % 4
        body = [ln.split("]", 1)[1] for ln in lines[1:]]
        assert lines[0] == "cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0"
        assert all(int(ln[1:7]) == len(b) for ln, b in zip(lines[1:], body)), lines   # the length prefix
        assert body[0] == (f"cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank={r};size=4;appnum=0;"
                           "debugged=FALSE;pmiverbose=FALSE;")
        assert body[1].startswith("cmd=job-getid-response;rc=0;jobid=lattice-")
        # vn: 2 cores per node, XYZT fills the 4 nodes first, so ranks r and r+2 share... a node each of 2
        assert body[2].startswith("cmd=info-getjobattr-response;rc=0;found=TRUE;value=(vector,")
        assert body[3:] == ["cmd=kvs-put-response;rc=0;", "cmd=kvs-fence-response;rc=0;",
                            f"cmd=kvs-get-response;rc=0;found=TRUE;value=v{o};",
                            "cmd=kvs-get-response;rc=0;found=FALSE;",
                            "cmd=info-putnodeattr-response;rc=0;",
                            f"cmd=info-getnodeattr-response;rc=0;found=TRUE;value=seg{r};",
                            "cmd=no-such-thing-response;rc=-1;errmsg=unknown PMI-2 command;",
                            "cmd=finalize-response;rc=0;"], body


def test_malformed_lines_get_errors_and_ciod_keeps_serving(machine: Machine, client: Path) -> None:
    long_key = "k" * 65
    long_val = "v" * 1025
    p = machine.run("run", "--block", "S", "-n", "2", "--kernel", "linux", str(client),
                    "1:cmd=get_maxes", INIT1, "1:garbage", "1:cmd=frobnicate", f"1:cmd=put kvsname=%j key={long_key} value=1",
                    f"1:cmd=put kvsname=%j key=k value={long_val}", "1:cmd=put kvsname=other key=k value=1",
                    "1:cmd=put kvsname=%j key= value=1", "1:cmd=get kvsname=%j", "s:" + "x" * 5000 + "\\n",
                    "r1:", "1:cmd=get_appnum", "1:cmd=finalize")
    by = replies(p.stdout)
    for r in (0, 1):
        lines = by[r]
        assert lines[0] == "cmd=error rc=-1 msg=command_before_init"
        assert lines[1].startswith("cmd=response_to_init rc=0")
        assert lines[2].startswith("cmd=error rc=-1 msg=malformed_PMI_line")
        assert lines[3] == "cmd=error rc=-1 msg=unknown_PMI-1_command"
        assert all(ln.startswith("cmd=put_result rc=-1 msg=") for ln in lines[4:7]), lines
        assert lines[7] == "cmd=error rc=-1 msg=malformed_PMI_line:_empty_value"
        assert lines[8].startswith("cmd=get_result rc=-1")
        assert lines[9] == "cmd=error rc=-1 msg=PMI_line_longer_than_4096_bytes"
        assert lines[10] == "cmd=appnum rc=0 appnum=0"      # still served
    ras = machine.run("ras").stdout
    assert "bad PMI request" in ras
    # the block is still fine
    assert machine.run("run", "--block", "S", "-n", "4", "--kernel", "linux", str(client), INIT1,
                       "1:cmd=finalize").returncode == 0


def test_bad_pmi2_length_prefix(machine: Machine, client: Path) -> None:
    p = machine.run("run", "--block", "S", "-n", "1", "--kernel", "linux", str(client),
                    "1:cmd=init pmi_version=2 pmi_subversion=0", "s:abcdefcmd=job-getid;", "r2:", check=False)
    assert "cmd=error-response;rc=-1;errmsg=bad PMI-2 length prefix" in p.stdout
    # its PMI is broken, so it cannot finalize: ending without it ends the job
    assert p.returncode == 1 and "exited without PMI finalize" in p.stderr, (p.returncode, p.stderr)


def test_mpmd_appnum_and_abort(machine: Machine, client: Path) -> None:
    p = machine.run("run", "--block", "S", "-n", "2", "--kernel", "linux", str(client), INIT1, "1:cmd=get_appnum",
                    "1:cmd=finalize", ":", "-n", "2", str(client), INIT1, "1:cmd=get_appnum", "1:cmd=finalize")
    by = replies(p.stdout)
    assert [by[r][1] for r in range(4)] == [f"cmd=appnum rc=0 appnum={a}" for a in (0, 0, 1, 1)], p.stdout
    p = machine.run("run", "--block", "S", "-n", "4", "--kernel", "linux", str(client), INIT1,
                    "1:cmd=barrier_in", "s:cmd=abort exitcode=%r message=rank-%r-gives-up\\n", "r1:", check=False)
    # rank r aborts with code r; the first abort the service node hears decides the
    # job's status (an abort with code 0 is still a failure: status 1)
    aborts = re.findall(r"rank (\d+) \(\S+\) called abort with code (\d+): rank-(\d+)-gives-up", p.stderr)
    assert aborts and all(r == c == m for r, c, m in aborts), p.stderr
    assert p.returncode == (int(aborts[0][1]) or 1), (p.returncode, p.stderr)
    assert "called abort" in machine.run("ras").stdout


def test_exit_without_finalize_ends_the_job(machine: Machine, client: Path) -> None:
    """A rank that used PMI and exits without finalize ends the job with its
    status (1 for 0) and a message naming it; ranks that never used PMI may."""
    p = machine.run("run", "--block", "S", "-n", "2", "--kernel", "linux", str(client), INIT1, check=False)
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert "exited without PMI finalize" in p.stderr
    assert machine.run("run", "--block", "S", "-n", "2", "--kernel", "linux", str(client)).returncode == 0


def test_pmi_fd_stays_local_under_cnk(machine: Machine, client: Path) -> None:
    p = machine.run("run", "--block", "S", "-n", "4", "--kernel", "cnk", "--hugepages", "keep", str(client), INIT1,
                    "1:cmd=put kvsname=%j key=c%r value=%r", "1:cmd=barrier_in", "1:cmd=get kvsname=%j key=c%o",
                    "1:cmd=finalize")
    by = replies(p.stdout)
    for r in range(4):
        assert by[r][-2] == f"cmd=get_result rc=0 msg=success value={(r + 1) % 4}", p.stdout
