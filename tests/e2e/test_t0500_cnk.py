"""Unchanged programs run under the compute node kernel (`lattice run --kernel cnk`,
the default): static, static-pie and dynamic C with stdio and malloc, pthreads,
Fortran file I/O, fork and unsupported calls answered with ENOSYS, and the
personality API.  One 1x1x2 machine (pset of 2) with block C booted serves
every test of this file."""
from __future__ import annotations

import os
import re
import struct
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from conftest import Machine, make_machine
from lattice.nodes import host
from cnk_helpers import CNK_EX, EM_X86_64, by_rank, class_counts, elf_header, interpreter, last_job

ET_EXEC, ET_DYN = 2, 3


@pytest.fixture(scope="module")
def cnk_machine(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    assert (built / "bin" / "cnk").exists(), "build/bin/cnk missing: the compute node kernel is not built"
    m = make_machine(tmp_path_factory.mktemp("cnk"), "--shape", "1x1x2", "--pset-size", "2",
                     "--memory", "512M")
    m.run("block", "create", "C", "--shape", "1x1x2")
    m.run("boot", "C")
    yield m
    m.run("free", "C", check=False)


def job(m: Machine, *args: str, n: int = 2, kernel: str | None = "cnk", check: bool = True,
        timeout: float = 60) -> subprocess.CompletedProcess[str]:
    opts = ["run", "--block", "C", "-n", str(n), "--label"]
    if kernel:
        opts += ["--kernel", kernel]
    return m.run(*opts, *args, check=check, timeout=timeout)


def workdir(m: Machine, name: str) -> Path:
    d = m.work / name
    d.mkdir()
    os.chmod(d, 0o777)
    return d


VARIANTS = {
    # suffix: (ELF type, has an interpreter)
    "": (ET_DYN, True),          # the ordinary dynamic PIE build
    "-static": (ET_EXEC, False),  # fixed address 0x400000
    "-spie": (ET_DYN, False),     # static-pie
}


@pytest.mark.parametrize("variant", list(VARIANTS), ids=["dynamic", "static", "static-pie"])
def test_stdio_and_malloc(cnk_machine: Machine, variant: str) -> None:
    m = cnk_machine
    exe = CNK_EX / f"stdio_malloc{variant}"
    # the variant really is what it says
    h = elf_header(exe)
    assert (h["type"], interpreter(exe) is not None) == VARIANTS[variant], (exe, h, interpreter(exe))
    assert h["machine"] == EM_X86_64
    n = 2345
    p = job(m, "--cwd", "/tmp", str(exe), str(n))
    big = sum((i * 2654435761) & 0xFFFFFFFF for i in range(0, (64 << 20) // 4, 1024))
    ranks = by_rank(p.stdout)
    for r in range(2):
        assert f"rank {r}: stdio+malloc ok sum={sum(i * i for i in range(n))} big={big}" in ranks.get(r, []), p.stdout
        assert f"{r}: rank {r}: stderr works" in p.stdout + p.stderr
    # the calls were classified by cnk: output was shipped, memory was local
    counts = class_counts(m, last_job(m))
    for r in range(2):
        assert counts[r].get("shipped", 0) >= 2 and counts[r].get("local", 0) >= 1, counts


@pytest.mark.parametrize("variant", ["", "-static", "-spie"], ids=["dynamic", "static", "static-pie"])
def test_two_threads(cnk_machine: Machine, variant: str) -> None:
    n = 3_000_000
    p = job(cnk_machine, str(CNK_EX / f"threads{variant}"), "1", str(n))
    ranks = by_rank(p.stdout)
    for r in range(2):
        assert f"threads: 1 workers + main ok total={n * (n - 1) // 2} tls={n}" in ranks.get(r, []), p.stdout


def test_more_threads_than_cores_fail_cleanly(cnk_machine: Machine) -> None:
    """cnk allows a thread per core (2 here); asking for many more makes
    pthread_create fail with EAGAIN (the program reports it), nothing crashes,
    and the block runs the next job."""
    p = job(cnk_machine, str(CNK_EX / "threads"), "16", "1000", n=1, check=False)
    assert p.returncode == 3, (p.stdout, p.stderr)
    assert re.search(r"^0: threads: pthread_create #\d+ failed: EAGAIN", p.stdout, re.M), p.stdout
    p = job(cnk_machine, str(CNK_EX / "threads"), "1", "1000", n=1)
    assert "ok total=499500" in p.stdout


@pytest.mark.parametrize("variant", ["", "-static"], ids=["dynamic", "static"])
def test_fortran_file_io(cnk_machine: Machine, variant: str) -> None:
    m = cnk_machine
    work = workdir(m, f"fortran{variant}")
    n = 64
    p = job(m, "--cwd", str(work), str(CNK_EX / f"fortran_file{variant}"), str(n))
    ranks = by_rank(p.stdout)
    for r in range(2):
        assert f"rank {r}: fortran file i/o ok records={n} bytes={16 * n}" in ranks.get(r, []), p.stdout
        # the files are on the I/O node's side, with the values the program wrote
        lines = (work / f"table-{r}.txt").read_text().splitlines()
        assert len(lines) == n + 1 and lines[-1] == "end"
        for i, line in enumerate(lines[:-1], start=1):
            a, b, c = line.split()
            assert (int(a), int(b)) == (i, i * (r + 1)) and abs(float(c) - i ** 0.5) < 1e-7
        recs = (work / f"recs-{r}.bin").read_bytes()
        assert len(recs) == 16 * n
        assert [struct.unpack_from("<qd", recs, 16 * k) for k in range(n)] == [(i, i / 8) for i in range(1, n + 1)]
    # the scratch files were deleted, nothing else is there
    assert sorted(f.name for f in work.iterdir()) == sorted(
        [f"table-{r}.txt" for r in range(2)] + [f"recs-{r}.bin" for r in range(2)])


@pytest.mark.parametrize("variant", ["", "-static"], ids=["dynamic", "static"])
def test_fork_gets_enosys_and_the_program_copes(cnk_machine: Machine, variant: str) -> None:
    m = cnk_machine
    p = job(m, "--cwd", "/tmp", str(CNK_EX / f"forkcheck{variant}"))
    ranks = by_rank(p.stdout)
    for r in range(2):
        lines = ranks.get(r, [])
        assert "fork: ENOSYS (Function not implemented), continuing without a child" in lines, p.stdout
        assert "spawn: ENOSYS (Function not implemented), continuing without a child" in lines, p.stdout
        assert any(l.startswith("forkcheck: done") for l in lines), p.stdout
    counts = class_counts(m, last_job(m))
    assert all(c.get("unsupported", 0) >= 2 for c in counts.values()), counts


def test_fork_works_under_the_linux_kernel(cnk_machine: Machine) -> None:
    """The ENOSYS above is cnk's doing: the same program under --kernel linux forks."""
    p = job(cnk_machine, "--cwd", "/tmp", str(CNK_EX / "forkcheck"), n=1, kernel="linux")
    assert "0: fork: child exited 7" in p.stdout, p.stdout


UNSUPPORTED = ["mount", "umount2", "ptrace", "swapon", "chroot", "pivot_root"]


@pytest.mark.parametrize("variant", ["", "-static"], ids=["dynamic", "static"])
def test_unsupported_calls_get_enosys(cnk_machine: Machine, variant: str) -> None:
    exe = CNK_EX / f"unsupported{variant}"
    # natively these calls do something else (ENOENT, or 0 for PTRACE_TRACEME)
    native = subprocess.run([str(exe)], capture_output=True, text=True, cwd="/tmp").stdout
    assert "ENOSYS" not in native, native
    p = job(cnk_machine, "--cwd", "/tmp", str(exe))   # the default kernel is cnk
    ranks = by_rank(p.stdout)
    for r in range(2):
        for call in UNSUPPORTED:
            assert f"{call}: -1 ENOSYS (Function not implemented)" in ranks.get(r, []), p.stdout
        assert "unsupported: still running" in ranks[r]
    counts = class_counts(cnk_machine, last_job(cnk_machine))
    assert all(c.get("unsupported", 0) >= len(UNSUPPORTED) for c in counts.values()), counts


def test_default_kernel_is_cnk(cnk_machine: Machine) -> None:
    p = cnk_machine.run("run", "--block", "C", "-n", "1", "--cwd", "/tmp", str(CNK_EX / "unsupported"))
    assert "mount: -1 ENOSYS" in p.stdout, p.stdout


def test_program_reads_its_personality(cnk_machine: Machine) -> None:
    """Each rank prints its personality through the C API; the text is what
    `lattice personality LOCATION` prints for that rank's node."""
    m = cnk_machine
    exe = CNK_EX / "personality"
    assert exe.exists(), f"{exe} missing: the personality API (liblatpers.a, personality.h) is not built"
    for variant in ("personality", "personality-static"):
        p = job(m, "--cwd", "/tmp", str(CNK_EX / variant))
        ranks = by_rank(p.stdout)
        rows = {int(l.split()[0]): l.split()[1] for l in
                m.run("jobs", "--ranks", str(last_job(m))).stdout.splitlines()[1:] if l.strip()}
        assert sorted(rows) == [0, 1]
        for r, location in rows.items():
            expected = m.run("personality", location).stdout.splitlines()
            assert expected, f"`lattice personality {location}` printed nothing"
            assert ranks.get(r) == expected, (variant, r, ranks.get(r), expected)
        # the two nodes differ (coordinates, rank in pset): nothing is shared by mistake
        assert ranks[0] != ranks[1]


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs a host with two CPUs")
def test_each_process_sees_the_cpus_its_node_was_given(cnk_machine: Machine) -> None:
    """sched_getaffinity under cnk shows the first --cores (2 per node: 1 per
    process in vn mode, 2 in co mode) of the real CPUs `lattice run --print-map`
    says the rank is bound to (docs/architecture.md, "Nodes on cores"); in co
    mode two ranks on a host of two or more CPUs see different ones."""
    def expected(*opts: str, cores: int) -> dict[int, str]:
        rows = [l.split() for l in cnk_machine.run("run", "--block", "C", "--print-map", *opts).stdout.splitlines()[2:]]
        return {int(r[0]): ",".join(map(str, sorted(host.parse_cpulist(r[-1]))[:cores])) for r in rows}

    vn = ("--mode", "vn", "--mapping", "TXYZ", "-n", "4")
    p = job(cnk_machine, *vn[:4], "--hugepages", "keep", str(CNK_EX / "affinity"), n=4)
    cpus = {int(m.group(1)): m.group(2) for m in re.finditer(r"affinity: rank (\d+) cpus (\S+)", p.stdout)}
    assert cpus == expected(*vn, cores=1), p.stdout
    p = job(cnk_machine, "--hugepages", "keep", str(CNK_EX / "affinity"))
    cpus = {int(m.group(1)): m.group(2) for m in re.finditer(r"affinity: rank (\d+) cpus (\S+)", p.stdout)}
    assert cpus == expected("-n", "2", cores=2), p.stdout
    assert not set(cpus[0].split(",")) & set(cpus[1].split(",")), "two ranks share a CPU while one idles"
