"""The one path rule of the shipping core (compute/shipc/path.c), as both kernels use it.

The core's path.c is built exactly as cnk builds it (freestanding, -fno-builtin) and
linked into a small hosted program that prints, for each name it is given, whether the
name stays on the compute node and how a (dirfd, name) pair is routed.  cnk and
libcnclient.so link this same object code, so these answers are both kernels' answers.
"""
from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FLAGS = ["-std=c11", "-ffreestanding", "-fno-builtin", "-fno-stack-protector", "-O2", "-Wall",
         "-Wextra", "-Werror", "-Iprotocol", "-Icompute/include", "-Icompute/shipc", "-Ibuild/gen"]

PROBE = r"""
#include <stdio.h>
#include <string.h>
#include "shipc.h"

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        printf("%s\n", shipc_path_is_local(strcmp(argv[i], "NULL") ? argv[i] : NULL) ? "local" : "ship");
    return 0;
}
"""


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("shipc_path")
    subprocess.run(["make", "-s", "-C", str(ROOT), "build/gen/fwd_posix_stubs.c"], check=True)
    obj = d / "path.o"
    subprocess.run(["gcc", *FLAGS, "-c", "compute/shipc/path.c", "-o", str(obj)], check=True, cwd=ROOT)
    (d / "probe.c").write_text(PROBE)
    exe = d / "probe"
    subprocess.run(["gcc", "-std=c11", "-O1", "-Icompute/shipc", "-Icompute/include", "-Iprotocol",
                    "-o", str(exe), str(d / "probe.c"), str(obj)], check=True, cwd=ROOT)
    return exe


def judge(exe: Path, names: list[str]) -> dict[str, str]:
    out = subprocess.run([str(exe), *names], capture_output=True, text=True, check=True).stdout.split()
    return dict(zip(names, out))


LOCAL = ["/proc", "//proc", "/proc/self/status", "/tmp/../proc/x", "/sys/devices", "/dev/shm",
         "/dev/shm/a/b", "/dev/null", "/dev//null", "/dev/./null", "/dev/zero", "/dev/urandom",
         "/dev/random", "/dev/fd/3", "/dev/stdin", "/dev/stdout", "/dev/stderr",
         # below a name of one of the process's own descriptors: the local kernel's ENOTDIR
         "/dev/stdin/x", "/dev/stdout/a/b", "/a/b/c/../../../proc", "/../proc"]
SHIPPED = ["proc", "./proc", "/procx", "/dev/nullx", "/dev/null/x", "/dev/zero/x", "/dev", "/",
           "/dev/shmx", "/tmp/proc", "/dev/tty", "/proc/../etc/passwd", "/dev/random/..", "/sysx",
           "", "relative/name", "/dev/stdinx", "NULL"]


def test_node_local_names(probe: Path) -> None:
    got = judge(probe, LOCAL)
    assert {n: v for n, v in got.items() if v != "local"} == {}


def test_every_other_name_ships(probe: Path) -> None:
    got = judge(probe, SHIPPED)
    assert {n: v for n, v in got.items() if v != "ship"} == {}


def test_the_rule_is_linked_into_both_kernels() -> None:
    subprocess.run(["make", "-s", "-C", str(ROOT), "build/bin/cnk", "build/lib/libcnclient.so"],
                   check=True)
    for binary in ("build/bin/cnk", "build/lib/libcnclient.so"):
        syms = subprocess.run(["nm", str(ROOT / binary)], capture_output=True, text=True,
                              check=True).stdout
        assert " shipc_path_is_local" in syms, binary
    exported = subprocess.run(["nm", "-D", "--defined-only", str(ROOT / "build/lib/libcnclient.so")],
                              capture_output=True, text=True, check=True).stdout
    assert "shipc_" not in exported         # the core is hidden: nothing new is interposable
