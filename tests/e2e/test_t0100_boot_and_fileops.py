"""The default machine boots and a 16-rank job's file I/O goes through its I/O nodes."""
from __future__ import annotations

import os
import re
from pathlib import Path

from conftest import EXAMPLES, Machine


def test_default_machine_layout(default_machine: Machine) -> None:
    out = default_machine.run("machine").stdout
    # 16 compute nodes with coordinates, in two psets of 8 behind two I/O nodes
    for x in range(2):
        for y in range(2):
            for z in range(4):
                assert re.search(rf"\b{x}\s*,?\s*{y}\s*,?\s*{z}\b", out), f"node {x},{y},{z} missing:\n{out}"
    assert out.count("-I:") >= 2, out
    blocks = default_machine.run("blocks").stdout
    assert re.search(r"R00\b.*Initialized", blocks), blocks


def test_fileops_on_16_ranks(default_machine: Machine) -> None:
    m = default_machine
    work = m.work / "fileops"
    work.mkdir()
    os.chmod(work, 0o777)
    before = counters(m)
    p = m.run("run", "--block", "R00", "-n", "16", "--label", "--cwd", str(work), str(EXAMPLES / "fileops"))
    for r in range(16):
        assert re.search(rf"^{r}: rank {r}: ok \(\d+ bytes, 2 entries listed\)$", p.stdout, re.M), p.stdout
    # exactly the expected results on the I/O nodes' file system
    found = sorted(str(f.relative_to(work)) for f in work.rglob("*"))
    expected = sorted([f"rank-{r}" for r in range(16)] + [f"rank-{r}/result.txt" for r in range(16)])
    assert found == expected
    for r in range(16):
        assert (work / f"rank-{r}" / "result.txt").read_text() == f"rank {r} of 16\n" * (r + 1)
    # every kind of call was executed by the I/O nodes, at least once per rank
    after = counters(m)
    for call in ("openat", "write", "read", "close", "mkdirat", "renameat", "unlinkat", "getdents64",
                 "faccessat"):
        assert after[call] - before[call] >= 16, (call, before[call], after[call])
    assert after["fstatat"] + after["statx"] - before["fstatat"] - before["statx"] >= 16


def test_job_files_are_invisible_on_compute_nodes(default_machine: Machine) -> None:
    """The compute nodes see an empty directory where the job's files live, so
    the job above could only have worked through function shipping."""
    m = default_machine
    (m.work / "marker").write_text("only the I/O node sees this\n")
    pids = m.processes("cnode", "R00")
    assert len(pids) == 16
    for pid in pids:
        assert not Path(f"/proc/{pid}/root{m.work}/marker").exists()
    assert (m.work / "marker").exists()


def test_fortran_io(default_machine: Machine) -> None:
    m = default_machine
    work = m.work / "fortran"
    work.mkdir()
    p = m.run("run", "--block", "R00", "-n", "16", "--label", "--cwd", str(work), str(EXAMPLES / "fortran_io"))
    for r in range(16):
        assert re.search(rf"^{r}: rank {r}: fortran ok$", p.stdout, re.M), p.stdout
        lines = (work / f"rank-{r}.dat").read_text().splitlines()
        assert [int(l.split()[0]) for l in lines] == [i * (r + 1) for i in range(1, 11)]
        assert [float(l.split()[1]) for l in lines] == [i / 4 for i in range(1, 11)]
    assert sorted(f.name for f in work.iterdir()) == sorted(f"rank-{r}.dat" for r in range(16))


def test_block_stays_up_across_jobs(default_machine: Machine) -> None:
    m = default_machine
    ciods = m.processes("ciod", "R00")
    cnodes = m.processes("cnode", "R00")
    assert len(ciods) == 2 and len(cnodes) == 16
    for _ in range(2):
        p = m.run("run", "--block", "R00", "-n", "16", str(EXAMPLES / "hello"))
        assert len(re.findall(r"^hello from rank \d+ of 16", p.stdout, re.M)) == 16, p.stdout
    assert m.processes("ciod", "R00") == ciods
    assert m.processes("cnode", "R00") == cnodes


def counters(m: Machine) -> dict[str, int]:
    """Sum of the block's I/O node counters, by call name."""
    total: dict[str, int] = {}
    for line in m.run("counters", "R00").stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[-1].isdigit():
            total[parts[-2]] = total.get(parts[-2], 0) + int(parts[-1])
    assert total, "no counters"
    return total
