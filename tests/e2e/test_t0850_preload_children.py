"""Linux mode without the sandbox (the LD_PRELOAD client, issue 25): the
processes of a rank that share its one PROC connection (a shell and the
programs it runs, pipelines, a fork()ed child, popen and system, Python's
subprocess) take turns on it and share its remote descriptors, so each
prints what it should and the rank exits 0; POSIX AIO on shipped files
works, and so does MPI-IO's nonblocking I/O built on it (ROMIO)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from conftest import Machine, make_machine

HERE = Path(__file__).parent
GUARD = 600     # s: bounds a job only so that a hang fails the test


@pytest.fixture(scope="module")
def pm(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    m = make_machine(tmp_path_factory.mktemp("preload"), "--shape", "1x1x2", "--pset-size", "2")
    m.run("block", "create", "K", "--shape", "1x1x2")
    m.run("boot", "K")
    yield m
    m.run("free", "K", check=False)


def build(m: Machine, src: Path, *cc: str) -> str:
    exe = m.work / src.stem
    subprocess.run([*(cc or ("gcc", "-std=c11", "-O2", "-Wall", "-Wextra", "-Werror")), "-o", str(exe), str(src)],
                   check=True)
    os.chmod(exe, 0o755)
    return str(exe)


def run(m: Machine, *argv: str, n: int = 1) -> subprocess.CompletedProcess[str]:
    """A job in Linux mode through the preload client, in m.work."""
    return m.run("run", "--block", "K", "-n", str(n), "--kernel", "linux", "--cwd", str(m.work), *argv,
                 check=False, timeout=GUARD)


def ok(p: subprocess.CompletedProcess[str]) -> str:
    assert p.returncode == 0, f"exited {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    assert "libcnclient" not in p.stderr, p.stderr
    return p.stdout


def test_shell_goes_on_after_a_program_it_ran(pm: Machine) -> None:
    # /bin/echo closed its stdout at exit: that closed the rank's remote
    # stdout for the shell too, whose echo then failed (exit 1)
    p = run(pm, "/bin/sh", "-c", "for i in 1 2 3 4 5 6; do /bin/echo one; echo after; done")
    assert ok(p) == "one\nafter\n" * 6


def test_python_subprocess(pm: Machine) -> None:
    p = run(pm, "/usr/bin/python3", "-c", 'import subprocess; subprocess.run(["/bin/echo", "x"]); print("y")')
    assert ok(p) == "x\ny\n"


def test_redirected_program_keeps_its_stdout(pm: Machine) -> None:
    # the placeholder of FILE at 1 was close-on-exec: /bin/echo had no stdout
    p = run(pm, "/bin/sh", "-c", "/bin/echo one >redir.txt; echo two; cat redir.txt")
    assert ok(p) == "two\none\n"
    assert (pm.work / "redir.txt").read_text() == "one\n"


def test_pipeline_fifty_times(pm: Machine) -> None:
    # ls (opening the directory) and cat (writing the rank's stdout) ship at
    # the same time: their requests and replies interleaved on the socket
    d = pm.work / "listing"
    d.mkdir()
    for name in ("alpha", "beta", "gamma"):
        (d / name).write_text(name)
    p = run(pm, "/bin/sh", "-c", "i=0; while [ $i -lt 50 ]; do ls listing | cat || echo FAILED; i=$((i+1)); done")
    assert ok(p) == "alpha\nbeta\ngamma\n" * 50


def test_bash_pipelines_and_background_jobs(pm: Machine) -> None:
    # bash has its own getenv/setenv: what the client set before bash's
    # start was lost, and bash's children found a stale LATTICE_IO_FD
    # ("not a connected socket; file calls stay local")
    (pm.work / "bg.txt").write_text("from the background\n")
    p = run(pm, "/usr/bin/bash", "-c", "printf 'a\\nb\\nc\\n' > three.txt; cat three.txt | /usr/bin/sort -r | "
            "wc -l; cat bg.txt & wait; /bin/echo last")
    assert ok(p) == "3\nfrom the background\nlast\n"


def test_fork_popen_system(pm: Machine) -> None:
    probe = build(pm, HERE / "children_probe.c")
    p = run(pm, probe, "300")
    assert ok(p) == ("popen: popen-says\npopen: 601\npclose: 0\n"
                     "system-says\nchild done\nsystem: 0\n")
    recs = (pm.work / "shared.dat").read_text().splitlines()
    assert sorted(recs) == sorted([f"C{i:06d}" for i in range(300)] + [f"P{i:06d}" for i in range(300)] +
                                  ["P-after"])
    assert recs[-1] == "P-after"


def test_subshells_do_not_use_up_remote_descriptors(pm: Machine) -> None:
    # a subshell leaves by _exit: the remote descriptors it alone held stay
    # open on the I/O node until an EMFILE there makes the client close them
    p = run(pm, "/bin/sh", "-c", "rm -f sub.txt; i=0; while [ $i -lt 1100 ]; do "
            "(exec 3>>sub.txt; echo x >&3) || { echo FAILED $i; break; }; i=$((i+1)); done; wc -l < sub.txt")
    assert ok(p) == "1100\n"


def test_a_child_killed_inside_a_call_breaks_the_connection_clearly(pm: Machine) -> None:
    # the child holds the connection's lock with its request half sent or
    # its reply unread: the parent must not hang on the lock nor read the
    # child's reply as its own; it is told once and gets EIO
    probe = build(pm, HERE / "killmid_probe.c")
    p = run(pm, probe)
    assert p.returncode == 0, p.stderr
    assert "child wrote 4194304;" in p.stderr, p.stderr     # the child shipped (main: EIO, -1)
    lost = "libcnclient: connection to the I/O node lost (another process on it died during its call"
    if "ok 20 eio 0" not in p.stderr:       # killed between two calls (rare): nothing to break
        assert p.stderr.count(lost) == 1 and "after the kill: ok 0 eio 20" in p.stderr, p.stderr


def test_posix_aio_on_a_shipped_file(pm: Machine) -> None:
    probe = build(pm, HERE / "aio_probe.c")
    p = run(pm, probe, "aio.dat")
    assert ok(p) == "aio ok\n"
    data = bytes(ord("a") + i % 23 for i in range(100000))
    assert (pm.work / "aio.dat").read_bytes() == b"head" + data[4:] + b"tail"


def test_mpiio_nonblocking_completes(pm: Machine) -> None:
    # ROMIO's MPI_File_iwrite_at/iread_at are glibc AIO: on a shipped file
    # the requests failed with EBADF and MPI_Wait spun for ever
    exe = build(pm, HERE / "mpi" / "mpiio_async.c", "mpicc.mpich", "-O2", "-Wall")
    p = run(pm, exe, "mpiio.dat", n=2)
    assert ok(p) == "mpiio async ok 2\n"
    data = (pm.work / "mpiio.dat").read_bytes()
    assert data == b"".join(bytes((r * 31 + i % 251) % 256 for i in range(1 << 20)) for r in range(2))
