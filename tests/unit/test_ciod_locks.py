"""Record locks and flock held on the I/O node for each compute process
(ionode/ciod/lock.c, docs/protocol.md section 6.6), and the calls that make
links and nodes, change owners and reserve space (ionode/ciod/inode.c)."""
from __future__ import annotations

import errno
import fcntl
import os
import stat
import struct
import threading
import time
from pathlib import Path

from test_ciod import SYS, Ciod, Job, Proc, ciod, ciod_bin, recv, send  # noqa: F401  (fixtures)

from lattice.transport import wire

SYS.update(lock=wire.SYS_LOCK, flock=wire.SYS_FLOCK, symlinkat=wire.SYS_SYMLINKAT, linkat=wire.SYS_LINKAT,
           fchownat=wire.SYS_FCHOWNAT, mknodat=wire.SYS_MKNODAT, fallocate=wire.SYS_FALLOCATE)
FLOCK = struct.Struct("<hhiqq")         # struct lat_flock
ERR_WAIT = 0x10000
AT_FDCWD, AT_EMPTY_PATH, AT_SYMLINK_FOLLOW = -100, 0x1000, 0x400
F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW = 36, 37, 38


def lk(typ: int, start: int, length: int, whence: int = os.SEEK_SET, pid: int = 0) -> bytes:
    return FLOCK.pack(typ, whence, pid, start, length)


def lock(p: Proc, fd: int, cmd: int, fl: bytes, wait: int = -1) -> tuple[int, int, tuple[int, ...]]:
    ret, err, out = p.call("lock", fd, cmd, wait, data=fl)
    return ret, err, FLOCK.unpack(out) if out else ()


def opened(p: Proc, name: str, flags: int = os.O_RDWR | os.O_CREAT) -> int:
    return p.ok("openat", AT_FDCWD, flags, 0o644, data=name.encode() + b"\0")[0]


def test_ranks_exclude_each_other_with_posix_rules(ciod: Ciod, tmp_path: Path) -> None:
    job = Job(ciod, tmp_path, image=b"x")
    a, b = job.proc(0), job.proc(1)
    fa, fb = opened(a, "shared"), opened(b, "shared")
    assert lock(a, fa, fcntl.F_SETLK, lk(fcntl.F_WRLCK, 0, 10))[:2] == (0, 0)
    # another rank: refused where it overlaps, granted beside it; F_GETLK names the holder's range
    assert lock(b, fb, fcntl.F_SETLK, lk(fcntl.F_WRLCK, 5, 10))[:2] == (-1, errno.EAGAIN)
    ret, err, got = lock(b, fb, fcntl.F_GETLK, lk(fcntl.F_WRLCK, 5, 10))
    assert (ret, err) == (0, 0) and got[0] == fcntl.F_WRLCK and got[3:] == (0, 10), got
    assert lock(b, fb, fcntl.F_SETLK, lk(fcntl.F_RDLCK, 10, 10))[:2] == (0, 0)
    # one owner per process: its own locks never conflict, even through another descriptor
    fa2 = opened(a, "shared", os.O_RDWR)
    assert lock(a, fa2, fcntl.F_SETLK, lk(fcntl.F_WRLCK, 2, 4))[:2] == (0, 0)
    ret, err, got = lock(a, fa, fcntl.F_GETLK, lk(fcntl.F_WRLCK, 0, 10))
    assert got[0] == fcntl.F_UNLCK, got
    # closing any descriptor of the file releases all of the process's locks on it
    a.ok("close", fa2)
    assert lock(b, fb, fcntl.F_SETLK, lk(fcntl.F_WRLCK, 0, 10))[:2] == (0, 0)
    # SEEK_CUR is the descriptor's position, not the lock file's
    b.ok("lseek", fb, 100, os.SEEK_SET)
    assert lock(b, fb, fcntl.F_SETLK, lk(fcntl.F_WRLCK, 5, 1, os.SEEK_CUR))[:2] == (0, 0)
    ret, err, got = lock(a, fa, fcntl.F_GETLK, lk(fcntl.F_WRLCK, 0, 0))
    assert got[0] == fcntl.F_WRLCK and got[3] == 0, got
    ret, err, got = lock(a, fa, fcntl.F_GETLK, lk(fcntl.F_WRLCK, 101, 10))
    assert got[0] == fcntl.F_WRLCK and got[3:] == (105, 1), got


def test_locks_exclude_processes_on_the_host_too(ciod: Ciod, tmp_path: Path) -> None:
    job = Job(ciod, tmp_path, image=b"x")
    a = job.proc(0)
    fa = opened(a, "hostfile")
    with open(tmp_path / "hostfile", "r+b") as f:
        fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 0)
        assert lock(a, fa, fcntl.F_SETLK, lk(fcntl.F_WRLCK, 0, 10))[:2] == (-1, errno.EAGAIN)
        fcntl.lockf(f, fcntl.LOCK_UN, 10, 0)
    assert lock(a, fa, fcntl.F_SETLK, lk(fcntl.F_WRLCK, 0, 10))[:2] == (0, 0)


def test_bad_lock_requests_get_linuxs_errors(ciod: Ciod, tmp_path: Path) -> None:
    job = Job(ciod, tmp_path, image=b"x")
    a = job.proc(0)
    (tmp_path / "ro").write_bytes(b"x")
    ro = opened(a, "ro", os.O_RDONLY)
    assert lock(a, ro, fcntl.F_SETLK, lk(fcntl.F_WRLCK, 0, 1))[:2] == (-1, errno.EBADF)
    assert lock(a, ro, fcntl.F_SETLK, lk(fcntl.F_RDLCK, 0, 1))[:2] == (0, 0)
    assert lock(a, ro, fcntl.F_SETLK, lk(7, 0, 1))[:2] == (-1, errno.EINVAL)
    assert lock(a, ro, fcntl.F_SETLK, lk(fcntl.F_RDLCK, 0, 1, whence=9))[:2] == (-1, errno.EINVAL)
    assert lock(a, ro, F_OFD_SETLK, lk(fcntl.F_RDLCK, 0, 1, pid=5))[:2] == (-1, errno.EINVAL)
    assert lock(a, ro, fcntl.F_GETFL, lk(fcntl.F_RDLCK, 0, 1))[:2] == (-1, errno.EINVAL)
    assert lock(a, 1, fcntl.F_SETLK, lk(fcntl.F_RDLCK, 0, 1))[:2] == (-1, errno.EINVAL)
    assert lock(a, 77, fcntl.F_SETLK, lk(fcntl.F_RDLCK, 0, 1))[:2] == (-1, errno.EBADF)
    # a short lock structure is malformed: an error, and ciod keeps serving
    ret, err, _ = a.call("lock", ro, fcntl.F_SETLK, -1, data=b"\0" * 8)
    assert ret == -1 and err in (errno.EINVAL, errno.EPROTO), err
    assert a.ok("fstatat", ro, AT_EMPTY_PATH, data=b"\0")[0] == 0


def test_a_blocking_lock_waits_and_is_granted_when_released(ciod: Ciod, tmp_path: Path) -> None:
    job = Job(ciod, tmp_path, image=b"x")
    a, b = job.proc(0), job.proc(1)
    fa, fb = opened(a, "f"), opened(b, "f")
    assert lock(a, fa, fcntl.F_SETLK, lk(fcntl.F_WRLCK, 0, 0))[:2] == (0, 0)
    # a bounded wait runs out: LAT_ERR_WAIT, nothing done
    t0 = time.monotonic()
    assert lock(b, fb, fcntl.F_SETLKW, lk(fcntl.F_WRLCK, 0, 0), wait=300)[:2] == (-1, ERR_WAIT)
    assert 0.25 < time.monotonic() - t0 < 600      # it waited its bound, and ended (600: a hang guard)
    # an unbounded one is granted once the holder lets go
    got: list[tuple[int, int, tuple[int, ...]]] = []
    waiter = threading.Thread(target=lambda: got.append(lock(b, fb, fcntl.F_SETLKW, lk(fcntl.F_WRLCK, 0, 0))))
    waiter.start()
    time.sleep(0.3)
    assert not got
    assert lock(a, fa, fcntl.F_SETLK, lk(fcntl.F_UNLCK, 0, 0))[:2] == (0, 0)
    waiter.join(600)
    assert got and got[0][:2] == (0, 0)
    assert lock(a, fa, fcntl.F_SETLK, lk(fcntl.F_WRLCK, 0, 1))[:2] == (-1, errno.EAGAIN)


def test_a_process_that_ends_or_dies_waiting_releases_its_locks(ciod: Ciod, tmp_path: Path) -> None:
    job = Job(ciod, tmp_path, image=b"x")
    a, b = job.proc(0), job.proc(1)
    fa, fb = opened(a, "f"), opened(b, "f")
    assert lock(a, fa, fcntl.F_SETLK, lk(fcntl.F_WRLCK, 0, 10))[:2] == (0, 0)
    assert lock(b, fb, fcntl.F_SETLK, lk(fcntl.F_WRLCK, 100, 10))[:2] == (0, 0)
    # b blocks for a's range, then its process is gone: its thread gives up and its lock goes
    b.seq += 1
    send(b.s, SYS["lock"], struct.pack("<4q", fb, fcntl.F_SETLKW, -1, 0) + lk(fcntl.F_WRLCK, 0, 10), b.seq)
    time.sleep(0.3)
    b.s.close()
    assert lock(a, fa, fcntl.F_SETLKW, lk(fcntl.F_WRLCK, 100, 10), wait=600000)[:2] == (0, 0)  # guard
    # a process that simply ends releases everything
    c = job.proc(1)
    fc = opened(c, "f")
    assert lock(c, fc, fcntl.F_SETLK, lk(fcntl.F_WRLCK, 0, 1))[:2] == (-1, errno.EAGAIN)
    a.s.close()
    assert lock(c, fc, fcntl.F_SETLKW, lk(fcntl.F_WRLCK, 0, 0), wait=600000)[:2] == (0, 0)


def test_flock_between_ranks(ciod: Ciod, tmp_path: Path) -> None:
    job = Job(ciod, tmp_path, image=b"x")
    a, b = job.proc(0), job.proc(1)
    fa, fb = opened(a, "f"), opened(b, "f")
    assert a.ok("flock", fa, fcntl.LOCK_EX, -1)[0] == 0
    assert b.fails("flock", fb, fcntl.LOCK_EX | fcntl.LOCK_NB, -1) == errno.EWOULDBLOCK
    assert b.call("flock", fb, fcntl.LOCK_SH, 200)[:2] == (-1, ERR_WAIT)
    assert a.ok("flock", fa, fcntl.LOCK_UN, -1)[0] == 0
    assert b.ok("flock", fb, fcntl.LOCK_SH, 2000)[0] == 0
    assert a.ok("flock", fa, fcntl.LOCK_SH | fcntl.LOCK_NB, -1)[0] == 0
    assert a.fails("flock", fa, 99, -1) == errno.EINVAL
    # record locks and flock are separate, as on Linux
    assert lock(a, fa, fcntl.F_SETLK, lk(fcntl.F_WRLCK, 0, 1))[:2] == (0, 0)


def test_links_owners_nodes_and_space(ciod: Ciod, tmp_path: Path) -> None:
    job = Job(ciod, tmp_path, image=b"x")
    p = job.proc(0)
    (tmp_path / "target").write_bytes(b"data")
    p.ok("symlinkat", AT_FDCWD, data=b"target\0sym\0")
    assert os.readlink(tmp_path / "sym") == "target"
    assert p.fails("symlinkat", AT_FDCWD, data=b"target\0sym\0") == errno.EEXIST
    p.ok("linkat", AT_FDCWD, AT_FDCWD, 0, data=b"target\0hard\0")
    assert os.stat(tmp_path / "hard").st_ino == os.stat(tmp_path / "target").st_ino
    p.ok("linkat", AT_FDCWD, AT_FDCWD, AT_SYMLINK_FOLLOW, data=b"sym\0hard2\0")
    assert os.stat(tmp_path / "hard2").st_nlink == 3
    # ownership: to one's own ids is fine; to another user needs a capability the worker lacks
    p.ok("fchownat", AT_FDCWD, os.getuid(), -1, 0, data=b"target\0")
    assert p.fails("fchownat", AT_FDCWD, os.getuid() + 12345, -1, 0, data=b"target\0") == errno.EPERM
    fd = opened(p, "target")
    p.ok("fchownat", fd, -1, os.getgid(), AT_EMPTY_PATH, data=b"\0")
    assert p.fails("fchownat", fd, 4242, 4242, AT_EMPTY_PATH, data=b"\0") == errno.EPERM
    assert os.stat(tmp_path / "target").st_uid == os.getuid()
    # nodes: a FIFO yes, a device no (no CAP_MKNOD, even for root's jobs)
    p.ok("mknodat", AT_FDCWD, stat.S_IFIFO | 0o600, 0, data=b"fifo\0")
    assert stat.S_ISFIFO(os.stat(tmp_path / "fifo").st_mode)
    p.ok("mknodat", AT_FDCWD, stat.S_IFREG | 0o600, 0, data=b"plain\0")
    assert (tmp_path / "plain").stat().st_size == 0
    assert p.fails("mknodat", AT_FDCWD, stat.S_IFCHR | 0o600, os.makedev(1, 3), data=b"null\0") == errno.EPERM
    assert not (tmp_path / "null").exists()
    # space
    p.ok("fallocate", fd, 0, 0, 1 << 20)
    assert (tmp_path / "target").stat().st_size == 1 << 20
    assert p.fails("fallocate", 1, 0, 0, 10) == errno.ESPIPE
