/*
 * file.c - descriptor calls whose libc function is not the system call of
 * its name: open family (varargs), closefrom, LFS aliases and fortified _chk
 * variants of the read/write family, fcntl, ioctl, isatty, posix_fadvise,
 * preadv2/pwritev2 (the call's offset is two words), fallocate64 and
 * posix_fallocate (glibc's calls its internal fallocate).  The plain ones
 * (read, close, dup2...) are made from lattice/syscalls.def (interpose.c).
 *
 * Each is the system call it stands for, handed to the shipping core
 * (lat_sys: compute/shipc/file.c, the same handlers as under cnk), which
 * routes the descriptor or path: node-local runs as the system call, the
 * client's own descriptors are EBADF, remote ones go to the I/O node (a
 * rendezvous, data up to LAT_MAX_IO, or a pipelined series of chunks).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <termios.h>
#include <unistd.h>

#include "client.h"

/* fortified entry points glibc headers only declare with _FORTIFY_SOURCE */
int __open_2(const char *path, int flags);
int __open64_2(const char *path, int flags);
int __openat_2(int dirfd, const char *path, int flags);
int __openat64_2(int dirfd, const char *path, int flags);
ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen);
ssize_t __pread_chk(int fd, void *buf, size_t n, off_t off, size_t buflen);
ssize_t __pread64_chk(int fd, void *buf, size_t n, off64_t off, size_t buflen);
int close_range(unsigned int first, unsigned int last, int flags);
void closefrom(int lowfd);

#define NEEDS_MODE(flags) (((flags) & O_CREAT) || ((flags) & O_TMPFILE) == O_TMPFILE)

#define SYS(nr, a0, a1, a2, a3) lat_sys((nr), (long)(a0), (long)(a1), (long)(a2), (long)(a3), 0, 0)

/* ---- open family ---- */

static int do_openat(int dirfd, const char *path, int flags, mode_t mode)
{
    return (int)SYS(SYS_openat, dirfd, path, flags, mode);
}

static mode_t mode_arg(int flags, va_list ap)
{
    return NEEDS_MODE(flags) ? (mode_t)va_arg(ap, int) : 0;
}

#define OPEN_VA(dirfd, path, flags)             \
    do {                                        \
        va_list ap;                             \
        va_start(ap, flags);                    \
        mode_t mode = mode_arg(flags, ap);      \
        va_end(ap);                             \
        return do_openat(dirfd, path, flags, mode); \
    } while (0)

int open(const char *path, int flags, ...) { OPEN_VA(AT_FDCWD, path, flags); }
int open64(const char *path, int flags, ...) { OPEN_VA(AT_FDCWD, path, flags); }
int openat(int dirfd, const char *path, int flags, ...) { OPEN_VA(dirfd, path, flags); }
int openat64(int dirfd, const char *path, int flags, ...) { OPEN_VA(dirfd, path, flags); }

int creat64(const char *path, mode_t mode)
{
    return do_openat(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode);
}

/* The _2 variants are what fortified code calls when no mode is passed; with
 * O_CREAT that is a bug glibc aborts on, so let glibc do it. */
int __open_2(const char *path, int flags)
{
    if (NEEDS_MODE(flags))
        return REAL(__open_2)(path, flags);
    return do_openat(AT_FDCWD, path, flags, 0);
}

int __open64_2(const char *path, int flags)
{
    if (NEEDS_MODE(flags))
        return REAL(__open64_2)(path, flags);
    return do_openat(AT_FDCWD, path, flags, 0);
}

int __openat_2(int dirfd, const char *path, int flags)
{
    if (NEEDS_MODE(flags))
        return REAL(__openat_2)(dirfd, path, flags);
    return do_openat(dirfd, path, flags, 0);
}

int __openat64_2(int dirfd, const char *path, int flags)
{
    if (NEEDS_MODE(flags))
        return REAL(__openat64_2)(dirfd, path, flags);
    return do_openat(dirfd, path, flags, 0);
}

/* ---- closefrom: close_range, which skips the client's own descriptors ---- */

void closefrom(int lowfd)
{
    close_range(lowfd < 0 ? 0u : (unsigned)lowfd, ~0u, 0);
}

/* ---- read / write ---- */

ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
    if (n > buflen)
        __chk_fail();
    return read(fd, buf, n);
}

ssize_t pread(int fd, void *buf, size_t n, off_t off) { return SYS(SYS_pread64, fd, buf, n, off); }
ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) { return SYS(SYS_pwrite64, fd, buf, n, off); }

ssize_t __pread_chk(int fd, void *buf, size_t n, off_t off, size_t buflen)
{
    if (n > buflen)
        __chk_fail();
    return pread(fd, buf, n, off);
}

ssize_t __pread64_chk(int fd, void *buf, size_t n, off64_t off, size_t buflen)
{
    if (n > buflen)
        __chk_fail();
    return pread(fd, buf, n, off);
}

/* the kernel's low word is the whole offset on x86-64 */
ssize_t preadv64(int fd, const struct iovec *iov, int cnt, off64_t off) { return SYS(SYS_preadv, fd, iov, cnt, off); }
ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off64_t off) { return SYS(SYS_pwritev, fd, iov, cnt, off); }

/* ---- lseek, truncate ---- */

off64_t lseek64(int fd, off64_t off, int whence) { return SYS(SYS_lseek, fd, off, whence, 0); }
int ftruncate64(int fd, off64_t len) { return (int)SYS(SYS_ftruncate, fd, len, 0, 0); }
int truncate64(const char *path, off64_t len) { return (int)SYS(SYS_truncate, path, len, 0, 0); }

/* ---- fcntl ---- */

/* The third argument is an int or a pointer; read it as a long, as glibc
 * does.  F_GETOWN stays libc's: its answer may be a negative process group. */
static int do_fcntl(int fd, int cmd, long arg)
{
    int r;
    if (cmd == F_GETOWN && lat_fd_route(fd, &r) == LAT_LOCAL)
        return REAL(fcntl)(fd, cmd, arg);
    return (int)SYS(SYS_fcntl, fd, cmd, arg, 0);
}

int fcntl(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    long arg = va_arg(ap, long);
    va_end(ap);
    return do_fcntl(fd, cmd, arg);
}

int fcntl64(int fd, int cmd, ...)
{
    va_list ap;
    va_start(ap, cmd);
    long arg = va_arg(ap, long);
    va_end(ap);
    return do_fcntl(fd, cmd, arg);
}

/* ---- terminals, ioctl, advice ---- */

/* glibc's isatty is TCGETS: the core's ioctl says ENOTTY for a shipped
 * file (a remote file is never a terminal), EBADF for the client's own. */
int isatty(int fd)
{
    struct termios t;
    return lat_sys(SYS_ioctl, fd, TCGETS, (long)&t, 0, 0, 0) == 0;
}

int ioctl(int fd, unsigned long req, ...)
{
    va_list ap;
    va_start(ap, req);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    return (int)SYS(SYS_ioctl, fd, req, arg, 0);
}

/* posix_fadvise returns the error number itself. */
static int do_fadvise(int fd, off_t off, off_t len, int advice)
{
    int e = errno;
    int r = (int)SYS(SYS_fadvise64, fd, off, len, advice);
    int err = r < 0 ? errno : 0;
    errno = e;
    return err;
}

int posix_fadvise(int fd, off_t off, off_t len, int advice) { return do_fadvise(fd, off, len, advice); }
int posix_fadvise64(int fd, off64_t off, off64_t len, int advice) { return do_fadvise(fd, off, len, advice); }

/* ---- fallocate: reserved on the I/O node (compute/shipc/file.c) ---- */

/* fallocate itself is made from lattice/syscalls.def (interpose.c); its LFS name is not */
int fallocate64(int fd, int mode, off64_t off, off64_t len) { return (int)SYS(SYS_fallocate, fd, mode, off, len); }

/* posix_fallocate returns the error number itself; glibc's calls its
 * internal fallocate, so it is interposed too.  A node-local descriptor
 * keeps glibc's (which writes where the file system cannot reserve). */
static int do_posix_fallocate(int fd, off_t off, off_t len)
{
    int r, e = errno;

    if (lat_fd_route(fd, &r) == LAT_LOCAL)
        return REAL(posix_fallocate)(fd, off, len);
    int err = SYS(SYS_fallocate, fd, 0, off, len) < 0 ? errno : 0;
    errno = e;
    return err;
}

int posix_fallocate(int fd, off_t off, off_t len) { return do_posix_fallocate(fd, off, len); }
int posix_fallocate64(int fd, off64_t off, off64_t len) { return do_posix_fallocate(fd, off, len); }

/* ---- preadv2/pwritev2 (the call: offset in two words, then flags); sendfile64 ---- */

ssize_t preadv2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
    return lat_sys(SYS_preadv2, fd, (long)iov, cnt, off, 0, flags);
}

ssize_t pwritev2(int fd, const struct iovec *iov, int cnt, off_t off, int flags)
{
    return lat_sys(SYS_pwritev2, fd, (long)iov, cnt, off, 0, flags);
}

ssize_t preadv64v2(int fd, const struct iovec *iov, int cnt, off64_t off, int flags)
{
    return preadv2(fd, iov, cnt, off, flags);
}

ssize_t pwritev64v2(int fd, const struct iovec *iov, int cnt, off64_t off, int flags)
{
    return pwritev2(fd, iov, cnt, off, flags);
}

/* With a shipped side, emulated through a bounce buffer (compute/shipc/copy.c). */
ssize_t sendfile64(int out, int in, off64_t *off, size_t count) { return SYS(SYS_sendfile, out, in, off, count); }

