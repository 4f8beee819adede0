"""Any binary under `--kernel linux` (issue 25): in the node sandbox, the
default, a program's files go through its I/O node whatever the program is.
Each kind (tests/e2e/anybin/) writes a file in its working directory: a C
program built -static, a Go program, raw syscall(2)s, io_uring, shell
scripts (with a redirection, with a pipe), Python's subprocess.  Each test
runs it with `lattice run --kernel linux --cwd DIR` on a booted block and
asserts that the file landed in DIR, not in the directory the block was
booted and the run started from, and that the I/O node counted its open and
its write (`lattice counters --json`).  Before the sandbox, the preload
client missed all of these (the static program wrote into the boot
directory, uncounted; the shell and Python ones exited 1).  Then MPICH's
ROMIO nonblocking I/O (MPI_File_iwrite_at/iread_at and their collective
forms, as MPICH's io tests async and i_aggregation) across two ranks on two
nodes, with and without the sandbox.

One 1x1x2 machine (one pset of 2 nodes, 256 MiB each) with block A, booted
from a directory of its own.
"""
from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import tempfile
from pathlib import Path
from typing import Iterator

import pytest

from conftest import LATTICE, ROOT, Machine, make_machine

SRC = ROOT / "tests" / "e2e" / "anybin"
GUARD = 600             # s: a bound on each command, only so that a hang fails
GO = "/usr/bin/go"      # Debian's golang-go (scripts/setup.sh)


class Booted:
    def __init__(self, m: Machine, boot_dir: Path, bins: Path) -> None:
        self.m, self.boot_dir, self.bins = m, boot_dir, bins

    def lattice(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """`lattice ARGS` started from the boot directory, as a user would."""
        p = subprocess.run([*LATTICE, *args], env=self.m.env, cwd=self.boot_dir, capture_output=True, text=True,
                           timeout=GUARD, stdin=subprocess.DEVNULL)
        if check and p.returncode != 0:
            raise AssertionError(f"lattice {' '.join(args)} exited {p.returncode}\n"
                                 f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}")
        return p

    def run(self, cwd: Path, *words: str, n: int = 1, check: bool = True,
            extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
        return self.lattice("run", "--block", "A", "-n", str(n), "--kernel", "linux", *extra, "--cwd", str(cwd),
                            *words, check=check)

    def counters(self) -> dict[str, int]:
        """The block's I/O node's calls by name."""
        (ion,) = json.loads(self.lattice("counters", "A", "--json").stdout)["ionodes"]
        return dict(ion["calls"])

    def jobdir(self, name: str) -> Path:
        d = self.m.work / name
        d.mkdir()
        os.chmod(d, 0o755)
        return d


def compile_c(out: Path, src: str, cflags: tuple[str, ...] = (), libs: tuple[str, ...] = ()) -> Path:
    exe = out / Path(src).stem
    subprocess.run(["gcc", "-O2", "-Wall", "-Wextra", "-Werror", *cflags, "-o", str(exe), str(SRC / src), *libs],
                   check=True)
    return exe


@pytest.fixture(scope="module")
def any_block(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Booted]:
    bins = tmp_path_factory.mktemp("anybin")
    os.chmod(bins, 0o755)
    compile_c(bins, "static_write.c", cflags=("-static",))
    compile_c(bins, "raw_syscall.c")
    compile_c(bins, "uring_write.c", libs=("-luring",))
    m = make_machine(tmp_path_factory.mktemp("anyb"), "--shape", "1x1x2", "--pset-size", "2", "--memory", "256M")
    boot_dir = Path(tempfile.mkdtemp(prefix="lattice-test-bootdir-"))
    b = Booted(m, boot_dir, bins)
    b.lattice("block", "create", "A", "--shape", "1x1x2")
    b.lattice("boot", "A")
    try:
        yield b
    finally:
        b.lattice("free", "A", check=False)
        shutil.rmtree(m.work, ignore_errors=True)
        shutil.rmtree(boot_dir, ignore_errors=True)


def landed(b: Booted, d: Path, name: str, text: str, before: dict[str, int]) -> None:
    """name holds text in d only, and the I/O node counted an open and a write."""
    assert not (b.boot_dir / name).exists(), f"{name} was written on the host, in the boot directory"
    assert (d / name).read_text() == text
    after = b.counters()
    delta = {k: v - before.get(k, 0) for k, v in after.items()}
    opens = sum(v for k, v in delta.items() if "open" in k or "creat" in k)
    writes = sum(v for k, v in delta.items() if "write" in k)
    assert opens >= 1 and writes >= 1, f"the I/O node did not count the job's file calls: {delta}"


def test_static_c(any_block: Booted) -> None:
    b = any_block
    d = b.jobdir("static")
    before = b.counters()
    p = b.run(d, str(b.bins / "static_write"), "static.txt")
    assert p.stdout == "wrote\n", p.stderr
    landed(b, d, "static.txt", "static ok\n", before)


def test_go(any_block: Booted, tmp_path: Path) -> None:
    b = any_block
    assert os.access(GO, os.X_OK), f"{GO} missing: apt-get install golang-go"
    exe = b.bins / "gowrite"
    if not exe.exists():
        # the standard library only, offline: no module download, a private build cache
        env = dict(os.environ, GOCACHE=str(tmp_path / "gocache"), GOPATH=str(tmp_path / "gopath"),
                   GOFLAGS="-mod=mod", GOPROXY="off", GOTOOLCHAIN="local", CGO_ENABLED="0")
        subprocess.run([GO, "build", "-o", str(exe), "."], cwd=SRC / "gowrite", env=env, check=True, timeout=GUARD)
    d = b.jobdir("go")
    before = b.counters()
    p = b.run(d, str(exe), "go.txt")
    assert p.stdout == "wrote\n", p.stderr
    landed(b, d, "go.txt", "go ok\n", before)


def test_raw_syscalls(any_block: Booted) -> None:
    b = any_block
    d = b.jobdir("raw")
    before = b.counters()
    p = b.run(d, str(b.bins / "raw_syscall"), "raw.txt")
    assert p.stdout == "wrote\n", p.stderr
    landed(b, d, "raw.txt", "raw ok\n", before)


def test_io_uring(any_block: Booted) -> None:
    b = any_block
    d = b.jobdir("uring")
    before = b.counters()
    p = b.run(d, str(b.bins / "uring_write"), "uring.txt")
    assert p.stdout == "wrote\n", p.stderr
    landed(b, d, "uring.txt", "uring ok\n", before)


def test_shell_children_write_stdout(any_block: Booted) -> None:
    b = any_block
    d = b.jobdir("shell")
    p = b.run(d, "/bin/sh", "-c", "/bin/echo one; echo after")
    assert (p.returncode, p.stdout) == (0, "one\nafter\n"), p.stderr
    before = b.counters()
    p = b.run(d, "/bin/sh", "-c", "/bin/echo one >sh.txt; echo two; cat sh.txt")
    assert (p.returncode, p.stdout) == (0, "two\none\n"), p.stderr
    landed(b, d, "sh.txt", "one\n", before)


def test_shell_pipeline_twenty_times(any_block: Booted) -> None:
    b = any_block
    d = b.jobdir("pipe")
    (d / "marker").write_text("")
    for i in range(20):
        p = b.run(d, "/bin/sh", "-c", f"ls {d} | cat", check=False)
        assert (p.returncode, p.stdout) == (0, "marker\n"), f"run {i + 1} of 20: {p.stdout!r} {p.stderr}"


def test_python_subprocess(any_block: Booted) -> None:
    b = any_block
    d = b.jobdir("python")
    before = b.counters()
    code = ("import subprocess\n"
            "subprocess.run(['/bin/echo', 'x'], check=True)\n"
            "print('after', flush=True)\n"
            "with open('py.txt', 'w') as f:\n"
            "    f.write('py ok\\n')\n")
    p = b.run(d, "/usr/bin/python3", "-c", code)
    assert (p.returncode, p.stdout) == (0, "x\nafter\n"), p.stderr
    landed(b, d, "py.txt", "py ok\n", before)


def test_the_job_says_it_ran_in_the_sandbox(any_block: Booted) -> None:
    b = any_block
    d = b.jobdir("verbose")
    p = b.run(d, "/bin/true", extra=("-v",))
    assert "Linux mode in the node sandbox" in p.stderr and "kernel linux/sandbox" in p.stderr, p.stderr
    assert b.lattice("jobs").stdout.splitlines()[-1].split()[4] == "linux/sandbox"


def test_trees_given_with_tree_and_nothing_else(any_block: Booted) -> None:
    """--tree adds a directory the job sees (read through the I/O node); a
    host directory that is no tree is not there at all."""
    b = any_block
    d, tree, other = b.jobdir("trees-cwd"), b.jobdir("trees-extra"), b.jobdir("trees-other")
    (tree / "f").write_text("in the tree\n")
    (other / "f").write_text("not a tree\n")
    before = b.counters()
    p = b.run(d, "/bin/sh", "-c", f"cat {tree}/f; test -e {other}/f && echo visible || echo hidden",
              extra=("--tree", str(tree)))
    assert p.stdout == "in the tree\nhidden\n", p.stderr
    delta = {k: v - before.get(k, 0) for k, v in b.counters().items()}
    assert sum(v for k, v in delta.items() if "open" in k) >= 1, delta


# --- MPICH's ROMIO nonblocking I/O ------------------------------------------------------

COUNT = 256 * 1024      # ints per rank and phase, as in mpiio_nb.c


def expected(n: int) -> bytes:
    return b"".join(struct.pack(f"<{COUNT}i", *(phase * 0x1000000 + r * 0x10000 + i for i in range(COUNT)))
                    for phase in range(2) for r in range(n))


@pytest.mark.parametrize("mode", ["sandbox", "preload"])
def test_romio_nonblocking_io(any_block: Booted, mode: str) -> None:
    b = any_block
    exe = b.bins / "mpiio_nb"
    if not exe.exists():
        assert shutil.which("mpicc.mpich"), "MPICH is not installed (apt-get install mpich libmpich-dev)"
        subprocess.run(["mpicc.mpich", "-O2", "-Wall", "-Wextra", "-Werror", "-o", str(exe), str(SRC / "mpiio_nb.c")],
                       check=True)
    d = b.jobdir(f"romio-{mode}")
    before = b.counters()
    extra = ("-t", "5:00") + (("--no-sandbox",) if mode == "preload" else ())      # -t: a hang fails, it never spins
    p = b.run(d, str(exe), "nb.dat", n=2, check=False, extra=extra)
    assert (p.returncode, p.stdout) == (0, "ok 2\n"), p.stderr
    assert (d / "nb.dat").read_bytes() == expected(2)
    assert not (b.boot_dir / "nb.dat").exists()
    delta = {k: v - before.get(k, 0) for k, v in b.counters().items()}
    assert sum(v for k, v in delta.items() if "write" in k) >= 2, delta
