"""Boot progress on a terminal (issue 26 item 5): a boot over a few seconds
says "booting B: N/M compute nodes up" on stderr, rewritten in place while it
is a terminal, and erases it before what follows; not on a terminal a quick
boot says nothing (tests/e2e/test_t0790_failures_clean.py).  A prefix whose
compute node 3 waits for a file before it starts makes the boot as long as
the test wants: the test lets it go once the line showed 3 of 4 nodes up."""
from __future__ import annotations

import os
import pty
import select
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from conftest import BUILD, LATTICE, Machine, make_machine


@pytest.fixture
def pm(built: Path, tmp_path: Path) -> Iterator[Machine]:
    m = make_machine(tmp_path, "--shape", "1x1x4", "--pset-size", "2", "--memory", "256M")
    m.run("block", "create", "B", "--shape", "1x1x4")
    yield m
    m.run("free", "B", check=False)


def held_prefix(d: Path, flag: Path) -> Path:
    """A build prefix whose compute node 3 starts only once flag exists."""
    (d / "bin").mkdir(parents=True)
    for p in ("ciod", "cnk"):
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


@pytest.mark.parametrize("warm", ["1", "0"])
def test_a_long_boot_shows_its_progress_in_place_on_a_terminal(pm: Machine, tmp_path: Path, warm: str) -> None:
    flag = tmp_path / "go"
    env = dict(pm.env, LATTICE_PREFIX=str(held_prefix(tmp_path / "prefix", flag)), LATTICE_WARM=warm)
    master, slave = pty.openpty()
    proc = subprocess.Popen([*LATTICE, "boot", "B"], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=slave)
    os.close(slave)
    got = bytearray()
    try:
        read_until(master, b"booting B: 3/4 compute nodes up", proc, got)
        assert b"\r\x1b[Kbooting B: 3/4 compute nodes up" in got, bytes(got)
        flag.touch()
        out, _ = proc.communicate(timeout=300)
        read_until(master, b"\xff", proc, got)      # the rest, to the terminal's end
    finally:
        if proc.poll() is None:
            proc.kill()
        os.close(master)
    assert proc.returncode == 0 and b"block B Initialized" in out, (out, bytes(got))
    text = bytes(got)
    assert text.endswith(b"\r\x1b[K"), text     # erased: the shell's prompt starts a clean line
    assert b"\n" not in text.replace(b"\r\n", b"") and b"lattice: boot B" not in text, text  # one line, in place
