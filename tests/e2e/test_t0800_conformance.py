"""One program, three ways, the same answers (issue 13, item 6): the
conformance program (examples/conformance.c: files, directories, paths,
stat, descriptors and dup/dup2/dup3/fcntl, stdio, pipes, socket pairs, TCP
on 127.0.0.1, locks, copies, mappings, errno cases, fork, popen, kill and
sigqueue, a handler's sa_mask, EMFILE) runs
natively as the same user, in Linux mode (`--kernel linux`) and under cnk,
each kernel also with LATTICE_MAILBOX=0, each run in its own scratch
directory with the same layout under one parent, and its outputs must match
line for line. Then examples/conformance_fault.c passes one bad pointer per
process (Linux: EFAULT), in the same directories, and
examples/conformance_threads.c checks threads and scheduling (issue 28: the
sched_* calls and their errors, PTHREAD_EXPLICIT_SCHED with each policy,
pthread_setschedparam, affinity, 8 threads alive at once), natively as a
job of root runs (without capabilities: a real-time policy is EPERM).

Where a run's line differs, the difference is named in KNOWN
(tests/conformance_known.py, listed in docs/architecture.md "Differences
from native") with the exact line that run prints and why; it is asserted to still differ in exactly
that way, so a fix makes this test fail until its entry goes. The files
each run leaves behind are compared as well.

One 1x1x2 machine (one pset of 2, 256 MiB per node) with block C.
"""
from __future__ import annotations

import difflib
import os
import re
import resource
import stat
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from conftest import EXAMPLES, Machine, booted_block
from conformance_known import KNOWN

PROG = EXAMPLES / "conformance"
FAULT = EXAMPLES / "conformance_fault"
THREADS = EXAMPLES / "conformance_threads"
# a job of root runs without capabilities (compute/cnode/launch.c): so does root's native run of THREADS
UNPRIVILEGED = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--securebits=+noroot,+noroot_locked"]
SIGNALLED = re.compile(r"killed by signal \d+ \((\w+)\)")
KERNELS = ("cnk", "linux")
PRELOAD = {"cnk": (), "linux": ("--no-sandbox",)}   # Linux mode here is the preload client's (issue 25)
# each kernel as it runs by default, and with every call on the socket
# instead of the mailbox (docs/protocol.md 6.4): name -> kernel, environment
RUNS = {k: (k, ()) for k in KERNELS} | {f"{k}-socket": (k, ("LATTICE_MAILBOX=0",)) for k in KERNELS}
# every run starts with this soft RLIMIT_NOFILE (below the hard limit, as on
# most systems): the client's own descriptors must take none of its numbers
START_NOFILE = min(1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1])


def make_scratch(d: Path) -> Path:
    """The layout the program expects, made by the test."""
    (d / "pre" / "dir").mkdir(parents=True)
    (d / "pre" / "file.txt").write_text("pre-made\n")
    (d / "pre" / "link").symlink_to("file.txt")
    (d / "pre" / "dangling").symlink_to("missing")
    (d / "pre" / "dirlink").symlink_to("dir")
    (d / "pre" / "dir" / "deep").mkdir()
    (d / "pre" / "deeplink").symlink_to("dir/deep")
    (d / "pre" / "dir" / "inner").touch()
    return d


def tree(d: Path) -> dict[str, tuple[str, int, bytes]]:
    """What a run left: relative path -> (type, mode bits, a file's bytes or a link's target)."""
    out = {}
    for p in sorted(d.rglob("*")):
        st = p.lstat()
        if stat.S_ISDIR(st.st_mode):
            out[str(p.relative_to(d))] = ("dir", stat.S_IMODE(st.st_mode), b"")
        elif stat.S_ISLNK(st.st_mode):
            out[str(p.relative_to(d))] = ("lnk", 0, os.readlink(p).encode())
        else:
            out[str(p.relative_to(d))] = ("reg", stat.S_IMODE(st.st_mode), p.read_bytes())
    return out


@dataclass
class Runs:
    out: dict[str, list[str]]             # native and each of RUNS -> the programs' lines
    trees: dict[str, dict[str, tuple[str, int, bytes]]]
    threads_err: dict[str, str]           # each of RUNS -> the stderr of its THREADS run


@pytest.fixture(scope="module")
def cm(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    assert PROG.exists() and FAULT.exists() and THREADS.exists(), f"{PROG}, {FAULT} or {THREADS} missing: run make"
    # the node's daemons, and so the ranks, start with the soft descriptor
    # limit the native runs get (start_nofile)
    old = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (START_NOFILE, old[1]))
    try:
        machine = booted_block(tmp_path_factory.mktemp("conformance"), "C", "1x1x2", "--pset-size", "2",
                               "--memory", "256M", "--cores", "2")
        m = next(machine)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, old)
    yield m
    next(machine, None)


def start_nofile() -> None:
    """The native runs' soft RLIMIT_NOFILE, as the ranks get it."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (START_NOFILE, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))


def outcome(p: subprocess.CompletedProcess[str], native_line: str) -> str:
    """A bad-pointer check's line, or what happened instead: how the rank
    died, or that it printed nothing (with the client's complaint)."""
    if p.returncode == 0 and p.stdout.strip():
        return p.stdout.strip()
    call = native_line.partition(" = ")[0]
    if died := SIGNALLED.search(p.stderr):
        return f"{call} = killed by {died.group(1)}"
    said = [line for line in p.stderr.splitlines() if line.startswith(("libcnclient:", "cnk:"))]
    return f"{call} = exit {p.returncode}, nothing printed; {' '.join(said)}"


@pytest.fixture(scope="module")
def runs(cm: Machine) -> Runs:
    parent = cm.work / "conformance"
    for how in ("native", *RUNS):
        make_scratch(parent / how)

    def native(prog: Path, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(prog), "native", *args], cwd=parent, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=600, preexec_fn=start_nofile)

    def job(how: str, prog: Path, *args: str) -> subprocess.CompletedProcess[str]:
        kernel, env = RUNS[how]
        return cm.run("run", "--block", "C", "-n", "1", "--kernel", kernel, *PRELOAD[kernel], *[f"--env={e}" for e in env],
                      "--cwd", str(parent), str(prog), how, *args, check=False, timeout=180)

    p = native(PROG)
    assert p.returncode == 0, p.stdout + p.stderr
    out = {"native": p.stdout.splitlines()}
    for how in RUNS:
        p = job(how, PROG)
        assert p.returncode == 0, f"{how}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
        out[how] = p.stdout.splitlines()
    # bad pointers, one process per check (a client that touches one dies)
    calls: list[str] = []
    while (p := native(FAULT, str(len(calls)))).returncode == 0:
        calls.append(p.stdout.strip())
    assert p.stdout.strip() == f"# no check {len(calls)}", p.stdout + p.stderr
    out["native"] += ["# bad pointers", *calls]
    for how in RUNS:
        out[how] += ["# bad pointers", *(outcome(job(how, FAULT, str(n)), line) for n, line in enumerate(calls))]
    # threads and scheduling
    p = subprocess.run([*(UNPRIVILEGED if os.geteuid() == 0 else []), str(THREADS)], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout + p.stderr
    out["native"] += ["# threads", *p.stdout.splitlines()]
    threads_err = {}
    for how in RUNS:
        kernel, env = RUNS[how]
        p = cm.run("run", "--block", "C", "-n", "1", "--kernel", kernel, *PRELOAD[kernel],
                   *[f"--env={e}" for e in env], "--cwd", str(parent), str(THREADS), check=False, timeout=180)
        assert p.returncode == 0, f"{how}: exit {p.returncode}\n{p.stdout}\n{p.stderr}"
        out[how] += ["# threads", *p.stdout.splitlines()]
        threads_err[how] = p.stderr
    return Runs(out, {how: tree(parent / how) for how in out}, threads_err)


def test_the_program_checks_what_it_says_natively(runs: Runs) -> None:
    native = runs.out["native"]
    assert "# done" in native and len(native) > 300, native[-5:]
    # a few lines that show each part ran and is right on Linux
    for line in ("open(a.txt, O_CREAT|O_EXCL|O_WRONLY) = 3 (the first descriptor, B)",
                 "open(missing) = -1 ENOENT", "rmdir(d) not empty = -1 ENOTEMPTY",
                 "listing(pre) = ../ ./ dangling@ deeplink@ dir/ dirlink@ file.txt link@", "dup(c) takes the lowest free = B+0",
                 "pread(hole, 4, offset 100) = 4 \"\\x00\\x00\\x00\\x00\"", "recv(client, 4, MSG_WAITALL) = 4 \"back\"",
                 "getcwd = <dir>/pre/dir", "close(1000) = -1 EBADF", "fork, child _exit(7), waitpid = exit status 7",
                 "stat(bad path) = -1 EFAULT", "write(file, bad buffer) = -1 EFAULT",
                 "pthread_create(PTHREAD_EXPLICIT_SCHED, default policy) = 0, the thread runs SCHED_OTHER priority 0",
                 "pthread_create(PTHREAD_EXPLICIT_SCHED, SCHED_FIFO, min) = EPERM",
                 "sched_setscheduler(no such pid, SCHED_OTHER, 0) = -1 ESRCH"):
        assert line in native, line
    for k in KNOWN.values():        # the table's native lines are the program's
        for known in k:
            assert known.native in native, f"KNOWN names a line the program no longer prints: {known.native}"


@pytest.mark.parametrize("how", RUNS)
def test_same_output_as_native_but_the_named_differences(runs: Runs, how: str) -> None:
    native, got = runs.out["native"], runs.out[how]
    diff = "\n".join(difflib.unified_diff(native, got, "native", how, lineterm="", n=1))
    assert len(got) == len(native) and "# done" in got, f"the outputs do not line up:\n{diff}"
    found = {(n, g) for n, g in zip(native, got) if n != g}
    named = {(k.native, k.got) for k in KNOWN[how]}
    problems = [f"  native: {n}\n  {how}: {g}\n    differs, and KNOWN does not say so" for n, g in sorted(found - named)]
    problems += [f"  native: {k.native}\n  KNOWN: {k.got}\n    no longer differs this way (fixed? update KNOWN): {k.why}"
                 for k in KNOWN[how] if (k.native, k.got) not in found]
    assert not problems, f"{how} against native:\n" + "\n".join(problems)


@pytest.mark.parametrize("how", RUNS)
def test_the_thread_limit_is_said_once(runs: Runs, how: str) -> None:
    said = [line for line in runs.threads_err[how].splitlines() if "thread limit" in line]
    if RUNS[how][0] == "linux":
        assert said == [], said     # Linux mode limits no threads
        return
    assert len(said) == 1 and "cnk: thread limit: rank 0 may run 4 threads (its 2 cores and 2 for its MPI library)" \
        in said[0] and "lattice run --threads N" in said[0], runs.threads_err[how]


@pytest.mark.parametrize("how", RUNS)
def test_leaves_the_same_files_as_native(runs: Runs, how: str) -> None:
    assert runs.trees[how] == runs.trees["native"], (runs.trees[how], runs.trees["native"])
    assert runs.trees["native"]["s.dat"] == ("reg", 0o644, b"vecto")
    assert runs.trees["native"]["d/g"] == ("reg", 0o604, b"\0\0\0")
