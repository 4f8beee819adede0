"""Standard input of ranks in the node sandbox (issue 25): `--kernel linux`
runs a rank without a PROC connection, so its descriptor 0 is a pipe fed by
a pump of cnode's that ships the rank's reads to ciod in the rank's slot
(compute/cnode/stdin_pump.c).  Before it, a sandboxed rank's descriptor 0
was /dev/null: `echo hi | lattice run --kernel linux cat` printed nothing.
Also: with --stdin=all a rank that ends without reading no longer stops the
others' input (ciod's stdin_gone; that hung under cnk too).

One 1x1x2 machine (one pset of 2 nodes) with block A, booted.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from conftest import LATTICE, Machine, booted_block, wait_for

GUARD = 600             # s: a bound on each command, only so that a hang fails


@pytest.fixture(scope="module")
def sb(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    yield from booted_block(tmp_path_factory.mktemp("sbstdin"), "A", "1x1x2", "--pset-size", "2",
                            "--memory", "256M")


def run(m: Machine, args: list[str], data: bytes) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*LATTICE, "run", "--block", "A", "--kernel", "linux", *args], env=m.env, input=data,
                          capture_output=True, timeout=GUARD)


def pumps_gone(m: Machine) -> bool:
    """Only the block's two cnode daemons are left: no pump (a fork of
    cnode's, which keeps its command line) outlived its job."""
    return len(m.processes("cnode", "A")) == 2


def test_cat_of_64_mib_is_byte_exact(sb: Machine) -> None:
    data = os.urandom(64 << 20)
    p = run(sb, ["-n", "1", "cat"], data)
    assert p.returncode == 0, p.stderr
    assert len(p.stdout) == len(data)
    assert hashlib.sha256(p.stdout).hexdigest() == hashlib.sha256(data).hexdigest()
    assert b"sandbox" in run(sb, ["-n", "1", "-v", "true"], b"").stderr      # it did run in the sandbox
    wait_for(lambda: pumps_gone(sb), GUARD)


def test_stdin_all_reaches_two_ranks_on_two_nodes(sb: Machine) -> None:
    data = os.urandom(1 << 20)          # many times the window and a pipe
    p = run(sb, ["-n", "2", "-l", "--stdin=all", "/bin/sh", "-c", 'echo "$LATTICE_NODE $(sha256sum)"'], data)
    assert p.returncode == 0, p.stderr
    digest = hashlib.sha256(data).hexdigest()
    lines = sorted(p.stdout.decode().splitlines())
    assert [ln.split()[0] for ln in lines] == ["0:", "1:"], lines
    assert all(ln.split()[2:] == [digest, "-"] for ln in lines), lines
    assert len({ln.split()[1] for ln in lines}) == 2, lines          # two nodes
    # one rank chosen: only it reads; the other reads end of file at once
    p = run(sb, ["-n", "2", "-l", "--stdin", "1", "/bin/sh", "-c", "wc -c"], data)
    assert sorted(p.stdout.decode().splitlines()) == ["0: 0", f"1: {len(data)}"], p.stdout
    wait_for(lambda: pumps_gone(sb), GUARD)


def test_a_rank_that_never_reads_ends_normally(sb: Machine) -> None:
    """Rank 1 ends without reading; rank 0 still gets all of the input."""
    data = os.urandom(8 << 20)
    p = run(sb, ["--stdin=all", "-n", "1", "cat", ":", "-n", "1", "true"], data)
    assert p.returncode == 0, p.stderr
    assert hashlib.sha256(p.stdout).hexdigest() == hashlib.sha256(data).hexdigest()
    wait_for(lambda: pumps_gone(sb), GUARD)


def test_the_job_ends_while_the_callers_input_stays_open(sb: Machine) -> None:
    """The rank reads one line and ends; the caller never closes its input:
    the pump's pending read must not keep the job (or itself) alive."""
    p = subprocess.Popen([*LATTICE, "run", "--block", "A", "--kernel", "linux", "-n", "1", "head", "-n", "1"],
                         env=sb.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdin is not None and p.stdout is not None and p.stderr is not None
    try:
        p.stdin.write(b"first line\nsecond line\n")
        p.stdin.flush()
        assert p.wait(timeout=GUARD) == 0, p.stderr.read()
        assert p.stdout.read() == b"first line\n"
    finally:
        p.kill()
        p.wait()
        p.stdin.close()
        p.stdout.close()
        p.stderr.close()
    wait_for(lambda: pumps_gone(sb), GUARD)
