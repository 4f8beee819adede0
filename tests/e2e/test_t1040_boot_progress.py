"""Boot progress on a terminal (issue 26 item 5): a boot over a few seconds
says "booting B: N/M compute nodes up" on stderr, rewritten in place while it
is a terminal, and erases it before what follows; not on a terminal a quick
boot says nothing (tests/e2e/test_t0790_failures_clean.py).  A prefix whose
compute node 3 waits for a file before it starts makes the boot as long as
the test wants: the test lets it go once the line showed 3 of 4 nodes up."""
from __future__ import annotations

import os
import re
import pty
import select
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from conftest import BUILD, EXAMPLES, LATTICE, Machine, make_machine


@pytest.fixture
def pm(built: Path, tmp_path: Path) -> Iterator[Machine]:
    m = make_machine(tmp_path, "--shape", "1x1x4", "--pset-size", "2", "--memory", "256M")
    m.run("block", "create", "B", "--shape", "1x1x4")
    yield m
    m.run("free", "B", check=False)


def held_prefix(d: Path, flag: Path) -> Path:
    """A build prefix whose compute node 3 starts only once flag exists."""
    (d / "bin").mkdir(parents=True)
    for p in ("ciod", "cnk", "lattice-pidns-init"):
        (d / "bin" / p).symlink_to(BUILD / "bin" / p)
    (d / "lib").symlink_to(BUILD / "lib")
    script = d / "bin" / "cnode"
    script.write_text("#!/bin/sh\n"
                      f'case "$*" in *node-3.json*) while [ ! -e {flag} ]; do sleep 0.05; done ;; esac\n'
                      f'exec {BUILD / "bin" / "cnode"} "$@"\n')
    script.chmod(0o755)
    return d


def read_until(fd: int, want: bytes, proc: subprocess.Popen[bytes], got: bytearray) -> None:
    """Bytes of the terminal into got until want shows (or the boot ended)."""
    deadline = time.monotonic() + 300      # a hang guard only
    while want not in got:
        assert time.monotonic() < deadline, bytes(got)
        r, _, _ = select.select([fd], [], [], 1.0)
        if r:
            try:
                got += os.read(fd, 4096)
            except OSError:     # the other end closed (EIO)
                return
        elif proc.poll() is not None:
            return


@pytest.mark.parametrize("how", ["boot", "boot-cold", "run"])
def test_a_long_boot_shows_its_progress_in_place_on_a_terminal(pm: Machine, tmp_path: Path, how: str) -> None:
    """`lattice boot` (warm, and in its own process) and a `lattice run` that boots."""
    flag = tmp_path / "go"
    env = dict(pm.env, LATTICE_PREFIX=str(held_prefix(tmp_path / "prefix", flag)),
               LATTICE_WARM="0" if how == "boot-cold" else "1")
    if how == "run":
        pm.run("block", "delete", "B")      # the run makes and boots a block of its own
    args = ["run", "-n", "4", str(EXAMPLES / "hello")] if how == "run" else ["boot", "B"]
    master, slave = pty.openpty()
    proc = subprocess.Popen([*LATTICE, *args], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=slave)
    os.close(slave)
    got = bytearray()
    try:
        read_until(master, b" compute nodes up", proc, got)
        read_until(master, b": 3/4 compute nodes up", proc, got)
        assert re.search(rb"\r\x1b\[Kbooting [\w-]+: 3/4 compute nodes up", got), bytes(got)
        flag.touch()
        out, _ = proc.communicate(timeout=300)
        read_until(master, b"\xff", proc, got)      # the rest, to the terminal's end
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    assert proc.returncode == 0, (out, bytes(got))
    assert (out.count(b"hello from rank") == 4) if how == "run" else (b"block B Initialized" in out), out
    text = bytes(got)
    # erased before anything else is said (run's job id), so that it and the prompt start a clean line
    assert re.search(rb"compute nodes up\r\x1b\[K(lattice: job \d+\r\n)?$", text), text
    assert text.count(b"\n") == (1 if how == "run" else 0) and b"lattice: boot" not in text, text  # in place
