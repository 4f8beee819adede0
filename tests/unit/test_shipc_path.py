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
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include "shipc.h"

/* the descriptor table, as far as routing a dirfd needs it: 7 stands for
 * remote 70, 9 is one of the client's own, the rest are local */
int shipc_fd_route(int fd, int *remote)
{
    if (fd == 9)
        return -EBADF;
    if (fd != 7)
        return SHIPC_LOCAL;
    *remote = 70;
    return SHIPC_SHIP;
}

/* the program's strings are all good here (usercopy.c checks them page by page) */
long shipc_strnlen(const char *s, size_t max)
{
    return (long)strnlen(s, max);
}

static void route(int dirfd, const char *path)
{
    int rd = -1, r = shipc_path_route(dirfd, path, &rd);
    if (r < 0)
        printf(" E%d", -r);
    else if (r == SHIPC_SHIP)
        printf(" S%d", rd);
    else
        printf(" L");
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        const char *p = strcmp(argv[i], "NULL") ? argv[i] : NULL;
        printf("%s", shipc_path_is_local(p) ? "local" : "ship");
        route(AT_FDCWD, p);
        route(7, p);
        route(9, p);
        route(5, p);
        printf("\n");
    }
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
    subprocess.run(["gcc", "-std=c11", "-D_GNU_SOURCE", "-O1", "-Icompute/shipc", "-Icompute/include", "-Iprotocol",
                    "-o", str(exe), str(d / "probe.c"), str(obj)], check=True, cwd=ROOT)
    return exe


def judge(exe: Path, names: list[str]) -> dict[str, str]:
    """name -> "local" or "ship", then its route from AT_FDCWD, from a shipped dirfd (remote 70),
    from one of the client's own and from a local one: L, S<remote dirfd> or E<errno>."""
    out = subprocess.run([str(exe), *names], capture_output=True, text=True, check=True).stdout
    return dict(zip(names, out.splitlines()))


LOCAL = ["/proc", "//proc", "/proc/self/status", "/tmp/../proc/x", "/sys/devices", "/dev/shm",
         "/dev/shm/a/b", "/dev/null", "/dev//null", "/dev/./null", "/dev/zero", "/dev/urandom",
         "/dev/random", "/dev/fd/3", "/dev/stdin", "/dev/stdout", "/dev/stderr",
         # below a name of one of the process's own descriptors: the local kernel's ENOTDIR
         "/dev/stdin/x", "/dev/stdout/a/b", "/a/b/c/../../../proc", "/../proc"]
SHIPPED = ["/procx", "/dev/nullx", "/dev/null/x", "/dev/zero/x", "/dev", "/",
           "/dev/shmx", "/tmp/proc", "/dev/tty", "/proc/../etc/passwd", "/dev/random/..", "/sysx",
           "/dev/stdinx"]


def test_node_local_names(probe: Path) -> None:
    got = judge(probe, LOCAL)
    # an absolute local name is local whatever the dirfd
    assert {n: v for n, v in got.items() if v != "local L L L L"} == {}


def test_every_other_name_ships(probe: Path) -> None:
    got = judge(probe, [n for n in SHIPPED if n.startswith("/")])
    # an absolute name ships against the I/O node's root, whatever the dirfd
    assert {n: v for n, v in got.items() if v != "ship S-100 S-100 S-100 S-100"} == {}


def test_relative_names_go_where_their_directory_is(probe: Path) -> None:
    got = judge(probe, ["proc", "./proc", "", "relative/name", "dev/null"])
    # the cwd is the I/O node's; a shipped dirfd gives its remote; one of the
    # client's own is EBADF; a local dirfd is the node kernel's to judge
    assert {n: v for n, v in got.items() if v != "ship S-100 S70 E9 L"} == {}


def test_null_and_too_long_names(probe: Path) -> None:
    got = judge(probe, ["NULL", "/" + "a" * 5000, "b" * 5000])
    assert got["NULL"] == "ship L L L L"        # the kernel answers EFAULT
    assert got["/" + "a" * 5000] == "ship E36 E36 E36 E36"      # ENAMETOOLONG
    assert got["b" * 5000] == "ship E36 E36 E36 E36"


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
