/*
 * file.c - the descriptor calls: open family, close, close_range, the
 * read/write family, lseek, truncate, sync, dup family, fcntl, ioctl,
 * fadvise, fallocate (locks: lock.c).  Each routes its descriptor or name first (fdtab.c,
 * path.c): node-local runs on the node's kernel, one of the client's own
 * descriptors is EBADF, anything else one request to the I/O node.
 */
#include <linux/close_range.h>
#include <linux/fadvise.h>
#include <linux/fs.h>
#include <linux/fcntl.h>

#include <lattice/fwd_posix.h>

#include "internal.h"

/* ---- open, close ---- */

long shipc_open_ship(int rd, const char *path, int flags, int mode)
{
    long r = fwd_openat(rd, flags, NEEDS_MODE(flags) ? mode : 0, path);
    if (r == -EMFILE && shipc_fd_reap())
        r = fwd_openat(rd, flags, NEEDS_MODE(flags) ? mode : 0, path);
    if (r < 0)
        return r;
    int fd = shipc_fd_install((int)r, flags & O_CLOEXEC, 0);
    if (fd < 0)
        shipc_rclose((int)r);
    return fd;
}

static long do_openat(struct shipc_call *c, long dirfd, const char *path, int flags, int mode)
{
    int rd;
    long ret;

    if (!by_path(c, dirfd, path, &rd, &ret))
        return ret;
    return shipped(c, shipc_open_ship(rd, path, flags, mode));
}

long shipc_sys_openat(struct shipc_call *c)
{
    return do_openat(c, c->a[0], PATH(1), (int)c->a[2], (int)c->a[3]);
}

long shipc_sys_open(struct shipc_call *c)
{
    return do_openat(c, AT_FDCWD, PATH(0), (int)c->a[1], (int)c->a[2]);
}

long shipc_sys_creat(struct shipc_call *c)
{
    return do_openat(c, AT_FDCWD, PATH(0), O_CREAT | O_WRONLY | O_TRUNC, (int)c->a[1]);
}

long shipc_sys_close(struct shipc_call *c)
{
    int r;
    long ret;

    if (!by_fd(c, c->a[0], &r, &ret)) {
        if (ret == 0)       /* perhaps an epoll set holding shipped descriptors */
            shipc_fd_closed((unsigned)c->a[0], (unsigned)c->a[0]);
        return ret;
    }
    /* a second closer of the same number finds nothing and gets EBADF */
    return shipped(c, shipc_fd_release((int)c->a[0]));
}

/* The kernel's close_range over [first, last] minus the client's own descriptors. */
static long close_pieces(unsigned first, unsigned last, unsigned flags)
{
    long ret = 0;

    for (;;) {
        int h = shipc_fd_next_hidden(first, last);
        if (h < 0)
            return ksys3(__NR_close_range, first, last, flags);
        if ((unsigned)h > first)
            ret = ksys3(__NR_close_range, first, (unsigned)h - 1, flags);
        if (ret < 0 || (unsigned)h == last)
            return ret;
        first = (unsigned)h + 1;
    }
}

long shipc_sys_close_range(struct shipc_call *c)
{
    unsigned first = (unsigned)c->a[0], last = (unsigned)c->a[1], flags = (unsigned)c->a[2];
    int any = 0;

    if ((flags & ~(CLOSE_RANGE_UNSHARE | CLOSE_RANGE_CLOEXEC)) || first > last)
        return answered(c, -EINVAL);
    for (int fd = shipc_fd_next_shipped(first, last); fd >= 0;
         fd = shipc_fd_next_shipped((unsigned)fd + 1, last)) {
        any = 1;
        if (flags & CLOSE_RANGE_CLOEXEC)
            shipc_fd_set_cloexec(fd, 1);
        else
            shipc_fd_release(fd);       /* errors are dropped, as close_range does */
    }
    long ret = close_pieces(first, last, flags);
    if (ret == 0 && !(flags & CLOSE_RANGE_CLOEXEC))
        shipc_fd_closed(first, last);
    return any ? shipped(c, ret) : answered(c, ret);
}

/* ---- read and write ---- */

static long rw1(struct shipc_call *c, int wr, int64_t off)
{
    int r;
    long ret;
    struct iovec v = { (void *)c->a[1], (size_t)c->a[2] };

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    if (off < -1)
        return answered(c, -EINVAL);
    return shipped(c, shipc_rw(r, wr, &v, 1, off));
}

long shipc_sys_read(struct shipc_call *c) { return rw1(c, 0, -1); }
long shipc_sys_write(struct shipc_call *c) { return rw1(c, 1, -1); }
/* a negative offset is EINVAL, not "the file position" */
long shipc_sys_pread64(struct shipc_call *c) { return rw1(c, 0, c->a[3] < 0 ? -2 : c->a[3]); }
long shipc_sys_pwrite64(struct shipc_call *c) { return rw1(c, 1, c->a[3] < 0 ? -2 : c->a[3]); }

/* Vectored: off -1 is the file position. */
static long rwv(struct shipc_call *c, int wr, int64_t off)
{
    int r;
    long ret;

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    if (off < -1)
        return answered(c, -EINVAL);
    return shipped(c, shipc_rw(r, wr, (const struct iovec *)c->a[1], (int)c->a[2], off));
}

long shipc_sys_readv(struct shipc_call *c) { return rwv(c, 0, -1); }
long shipc_sys_writev(struct shipc_call *c) { return rwv(c, 1, -1); }
long shipc_sys_preadv(struct shipc_call *c) { return rwv(c, 0, c->a[3] < 0 ? -2 : c->a[3]); }
long shipc_sys_pwritev(struct shipc_call *c) { return rwv(c, 1, c->a[3] < 0 ? -2 : c->a[3]); }

/* preadv2/pwritev2: RWF_HIPRI is a hint; RWF_DSYNC/RWF_SYNC sync after the
 * write; the rest (NOWAIT, APPEND...) cannot be kept over the wire. */
static long rwv2(struct shipc_call *c, int wr)
{
    int r;
    long ret;
    unsigned flags = (unsigned)c->a[5];

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    if (flags & ~(unsigned)(RWF_HIPRI | RWF_DSYNC | RWF_SYNC))
        return answered(c, -EOPNOTSUPP);
    ret = rwv(c, wr, c->a[3] < -1 ? -2 : c->a[3]);
    if (ret >= 0 && wr && (flags & (RWF_DSYNC | RWF_SYNC))) {
        long s = flags & RWF_SYNC ? fwd_fsync(r) : fwd_fdatasync(r);
        if (s < 0)
            ret = s;
    }
    return ret;
}

long shipc_sys_preadv2(struct shipc_call *c) { return rwv2(c, 0); }
long shipc_sys_pwritev2(struct shipc_call *c) { return rwv2(c, 1); }

long shipc_sys_lseek(struct shipc_call *c)
{
    int r;
    long ret;

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    return shipped(c, fwd_lseek(r, c->a[1], (int)c->a[2]));
}

/* ---- directories, size, sync ---- */

long shipc_sys_getdents64(struct shipc_call *c)
{
    int r;
    long ret;
    unsigned count = (unsigned)c->a[2];

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    /* records arrive as the I/O node's getdents64 wrote them */
    return shipped(c, fwd_getdents64(r, (void *)c->a[1], SHIPC_MIN(count, LAT_MAX_IO)));
}

long shipc_sys_truncate(struct shipc_call *c)
{
    int rd;
    long ret;

    if (!by_path(c, AT_FDCWD, PATH(0), &rd, &ret))
        return ret;
    return shipped(c, fwd_truncate(PATH(0), c->a[1]));
}

/* A call on a descriptor with one more integer argument (fn2) or none (fn1). */
static long fd_call(struct shipc_call *c, int64_t (*fn1)(int), int64_t (*fn2)(int, int64_t), int64_t a1)
{
    int r;
    long ret;

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    return shipped(c, fn1 ? fn1(r) : fn2(r, a1));
}

static int64_t fchmod2(int fd, int64_t mode) { return fwd_fchmod(fd, (int)mode); }

long shipc_sys_ftruncate(struct shipc_call *c) { return fd_call(c, NULL, fwd_ftruncate, c->a[1]); }
/* lattice/syscalls.def's BY_FD(f) lines (fsync, fdatasync): fwd_f on a shipped descriptor. */
#define BY_FD_LINE(f) long shipc_sys_##f(struct shipc_call *c) { return fd_call(c, fwd_##f, NULL, 0); }
#include <lattice/syscalls_by_fd.h>
#undef BY_FD_LINE
long shipc_sys_fchmod(struct shipc_call *c) { return fd_call(c, NULL, fchmod2, (int)c->a[1]); }
/* A local directory cannot become the I/O node's cwd: fchdir on one
 * changes only the unused local cwd, as in libcnclient. */
long shipc_sys_fchdir(struct shipc_call *c) { return fd_call(c, fwd_fchdir, NULL, 0); }

/* ---- descriptors: dup, fcntl ---- */

/* A fresh program descriptor for new remote descriptor nr. */
static long install_new(long nr, int cloexec, int minfd)
{
    if (nr < 0)
        return nr;
    int fd = shipc_fd_install((int)nr, cloexec, minfd);
    if (fd < 0)
        shipc_rclose((int)nr);
    return fd;
}

long shipc_sys_dup(struct shipc_call *c)
{
    int r;
    long ret;

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    long nr = fwd_dup(r);
    if (nr == -EMFILE && shipc_fd_reap())
        nr = fwd_dup(r);
    return shipped(c, install_new(nr, 0, 0));
}

/* A local descriptor dup'ed over a shipped one: the kernel replaced the
 * placeholder, the remote descriptor must go too. */
static long dup_local(struct shipc_call *c, int newfd, int new_shipped)
{
    int tok = new_shipped ? shipc_fd_hold(newfd) : -1;
    long ret = local(c);

    if (ret >= 0)
        shipc_fd_closed((unsigned)newfd, (unsigned)newfd);   /* replaced whatever was there */
    if (ret >= 0 && new_shipped) {
        int old = shipc_fd_forget(newfd, 0);
        if (shipc_fd_last(tok, old)) {
            shipc_rclose(old);
            c->cls = SHIPC_CLS_SHIPPED;
        }
    } else {
        shipc_fd_last(tok, -1);
    }
    return ret;
}

static long dup_to(struct shipc_call *c, int is_dup3)
{
    int oldfd = (int)c->a[0], newfd = (int)c->a[1], flags = is_dup3 ? (int)c->a[2] : 0;
    int ro, rn, old;
    int o = shipc_fd_route(oldfd, &ro), n = shipc_fd_route(newfd, &rn);

    if (o < 0 || n < 0)
        return answered(c, -EBADF);     /* the client's own, on either side */
    if (flags & ~O_CLOEXEC)
        return answered(c, -EINVAL);
    if (oldfd == newfd) {
        if (is_dup3)
            return answered(c, -EINVAL);
        return o == SHIPC_SHIP ? answered(c, newfd) : local(c);
    }
    if (o == SHIPC_LOCAL)
        return dup_local(c, newfd, n == SHIPC_SHIP);
    if (newfd < 0 || (unsigned)newfd >= shipc_fd_limit())
        return answered(c, -EBADF);     /* as the kernel: beyond RLIMIT_NOFILE */
    long nr = fwd_dup(ro);
    if (nr == -EMFILE && shipc_fd_reap())
        nr = fwd_dup(ro);
    if (nr < 0)
        return shipped(c, nr);
    long ret = shipc_fd_install_at((int)nr, flags & O_CLOEXEC, newfd, &old);
    if (ret < 0)
        shipc_rclose((int)nr);
    if (old >= 0)
        shipc_rclose(old);
    return shipped(c, ret);
}

long shipc_sys_dup2(struct shipc_call *c) { return dup_to(c, 0); }
long shipc_sys_dup3(struct shipc_call *c) { return dup_to(c, 1); }

/* Descriptor flags live in the table, status flags on the I/O node. */
long shipc_sys_fcntl(struct shipc_call *c)
{
    int fd = (int)c->a[0], cmd = (int)c->a[1], r;
    long arg = c->a[2], ret;

    if (!by_fd(c, fd, &r, &ret))
        return ret;
    switch (cmd) {
    case F_GETFD:
        return answered(c, shipc_fd_cloexec(fd) ? FD_CLOEXEC : 0);
    case F_SETFD:
        shipc_fd_set_cloexec(fd, (int)arg & FD_CLOEXEC);
        return answered(c, 0);
    case F_GETFL:
    case F_SETFL:
        return shipped(c, fwd_fcntl(r, cmd, cmd == F_SETFL ? (int)arg : 0));
    case F_DUPFD:
    case F_DUPFD_CLOEXEC:
        if (arg < 0 || arg >= (long)shipc_fd_limit())
            return answered(c, -EINVAL);    /* as the kernel: beyond RLIMIT_NOFILE */
        return shipped(c, install_new(fwd_dup(r), cmd == F_DUPFD_CLOEXEC,
                                      (int)arg));
    case F_GETLK:
    case F_SETLK:
    case F_SETLKW:
    case F_OFD_GETLK:
    case F_OFD_SETLK:
    case F_OFD_SETLKW:
        return shipc_lock(c, r, cmd, (void *)arg);     /* held on the I/O node: lock.c */
    default:
        return answered(c, -EINVAL);
    }
}

long shipc_sys_ioctl(struct shipc_call *c)
{
    int r;
    long ret;

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    return answered(c, -ENOTTY);        /* a remote file is never a terminal */
}

long shipc_sys_fallocate(struct shipc_call *c)
{
    int r;
    long ret;

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    return shipped(c, fwd_fallocate(r, (int)c->a[1], c->a[2], c->a[3]));
}

long shipc_sys_fadvise64(struct shipc_call *c)
{
    int r;
    long ret;
    int advice = (int)c->a[3];

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    if (c->a[2] < 0 || advice < POSIX_FADV_NORMAL || advice > POSIX_FADV_NOREUSE)
        return answered(c, -EINVAL);
    return answered(c, 0);              /* advice only */
}
