"""Signals under cnk: the program's handlers make file calls while the code
they interrupted is in the middle of its own (cnk holds the signal back
until it lets go of its connection: compute/cnk/signal.c), a blocking local
call is still interrupted (EINTR, or restarted with SA_RESTART), SIGSYS
raised by the program reaches its handler, and sigaction reads back what the
program set.  examples/cnk/sigio.c checks every byte it wrote; each part
prints an "ok" line.  A handler that ran on top of a shipped call would
deadlock on the connection's lock: the job would not end (timeout)."""
from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest

from conftest import Machine, make_machine
from cnk_helpers import CNK_EX

PARTS = ("ok io ", "ok eintr", "ok sigsys ", "ok sigaction")


@pytest.fixture(scope="module")
def sig_machine(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Machine]:
    assert (built / "bin" / "cnk").exists(), "build/bin/cnk missing: the compute node kernel is not built"
    m = make_machine(tmp_path_factory.mktemp("sig"), "--shape", "1x1x1", "--pset-size", "1",
                     "--memory", "256M")
    m.run("block", "create", "S", "--shape", "1x1x1")
    m.run("boot", "S")
    yield m
    m.run("free", "S", check=False)


def mbox_calls(m: Machine) -> int:
    (ion,) = json.loads(m.run("counters", "S", "--json").stdout)["ionodes"]
    return int(ion["stats"]["mbox_calls"])


@pytest.mark.parametrize("how", ["mailbox", "socket"])
@pytest.mark.parametrize("variant", ["", "-static"], ids=["dynamic", "static"])
def test_handlers_make_file_calls_in_the_middle_of_calls(sig_machine: Machine, variant: str, how: str) -> None:
    m = sig_machine
    work = m.work / f"sigio{variant}-{how}"
    work.mkdir()
    os.chmod(work, 0o777)
    env = ["--env", "LATTICE_MAILBOX=0"] if how == "socket" else []
    before = mbox_calls(m)
    p = m.run("run", "--block", "S", "-n", "1", "--kernel", "cnk", *env, "--cwd", str(work),
              str(CNK_EX / f"sigio{variant}"), str(work), check=False, timeout=300)
    lines = p.stdout.splitlines()
    assert p.returncode == 0, p.stdout + p.stderr
    for part in PARTS:
        assert any(line.startswith(part) for line in lines), (part, p.stdout + p.stderr)
    # the calls went the way asked: thousands through the mailbox, or none
    calls = mbox_calls(m) - before
    assert (calls > 1000) if how == "mailbox" else (calls == 0), calls
    assert list(work.iterdir()) == []       # the program removed its files


def test_the_program_cannot_take_gs(sig_machine: Machine) -> None:
    """%gs holds cnk's per-thread block: arch_prctl(ARCH_SET_GS) is refused."""
    m = sig_machine
    src = m.work / "setgs.c"
    src.write_text(
        "#include <asm/prctl.h>\n#include <errno.h>\n#include <stdio.h>\n#include <sys/syscall.h>\n"
        "#include <unistd.h>\n"
        "int main(void) { long r = syscall(SYS_arch_prctl, ARCH_SET_GS, 0x1000);\n"
        "  printf(\"set_gs=%ld errno=%d\\n\", r, r ? errno : 0); return 0; }\n")
    exe = m.work / "setgs"
    subprocess.run(["cc", "-O2", "-o", str(exe), str(src)], check=True)
    p = m.run("run", "--block", "S", "-n", "1", "--kernel", "cnk", str(exe), timeout=120)
    assert p.stdout.strip() == "set_gs=-1 errno=1", p.stdout + p.stderr
