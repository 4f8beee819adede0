"""One program, three ways, the same answers (issue 13, item 6): the
conformance program (examples/conformance.c: files, directories, paths,
stat, descriptors and dup/dup2/dup3/fcntl, stdio, pipes, socket pairs, TCP
on 127.0.0.1, locks, copies, mappings, errno cases, fork, popen, kill and
sigqueue, a handler's sa_mask, EMFILE) runs
natively as the same user, in Linux mode (`--kernel linux`) and under cnk,
each kernel also with LATTICE_MAILBOX=0, each run in its own scratch
directory with the same layout under one parent, and its outputs must match
line for line. Then examples/conformance_fault.c passes one bad pointer per
process (Linux: EFAULT), in the same directories.

Where a run's line differs, the difference is named in KNOWN with the exact
line that run prints and why; it is asserted to still differ in exactly
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

PROG = EXAMPLES / "conformance"
FAULT = EXAMPLES / "conformance_fault"
SIGNALLED = re.compile(r"killed by signal \d+ \((\w+)\)")
KERNELS = ("cnk", "linux")
PRELOAD = {"cnk": (), "linux": ("--no-sandbox",)}   # Linux mode here is the preload client's (issue 25)
# each kernel as it runs by default, and with every call on the socket
# instead of the mailbox (docs/protocol.md 6.4): name -> kernel, environment
RUNS = {k: (k, ()) for k in KERNELS} | {f"{k}-socket": (k, ("LATTICE_MAILBOX=0",)) for k in KERNELS}
# every run starts with this soft RLIMIT_NOFILE (below the hard limit, as on
# most systems): the client's own descriptors must take none of its numbers
START_NOFILE = min(1024, resource.getrlimit(resource.RLIMIT_NOFILE)[1])


@dataclass(frozen=True)
class Known:
    native: str     # the line the program prints natively
    got: str        # the line the kernel prints instead
    why: str


def known(why: str, *pairs: tuple[str, str]) -> list[Known]:
    return [Known(n, g, why) for n, g in pairs]


# Issue 14's conformance bugs, and those this test found, in both kernels.
BOTH = [
    *known("a second connect() of a socket connected through the I/O node returns 0, not EISCONN: ciod "
           "completes the connect with poll and SO_ERROR, so the kernel's socket is still connecting",
           ("connect again = -1 EISCONN", "connect again = 0")),
    *known("listen() of a shipped descriptor is EOPNOTSUPP even when it is not a socket (Linux: ENOTSOCK)",
           ("listen(a file) = -1 ENOTSOCK", "listen(a file) = -1 EOPNOTSUPP")),
    *known("/dev/fd/N of a shipped descriptor names the local placeholder (/dev/null): the path rule keeps "
           "/dev/fd on the node",
           ("stat(/dev/fd/N of s.dat) = 0 type=reg mode=0644 size=5 nlink=1",
            "stat(/dev/fd/N of s.dat) = 0 type=chr mode=0666 size=0 nlink=1")),
    *known("a shared writable mapping of an I/O-node file is ENODEV: the compute node holds a copy, which "
           "could not be kept in step with the file that other nodes and ciod change (compute/cnk/README.md)",
           ('mmap(O_RDWR, PROT_WRITE, MAP_SHARED) maps = 5 "vecto"', "mmap(O_RDWR, PROT_WRITE, MAP_SHARED) = MAP_FAILED ENODEV")),
    *known("ioctl of a shipped descriptor is ENOTTY, FIONREAD included",
           ("ioctl(s.dat, FIONREAD) = 0", "ioctl(s.dat, FIONREAD) = -1 ENOTTY")),
    *known("the client reads the socket address itself instead of answering EFAULT: the rank dies (stat "
           "buffers, paths, utimensat times and iovec arrays go through compute/shipc/usercopy.c)",
           ("connect(TCP socket, bad address) = -1 EFAULT", "connect(TCP socket, bad address) = killed by SIGSEGV")),
]

# by run (RUNS): what each kernel's line is instead of the native one
KNOWN: dict[str, list[Known]] = {
    "cnk": [
        *BOTH,
        *known("cnk runs one process: fork is unsupported (compute/cnk/README.md), as on Blue Gene; popen's "
               "posix_spawn cannot start its child either",
               ("fork, child _exit(7), waitpid = exit status 7", "fork, child _exit(7), waitpid = -1 ENOSYS"),
               ("popen(echo, r) reads = from-the-child, second line", "popen(echo, r) = NULL ENOMEM"),
               ("pclose = exit status 0", "pclose = not run")),
    ],
    "linux": [
        *BOTH,
    ],
}


KNOWN["cnk-socket"] = KNOWN["cnk"]
KNOWN["linux-socket"] = KNOWN["linux"]


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


@pytest.fixture(scope="module")
def cm(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    assert PROG.exists() and FAULT.exists(), f"{PROG} or {FAULT} missing: run make"
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
    return Runs(out, {how: tree(parent / how) for how in out})


def test_the_program_checks_what_it_says_natively(runs: Runs) -> None:
    native = runs.out["native"]
    assert "# done" in native and len(native) > 300, native[-5:]
    # a few lines that show each part ran and is right on Linux
    for line in ("open(a.txt, O_CREAT|O_EXCL|O_WRONLY) = 3 (the first descriptor, B)",
                 "open(missing) = -1 ENOENT", "rmdir(d) not empty = -1 ENOTEMPTY",
                 "listing(pre) = ../ ./ dangling@ deeplink@ dir/ dirlink@ file.txt link@", "dup(c) takes the lowest free = B+0",
                 "pread(hole, 4, offset 100) = 4 \"\\x00\\x00\\x00\\x00\"", "recv(client, 4, MSG_WAITALL) = 4 \"back\"",
                 "getcwd = <dir>/pre/dir", "close(1000) = -1 EBADF", "fork, child _exit(7), waitpid = exit status 7",
                 "stat(bad path) = -1 EFAULT", "write(file, bad buffer) = -1 EFAULT"):
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
def test_leaves_the_same_files_as_native(runs: Runs, how: str) -> None:
    assert runs.trees[how] == runs.trees["native"], (runs.trees[how], runs.trees["native"])
    assert runs.trees["native"]["s.dat"] == ("reg", 0o644, b"vecto")
    assert runs.trees["native"]["d/g"] == ("reg", 0o604, b"\0\0\0")
