"""The MPMD launcher's single exec under cnk (issues 3 and 4): one program
chooses by rank and execs another image once (examples/cnk/launcher.c).
Failed execs (missing, not executable, not ELF) give the caller ENOENT,
EACCES, ENOEXEC and it carries on; with a second thread alive EAGAIN; the
new image (static, static-pie or dynamic) is read through the I/O node,
gets its arguments, keeps descriptors not marked close-on-exec (shipped and
local) and the signal mask, finds its signal handlers back to default, and
gets ENOSYS for a second exec.  The counters keep counting across the exec
and --trace shows it as a local call.  An MPICH program exec'd by the
launcher bootstraps through PMI_FD, which survives the exec.

One 1x1x2 machine (pset of 2) with block X booted serves the whole file.
"""
from __future__ import annotations

import os
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Iterator

import pytest

from conftest import EXAMPLES, Machine, make_machine
from cnk_helpers import CNK_EX, by_rank, class_counts, copy_exe, last_job, trace_lines


@pytest.fixture(scope="module")
def exec_machine(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    for p in ("launcher", "launcher-static", "execprobe", "execprobe-spie", "stdio_malloc",
              "stdio_malloc-static", "stdio_malloc-spie"):
        assert (CNK_EX / p).exists(), f"{CNK_EX / p} missing: run make"
    m = make_machine(tmp_path_factory.mktemp("cnkexec"), "--shape", "1x1x2", "--pset-size", "2",
                     "--memory", "256M", "--cores", "2")
    m.run("block", "create", "X", "--shape", "1x1x2")
    m.run("boot", "X")
    yield m
    m.run("free", "X", check=False)


def job(m: Machine, cwd: Path, *args: str, check: bool = True, timeout: float = 90
        ) -> subprocess.CompletedProcess[str]:
    return m.run("run", "--block", "X", "-n", "2", "--label", "--kernel", "cnk", "--hugepages", "keep",
                 "--cwd", str(cwd), *args, check=check, timeout=timeout)


def workdir(m: Machine, name: str) -> Path:
    d = m.work / name
    d.mkdir()
    os.chmod(d, 0o777)
    return d


def stdio_line(rank: int, n: int) -> str:
    big = sum((i * 2654435761) & 0xFFFFFFFF for i in range(0, (64 << 20) // 4, 1024))
    return f"rank {rank}: stdio+malloc ok sum={sum(i * i for i in range(n))} big={big}"


def test_launcher_picks_by_rank_after_failed_execs(exec_machine: Machine) -> None:
    m = exec_machine
    w = workdir(m, "pick")
    (w / "noexec").write_bytes((CNK_EX / "stdio_malloc").read_bytes())
    os.chmod(w / "noexec", 0o644)
    (w / "script").write_text("#!/bin/sh\necho hi\n")
    os.chmod(w / "script", 0o755)
    # the images live where only the I/O node sees them: cnk reads them through it
    even = copy_exe(CNK_EX / "stdio_malloc-static", w / "even")
    odd = copy_exe(CNK_EX / "stdio_malloc", w / "odd")
    p = job(m, w, str(CNK_EX / "launcher"), "-e", str(w / "missing"), "-e", "noexec", "-e", "script",
            "-e", str(w), "-t", str(even), "123", "--", "./odd", "456")
    out = by_rank(p.stdout)
    for r in range(2):
        lines = out.get(r, [])
        assert lines[:6] == [
            f"launcher: rank {r}: exec {w / 'missing'}: ENOENT",
            f"launcher: rank {r}: exec noexec: EACCES",
            f"launcher: rank {r}: exec script: ENOEXEC",
            f"launcher: rank {r}: exec {w}: EACCES",
            f"launcher: rank {r}: exec /bin/true: EAGAIN",
            f"launcher: rank {r}: exec with 2 threads: EAGAIN",
        ], p.stdout
        assert lines[6] == f"launcher: rank {r}: exec {even if r == 0 else './odd'}", p.stdout
        assert stdio_line(r, 123 if r == 0 else 456) in lines, p.stdout
        assert f"{r}: rank {r}: stderr works" in p.stdout + p.stderr


@pytest.mark.parametrize("launcher,even,odd", [
    ("launcher-static", "execprobe", "execprobe-spie"),
    ("launcher", "execprobe-spie", "execprobe"),
], ids=["static-to-dynamic+spie", "dynamic-to-spie+dynamic"])
def test_exec_keeps_descriptors_mask_and_counters(exec_machine: Machine, launcher: str, even: str,
                                                  odd: str) -> None:
    m = exec_machine
    w = workdir(m, f"probe-{launcher}")
    (w / "data").write_text("0123456789abcdef")
    e, o = copy_exe(CNK_EX / even, w / "even"), copy_exe(CNK_EX / odd, w / "odd")
    p = job(m, w, "--trace", str(CNK_EX / launcher), "-f", "data", str(e), "one", "two words", "--",
            str(o), "three")
    out = by_rank(p.stdout)
    for r in range(2):
        lines = out.get(r, [])
        args = "argc=3 args=one|two words" if r == 0 else "argc=2 args=three"
        assert lines == [
            f"launcher: rank {r}: exec {e if r == 0 else o}",
            f"execprobe: rank {r}: {args}",
            f"execprobe: rank {r}: fds keep=ok:4567 cloexec=closed setfd=closed pipe=ok:pipe-data "
            "pipecloexec=closed localsetfd=closed",
            f"execprobe: rank {r}: signals usr1=default usr2=ignored hup=blocked sys=default",
            f"execprobe: rank {r}: pmi_fd=8 open",     # cnode's PMI endpoint, inherited
            f"execprobe: rank {r}: malloc ok",
            f"execprobe: rank {r}: second exec: ENOSYS",
        ], p.stdout
    traced = trace_lines(p.stdout + p.stderr)
    counts = class_counts(m, last_job(m))
    for r in range(2):
        mine = [t for t in traced if int(t.group(1)) == r]
        execs = [(t.group(4), t.group(5)) for t in mine if t.group(2) == "execve"]
        # the one exec is local and never returns (shown as 0), the second is unsupported
        assert execs == [("0", "local"), ("-ENOSYS", "unsupported")], execs
        first = next(i for i, t in enumerate(mine) if t.group(2) == "execve")
        assert first > 10 and len(mine) - first > 10, "calls traced on both sides of the exec"
        # the report page counted every traced call, before and after the exec
        by_class = Counter(t.group(5) for t in mine)
        assert counts[r] == {c: by_class.get(c, 0) for c in ("local", "shipped", "unsupported")}, \
            (counts[r], by_class)


def test_exec_of_a_missing_image_is_an_error_only_for_the_caller(exec_machine: Machine) -> None:
    """Both choices missing: the launcher reports it and exits 2, the job ends normally."""
    m = exec_machine
    w = workdir(m, "missing")
    p = job(m, w, str(CNK_EX / "launcher"), str(w / "nope"), "--", str(w / "nope"), check=False)
    assert p.returncode == 2, (p.stdout, p.stderr)
    for r in range(2):
        assert f"launcher: rank {r}: exec {w / 'nope'} failed: ENOENT" in by_rank(p.stdout).get(r, []), p.stdout


def test_mpi_program_exec_by_launcher(exec_machine: Machine) -> None:
    """MPICH's hello, exec'd by the launcher (MPI_Init only in the new image),
    bootstraps through PMI_FD kept open across the exec."""
    hello = EXAMPLES / "mpi" / "hello"
    if not hello.exists() or not shutil.which("mpicc.mpich"):
        pytest.skip("MPICH examples not built")
    m = exec_machine
    w = workdir(m, "mpi")
    p = job(m, w, str(CNK_EX / "launcher"), "-e", str(w / "missing"), str(hello), "--", str(hello),
            timeout=180)
    out = by_rank(p.stdout)
    for r in range(2):
        lines = out.get(r, [])
        assert lines[:2] == [f"launcher: rank {r}: exec {w / 'missing'}: ENOENT",
                             f"launcher: rank {r}: exec {hello}"], p.stdout
        assert any(l.startswith(f"hello from rank {r} of 2:") for l in lines), p.stdout
    assert "hello: allreduce ok (3)" in out.get(0, []), p.stdout
