/*
 * file.c - descriptor calls: open family, close, read/write family, lseek,
 * truncate, sync, dup family, fcntl, close_range, isatty/ioctl/flock.
 *
 * Pattern of every call: route the descriptor or path; local -> libc;
 * the shipping socket itself -> EBADF (the program must not see it);
 * remote -> one request (a rendezvous, or data up to LAT_MAX_IO; above
 * that a pipelined series of chunks), errno from the I/O node.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
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

/* ---- shipping helpers ---- */

int lat_ship_close(int rfd)
{
    if (lat_forked())
        return 0;  /* the parent still owns it */
    return (int)lcn_ret(fwd_close(rfd));
}

/* A rendezvous, one message each way, or a pipelined series of chunks:
 * the shipping core's (compute/shipc/bulk.c). */
ssize_t lat_ship_rw(int rfd, int wr, const struct iovec *iov, int cnt, off_t off)
{
    return (ssize_t)lcn_ret(shipc_rw(rfd, wr, iov, cnt, off));
}

static int ship_open(int rdirfd, const char *path, int flags, mode_t mode)
{
    int64_t r = lcn_ret(fwd_openat(rdirfd, flags, NEEDS_MODE(flags) ? (int)mode : 0, path));
    if (r < 0)
        return -1;
    return lat_fd_install((int)r, flags & O_CLOEXEC, 0);
}

/* ---- open family ---- */

static int do_openat(int dirfd, const char *path, int flags, mode_t mode)
{
    int rd;
    switch (lat_path_route(dirfd, path, &rd)) {
    case LAT_SHIP:
        return ship_open(rd, path, flags, mode);
    case LAT_LOCAL:
        return REAL(openat)(dirfd, path, flags, mode);
    default:
        return -1;
    }
}

static mode_t mode_arg(int flags, va_list ap)
{
    return NEEDS_MODE(flags) ? (mode_t)va_arg(ap, int) : 0;
}

int open(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    return do_openat(AT_FDCWD, path, flags, mode);
}

int open64(const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    return do_openat(AT_FDCWD, path, flags, mode);
}

int openat(int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    return do_openat(dirfd, path, flags, mode);
}

int openat64(int dirfd, const char *path, int flags, ...)
{
    va_list ap;
    va_start(ap, flags);
    mode_t mode = mode_arg(flags, ap);
    va_end(ap);
    return do_openat(dirfd, path, flags, mode);
}

int creat(const char *path, mode_t mode)
{
    return do_openat(AT_FDCWD, path, O_CREAT | O_WRONLY | O_TRUNC, mode);
}

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

/* ---- close ---- */

int close(int fd)
{
    int r;
    switch (lat_fd_route(fd, &r)) {
    case LAT_SHIP:
        return lat_ship_close(shipc_fd_forget(fd, 1));
    case LAT_HIDE:
        return lat_fail(EBADF);
    case LAT_LOCAL:
        break;
    }
    int ret = REAL(close)(fd);
    if (ret == 0)       /* perhaps an epoll set holding shipped descriptors */
        lat_epoll_closed((unsigned)fd, (unsigned)fd);
    return ret;
}

/* closefrom() and friends must not take the shipping socket with them. */
static int close_range_impl(unsigned first, unsigned last, int flags)
{
    if (!lat_active())
        return REAL(close_range)(first, last, flags);
    if (first > last)
        return lat_fail(EINVAL);
    unsigned lim = shipc_fd_limit();
    for (unsigned fd = first; fd <= last && fd < lim; fd++) {
        int r;
        if (lat_fd_route((int)fd, &r) != LAT_SHIP)
            continue;
        if (flags & CLOSE_RANGE_CLOEXEC)
            shipc_fd_set_cloexec((int)fd, 1);
        else
            lat_ship_close(shipc_fd_forget((int)fd, 1));
    }
    /* the descriptors we hide (the socket, its seq page), in order: skipped */
    unsigned h[2] = { (unsigned)lat_conn_fd(), (unsigned)lat_seq_fd() };
    if (h[0] > h[1]) {
        unsigned t = h[0];
        h[0] = h[1];
        h[1] = t;
    }
    int ret = 0;
    unsigned from = first;
    for (int i = 0; i < 2 && ret == 0; i++) {
        if (h[i] < from || h[i] > last)
            continue;
        if (h[i] > from)
            ret = REAL(close_range)(from, h[i] - 1, flags);
        if (h[i] == last)
            return ret;
        from = h[i] + 1;
    }
    return ret == 0 ? REAL(close_range)(from, last, flags) : ret;
}

int close_range(unsigned int first, unsigned int last, int flags)
{
    int ret = close_range_impl(first, last, flags);
    if (ret == 0 && !(flags & CLOSE_RANGE_CLOEXEC))
        lat_epoll_closed(first, last);
    return ret;
}

void closefrom(int lowfd)
{
    if (!lat_active()) {
        REAL(closefrom)(lowfd);
        return;
    }
    close_range(lowfd < 0 ? 0u : (unsigned)lowfd, ~0u, 0);
}

/* ---- read / write ---- */

#define RW_BODY(fd, wr, iov, cnt, off, local_call)                \
    do {                                                          \
        int r_;                                                   \
        switch (lat_fd_route(fd, &r_)) {                          \
        case LAT_SHIP:                                            \
            return lat_ship_rw(r_, wr, iov, cnt, off);            \
        case LAT_HIDE:                                            \
            return lat_fail(EBADF);                               \
        case LAT_LOCAL:                                           \
            break;                                                \
        }                                                         \
        return local_call;                                        \
    } while (0)

ssize_t read(int fd, void *buf, size_t n)
{
    struct iovec v = { buf, n };
    RW_BODY(fd, 0, &v, 1, -1, REAL(read)(fd, buf, n));
}

ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen)
{
    if (n > buflen)
        __chk_fail();
    return read(fd, buf, n);
}

ssize_t write(int fd, const void *buf, size_t n)
{
    struct iovec v = { (void *)buf, n };
    RW_BODY(fd, 1, &v, 1, -1, REAL(write)(fd, buf, n));
}

static ssize_t do_pread(int fd, void *buf, size_t n, off_t off)
{
    if (off < 0 && lat_active()) {
        int r;
        if (lat_fd_route(fd, &r) == LAT_SHIP)
            return lat_fail(EINVAL);
    }
    struct iovec v = { buf, n };
    RW_BODY(fd, 0, &v, 1, off, REAL(pread)(fd, buf, n, off));
}

static ssize_t do_pwrite(int fd, const void *buf, size_t n, off_t off)
{
    if (off < 0 && lat_active()) {
        int r;
        if (lat_fd_route(fd, &r) == LAT_SHIP)
            return lat_fail(EINVAL);
    }
    struct iovec v = { (void *)buf, n };
    RW_BODY(fd, 1, &v, 1, off, REAL(pwrite)(fd, buf, n, off));
}

ssize_t pread(int fd, void *buf, size_t n, off_t off) { return do_pread(fd, buf, n, off); }
ssize_t pread64(int fd, void *buf, size_t n, off64_t off) { return do_pread(fd, buf, n, off); }
ssize_t pwrite(int fd, const void *buf, size_t n, off_t off) { return do_pwrite(fd, buf, n, off); }
ssize_t pwrite64(int fd, const void *buf, size_t n, off64_t off) { return do_pwrite(fd, buf, n, off); }

ssize_t __pread_chk(int fd, void *buf, size_t n, off_t off, size_t buflen)
{
    if (n > buflen)
        __chk_fail();
    return do_pread(fd, buf, n, off);
}

ssize_t __pread64_chk(int fd, void *buf, size_t n, off64_t off, size_t buflen)
{
    if (n > buflen)
        __chk_fail();
    return do_pread(fd, buf, n, off);
}

ssize_t readv(int fd, const struct iovec *iov, int cnt)
{
    RW_BODY(fd, 0, iov, cnt, -1, REAL(readv)(fd, iov, cnt));
}

ssize_t writev(int fd, const struct iovec *iov, int cnt)
{
    RW_BODY(fd, 1, iov, cnt, -1, REAL(writev)(fd, iov, cnt));
}

static ssize_t do_preadv(int fd, const struct iovec *iov, int cnt, off_t off)
{
    int r;
    if (lat_fd_route(fd, &r) == LAT_SHIP && off < 0)
        return lat_fail(EINVAL);
    RW_BODY(fd, 0, iov, cnt, off, REAL(preadv)(fd, iov, cnt, off));
}

static ssize_t do_pwritev(int fd, const struct iovec *iov, int cnt, off_t off)
{
    int r;
    if (lat_fd_route(fd, &r) == LAT_SHIP && off < 0)
        return lat_fail(EINVAL);
    RW_BODY(fd, 1, iov, cnt, off, REAL(pwritev)(fd, iov, cnt, off));
}

ssize_t preadv(int fd, const struct iovec *iov, int cnt, off_t off) { return do_preadv(fd, iov, cnt, off); }
ssize_t preadv64(int fd, const struct iovec *iov, int cnt, off64_t off) { return do_preadv(fd, iov, cnt, off); }
ssize_t pwritev(int fd, const struct iovec *iov, int cnt, off_t off) { return do_pwritev(fd, iov, cnt, off); }
ssize_t pwritev64(int fd, const struct iovec *iov, int cnt, off64_t off) { return do_pwritev(fd, iov, cnt, off); }

/* ---- lseek, truncate, sync ---- */

static off_t do_lseek(int fd, off_t off, int whence)
{
    int r;
    switch (lat_fd_route(fd, &r)) {
    case LAT_SHIP:
        return (off_t)lcn_ret(fwd_lseek(r, off, whence));
    case LAT_HIDE:
        return lat_fail(EBADF);
    case LAT_LOCAL:
        break;
    }
    return REAL(lseek)(fd, off, whence);
}

off_t lseek(int fd, off_t off, int whence) { return do_lseek(fd, off, whence); }
off64_t lseek64(int fd, off64_t off, int whence) { return do_lseek(fd, off, whence); }

static int do_ftruncate(int fd, off_t len)
{
    int r;
    switch (lat_fd_route(fd, &r)) {
    case LAT_SHIP:
        return (int)lcn_ret(fwd_ftruncate(r, len));
    case LAT_HIDE:
        return lat_fail(EBADF);
    case LAT_LOCAL:
        break;
    }
    return REAL(ftruncate)(fd, len);
}

int ftruncate(int fd, off_t len) { return do_ftruncate(fd, len); }
int ftruncate64(int fd, off64_t len) { return do_ftruncate(fd, len); }

static int do_truncate(const char *path, off_t len)
{
    int rd;
    switch (lat_path_route(AT_FDCWD, path, &rd)) {
    case LAT_SHIP:
        return (int)lcn_ret(fwd_truncate(path, len));
    case LAT_LOCAL:
        return REAL(truncate)(path, len);
    default:
        return -1;
    }
}

int truncate(const char *path, off_t len) { return do_truncate(path, len); }
int truncate64(const char *path, off64_t len) { return do_truncate(path, len); }

static int do_sync(int fd, int data_only)
{
    int r;
    switch (lat_fd_route(fd, &r)) {
    case LAT_SHIP:
        return (int)(data_only ? lcn_ret(fwd_fdatasync(r)) : lcn_ret(fwd_fsync(r)));
    case LAT_HIDE:
        return lat_fail(EBADF);
    case LAT_LOCAL:
        break;
    }
    return data_only ? REAL(fdatasync)(fd) : REAL(fsync)(fd);
}

int fsync(int fd) { return do_sync(fd, 0); }
int fdatasync(int fd) { return do_sync(fd, 1); }

/* ---- dup family ---- */

/* A new remote descriptor sharing r's open file (and offset). */
static int ship_dup(int r, int cx, int minfd)
{
    int64_t nr = lcn_ret(fwd_dup(r));
    if (nr < 0)
        return -1;
    return lat_fd_install((int)nr, cx, minfd);
}

int dup(int fd)
{
    int r;
    switch (lat_fd_route(fd, &r)) {
    case LAT_SHIP:
        return ship_dup(r, 0, 0);
    case LAT_HIDE:
        return lat_fail(EBADF);
    case LAT_LOCAL:
        break;
    }
    return REAL(dup)(fd);
}

static int do_dup3(int oldfd, int newfd, int flags, int is_dup2)
{
    int ro, rn;
    if (!lat_active())
        return is_dup2 ? REAL(dup2)(oldfd, newfd) : REAL(dup3)(oldfd, newfd, flags);
    enum lat_route o = lat_fd_route(oldfd, &ro);
    enum lat_route n = lat_fd_route(newfd, &rn);
    if (o == LAT_HIDE || n == LAT_HIDE || newfd < 0 || (unsigned)newfd >= shipc_fd_limit())
        return lat_fail(EBADF);
    if (!is_dup2 && (flags & ~O_CLOEXEC))
        return lat_fail(EINVAL);
    if (oldfd == newfd) {
        if (!is_dup2)
            return lat_fail(EINVAL);
        if (o == LAT_SHIP)
            return newfd;
        return REAL(dup2)(oldfd, newfd);
    }
    if (o == LAT_SHIP) {
        int64_t nr = lcn_ret(fwd_dup(ro));
        if (nr < 0)
            return -1;
        return lat_fd_install_at((int)nr, flags & O_CLOEXEC, newfd);
    }
    int ret = is_dup2 ? REAL(dup2)(oldfd, newfd) : REAL(dup3)(oldfd, newfd, flags);
    if (ret >= 0)
        lat_epoll_closed((unsigned)newfd, (unsigned)newfd);    /* replaced whatever was there */
    if (ret >= 0 && n == LAT_SHIP)
        lat_ship_close(shipc_fd_forget(newfd, 0));  /* the local dup replaced the placeholder */
    return ret;
}

int dup2(int oldfd, int newfd) { return do_dup3(oldfd, newfd, 0, 1); }
int dup3(int oldfd, int newfd, int flags) { return do_dup3(oldfd, newfd, flags, 0); }

/* ---- fcntl ---- */

static int ship_fcntl(int fd, int r, int cmd, long arg)
{
    switch (cmd) {
    case F_GETFD:
        return shipc_fd_cloexec(fd) ? FD_CLOEXEC : 0;
    case F_SETFD:
        shipc_fd_set_cloexec(fd, (int)arg & FD_CLOEXEC);
        return 0;
    case F_GETFL:
    case F_SETFL:
        return (int)lcn_ret(fwd_fcntl(r, cmd, cmd == F_SETFL ? (int)arg : 0));
    case F_DUPFD:
    case F_DUPFD_CLOEXEC:
        if (arg < 0 || arg >= (long)shipc_fd_limit())
            return lat_fail(EINVAL);
        return ship_dup(r, cmd == F_DUPFD_CLOEXEC, (int)arg);
    case F_GETLK:
    case F_SETLK:
    case F_SETLKW:
    case F_OFD_GETLK:
    case F_OFD_SETLK:
    case F_OFD_SETLKW:
        return lat_fail(ENOLCK);  /* no locks across the I/O node (yet) */
    default:
        return lat_fail(EINVAL);
    }
}

static int do_fcntl(int fd, int cmd, long arg)
{
    int r;
    switch (lat_fd_route(fd, &r)) {
    case LAT_SHIP:
        return ship_fcntl(fd, r, cmd, arg);
    case LAT_HIDE:
        return lat_fail(EBADF);
    case LAT_LOCAL:
        break;
    }
    return REAL(fcntl)(fd, cmd, arg);
}

/* The third argument is an int or a pointer; read it as a long, as glibc does. */
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

/* ---- terminals, ioctl, locks, advice ---- */

int isatty(int fd)
{
    int r;
    switch (lat_fd_route(fd, &r)) {
    case LAT_SHIP:
        lat_fail(ENOTTY);  /* a remote file is never a terminal */
        return 0;
    case LAT_HIDE:
        lat_fail(EBADF);
        return 0;
    case LAT_LOCAL:
        break;
    }
    return REAL(isatty)(fd);
}

int ioctl(int fd, unsigned long req, ...)
{
    va_list ap;
    va_start(ap, req);
    void *arg = va_arg(ap, void *);
    va_end(ap);
    int r;
    switch (lat_fd_route(fd, &r)) {
    case LAT_SHIP:
        return lat_fail(ENOTTY);
    case LAT_HIDE:
        return lat_fail(EBADF);
    case LAT_LOCAL:
        break;
    }
    return REAL(ioctl)(fd, req, arg);
}

int flock(int fd, int op)
{
    int r;
    switch (lat_fd_route(fd, &r)) {
    case LAT_SHIP:
        return lat_fail(ENOSYS);  /* libraries (HDF5) treat ENOSYS as "no locking here" */
    case LAT_HIDE:
        return lat_fail(EBADF);
    case LAT_LOCAL:
        break;
    }
    return REAL(flock)(fd, op);
}

static int do_fadvise(int fd, off_t off, off_t len, int advice)
{
    int r;
    switch (lat_fd_route(fd, &r)) {
    case LAT_SHIP:
        return 0;  /* advice only */
    case LAT_HIDE:
        return EBADF;
    case LAT_LOCAL:
        break;
    }
    return REAL(posix_fadvise)(fd, off, len, advice);
}

int posix_fadvise(int fd, off_t off, off_t len, int advice) { return do_fadvise(fd, off, len, advice); }
int posix_fadvise64(int fd, off64_t off, off64_t len, int advice) { return do_fadvise(fd, off, len, advice); }
