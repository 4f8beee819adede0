"""lattice-fs's start (compute/cnfs/main.c): what cnode hands it, and one
line on stderr, never a crash, when something is wrong with it."""
from __future__ import annotations

import ctypes
import errno
import os
import re
import socket
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent
EXE = ROOT / "build" / "bin" / "lattice-fs"


def setup_module() -> None:
    assert EXE.exists(), f"{EXE} missing: run make"


def start(conn: int, ctl: int, dp: str = "0,0,0") -> subprocess.Popen[bytes]:
    return subprocess.Popen([str(EXE), "--conn", str(conn), "--ctl", str(ctl), "--dp", dp, "--label", "t"],
                            pass_fds=(conn, ctl), stdout=subprocess.PIPE, stderr=subprocess.PIPE)


USAGE = ("lattice-fs: usage: lattice-fs --conn FD --ctl FD --dp EAGER,RDV,FLAGS [--label TEXT] "
         "[--writes cached|direct] (started by cnode)")


def test_without_its_descriptors_it_says_how_it_is_started() -> None:
    p = subprocess.run([str(EXE)], capture_output=True, text=True, timeout=600)
    assert p.returncode == 2
    assert p.stderr.splitlines() == [USAGE]


def test_writes_are_cached_or_direct() -> None:
    p = subprocess.run([str(EXE), "--conn", "0", "--ctl", "1", "--dp", "0,0,0", "--writes", "later"],
                       capture_output=True, text=True, timeout=600)
    assert p.returncode == 2
    assert p.stderr.splitlines() == [USAGE]


def test_a_connection_that_is_no_socket_is_one_line() -> None:
    r, w = os.pipe()
    try:
        p = start(r, w)
        out, err = p.communicate(timeout=600)
    finally:
        os.close(r)
        os.close(w)
    assert p.returncode == 1 and out == b""
    assert err.decode().splitlines() == ["lattice-fs t: the I/O node connection is unusable: Socket operation on "
                                         "non-socket"]


def test_a_job_that_never_mounts_ends_it_without_a_word() -> None:
    conn, peer = socket.socketpair()
    ctl, holder = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with conn, peer, ctl, holder:
        p = start(conn.fileno(), ctl.fileno())
        holder.close()                      # the job ended before its sandbox mounted anything
        ctl.close()
        out, err = p.communicate(timeout=600)
    assert (p.returncode, out, err) == (0, b"", b"")


def test_a_message_without_the_fuse_descriptor_is_one_line() -> None:
    conn, peer = socket.socketpair()
    ctl, holder = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    with conn, peer, ctl, holder:
        p = start(conn.fileno(), ctl.fileno())
        holder.send(b"x")
        out, err = p.communicate(timeout=600)
    assert p.returncode == 1 and out == b""
    assert err.decode().splitlines() == ["lattice-fs t: no /dev/fuse descriptor from the sandbox: Protocol error"]


def mount_fuse(mnt: Path) -> int:
    """/dev/fuse mounted on mnt as the sandbox's holder mounts it: the descriptor."""
    fd = os.open("/dev/fuse", os.O_RDWR)
    libc = ctypes.CDLL(None, use_errno=True)
    opts = f"fd={fd},rootmode=40000,user_id=0,group_id=0".encode()
    if libc.mount(b"lattice-fs", str(mnt).encode(), b"fuse.lattice-fs", 6, opts) != 0:   # MS_NOSUID | MS_NODEV
        err = ctypes.get_errno()
        os.close(fd)
        raise OSError(err, os.strerror(err))
    return fd


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting /dev/fuse needs root")
def test_the_io_node_hanging_up_ends_it_with_one_line(tmp_path: Path) -> None:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    dev = mount_fuse(mnt)
    try:
        conn, peer = socket.socketpair()
        ctl, holder = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with conn, peer, ctl, holder:
            p = start(conn.fileno(), ctl.fileno())
            peer.close()                        # ciod gone
            socket.send_fds(holder, [b"x"], [dev])
            os.close(dev)
            dev = -1
            out, err = p.communicate(timeout=600)
        assert p.returncode == 1 and out == b""
        lines = err.decode().splitlines()
        assert len(lines) == 1 and re.fullmatch(r"lattice-fs t: connection to the I/O node lost \(.+\); ending",
                                                lines[0]), lines
        with pytest.raises(OSError) as e:
            os.stat(mnt / "x")
        assert e.value.errno == errno.ENOTCONN    # the mount's calls fail, none hangs
    finally:
        if dev >= 0:
            os.close(dev)
        subprocess.run(["umount", "-l", str(mnt)], check=False)
