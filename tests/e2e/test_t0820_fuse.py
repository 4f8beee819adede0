"""The job's files through the FUSE client (issue 25): in the node sandbox a
job's working directory is a tree served by lattice-fs (compute/cnfs/),
every call shipped to the I/O node and done there by the job's I/O worker
as the job owner.

One 1x1x2 machine (two compute nodes behind one I/O node) with block FS.
tests/e2e/fuse_probe.c is the job; it first says whether its working
directory is on FUSE, which it is not without the sandbox (the preload
client, `--no-sandbox`, ships the calls itself).
"""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from cnk_helpers import unlabelled
from conftest import BUILD, EXAMPLES, Machine, booted_block, build_probe, local_users, processes, wait_for
from test_t0660_mpiio_locks import BLK, NBLK, WAITED

BLOCK = "FS"


@pytest.fixture(scope="module")
def fm(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    assert (BUILD / "bin" / "lattice-fs").exists(), "build/bin/lattice-fs missing: run make"
    yield from booted_block(tmp_path_factory.mktemp("fuse"), BLOCK, "1x1x2", "--pset-size", "2", "--memory", "256M")


@pytest.fixture(scope="module")
def probe(fm: Machine, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The probe where every test user may read it (pytest's own directories are private)."""
    exe = fm.work / "fuse_probe"
    shutil.copy(build_probe(tmp_path_factory, "fuse_probe"), exe)
    os.chmod(exe, 0o755)
    return str(exe)


def sandboxed(cwd: Path, *more_trees: str) -> list[str]:
    """`lattice run` options for a sandboxed Linux-mode job in cwd, with more trees."""
    return ["--kernel", "linux", "--cwd", str(cwd), *(a for t in more_trees for a in ("--tree", t))]


def scratch(m: Machine, name: str) -> Path:
    d = m.work / name
    d.mkdir()
    os.chmod(d, 0o777)
    return d


def counters(m: Machine) -> dict[str, int]:
    total: dict[str, int] = {}
    for line in m.run("counters", BLOCK).stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[-1].isdigit():
            total[parts[-2]] = total.get(parts[-2], 0) + int(parts[-1])
    assert total, "no counters"
    return total


def test_a_job_works_on_its_files_through_fuse(fm: Machine, probe: str) -> None:
    work = scratch(fm, "ops")
    before = counters(fm)
    p = fm.run("run", "--block", BLOCK, "-n", "1", *sandboxed(work), probe, "ops")
    assert p.stdout.splitlines()[0] == "fs=fuse", p.stdout
    assert "listed: b.txt hard link\nops ok" in p.stdout, p.stdout
    # the I/O node did the work, on the host's files
    assert (work / "d" / "b.txt").read_bytes() == b"hello"
    assert sorted(f.name for f in work.iterdir()) == ["d"]
    assert (work / "d" / "b.txt").stat().st_mode & 0o7777 == 0o600
    after = counters(fm)
    for call in ("openat", "close", "renameat", "mkdirat", "getdents64", "statx", "unlinkat", "symlinkat",
                 "linkat", "readlinkat", "fchmodat", "truncate", "utimensat", "fsync", "lock", "fallocate",
                 "ftruncate", "statfs"):
        assert after[call] > before[call], (call, before[call], after[call])
    assert after["pwrite"] + after["write"] > before["pwrite"] + before["write"]


def test_bytes_written_on_one_node_are_read_exactly_on_the_other(fm: Machine, probe: str) -> None:
    """Rank 0 (node 0) writes 3 MiB and 123 bytes, rank 1 (node 1) waits for
    its word (a file appearing) and reads every byte back."""
    work = scratch(fm, "pair")
    p = fm.run("run", "--block", BLOCK, "-n", "2", "--label", *sandboxed(work), probe, "pair", "data", "3")
    assert re.search(r"^0: fs=fuse$", p.stdout, re.M) and re.search(r"^1: fs=fuse$", p.stdout, re.M), p.stdout
    assert re.search(r"^0: wrote 3145851$", p.stdout, re.M), p.stdout
    assert re.search(r"^1: read ok 3145851$", p.stdout, re.M), p.stdout
    assert (work / "data").stat().st_size == 3145851


def test_a_name_made_elsewhere_is_seen_at_once(fm: Machine, probe: str) -> None:
    """A job looks a name up and finds nothing; the name is then made on the
    I/O node's host, not through this I/O node (as by ranks behind another
    one); the job's next look finds it.  ciod shares a pset's stats of a
    path for 2 s, "no such file" too: lattice-fs's lookups must not be
    among them (MPI_File_open: rank 0 creates, the others open)."""
    work = scratch(fm, "late")
    run = fm.popen("run", "--block", BLOCK, "-n", "1", *sandboxed(work), probe, "late", "made")
    assert run.stdout is not None
    try:
        assert run.stdout.readline() == "fs=fuse\n"
        assert run.stdout.readline() == "absent\n"
        (work / "made").write_text("x")
        rank = [pid for pid, argv in processes() if argv[0].endswith(b"fuse_probe") and b"made" in argv]
        assert len(rank) == 1, rank
        os.kill(rank[0], signal.SIGUSR1)
        out, err = run.communicate(timeout=600)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert out == "present\n", out + err


def test_the_owner_cannot_read_another_users_private_file(fm: Machine, probe: str) -> None:
    work = scratch(fm, "perm")
    with local_users("latfsa", "latfsb") as (a, b):
        secret, shared = work / "secret", work / "shared"
        secret.write_text("b's secret\n")
        shared.write_text("for everyone\n")
        for f, mode in ((secret, 0o600), (shared, 0o644)):
            os.chown(f, b.pw_uid, b.pw_gid)
            os.chmod(f, mode)
        opts = ["run", "--block", BLOCK, "-n", "1", "--user", a.pw_name, *sandboxed(work), probe, "cat"]
        p = fm.run(*opts, "secret", check=False)
        assert p.stdout.splitlines() == ["fs=fuse", "open secret: Permission denied"], p.stdout + p.stderr
        p = fm.run(*opts, "shared")
        assert p.stdout.splitlines() == ["fs=fuse", "for everyone"], p.stdout


def test_a_tree_the_job_cannot_have_is_a_clear_error(fm: Machine, probe: str) -> None:
    """A tree that is not there, or that the owner may not reach on the I/O
    node (a directory inside root's private one): one line saying which."""
    work = scratch(fm, "notree")
    missing = str(fm.work / "no-such-tree")
    p = fm.run("run", "--block", BLOCK, "-n", "1", *sandboxed(work, missing), probe, "ops", check=False)
    assert p.returncode != 0
    assert re.search(rf"{re.escape(missing)}'?:? (is not a directory|no such directory on the I/O node)", p.stderr), \
        p.stdout + p.stderr
    private = fm.work / "private"
    (private / "t").mkdir(parents=True)
    os.chmod(private, 0o700)
    with local_users("latfsc") as (c,):
        p = fm.run("run", "--block", BLOCK, "-n", "1", "--user", c.pw_name, *sandboxed(work, str(private / "t")),
                   probe, "ops", check=False)
    assert p.returncode != 0
    assert f"file tree {private / 't'}: Permission denied on the I/O node" in p.stderr, p.stdout + p.stderr
    for out in (p.stdout, p.stderr):
        assert "Traceback" not in out and "fs=" not in out     # the program never ran


def test_mpiio_locks_exclude_ranks_on_two_nodes(fm: Machine) -> None:
    """ROMIO's data sieving and shared file pointer lock through lattice-fs
    (each node's client locks the same file at the I/O node), and a blocked
    F_SETLKW on one node waits for the holder on the other, signals handled
    meanwhile (examples/mpi/mpiio_locks and examples/lockwait, as in t0660)."""
    d = scratch(fm, "mpiio")
    before = counters(fm)["lock"]
    p = fm.run("run", "--block", BLOCK, "-n", "2", "--label", *sandboxed(d), str(EXAMPLES / "mpi" / "mpiio_locks"),
               str(d), timeout=300)
    assert unlabelled(p.stdout) == ["atomic: ok (4000 bytes of one rank, atomicity 1)",
                                    "interleaved: ok (32000 bytes)", "shared: ok (40 bytes)"], p.stdout + p.stderr
    data = (d / "interleaved.dat").read_bytes()
    want = bytes(ord("A") + ((i // BLK) % 2 * 7 + (i // BLK // 2) * BLK + i % BLK) % 26 for i in range(BLK * NBLK * 2))
    assert data == want, "a block of one rank was lost or overwritten"
    assert sorted((d / "shared.dat").read_bytes().splitlines(keepends=True)) == \
        [b"record of rank %4d\n" % r for r in range(2)]
    assert counters(fm)["lock"] > before        # the locks were the I/O node's
    w = scratch(fm, "lockwait")
    p = fm.run("run", "--block", BLOCK, "-n", "2", "--label", *sandboxed(w), str(EXAMPLES / "lockwait"), str(w),
               timeout=300)
    assert unlabelled(p.stdout) == WAITED, p.stdout + p.stderr


def fs_clients(m: Machine) -> list[int]:
    """pids of lattice-fs processes whose parent is one of this machine's cnodes."""
    cnodes = set(m.processes("cnode", BLOCK))
    out = []
    for pid, argv in processes():
        if argv and argv[0].endswith(b"lattice-fs"):
            try:
                ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid in cnodes:
                out.append(pid)
    return out


def test_killing_the_file_client_ends_the_job_with_a_clear_line(fm: Machine, probe: str) -> None:
    work = scratch(fm, "kill")
    (work / "here").write_text("x")
    job = fm.popen("run", "--block", BLOCK, "-n", "1", *sandboxed(work), probe, "poll", "here")
    try:
        assert job.stdout is not None
        assert job.stdout.readline() == "fs=fuse\n"
        assert job.stdout.readline() == "polling\n"
        clients = [pid for pid in fs_clients(fm) if Path(f"/proc/{pid}").exists()]
        assert len(clients) == 1, clients
        os.kill(clients[0], signal.SIGKILL)
        out, err = job.communicate(timeout=600)     # a hang guard: the job ends by itself
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode != 0
    assert "the node's file client (lattice-fs) died: killed by signal 9" in err, out + err
    wait_for(lambda: not [p for p in fs_clients(fm) if Path(f"/proc/{p}").exists()
                          and "Z" not in Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]])


def rank_pid(rank: int, word: bytes) -> int:
    """The pid of the probe of this rank whose command line has word."""
    found = []
    for pid, argv in processes():
        if argv[0].endswith(b"fuse_probe") and word in argv:
            try:
                env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue
            if f"LATTICE_RANK={rank}".encode() in env:
                found.append(pid)
    assert len(found) == 1, (rank, found)
    return found[0]


def line(stream, want: str) -> str:  # type: ignore[no-untyped-def]
    """The job's lines until one starting with want (EOF: the job ended without it)."""
    seen = []
    while True:
        got = stream.readline()
        assert got, f"no line {want!r}; got {seen}"
        seen.append(got)
        if got.startswith(want):
            return str(got.rstrip("\n"))


def test_an_unchanged_file_is_read_from_the_cache_and_another_nodes_rewrite_is_seen(fm: Machine, probe: str) -> None:
    """Close-to-open (docs/architecture.md "The FUSE file client"): node 0
    reads a file; opened again unchanged it is read from its page cache, no
    read shipped; node 1 then rewrites it, longer, and node 0's next open
    reads all of node 1's bytes (its kernel's size of the file, trusted for
    1 s, is dropped at that open)."""
    work = scratch(fm, "reread")
    (work / "f").write_bytes(b"a" * 300000)
    (work / "f").chmod(0o666)
    job = fm.popen("run", "--block", BLOCK, "-n", "2", "--label", *sandboxed(work), probe, "reread", "f")
    assert job.stdout is not None
    try:
        assert line(job.stdout, "0: read1") == "0: read1 300000 a"
        before = counters(fm)
        os.kill(rank_pid(0, b"reread"), signal.SIGUSR1)
        assert line(job.stdout, "0: read2") == "0: read2 300000 a"
        after = counters(fm)
        assert after["pread"] == before["pread"], "the cached file was read again"     # lattice-fs reads by PREAD
        assert after["openat_stat"] > before["openat_stat"]     # the open asked whether it changed
        os.kill(rank_pid(1, b"reread"), signal.SIGUSR1)
        assert line(job.stdout, "1: rewrote") == "1: rewrote 400000"
        os.kill(rank_pid(0, b"reread"), signal.SIGUSR1)
        assert line(job.stdout, "0: read3") == "0: read3 400000 b"
        out, err = job.communicate(timeout=600)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode == 0, out + err
    assert (work / "f").read_bytes() == b"b" * 400000


def test_a_file_written_and_synced_is_read_back_from_the_cache(fm: Machine, probe: str) -> None:
    """A write-only open writes through the page cache: after fsync and
    close, reading the file back on the same node ships no read; the bytes
    are on the I/O node."""
    work = scratch(fm, "wback")
    before = counters(fm)
    p = fm.run("run", "--block", BLOCK, "-n", "1", *sandboxed(work), probe, "wback", "w.dat", "4")
    assert p.stdout.splitlines()[-1] == "wback ok 4194304", p.stdout + p.stderr
    after = counters(fm)
    assert after["pread"] == before["pread"], "the written file was read again"    # lattice-fs reads by PREAD
    assert after["pwrite"] > before["pwrite"]
    assert (work / "w.dat").read_bytes() == b"w" * (4 << 20)


SMALL_CALLS = ("statx", "openat", "openat_stat", "fstatat", "pwrite", "write", "close", "unlinkat", "fsync", "lock")


def test_a_small_file_costs_six_shipped_calls(fm: Machine, probe: str) -> None:
    """Create, write 4 KiB, close, stat, unlink (bench/fuse_io.py's small
    files): lookup and stat after the write are one STATX each, create one
    OPENAT_STAT (no FSTATAT after it), then PWRITE, CLOSE, UNLINKAT.  No
    GETATTR of the directory after each create and unlink (no
    default_permissions).  Two jobs, 10 and 210 files: the difference is
    200 files' calls alone."""
    work = scratch(fm, "small")
    calls = []
    for n in (10, 210):
        before = counters(fm)
        p = fm.run("run", "--block", BLOCK, "-n", "1", *sandboxed(work), probe, "small", str(n))
        assert p.stdout.splitlines()[-1] == "small ok", p.stdout + p.stderr
        after = counters(fm)
        calls.append({c: after[c] - before[c] for c in SMALL_CALLS})
    per = {c: (calls[1][c] - calls[0][c]) / 200 for c in SMALL_CALLS}
    # the directory's own lookup once a second (its entry timeout) may add a few
    assert per["statx"] < 2.1 and per["openat_stat"] == 1 and per["fstatat"] == 0, per
    assert sum(per.values()) < 6.1, per
    assert list(work.iterdir()) == []


def test_direct_writes_leave_the_cache_alone_and_a_bad_value_is_one_line(fm: Machine, probe: str) -> None:
    """LATTICE_FS_WRITES=direct: write-only opens bypass the page cache
    (direct_io), so the file is read back from the I/O node; any other
    value than cached or direct fails the launch in one line."""
    work = scratch(fm, "direct")
    before = counters(fm)
    p = fm.run("run", "--block", BLOCK, "-n", "1", "--env", "LATTICE_FS_WRITES=direct", *sandboxed(work), probe,
               "wback", "w.dat", "4")
    assert p.stdout.splitlines()[-1] == "wback ok 4194304", p.stdout + p.stderr
    assert counters(fm)["pread"] > before["pread"]
    assert (work / "w.dat").read_bytes() == b"w" * (4 << 20)
    p = fm.run("run", "--block", BLOCK, "-n", "1", "--env", "LATTICE_FS_WRITES=later", *sandboxed(work), probe,
               "ops", check=False)
    assert p.returncode != 0
    assert 'LATTICE_FS_WRITES=later: not "cached" or "direct"' in p.stderr, p.stdout + p.stderr
    assert "Traceback" not in p.stderr and "fs=" not in p.stdout


def test_fsync_and_a_lock_of_a_cached_open_see_another_nodes_rewrite(fm: Machine, probe: str) -> None:
    """Node 0 holds a file open read-only, its pages cached; node 1
    rewrites it.  Node 0's fsync on the same descriptor (MPI_File_sync),
    then its read lock, each make its next read see node 1's bytes: the
    cache is revalidated there, as NFS does at a lock."""
    work = scratch(fm, "resync")
    (work / "f").write_bytes(b"a" * 65536)
    (work / "f").chmod(0o666)
    job = fm.popen("run", "--block", BLOCK, "-n", "2", "--label", *sandboxed(work), probe, "resync", "f")
    assert job.stdout is not None
    try:
        assert line(job.stdout, "0: read") == "0: read a"
        for c, step in (("b", "synced"), ("c", "locked")):
            os.kill(rank_pid(1, b"resync"), signal.SIGUSR1)
            assert line(job.stdout, "1: rewrote") == f"1: rewrote {c}"
            os.kill(rank_pid(0, b"resync"), signal.SIGUSR1)
            assert line(job.stdout, f"0: {step}") == f"0: {step} {c}"
        out, err = job.communicate(timeout=600)
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    assert job.returncode == 0, out + err


def test_a_full_file_system_is_said_by_a_write_or_by_close(fm: Machine, probe: str) -> None:
    """A write through the cache is answered before the I/O node has it
    (compute/cnfs/behind.c); when the I/O node's file system is full the
    error still reaches the program, at that write, the next one or close
    (FLUSH), never lost; the file holds what the I/O node took."""
    full = scratch(fm, "full")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(full)], check=True)
    try:
        os.chmod(full, 0o777)
        p = fm.run("run", "--block", BLOCK, "-n", "1", *sandboxed(full), probe, "fill", "8")
        out = p.stdout.splitlines()
        assert out[0] == "fs=fuse", p.stdout
        errors = [l for l in out if l.startswith(("write: ", "close: "))]
        assert any(l.endswith("No space left on device") for l in errors), p.stdout + p.stderr
        wrote = int(next(l for l in out if l.startswith("wrote "))[6:])
        assert wrote < 8 << 20
        assert (full / "fill.dat").stat().st_size <= 2 << 20
    finally:
        subprocess.run(["umount", str(full)], check=True)
