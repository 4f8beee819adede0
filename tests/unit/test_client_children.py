"""libcnclient.so against a fake ciod (test_client.py's), with the shared
page cnode gives every process (LATTICE_IO_SEQ_FD): a fork()ed child and a
program it execs ship on the one connection, taking turns; a remote
descriptor is closed on the "I/O node" once, by its last holder, and the
rank's stdout never; POSIX AIO on a shipped file is done at submission
(issue 25)."""
from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from test_client import FakeCiod, build_library

KIDS = r"""
#define _GNU_SOURCE
#include <aio.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "FAIL line %d: %s (errno %d %s)\n", \
    __LINE__, #c, errno, strerror(errno)); exit(1); } } while (0)

int main(void)
{
    int fd = open("f.txt", O_CREAT | O_WRONLY | O_TRUNC, 0644);
    CHECK(fd >= 0);
    pid_t c = fork();
    CHECK(c >= 0);
    if (c == 0) {                           /* ships too, and lets go of its copy */
        CHECK(write(fd, "child\n", 6) == 6);
        CHECK(close(fd) == 0);
        printf("child ok\n");
        exit(0);
    }
    int st;
    CHECK(waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(write(fd, "parent\n", 7) == 7);   /* the child's close left it open */
    fflush(stdout);
    if ((c = fork()) == 0) {                /* closes its stdout at exit */
        execl("/bin/echo", "echo", "exec'd", (char *)NULL);
        _exit(127);
    }
    CHECK(waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(close(fd) == 0);
    int g = open("g.txt", O_CREAT | O_RDWR | O_TRUNC, 0644);
    CHECK(g >= 0);
    struct aiocb w = { .aio_fildes = g, .aio_buf = "aio!", .aio_nbytes = 4 };
    const struct aiocb *list[1] = { &w };
    CHECK(aio_write(&w) == 0);
    while (aio_error(&w) == EINPROGRESS)
        CHECK(aio_suspend(list, 1, NULL) == 0);
    CHECK(aio_error(&w) == 0 && aio_return(&w) == 4);
    CHECK(aio_cancel(g, NULL) == AIO_ALLDONE);
    CHECK(close(g) == 0);
    printf("parent ok\n");                  /* the rank's stdout is still there */
    return 0;
}
"""


class CountingCiod(FakeCiod):
    """Which remote descriptors were closed, in order."""

    def __init__(self, sock: socket.socket, cwd: str) -> None:
        super().__init__(sock, cwd)
        self.closed: list[int] = []

    def do_close(self, a, data):  # type: ignore[no-untyped-def]
        self.closed.append(a[0])
        return super().do_close(a, data)


@pytest.fixture(scope="module")
def kids(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("kids")
    lib = build_library(d / "libcnclient.so")
    (d / "kids.c").write_text(KIDS)
    subprocess.run(["gcc", "-O2", "-Wall", "-o", str(d / "kids"), str(d / "kids.c")], check=True)
    return {"lib": lib, "prog": d / "kids"}


def test_children_share_the_connection_and_its_descriptors(kids: dict[str, Path], tmp_path: Path) -> None:
    server, local = tmp_path / "ionode", tmp_path / "compute"
    server.mkdir()
    local.mkdir()
    a, b = socket.socketpair()
    srv = CountingCiod(a, str(server))
    srv.start()
    seq = os.memfd_create("lattice-io-seq", 0)      # as cnode's seq_page
    os.ftruncate(seq, 4096)
    env = dict(os.environ, LD_PRELOAD=str(kids["lib"]), LATTICE_IO_FD=str(b.fileno()),
               LATTICE_IO_SEQ_FD=str(seq))
    try:
        p = subprocess.run([str(kids["prog"])], cwd=local, env=env, pass_fds=[b.fileno(), seq],
                           capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
    finally:
        b.close()
        os.close(seq)
    srv.join(timeout=30)
    a.close()
    explain = f"rc={p.returncode} stderr={p.stderr!r} remote={bytes(srv.out[1])!r} {bytes(srv.out[2])!r}"
    assert not srv.protocol_errors, srv.protocol_errors
    assert p.returncode == 0, explain
    assert srv.out[1].decode() == "child ok\nexec'd\nparent ok\n", explain
    assert (server / "f.txt").read_text() == "child\nparent\n"
    assert (server / "g.txt").read_text() == "aio!"
    # f.txt (3) closed once, by the parent, its last holder; g.txt (3 again)
    # once; the rank's stdin, stdout and stderr never
    assert srv.closed == [3, 3], srv.closed
    assert list(local.iterdir()) == []
