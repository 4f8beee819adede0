"""The ranks' output and input at pipe speed (issue 27, docs/cli.md "Output").

Before, `lattice run` held everything a rank wrote after its last newline
and joined it again with each chunk: binary output without newlines cost
quadratic time and all of it in memory, and a long line came out only when
it ended.  `-l` also labelled after each carriage return, changing binary
output.  Now at most 64 KiB of a line is held, a longer one goes out in
pieces labelled once, a label goes only after a newline, and the output
comes byte for byte, under cnk and in Linux mode.

Each test's reference is tests/e2e/outpattern.c run natively for the same
rank.  One 1x1x4 machine in psets of 2 (two I/O nodes), block O, booted.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Iterator

import pytest

from conftest import LATTICE, Machine, booted_block, build_probe

GUARD = 600             # s: a bound on each command, only so that a hang fails
KERNELS = ["cnk", "linux"]
MODES = {"cnk": ["--kernel", "cnk"], "linux": ["--kernel", "linux"],                 # the sandbox: pipes to cnode
         "preload": ["--kernel", "linux", "--no-sandbox"]}                          # shipped by libcnclient


@pytest.fixture(scope="module")
def om(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    yield from booted_block(tmp_path_factory.mktemp("output"), "O", "1x1x4", "--pset-size", "2",
                            "--memory", "256M")


@pytest.fixture(scope="module")
def exitrace(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_probe(tmp_path_factory, "exitrace_probe")


@pytest.fixture(scope="module")
def pattern(tmp_path_factory: pytest.TempPathFactory) -> str:
    return build_probe(tmp_path_factory, "outpattern")


def native(exe: str, rank: int, *args: str) -> bytes:
    """What the pattern writer writes for rank, run here."""
    return subprocess.run([exe, *args], env=dict(os.environ, LATTICE_RANK=str(rank)), capture_output=True,
                          check=True, timeout=GUARD).stdout


def run_measured(m: Machine, args: list[str], cwd: Path) -> tuple[int, int, bytes]:
    """`lattice run` in this process's child, not in the warm server: (exit
    status, its peak resident memory in KiB, its stderr); stdout discarded."""
    err = cwd / "stderr"
    with open(err, "wb") as e:
        p = subprocess.Popen([*LATTICE, "run", "--block", "O", *args], env=dict(m.env, LATTICE_WARM="0"),
                             cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=e)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    return p.returncode, usage.ru_maxrss, err.read_bytes()


@pytest.mark.parametrize("kernel", KERNELS)
def test_ranks_binary_output_in_files_byte_exact_in_bounded_memory(om: Machine, pattern: str, kernel: str,
                                                                    tmp_path: Path) -> None:
    """4 ranks write 12 MiB each without a newline to -o files: each file is
    its rank's bytes exactly, and the run holds far less than one rank's line
    (before: all of each line, twice while it was joined again)."""
    size = 12 << 20
    status, base, err = run_measured(om, ["-n", "4", "--kernel", kernel, "true"], tmp_path)
    assert status == 0, err
    status, peak, err = run_measured(om, ["-n", "4", "--kernel", kernel, "-o", "out.%t", pattern, "flat",
                                          str(size)], tmp_path)
    assert status == 0, err
    for rank in range(4):
        got = (tmp_path / f"out.{rank}").read_bytes()
        want = native(pattern, rank, "flat", str(size))
        assert len(got) == size and hashlib.sha256(got).digest() == hashlib.sha256(want).digest(), rank
    assert peak - base < 16 << 10, f"lattice run grew by {(peak - base) >> 10} MiB for 48 MiB of output"


@pytest.mark.parametrize("kernel", list(MODES))
def test_labelled_binary_and_line_output_of_ranks_on_stdout(om: Machine, pattern: str, kernel: str) -> None:
    """-l: rank 0 writes 6 MiB of binary (carriage returns and every other
    byte among it), ranks 1-3 100-byte lines, all to one pipe: every line is
    whole and labelled, each rank's lines in order, its bytes exact."""
    size = 6 << 20
    p = subprocess.run([*LATTICE, "run", "--block", "O", "-l", *MODES[kernel], "-n", "1", pattern, "bin",
                        str(size), ":", "-n", "3", pattern, "lines", str(size // 2)], env=om.env,
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=GUARD)
    assert p.returncode == 0, p.stderr
    mine: dict[int, list[bytes]] = {r: [] for r in range(4)}
    for line in p.stdout.split(b"\n")[:-1]:        # lines end at newlines only (not at a carriage return)
        label, sep, rest = line.partition(b": ")
        assert sep and label in (b"0", b"1", b"2", b"3"), line[:80]
        mine[int(label)].append(rest + b"\n")
    want = native(pattern, 0, "bin", str(size))
    got = b"".join(mine[0])
    # the last line of rank 0 had no newline: a labelled one gets one
    assert got == want + (b"" if want.endswith(b"\n") else b"\n")
    for r in (1, 2, 3):
        assert b"".join(mine[r]) == native(pattern, r, "lines", str(size // 2)), r


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_long_line_goes_out_before_it_ends_and_stdin_comes_back(om: Machine, pattern: str, kernel: str) -> None:
    """A rank writes 1 MiB without a newline, then copies its input (8 MiB of
    lines) back: the long line reaches the caller, labelled once, while the
    rank still waits for input; then the input comes back whole, labelled."""
    size = 1 << 20
    p = subprocess.Popen([*LATTICE, "run", "--block", "O", "-l", "--kernel", kernel, "-n", "1", pattern, "stream",
                          str(size)], env=om.env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    out, inp = p.stdout, p.stdin
    assert out is not None and inp is not None and p.stderr is not None
    head: list[bytes] = []
    reader = threading.Thread(target=lambda: head.append(out.read(3 + size)), daemon=True)
    reader.start()
    reader.join(GUARD)              # the event: the line's first MiB came, its newline not yet sent
    if reader.is_alive():
        p.kill()
        pytest.fail("the long line did not come out before its end")
    flat = native(pattern, 0, "flat", str(size))
    assert head == [b"0: " + flat]
    lines = [b"%07d %s\n" % (i, os.urandom(40).hex().encode()) for i in range(8 << 20 >> 7)]
    feeder = threading.Thread(target=lambda: (inp.write(b"".join(lines)), inp.close()), daemon=True)
    feeder.start()
    rest = out.read()
    p.wait(GUARD)
    feeder.join(GUARD)
    assert p.returncode == 0, p.stderr.read()
    assert rest == b"\n" + b"".join(b"0: " + ln for ln in lines) + b"0: end\n"


def out_counters(m: Machine) -> dict[str, int]:
    """The block's output counters, summed over its I/O nodes."""
    ions = json.loads(m.run("counters", "O", "--json").stdout)["ionodes"]
    return {k: sum(ion["stats"][k] for ion in ions) for k in ("out_msgs", "exits_held")}


@pytest.mark.parametrize("kernel,ending,width", [("cnk", "exit", 0), ("cnk", "kill", 0), ("cnk", "kill", 60000),
                                                ("preload", "exit", 0)])
def test_ranks_that_write_then_exit_at_once_lose_nothing(om: Machine, exitrace: str, kernel: str,
                                                         ending: str, width: int) -> None:
    """8 ranks (vn mode, two I/O nodes) write 1,500 lines each, one write(2)
    a line, and end at once (_exit, rank 5 with 3 or by SIGKILL): every line
    of every rank arrives, in order, before its rank's exit, and the job's
    status is rank 5's.  A rank killed by a signal ends the job (the others
    are killed, mid-output or not): then rank 5's lines are all there and the
    others' are a beginning of theirs.  Each write is handed from the I/O
    worker to ciod's monitor unacknowledged, and each exit goes out behind
    its rank's output (the counters say so: before, every output message
    waited for the monitor's acknowledgement and exits went out as they came).
    Lines of 60,000 bytes (4 ranks, rank 1 killed): cnk does not wait for its
    output writes' replies, so a rank killed at once may leave some unserved;
    its exit waits for them (this case rarely shows that race: the worker
    serves them before the exit arrives)."""
    lines, ranks = (1500, 8) if not width else (300, 4)
    before = out_counters(om)
    fail = ranks - 3
    p = subprocess.run([*LATTICE, "run", "--block", "O", *MODES[kernel], "--mode", "vn", "-n", str(ranks), exitrace,
                        str(lines), str(fail), ending, str(width)], env=om.env, stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=GUARD)
    assert p.returncode == (3 if ending == "exit" else 128 + 9), p.stderr[-2000:]
    out: dict[int, list[str]] = {r: [] for r in range(ranks)}
    for line in p.stdout.decode().splitlines():
        out[int(line.split()[0])].append(line)
    err: dict[int, list[str]] = {r: [] for r in range(ranks)}
    for line in p.stderr.decode().splitlines():
        if line[:1].isdigit():
            err[int(line.split()[0])].append(line)
    def line(r: int, i: int) -> str:
        head = f"{r} {i}"
        return head + "." * (width - len(head) - 1) if width > len(head) + 1 else head

    for r in range(ranks):
        want_out = [line(r, i) for i in range(lines)]
        want_err = [line(r, i) for i in range(99, lines, 100)]
        if ending == "exit" or r == fail:
            assert out[r] == want_out, (r, len(out[r]))
            assert err[r] == want_err, (r, len(err[r]))
        else:                           # killed with the job: what came is in order
            assert out[r] == want_out[:len(out[r])], r
            assert err[r] == want_err[:len(err[r])], r
    d = {k: v - before[k] for k, v in out_counters(om).items()}
    assert d["exits_held"] == ranks
    assert d["out_msgs"] >= (ranks if ending == "exit" else 1) * (lines + lines // 100)


def test_a_rank_blocked_in_a_call_when_its_job_is_killed_ends_with_its_output(om: Machine, exitrace: str,
                                                                             tmp_path: Path) -> None:
    """Under cnk an exit waits until the I/O node served everything its rank
    sent (cnk does not wait for its output writes' replies), but never for a
    call the rank waited for: a rank that wrote 1,500 lines and blocks
    opening a FIFO on the I/O node ends when its job is cancelled."""
    fifo = tmp_path / "never"
    os.mkfifo(fifo)
    os.chmod(tmp_path, 0o755)
    p = subprocess.Popen([*LATTICE, "run", "--block", "O", "--kernel", "cnk", "-n", "1", exitrace, "1500", "0",
                          str(fifo)], env=om.env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    assert p.stdout is not None
    lines = [p.stdout.readline() for _ in range(1500)]     # the event: all of them came, the rank blocks
    assert lines == [f"0 {i}\n".encode() for i in range(1500)]
    job = next(int(ln.split()[0]) for ln in om.run("jobs").stdout.splitlines()[1:] if " Running " in ln)
    om.run("cancel", str(job))
    out, err = p.communicate(timeout=GUARD)  # it ends: the exit did not wait for the blocked call
    assert p.returncode != 0 and out == b"", err[-2000:]
