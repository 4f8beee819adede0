"""libcnclient.so against a fake ciod: calls are shipped, errno is exact.

The client is built from compute/libcnclient with the Makefile's flags; the
test programs run with their local cwd in an empty directory, so a call that
slips past the client fails or leaves a trace there.
"""
from __future__ import annotations

import ctypes
import errno
import os
import shutil
import socket
import stat
import struct
import subprocess
import threading
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from lattice.transport import wire

# ---------------------------------------------------------------------------
# A fake ciod serving one PROC connection: it reissues every shipped call
# with os.* under its own working directory, keeps its own remote descriptor
# table, counts calls, and collects writes to remote 1 and 2.

MAGIC, VERSION, REPLY, ERROR = wire.MAGIC, wire.VERSION, wire.REPLY, wire.ERROR
MAX_IO = 1 << 20
MAX_PAYLOAD = MAX_IO + 8192
AT_FDCWD_WIRE = -100
AT_EMPTY_PATH = 0x1000
AT_SYMLINK_NOFOLLOW = 0x100
AT_REMOVEDIR = 0x200
AT_EACCESS = 0x200

NAMES = {
    0x0300: "openat", 0x0301: "close", 0x0302: "read", 0x0303: "write", 0x0304: "pread",
    0x0305: "pwrite", 0x0306: "lseek", 0x0307: "fstatat", 0x0308: "statx", 0x0309: "faccessat",
    0x030A: "unlinkat", 0x030B: "renameat", 0x030C: "mkdirat", 0x030D: "getdents64",
    0x030E: "readlinkat", 0x030F: "truncate", 0x0310: "ftruncate", 0x0311: "fsync",
    0x0312: "fdatasync", 0x0313: "dup", 0x0314: "fcntl", 0x0315: "chdir", 0x0316: "fchdir",
    0x0317: "getcwd", 0x0318: "umask", 0x0319: "fchmodat", 0x031A: "fchmod", 0x031B: "utimensat",
    0x031C: "statfs", 0x031D: "fstatfs",
}

_libc = ctypes.CDLL(None, use_errno=True)


class Fail(Exception):
    def __init__(self, err: int) -> None:
        super().__init__(err)
        self.err = err


def _recv_exact(s: socket.socket, n: int) -> bytes:
    b = bytearray()
    while len(b) < n:
        chunk = s.recv(n - len(b))
        if not chunk:
            raise EOFError
        b += chunk
    return bytes(b)


class FakeCiod(threading.Thread):
    def __init__(self, sock: socket.socket, cwd: str) -> None:
        super().__init__(daemon=True)
        self.sock = sock
        self.cwdfd = os.open(cwd, os.O_RDONLY | os.O_DIRECTORY)
        self.fds: dict[int, object] = {0: "stdin", 1: "stdout", 2: "stderr"}
        self.dirpos: dict[int, list[bytes]] = {}
        self.out = {1: bytearray(), 2: bytearray()}
        self.calls: Counter[str] = Counter()
        self.sizes: list[tuple[str, int]] = []  # (call, data bytes) of reads/writes
        self.umask = 0o022
        self.protocol_errors: list[str] = []
        self.last_seq: int | None = None

    # -- descriptor helpers --
    def real(self, rfd: int) -> int:
        v = self.fds.get(rfd)
        if not isinstance(v, int):
            raise Fail(errno.EBADF)
        return v

    def dirfd(self, rfd: int) -> int:
        return self.cwdfd if rfd == AT_FDCWD_WIRE else self.real(rfd)

    def new_fd(self, real: object) -> int:
        for n in range(1024):
            if n not in self.fds:
                self.fds[n] = real
                return n
        if isinstance(real, int):
            os.close(real)
        raise Fail(errno.EMFILE)

    # -- main loop --
    def run(self) -> None:
        try:
            while True:
                hdr = _recv_exact(self.sock, 16)
                magic, version, _, typ, ln, seq = wire.HDR.unpack(hdr)
                if magic != MAGIC or version != VERSION or ln > MAX_PAYLOAD or ln < 32:
                    self.protocol_errors.append(f"bad header {hdr.hex()}")
                    return
                payload = _recv_exact(self.sock, ln)
                # as ciod: every message's seq after the last one (docs/protocol.md 3.2)
                if self.last_seq is not None and not 0 < (seq - self.last_seq) & 0xFFFFFFFF < 1 << 31:
                    self.protocol_errors.append(f"seq {seq} after {self.last_seq}")
                    return
                self.last_seq = seq
                a = struct.unpack("<4q", payload[:32])
                data = payload[32:]
                name = NAMES.get(typ)
                if name is None:
                    self.reply(ERROR | REPLY, seq, -1, errno.ENOSYS, b"unknown call")
                    continue
                self.calls[name] += 1
                try:
                    ret, out = getattr(self, "do_" + name)(a, data)
                    self.reply(typ | REPLY, seq, ret, 0, out)
                except Fail as e:
                    self.reply(typ | REPLY, seq, -1, e.err, b"")
                except OSError as e:
                    self.reply(typ | REPLY, seq, -1, e.errno or errno.EIO, b"")
                except Exception as e:  # a bug here must not hang the client
                    self.protocol_errors.append(f"{name}: {e!r}")
                    self.reply(typ | REPLY, seq, -1, errno.EIO, b"")
        except (EOFError, ConnectionError):
            pass
        finally:
            for v in self.fds.values():
                if isinstance(v, int):
                    os.close(v)
            os.close(self.cwdfd)

    def reply(self, typ: int, seq: int, ret: int, err: int, data: bytes) -> None:
        body = struct.pack("<qiI", ret, err, 0) + data
        self.sock.sendall(wire.HDR.pack(MAGIC, VERSION, 0, typ, len(body), seq) + body)

    @staticmethod
    def path(data: bytes) -> bytes:
        end = data.find(b"\0")
        if end < 0:
            raise Fail(errno.EINVAL)
        return data[:end]

    # -- calls --
    def do_openat(self, a, data):  # type: ignore[no-untyped-def]
        fd = os.open(self.path(data), a[1] | os.O_CLOEXEC, a[2], dir_fd=self.dirfd(a[0]))
        return self.new_fd(fd), b""

    def do_close(self, a, data):  # type: ignore[no-untyped-def]
        v = self.fds.pop(a[0], None)
        if v is None:
            raise Fail(errno.EBADF)
        if isinstance(v, int):
            os.close(v)
        self.dirpos.pop(a[0], None)
        return 0, b""

    def do_read(self, a, data):  # type: ignore[no-untyped-def]
        if a[1] > MAX_IO or a[1] < 0:
            raise Fail(errno.EINVAL)
        v = self.fds.get(a[0])
        if v == "stdin":
            return 0, b""
        if v in ("stdout", "stderr"):
            raise Fail(errno.EBADF)
        b = os.read(self.real(a[0]), a[1])
        self.sizes.append(("read", len(b)))
        return len(b), b

    def do_write(self, a, data):  # type: ignore[no-untyped-def]
        if len(data) > MAX_IO:
            raise Fail(errno.EINVAL)
        v = self.fds.get(a[0])
        self.sizes.append(("write", len(data)))
        if v in ("stdout", "stderr"):
            self.out[1 if v == "stdout" else 2] += data
            return len(data), b""
        if v == "stdin":
            raise Fail(errno.EBADF)
        return os.write(self.real(a[0]), data), b""

    def do_pread(self, a, data):  # type: ignore[no-untyped-def]
        if a[1] > MAX_IO:
            raise Fail(errno.EINVAL)
        b = os.pread(self.real(a[0]), a[1], a[2])
        return len(b), b

    def do_pwrite(self, a, data):  # type: ignore[no-untyped-def]
        return os.pwrite(self.real(a[0]), data, a[2]), b""

    def do_lseek(self, a, data):  # type: ignore[no-untyped-def]
        pos = os.lseek(self.real(a[0]), a[1], a[2])
        if a[1] == 0 and a[2] == os.SEEK_SET:
            self.dirpos.pop(a[0], None)
        return pos, b""

    def do_fstatat(self, a, data):  # type: ignore[no-untyped-def]
        p = self.path(data)
        if p == b"" and a[1] & AT_EMPTY_PATH and isinstance(self.fds.get(a[0]), str):
            # remote 0, 1, 2 are pipes of a sort, as in ciod
            return 0, struct.pack("<QQQIIIIQqqqqqqqqq", 0, 0, 1, stat.S_IFIFO | 0o600, os.getuid(),
                                  os.getgid(), 0, 0, 0, 4096, 0, 0, 0, 0, 0, 0, 0)
        if p == b"" and a[1] & AT_EMPTY_PATH:
            st = os.fstat(self.real(a[0]))
        else:
            st = os.stat(p, dir_fd=self.dirfd(a[0]), follow_symlinks=not a[1] & AT_SYMLINK_NOFOLLOW)
        out = struct.pack(
            "<QQQIIIIQqqqqqqqqq", st.st_dev, st.st_ino, st.st_nlink, st.st_mode, st.st_uid, st.st_gid,
            0, st.st_rdev, st.st_size, st.st_blksize, st.st_blocks,
            st.st_atime_ns // 10**9, st.st_atime_ns % 10**9, st.st_mtime_ns // 10**9,
            st.st_mtime_ns % 10**9, st.st_ctime_ns // 10**9, st.st_ctime_ns % 10**9)
        assert len(out) == 120
        return 0, out

    def do_statx(self, a, data):  # type: ignore[no-untyped-def]
        buf = ctypes.create_string_buffer(256)
        if _libc.statx(self.dirfd(a[0]), self.path(data), a[1], a[2], buf) != 0:
            raise Fail(ctypes.get_errno())
        return 0, buf.raw

    def do_faccessat(self, a, data):  # type: ignore[no-untyped-def]
        ok = os.access(self.path(data), a[1], dir_fd=self.dirfd(a[0]),
                       effective_ids=bool(a[2] & AT_EACCESS),
                       follow_symlinks=not a[2] & AT_SYMLINK_NOFOLLOW)
        if not ok:
            # os.access hides errno: find it the slow way
            try:
                os.stat(self.path(data), dir_fd=self.dirfd(a[0]))
            except OSError as e:
                raise Fail(e.errno or errno.EACCES)
            raise Fail(errno.EACCES)
        return 0, b""

    def do_unlinkat(self, a, data):  # type: ignore[no-untyped-def]
        if a[1] & AT_REMOVEDIR:
            os.rmdir(self.path(data), dir_fd=self.dirfd(a[0]))
        else:
            os.unlink(self.path(data), dir_fd=self.dirfd(a[0]))
        return 0, b""

    def do_renameat(self, a, data):  # type: ignore[no-untyped-def]
        parts = data.split(b"\0")
        if len(parts) < 3:
            raise Fail(errno.EINVAL)
        os.rename(parts[0], parts[1], src_dir_fd=self.dirfd(a[0]), dst_dir_fd=self.dirfd(a[1]))
        return 0, b""

    def do_mkdirat(self, a, data):  # type: ignore[no-untyped-def]
        os.mkdir(self.path(data), a[1], dir_fd=self.dirfd(a[0]))
        return 0, b""

    def do_getdents64(self, a, data):  # type: ignore[no-untyped-def]
        fd = self.real(a[0])
        if a[0] not in self.dirpos:
            if not stat.S_ISDIR(os.fstat(fd).st_mode):
                raise Fail(errno.ENOTDIR)
            recs = []
            entries = [(".", os.fstat(fd).st_ino, 4), ("..", 1, 4)]
            for e in os.scandir(fd):
                t = 4 if e.is_dir(follow_symlinks=False) else 10 if e.is_symlink() else 8
                entries.append((e.name, e.inode(), t))
            for i, (name, ino, t) in enumerate(entries):
                nb = name.encode() + b"\0"
                reclen = (19 + len(nb) + 7) & ~7
                recs.append(struct.pack("<QqHB", ino, i + 1, reclen, t) + nb.ljust(reclen - 19, b"\0"))
            self.dirpos[a[0]] = recs
        recs = self.dirpos[a[0]]
        out = bytearray()
        while recs and len(out) + len(recs[0]) <= a[1]:
            out += recs.pop(0)
        if recs and not out:
            raise Fail(errno.EINVAL)
        return len(out), bytes(out)

    def do_readlinkat(self, a, data):  # type: ignore[no-untyped-def]
        t = os.readlink(self.path(data), dir_fd=self.dirfd(a[0]))
        b = os.fsencode(t)[: a[1]]
        return len(b), b

    def do_truncate(self, a, data):  # type: ignore[no-untyped-def]
        fd = os.open(self.path(data), os.O_WRONLY, dir_fd=self.cwdfd)
        try:
            os.ftruncate(fd, a[1])
        finally:
            os.close(fd)
        return 0, b""

    def do_ftruncate(self, a, data):  # type: ignore[no-untyped-def]
        os.ftruncate(self.real(a[0]), a[1])
        return 0, b""

    def do_fsync(self, a, data):  # type: ignore[no-untyped-def]
        os.fsync(self.real(a[0]))
        return 0, b""

    def do_fdatasync(self, a, data):  # type: ignore[no-untyped-def]
        os.fdatasync(self.real(a[0]))
        return 0, b""

    def do_dup(self, a, data):  # type: ignore[no-untyped-def]
        v = self.fds.get(a[0])
        if v is None:
            raise Fail(errno.EBADF)
        return self.new_fd(os.dup(v) if isinstance(v, int) else v), b""

    def do_fcntl(self, a, data):  # type: ignore[no-untyped-def]
        import fcntl
        if a[1] not in (fcntl.F_GETFL, fcntl.F_SETFL):
            raise Fail(errno.EINVAL)
        v = self.fds.get(a[0])
        if v in ("stdin",):
            return os.O_RDONLY, b""
        if v in ("stdout", "stderr"):
            return os.O_WRONLY, b""
        return fcntl.fcntl(self.real(a[0]), a[1], a[2]), b""

    def do_chdir(self, a, data):  # type: ignore[no-untyped-def]
        fd = os.open(self.path(data), os.O_RDONLY | os.O_DIRECTORY, dir_fd=self.cwdfd)
        os.close(self.cwdfd)
        self.cwdfd = fd
        return 0, b""

    def do_fchdir(self, a, data):  # type: ignore[no-untyped-def]
        fd = os.dup(self.real(a[0]))
        os.close(self.cwdfd)
        self.cwdfd = fd
        return 0, b""

    def do_getcwd(self, a, data):  # type: ignore[no-untyped-def]
        p = os.fsencode(os.readlink(f"/proc/self/fd/{self.cwdfd}")) + b"\0"
        if len(p) > a[0]:
            raise Fail(errno.ERANGE)
        return len(p), p

    def do_umask(self, a, data):  # type: ignore[no-untyped-def]
        old, self.umask = self.umask, a[0] & 0o777
        return old, b""

    def do_fchmodat(self, a, data):  # type: ignore[no-untyped-def]
        os.chmod(self.path(data), a[1], dir_fd=self.dirfd(a[0]))
        return 0, b""

    def do_fchmod(self, a, data):  # type: ignore[no-untyped-def]
        os.fchmod(self.real(a[0]), a[1])
        return 0, b""

    def do_utimensat(self, a, data):  # type: ignore[no-untyped-def]
        at, an, mt, mn = struct.unpack("<4q", data[:32])
        p = self.path(data[32:])
        ns = (at * 10**9 + an, mt * 10**9 + mn) if a[2] else None
        if p == b"":
            os.utime(self.real(a[0]), ns=ns) if ns else os.utime(self.real(a[0]))
        elif ns:
            os.utime(p, ns=ns, dir_fd=self.dirfd(a[0]))
        else:
            os.utime(p, dir_fd=self.dirfd(a[0]))
        return 0, b""

    def _statfs(self, fd: int) -> bytes:
        buf = ctypes.create_string_buffer(120)
        if _libc.fstatfs(fd, buf) != 0:
            raise Fail(ctypes.get_errno())
        f = struct.unpack("<qqQQQQQ2iqqq4q", buf.raw)
        fsid = (f[7] & 0xFFFFFFFF) | ((f[8] & 0xFFFFFFFF) << 32)
        return struct.pack("<qqQQQQQQqqq", f[0], f[1], f[2], f[3], f[4], f[5], f[6], fsid, f[9], f[10], f[11])

    def do_statfs(self, a, data):  # type: ignore[no-untyped-def]
        fd = os.open(self.path(data), os.O_RDONLY | os.O_PATH, dir_fd=self.cwdfd)
        try:
            return 0, self._statfs(fd)
        finally:
            os.close(fd)

    def do_fstatfs(self, a, data):  # type: ignore[no-untyped-def]
        return 0, self._statfs(self.real(a[0]))


# ---------------------------------------------------------------------------
# The programs run under the client.

ROOT = Path(__file__).resolve().parents[2]
CFLAGS = ["-std=c11", "-D_GNU_SOURCE", "-O2", "-g", "-Wall", "-Wextra", "-Wimplicit-fallthrough",
          f"-I{ROOT / 'protocol'}", f"-I{ROOT / 'build' / 'gen'}"]


def build_library(dest: Path) -> Path:
    """libcnclient.so as make builds it (it links the shipping core, compute/shipc/), copied to dest."""
    p = subprocess.run(["make", "-s", "-C", str(ROOT), "-W", "compute/libcnclient/conn.c",
                        "build/lib/libcnclient.so"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "warning" not in p.stderr, p.stderr
    shutil.copy(ROOT / "build/lib/libcnclient.so", dest)
    return dest

PROG = r"""
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

extern int __xstat(int, const char *, struct stat *);
extern int __fxstat(int, int, struct stat *);

#define CHECK(c) do { if (!(c)) { fprintf(stderr, "FAIL line %d: %s (errno %d %s)\n", \
    __LINE__, #c, errno, strerror(errno)); exit(1); } } while (0)
#define ERRNO(call, e) do { errno = 0; CHECK((call) == -1); CHECK(errno == (e)); } while (0)

static int basic(void)
{
    char buf[256];
    struct stat st;
    CHECK(mkdir("d", 0755) == 0);
    ERRNO(mkdir("d", 0755), EEXIST);
    int fd = open("d/f", O_CREAT | O_EXCL | O_WRONLY, 0644);
    CHECK(fd >= 3);
    ERRNO(open("d/f", O_CREAT | O_EXCL | O_WRONLY, 0644), EEXIST);
    CHECK(write(fd, "hello\n", 6) == 6);
    CHECK(fstat(fd, &st) == 0 && st.st_size == 6 && S_ISREG(st.st_mode));
    CHECK(__fxstat(1, fd, &st) == 0 && st.st_size == 6);
    CHECK(fcntl(fd, F_GETFL) >= 0 && (fcntl(fd, F_GETFL) & O_ACCMODE) == O_WRONLY);
    CHECK(fcntl(fd, F_GETFD) == 0);
    CHECK(fcntl(fd, F_SETFD, FD_CLOEXEC) == 0 && fcntl(fd, F_GETFD) == FD_CLOEXEC);
    CHECK(isatty(fd) == 0 && errno == ENOTTY);
    errno = 0;
    CHECK(ttyname(fd) == NULL && errno == ENOTTY);      /* glibc's own check would say EBADF */
    CHECK(ttyname_r(fd, buf, sizeof buf) == ENOTTY);
    CHECK(close(fd) == 0);
    ERRNO(close(fd), EBADF);
    ERRNO(read(fd, buf, 1), EBADF);
    ERRNO(open("missing", O_RDONLY), ENOENT);
    ERRNO(open("d/f/x", O_RDONLY), ENOTDIR);

    fd = open("d/f", O_RDONLY);
    CHECK(fd >= 0);
    CHECK(read(fd, buf, sizeof buf) == 6 && memcmp(buf, "hello\n", 6) == 0);
    CHECK(read(fd, buf, sizeof buf) == 0);
    CHECK(lseek(fd, 1, SEEK_SET) == 1);
    CHECK(pread(fd, buf, 3, 2) == 3 && memcmp(buf, "llo", 3) == 0);
    int fd2 = dup(fd);
    CHECK(fd2 >= 0 && fd2 != fd);
    CHECK(read(fd2, buf, 2) == 2 && memcmp(buf, "el", 2) == 0);  /* shares the offset */
    CHECK(close(fd2) == 0 && close(fd) == 0);

    CHECK(stat("d/f", &st) == 0 && st.st_size == 6);
    CHECK(lstat("d/f", &st) == 0 && S_ISREG(st.st_mode));
    CHECK(__xstat(1, "d/f", &st) == 0 && st.st_size == 6);
    ERRNO(stat("d/nothing", &st), ENOENT);
    struct statx sx;
    CHECK(statx(AT_FDCWD, "d/f", 0, STATX_SIZE, &sx) == 0 && sx.stx_size == 6);
    CHECK(fstatat(AT_FDCWD, "d", &st, 0) == 0 && S_ISDIR(st.st_mode));
    struct statvfs sv;
    CHECK(statvfs("d", &sv) == 0 && sv.f_bsize > 0);
    CHECK(access("d/f", R_OK | W_OK) == 0);
    ERRNO(access("d/g", F_OK), ENOENT);
    CHECK(chmod("d/f", 0600) == 0 && stat("d/f", &st) == 0 && (st.st_mode & 0777) == 0600);
    CHECK(truncate("d/f", 5) == 0 && stat("d/f", &st) == 0 && st.st_size == 5);

    /* directories: opendir/readdir/rewinddir/dirfd, scandir */
    CHECK(mkdir("d/sub", 0700) == 0);
    DIR *dir = opendir("d");
    CHECK(dir != NULL);
    CHECK(dirfd(dir) >= 0);
    int n = 0, seen_f = 0, seen_sub = 0;
    for (struct dirent *e; (e = readdir(dir)) != NULL; n++) {
        seen_f |= strcmp(e->d_name, "f") == 0 && e->d_type == DT_REG;
        seen_sub |= strcmp(e->d_name, "sub") == 0 && e->d_type == DT_DIR;
    }
    CHECK(n == 4 && seen_f && seen_sub);
    rewinddir(dir);
    CHECK(readdir(dir) != NULL);
    CHECK(closedir(dir) == 0);
    errno = 0;
    CHECK(opendir("d/f") == NULL && errno == ENOTDIR);
    CHECK(opendir("nope") == NULL && errno == ENOENT);
    struct dirent **list;
    CHECK(scandir("d", &list, NULL, alphasort) == 4);
    CHECK(strcmp(list[2]->d_name, "f") == 0 && strcmp(list[3]->d_name, "sub") == 0);

    /* names */
    CHECK(rename("d/f", "d/g") == 0);
    ERRNO(rename("d/f", "d/h"), ENOENT);
    ERRNO(access("d/f", F_OK), ENOENT);
    CHECK(unlink("d/g") == 0);
    ERRNO(unlink("d/g"), ENOENT);
    ERRNO(rmdir("d"), ENOTEMPTY);
    CHECK(rmdir("d/sub") == 0);

    /* cwd lives on the I/O node */
    char cwd[PATH_MAX];
    CHECK(getcwd(cwd, sizeof cwd) != NULL);
    CHECK(chdir("d") == 0);
    char cwd2[PATH_MAX];
    CHECK(getcwd(cwd2, sizeof cwd2) != NULL);
    CHECK(strlen(cwd2) == strlen(cwd) + 2 && strcmp(cwd2 + strlen(cwd), "/d") == 0);
    char *rp = realpath("../d/./", NULL);
    CHECK(rp && strcmp(rp, cwd2) == 0);
    free(rp);
    CHECK(chdir("..") == 0);
    CHECK(rmdir("d") == 0);
    ERRNO(rmdir("d"), ENOENT);

    /* stdio */
    FILE *f = fopen("s.txt", "w");
    CHECK(f != NULL);
    CHECK(fileno(f) >= 3);
    CHECK(fprintf(f, "line one\nline %d\n", 2) > 0);
    CHECK(fclose(f) == 0);
    f = fopen("s.txt", "a+");
    CHECK(f && fputs("line three\n", f) >= 0 && fclose(f) == 0);
    f = fopen("s.txt", "r");
    CHECK(f != NULL);
    CHECK(fgets(buf, sizeof buf, f) && strcmp(buf, "line one\n") == 0);
    CHECK(fgets(buf, sizeof buf, f) && strcmp(buf, "line 2\n") == 0);
    CHECK(fgets(buf, sizeof buf, f) && strcmp(buf, "line three\n") == 0);
    CHECK(fgets(buf, sizeof buf, f) == NULL && feof(f));
    CHECK(fseek(f, 5, SEEK_SET) == 0 && ftell(f) == 5 && fgetc(f) == 'o');
    CHECK(fclose(f) == 0);
    errno = 0;
    CHECK(fopen("s.txt", "wx") == NULL && errno == EEXIST);
    CHECK(fopen("nodir/x", "r") == NULL && errno == ENOENT);
    CHECK(remove("s.txt") == 0);
    CHECK(mkdir("rmme", 0755) == 0 && remove("rmme") == 0);    /* a directory: rmdir */
    ERRNO(remove("rmme"), ENOENT);

    /* stdout, stderr, stdin are the remote 1, 2, 0 */
    CHECK(fgetc(stdin) == EOF);
    CHECK(fileno(stdout) == 1 && fileno(stderr) == 2);
    printf("printf reached the I/O node\n");
    fprintf(stderr, "stderr too\n");
    write(1, "raw write 1\n", 12);
    return 0;
}

static int big(void)
{
    size_t n = 3 * 1024 * 1024 + 5;
    char *a = malloc(n), *b = malloc(n);
    CHECK(a && b);
    for (size_t i = 0; i < n; i++)
        a[i] = (char)(i * 7 + 3);
    int fd = open("big.dat", O_CREAT | O_TRUNC | O_RDWR, 0644);
    CHECK(fd >= 0);
    CHECK(write(fd, a, n) == (ssize_t)n);
    CHECK(lseek(fd, 0, SEEK_SET) == 0);
    CHECK(read(fd, b, n) == (ssize_t)n && memcmp(a, b, n) == 0);
    /* gathered: three pieces, 1.5 MiB total, after the data */
    struct iovec v[3] = { { a, 500000 }, { a + 500000, 700000 }, { a + 1200000, 372864 } };
    CHECK(writev(fd, v, 3) == 1572864);
    memset(b, 0, n);
    struct iovec r[2] = { { b, 1000000 }, { b + 1000000, 572864 } };
    CHECK(lseek(fd, (off_t)n, SEEK_SET) == (off_t)n);
    CHECK(readv(fd, r, 2) == 1572864 && memcmp(a, b, 1572864) == 0);
    CHECK(pwrite(fd, "XY", 2, 10) == 2 && pread(fd, b, 4, 9) == 4 && memcmp(b + 1, "XY", 2) == 0);
    CHECK(close(fd) == 0);
    puts("big ok");
    return 0;
}

static int redirect(void)
{
    /* dup2 a shipped file onto stdout: printf follows it, as in a shell redirection */
    int fd = open("out.txt", O_CREAT | O_TRUNC | O_WRONLY, 0644);
    CHECK(fd >= 0);
    fflush(stdout);
    int saved = dup(1);
    CHECK(saved >= 0);
    CHECK(dup2(fd, 1) == 1);
    CHECK(close(fd) == 0);
    printf("into the file\n");
    fflush(stdout);
    CHECK(dup2(saved, 1) == 1 && close(saved) == 0);
    /* freopen keeps the FILE and fd 1 */
    CHECK(freopen("out2.txt", "w", stdout) == stdout);
    CHECK(fileno(stdout) == 1);
    printf("freopened\n");
    return 0;
}

static int local(void)
{
    /* /proc and /dev/shm stay on the compute node */
    char buf[64];
    int fd = open("/proc/self/stat", O_RDONLY);
    CHECK(fd >= 0 && read(fd, buf, sizeof buf) > 0 && close(fd) == 0);
    FILE *f = fopen("/proc/self/status", "r");
    CHECK(f && fgets(buf, sizeof buf, f) && fclose(f) == 0);
    struct stat st;
    CHECK(stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode));
    DIR *d = opendir("/proc/self/fd");
    CHECK(d && readdir(d) && closedir(d) == 0);
    /* the shipping socket is invisible */
    ERRNO(close(atoi(getenv("LATTICE_IO_FD"))), EBADF);
    ERRNO(fcntl(atoi(getenv("LATTICE_IO_FD")), F_GETFD), EBADF);
    puts("local ok");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 64;
    if (!strcmp(argv[1], "basic")) return basic();
    if (!strcmp(argv[1], "big")) return big();
    if (!strcmp(argv[1], "redirect")) return redirect();
    if (!strcmp(argv[1], "local")) return local();
    return 64;
}
"""

FORTRAN = r"""
program fio
  implicit none
  integer :: i, v, ios
  real(8) :: x
  character(len=64) :: line
  open (unit=10, file='data.txt', status='replace', action='write')
  do i = 1, 10
    write (10, '(i6,1x,f12.4)') i * 3, real(i, 8) / 4.0d0
  end do
  close (10)
  open (unit=11, file='data.txt', status='old', action='read')
  do i = 1, 10
    read (11, *) v, x
    if (v /= i * 3 .or. abs(x - real(i, 8) / 4.0d0) > 1d-9) stop 2
  end do
  close (11)
  open (unit=12, file='data.txt', status='old', access='stream', form='unformatted')
  read (12, iostat=ios) line(1:6)
  close (12, status='delete')
  open (unit=13, status='scratch')
  write (13, *) 42
  rewind (13)
  read (13, *) v
  close (13)
  if (v /= 42) stop 3
  print '(a)', 'fortran ok'
end program fio
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("client")
    lib = d / "libcnclient.so"
    build_library(lib)
    (d / "prog.c").write_text(PROG)
    subprocess.run(["gcc", "-D_GNU_SOURCE", "-O2", "-Wall", "-o", str(d / "prog"), str(d / "prog.c")], check=True)
    out = {"lib": lib, "prog": d / "prog"}
    if shutil.which("gfortran"):
        (d / "fio.f90").write_text(FORTRAN)
        subprocess.run(["gfortran", "-O2", "-o", str(d / "fio"), str(d / "fio.f90")], check=True,
                       cwd=d)
        out["fio"] = d / "fio"
    return out


@dataclass
class Run:
    proc: subprocess.CompletedProcess[bytes]
    server: FakeCiod

    @property
    def stdout(self) -> str:
        return self.server.out[1].decode()

    @property
    def stderr(self) -> str:
        return self.server.out[2].decode()

    def explain(self) -> str:
        return (f"rc={self.proc.returncode}\nremote stdout:\n{self.stdout}\nremote stderr:\n{self.stderr}\n"
                f"local stdout:\n{self.proc.stdout.decode()}\nlocal stderr:\n{self.proc.stderr.decode()}\n"
                f"calls: {dict(self.server.calls)}")


def run_client(built: dict[str, Path], argv: list[str], server_dir: Path, local_dir: Path) -> Run:
    """Run argv under the client, its calls served by a FakeCiod in server_dir.
    Its local cwd is local_dir (empty): a call that slips past the client fails."""
    a, b = socket.socketpair()
    srv = FakeCiod(a, str(server_dir))
    srv.start()
    env = dict(os.environ, LD_PRELOAD=str(built["lib"]), LATTICE_IO_FD=str(b.fileno()))
    try:
        p = subprocess.run(argv, cwd=local_dir, env=env, pass_fds=[b.fileno()], capture_output=True,
                           timeout=120, stdin=subprocess.DEVNULL)
    finally:
        b.close()
    srv.join(timeout=30)
    a.close()
    assert not srv.protocol_errors, srv.protocol_errors
    return Run(p, srv)


@pytest.fixture
def dirs(tmp_path: Path) -> tuple[Path, Path]:
    server, local = tmp_path / "ionode", tmp_path / "compute"
    server.mkdir()
    local.mkdir()
    return server, local


def test_basic_calls_are_shipped_with_exact_errno(built: dict[str, Path], dirs: tuple[Path, Path]) -> None:
    server, local = dirs
    r = run_client(built, [str(built["prog"]), "basic"], server, local)
    assert r.proc.returncode == 0, r.explain()
    assert "printf reached the I/O node\n" in r.stdout, r.explain()
    assert "raw write 1\n" in r.stdout
    assert r.stderr == "stderr too\n", r.explain()
    assert r.proc.stdout == b"" and r.proc.stderr == b"", r.explain()
    for call in ("openat", "close", "read", "write", "pread", "lseek", "fstatat", "statx", "faccessat",
                 "unlinkat", "renameat", "mkdirat", "getdents64", "dup", "fcntl", "chdir", "getcwd",
                 "fchmodat", "truncate", "statfs"):
        assert r.server.calls[call] > 0, (call, r.explain())
    # everything happened on the "I/O node", nothing on the compute node
    assert list(server.iterdir()) == [] and list(local.iterdir()) == []


def test_large_transfers_are_split(built: dict[str, Path], dirs: tuple[Path, Path]) -> None:
    server, local = dirs
    r = run_client(built, [str(built["prog"]), "big"], server, local)
    assert r.proc.returncode == 0, r.explain()
    assert r.stdout == "big ok\n"
    n = 3 * 1024 * 1024 + 5
    assert (server / "big.dat").stat().st_size == n + 1572864
    writes = [s for c, s in r.server.sizes if c == "write"]
    assert max(writes) == 1 << 20
    assert writes[:4] == [1 << 20, 1 << 20, 1 << 20, 5]
    assert writes[4:6] == [1 << 20, 1572864 - (1 << 20)]


def test_redirecting_stdout(built: dict[str, Path], dirs: tuple[Path, Path]) -> None:
    server, local = dirs
    r = run_client(built, [str(built["prog"]), "redirect"], server, local)
    assert r.proc.returncode == 0, r.explain()
    assert (server / "out.txt").read_text() == "into the file\n"
    assert (server / "out2.txt").read_text() == "freopened\n"
    assert r.stdout == ""


def test_local_paths_stay_local(built: dict[str, Path], dirs: tuple[Path, Path]) -> None:
    server, local = dirs
    r = run_client(built, [str(built["prog"]), "local"], server, local)
    assert r.proc.returncode == 0, r.explain()
    assert r.stdout == "local ok\n"
    assert set(r.server.calls) == {"write"}, r.explain()


def test_fortran_runtime_io(built: dict[str, Path], dirs: tuple[Path, Path]) -> None:
    if "fio" not in built:
        pytest.skip("gfortran not installed")
    server, local = dirs
    tmp = server / "tmp"
    tmp.mkdir()
    r = run_client(built, ["env", f"TMPDIR={tmp}", str(built["fio"])], server, local)
    assert r.proc.returncode == 0, r.explain()
    assert r.stdout == "fortran ok\n", r.explain()
    assert list(server.iterdir()) == [tmp] and list(tmp.iterdir()) == [], r.explain()
    assert list(local.iterdir()) == []
    assert r.server.calls["openat"] >= 3 and r.server.calls["unlinkat"] >= 2, r.explain()


def test_inert_without_lattice(built: dict[str, Path], tmp_path: Path) -> None:
    env = dict(os.environ, LD_PRELOAD=str(built["lib"]))
    env.pop("LATTICE_IO_FD", None)
    p = subprocess.run([str(built["prog"]), "big"], cwd=tmp_path, env=env, capture_output=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout == b"big ok\n"
    assert (tmp_path / "big.dat").exists()
