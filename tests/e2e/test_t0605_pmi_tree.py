"""The PMI fence spread by the I/O nodes as a tree (docs/protocol.md
section 10): on a 2x2x2 machine in psets of 2 (four I/O nodes), MPICH jobs
start and compute through trees of fan-out 1 (a chain), 2 and 8 (the old
star: the service node sends to every I/O node); `lattice run -v` says who
sends to whom and the I/O nodes' logs show the connections below them.  A
job of 32 ranks' fences (PMI-1 spoken by bench/pmi_fence.c, 452-byte
values) gives every rank the right values.  Killing an I/O node in the
middle of the tree while a job runs ends the job at once, with a RAS
event, and no daemon hangs.  On a 4x4x4 machine (eight I/O nodes), 128
MPICH ranks placed irregularly by a map file, whose PMI_process_mapping is
longer than MPICH 4.0.2 reads, start and compute (MPICH finds the ranks
that share a node by itself)."""
from __future__ import annotations

import os
import queue
import random
import re
import signal
import threading
from pathlib import Path
from typing import Iterator

import pytest

from conftest import BUILD, EXAMPLES, Machine, make_machine

BLOCK = "T"
TOP = "lattice: PMI fence tree, fan-out {k}, {levels} level(s) of I/O nodes: the service node sends to {n} of 4: "


@pytest.fixture(scope="module")
def tree_machine(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    assert (EXAMPLES / "mpi" / "allreduce").exists(), "run make"
    m = make_machine(tmp_path_factory.mktemp("pmitree"), "--shape", "2x2x2", "--pset-size", "2",
                     "--memory", "256M")
    m.run("block", "create", BLOCK, "--shape", "2x2x2")
    m.run("boot", BLOCK)
    yield m
    m.run("free", BLOCK, check=False)


def ciod_log(m: Machine, pset: int) -> str:
    return (m.home / "blocks" / BLOCK / "log" / f"ciod-{pset}.log").read_text()


def last_job(m: Machine) -> int:
    return int(m.rows("SELECT max(id) FROM jobs")[0][0])


@pytest.mark.parametrize("kernel", ["cnk", "linux"])
def test_mpich_starts_through_a_tree_of_two(tree_machine: Machine, kernel: str) -> None:
    m = tree_machine
    m.env["LATTICE_PMI_FANOUT"] = "2"
    try:
        p = m.run("run", "-v", "--block", BLOCK, "-n", "8", "--kernel", kernel, str(EXAMPLES / "mpi" / "allreduce"))
    finally:
        m.env.pop("LATTICE_PMI_FANOUT")
    assert "allreduce: size 8 sum 28" in p.stdout and "allreduce: ok" in p.stdout
    assert TOP.format(k=2, levels=2, n=2) + "R00-M0-N00-I:J00, R00-M0-N00-I:J01" in p.stderr, p.stderr
    assert "lattice: PMI fence tree: R00-M0-N00-I:J00 sends to R00-M0-N00-I:J02, R00-M0-N00-I:J03" in p.stderr
    assert re.search(r"lattice: PMI: \d+ fence\(s\); the service node sent \d+ bytes of FENCE_OUT to 2 of 4 I/O "
                     "nodes", p.stderr), p.stderr
    job = last_job(m)
    # psets 2 and 3 went to pset 0, not to the service node
    sock0 = f"unix:{m.home}/run/{BLOCK}-0.sock"
    for child in (2, 3):
        assert f"job {job}: PMI tree: above {sock0}, 0 below" in ciod_log(m, child)
        assert f"job {job}: PMI tree: pset {child} below connected" in ciod_log(m, 0)
    assert f"job {job}: PMI tree: above the service node, 2 below" in ciod_log(m, 0)
    assert f"job {job}: PMI tree: above the service node, 0 below" in ciod_log(m, 1)


def test_a_chain_and_a_star(tree_machine: Machine) -> None:
    m = tree_machine
    for k, levels, n, program in (("1", 4, 1, "collectives"), ("8", 1, 4, "ring")):
        m.env["LATTICE_PMI_FANOUT"] = k
        try:
            p = m.run("run", "-v", "--block", BLOCK, "-n", "16", "--mode", "vn", str(EXAMPLES / "mpi" / program))
        finally:
            m.env.pop("LATTICE_PMI_FANOUT")
        assert TOP.format(k=k, levels=levels, n=n) in p.stderr, p.stderr
        assert "ok" in p.stdout, p.stdout
        sends = re.findall(r"PMI fence tree: (\S+) sends to (.*)", p.stderr)
        if k == "1":        # a chain: each I/O node sends to the next
            assert sends == [(f"R00-M0-N00-I:J0{i}", f"R00-M0-N00-I:J0{i + 1}") for i in range(3)], sends
            assert "FENCE_OUT to 1 of 4 I/O nodes" in p.stderr
        else:               # the star: only the service node sends, to all
            assert sends == [] and "FENCE_OUT to 4 of 4 I/O nodes" in p.stderr, sends


def test_fences_of_16_ranks_give_every_value(tree_machine: Machine) -> None:
    m = tree_machine
    m.env["LATTICE_PMI_FANOUT"] = "2"
    try:
        p = m.run("run", "--block", BLOCK, "-n", "16", "--mode", "vn", "--kernel", "linux",
                  str(BUILD / "bench" / "pmi_fence"), "20")
    finally:
        m.env.pop("LATTICE_PMI_FANOUT")
    assert p.stdout.splitlines()[-1] == "ok" and len(re.findall(r"^fence \d+ ", p.stdout, re.M)) == 20, p.stdout


@pytest.mark.parametrize("victim", [0, 3])
def test_killing_an_io_node_in_the_tree_ends_the_job(tree_machine: Machine, victim: int) -> None:
    """With fan-out 2, pset 0's I/O node is the parent of psets 2 and 3,
    and pset 3's a leaf below it: either, killed while the ranks fence every
    20 ms, ends the job, saying why (the lost connection, not a timer: the
    fences alone would run for half an hour), and every other daemon is left
    serving.  No bound on how long that takes: a loaded host stretches it."""
    m = tree_machine
    m.env["LATTICE_PMI_FANOUT"] = "2"
    try:
        run = m.popen("run", "--block", BLOCK, "-n", "8", "--kernel", "linux", str(BUILD / "bench" / "pmi_fence"),
                      "100000", "20")
    finally:
        m.env.pop("LATTICE_PMI_FANOUT")
    # the job's output read as it comes (stdout line by line, stderr kept), so a job that ends or
    # prints nothing fails the wait below with its stderr, not a blocked read or a spin to a timeout
    lines: queue.Queue[str] = queue.Queue()
    errs: list[str] = []

    def read_out() -> None:
        for line in run.stdout or []:
            lines.put(line)
        lines.put("")       # its end

    readers = [threading.Thread(target=read_out, daemon=True),
               threading.Thread(target=lambda: errs.extend(run.stderr or []), daemon=True)]
    for t in readers:
        t.start()
    try:
        while not (line := lines.get(timeout=600)).startswith("fence 20 "):     # a hang guard
            if not line:
                run.wait(timeout=600)
                readers[1].join(timeout=600)
                pytest.fail(f"the job ended before its 20th fence: exit {run.returncode}\n{''.join(errs)}")
        pid = m.rows("SELECT pid FROM daemons WHERE block = ? AND kind = 'ciod' AND node = ?", BLOCK, victim)[0][0]
        os.kill(pid, signal.SIGKILL)
        run.wait(timeout=600)       # a hang guard
        for t in readers:
            t.join(timeout=600)
    finally:
        if run.poll() is None:
            run.kill()
    err = "".join(errs)
    assert run.returncode != 0
    where = f"R00-M0-N00-I:J0{victim}"
    assert f"I/O node {where} lost" in err, err
    ras = m.run("ras").stdout
    assert f"I/O node {where} lost (connection closed)" in ras
    # the other I/O nodes are alive and their ranks gone: the block can be freed and booted again
    m.run("free", BLOCK)
    m.run("boot", BLOCK)
    assert "allreduce: ok" in m.run("run", "--block", BLOCK, "-n", "8", str(EXAMPLES / "mpi" / "allreduce")).stdout


def test_128_irregular_ranks_with_a_mapping_mpich_cannot_read(built: Path,
                                                              tmp_path_factory: pytest.TempPathFactory) -> None:
    m = make_machine(tmp_path_factory.mktemp("pmimap"), "--shape", "4x4x4", "--pset-size", "8", "--memory", "128M")
    m.run("block", "create", "M", "--shape", "4x4x4")
    m.run("boot", "M")
    try:
        cells = [(x, y, z, t) for t in range(2) for z in range(4) for y in range(4) for x in range(4)]
        random.Random(9).shuffle(cells)
        mapfile = m.work / "irregular.map"
        mapfile.write_text("".join(" ".join(map(str, c)) + "\n" for c in cells))
        mapfile.chmod(0o644)
        head = m.run("run", "--block", "M", "-n", "128", "--mode", "vn", "--mapping", str(mapfile), "--print-map",
                     "-v", "/bin/true").stdout.splitlines()[1]
        mapping = head.removeprefix("# PMI_process_mapping ")
        assert 640 < len(mapping) <= 1024, mapping     # was served, and MPICH 4.0.2 aborted MPI_Init on it
        for kernel in ("linux", "cnk"):
            p = m.run("run", "--block", "M", "-n", "128", "--mode", "vn", "--mapping", str(mapfile), "--kernel",
                      kernel, str(EXAMPLES / "mpi" / "allreduce"))
            assert "allreduce: size 128 sum 8128" in p.stdout and "allreduce: ok" in p.stdout, p.stderr
        logs = "".join(f.read_text() for f in (m.home / "blocks" / "M" / "log").glob("ciod-*.log"))
        assert f"PMI_process_mapping has {len(mapping)} characters, more than the 640 served" in logs
    finally:
        m.run("free", "M", check=False)
