/*
 * ship.c - file calls on the I/O node: the PROC connection to ciod and one
 * handler per file system call (docs/protocol.md section 6).
 *
 * Every handler routes its path (path.c) or descriptor (fd.c) first: a
 * node-local object runs the real call with the program's own arguments, one
 * of cnk's descriptors gives EBADF, anything else becomes one request and one
 * reply (seq checked) under conn_lock, errno being the I/O node's.  Data moves
 * straight between the program's buffers and the socket: no copies, no
 * allocation.  A transfer of at least rdv_min bytes (agreed in the hello,
 * LATTICE_IO_DP) is one rendezvous request naming the program's buffers:
 * ciod moves the bytes itself (docs/protocol.md section 6.2), straight on its
 * mapping of big memory when cnk shared it (shipc_share).  Otherwise,
 * transfers above LAT_MAX_IO go as a pipelined series of chunks, a short
 * one ending the transfer (ciod cancels the chunks after it).  A small
 * call whose buffers lie in big memory goes through the mailbox shared with
 * ciod instead of the socket (docs/protocol.md section 6.4; LATTICE_MAILBOX=0:
 * never).
 *
 * Calls the protocol has no message for are refused on shipped names
 * (link, symlink, chown: ENOSYS; locks: ENOLCK; flock: ENOSYS), as
 * libcnclient refuses them.  sendfile and copy_file_range involving a
 * shipped descriptor are emulated with reads and writes through a bounce
 * buffer, at most LAT_MAX_IO bytes per call (callers loop on short counts).
 *
 * Limits: program pointers are trusted to be mapped, except that reply data
 * landing in a bad buffer gives EFAULT (the kernel checks it for us, and the
 * rest of the reply is drained so the connection stays in step).  While
 * a thread holds conn_lock the program's signal handlers wait (signal.c),
 * so none can ship on top of a call in flight; a call in flight is never
 * abandoned (EINTR retried).
 */
#include <asm/unistd.h>
#include <linux/close_range.h>
#include <linux/errno.h>
#include <linux/fadvise.h>
#include <linux/fcntl.h>
#include <linux/fs.h>
#include <linux/futex.h>
#include <linux/memfd.h>
#include <linux/mman.h>
#include <linux/stat.h>
#include <linux/timerfd.h>
#include <linux/uio.h>

#include <lattice/fwd_posix.h>
#include <lattice/pipe_series.h>
#include <lattice/wire.h>

#include "cnk.h"

#define MSG_NOSIGNAL 0x4000
#define MSG_DONTWAIT_ 0x40
#define MSG_PEEK_ 0x2
#define NEEDS_MODE(f) (((f) & O_CREAT) || ((f) & O_TMPFILE) == O_TMPFILE)
#define MIN(a, b) ((a) < (b) ? (a) : (b))

/* The x86-64 kernel's struct stat (asm/stat.h), filled from struct lat_stat. */
struct kstat {
    uint64_t dev, ino, nlink;
    uint32_t mode, uid, gid, pad0;
    uint64_t rdev;
    int64_t size, blksize, blocks;
    uint64_t atime, atime_nsec, mtime, mtime_nsec, ctime, ctime_nsec;
    int64_t unused[3];
};
_Static_assert(sizeof(struct kstat) == 144, "x86-64 struct stat");

/* The x86-64 kernel's struct statfs (asm-generic/statfs.h). */
struct kstatfs {
    int64_t type, bsize;
    uint64_t blocks, bfree, bavail, files, ffree;
    int32_t fsid[2];
    int64_t namelen, frsize, flags, spare[4];
};
_Static_assert(sizeof(struct kstatfs) == 120, "x86-64 struct statfs");

_Static_assert(sizeof(struct statx) == sizeof(struct lat_statx), "statx on the wire");

/* Shipped reads and writes, and closes of remote descriptors, go through
 * the shipping core (compute/shipc/: the connection, mailbox, rendezvous
 * and pipelined series); every other call through the fwd_*() stubs
 * generated from lattice/fwd_posix.h, which the core also carries. */
static long rclose(int remote)
{
    return fwd_close(remote);
}

/* ---- how a call was handled ---- */

static long local(struct cnk_call *c)
{
    c->cls = CNK_LOCAL;
    return ksys6(c->nr, c->a[0], c->a[1], c->a[2], c->a[3], c->a[4], c->a[5]);
}

static long answered(struct cnk_call *c, long r)     /* by cnk itself */
{
    c->cls = CNK_LOCAL;
    return r;
}

static long shipped(struct cnk_call *c, long r)
{
    c->cls = CNK_SHIPPED;
    return r;
}

static long refused(struct cnk_call *c, long r)
{
    c->cls = CNK_UNSUPPORTED;
    return r;
}

/* 1: the descriptor is shipped (*r); 0: done, *ret is the answer. */
static int by_fd(struct cnk_call *c, long fd, int *r, long *ret)
{
    int rt = shipc_fd_route((int)fd, r);

    if (rt == SHIPC_SHIP)
        return 1;
    *ret = rt < 0 ? answered(c, rt) : local(c);
    return 0;
}

/* 1: the name is shipped (*rd is the remote dirfd); 0: done, *ret the answer. */
static int by_path(struct cnk_call *c, long dirfd, const char *path, int *rd, long *ret)
{
    int rt = shipc_path_route((int)dirfd, path, rd);

    if (rt == SHIPC_SHIP)
        return 1;
    *ret = rt < 0 ? answered(c, rt) : local(c);
    return 0;
}

#define PATH(i) ((const char *)c->a[i])

/* ---- open, close ---- */

static long open_ship(int rd, const char *path, int flags, int mode)
{
    long r = fwd_openat(rd, flags, NEEDS_MODE(flags) ? mode : 0, path);
    if (r < 0)
        return r;
    int fd = shipc_fd_install((int)r, flags & O_CLOEXEC, 0);
    if (fd < 0)
        rclose((int)r);
    return fd;
}

static long do_openat(struct cnk_call *c, long dirfd, const char *path, int flags, int mode)
{
    int rd;
    long ret;

    if (!by_path(c, dirfd, path, &rd, &ret))
        return ret;
    return shipped(c, open_ship(rd, path, flags, mode));
}

long sys_openat(struct cnk_call *c)
{
    return do_openat(c, c->a[0], PATH(1), (int)c->a[2], (int)c->a[3]);
}

long sys_open(struct cnk_call *c)
{
    return do_openat(c, AT_FDCWD, PATH(0), (int)c->a[1], (int)c->a[2]);
}

long sys_creat(struct cnk_call *c)
{
    return do_openat(c, AT_FDCWD, PATH(0), O_CREAT | O_WRONLY | O_TRUNC, (int)c->a[1]);
}

long sys_close(struct cnk_call *c)
{
    int r;
    long ret;

    if (!by_fd(c, c->a[0], &r, &ret)) {
        if (ret == 0)       /* perhaps an epoll set holding shipped descriptors */
            shipc_fd_closed((unsigned)c->a[0], (unsigned)c->a[0]);
        return ret;
    }
    /* a second closer of the same number finds -1 and gets EBADF */
    return shipped(c, rclose(shipc_fd_forget((int)c->a[0], 1)));
}

/* The kernel's close_range over [first, last] minus cnk's own descriptors. */
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

long sys_close_range(struct cnk_call *c)
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
            rclose(shipc_fd_forget(fd, 1));   /* errors are dropped, as close_range does */
    }
    long ret = close_pieces(first, last, flags);
    if (ret == 0 && !(flags & CLOSE_RANGE_CLOEXEC))
        shipc_fd_closed(first, last);
    return any ? shipped(c, ret) : answered(c, ret);
}

/* ---- read and write ---- */

static long rw1(struct cnk_call *c, int wr, int64_t off)
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

long sys_read(struct cnk_call *c) { return rw1(c, 0, -1); }
long sys_write(struct cnk_call *c) { return rw1(c, 1, -1); }
/* a negative offset is EINVAL, not "the file position" */
long sys_pread64(struct cnk_call *c) { return rw1(c, 0, c->a[3] < 0 ? -2 : c->a[3]); }
long sys_pwrite64(struct cnk_call *c) { return rw1(c, 1, c->a[3] < 0 ? -2 : c->a[3]); }

/* Vectored: off -1 is the file position. */
static long rwv(struct cnk_call *c, int wr, int64_t off)
{
    int r;
    long ret;

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    if (off < -1)
        return answered(c, -EINVAL);
    return shipped(c, shipc_rw(r, wr, (const struct iovec *)c->a[1], (int)c->a[2], off));
}

long sys_readv(struct cnk_call *c) { return rwv(c, 0, -1); }
long sys_writev(struct cnk_call *c) { return rwv(c, 1, -1); }
long sys_preadv(struct cnk_call *c) { return rwv(c, 0, c->a[3] < 0 ? -2 : c->a[3]); }
long sys_pwritev(struct cnk_call *c) { return rwv(c, 1, c->a[3] < 0 ? -2 : c->a[3]); }

/* preadv2/pwritev2: RWF_HIPRI is a hint; RWF_DSYNC/RWF_SYNC sync after the
 * write; the rest (NOWAIT, APPEND...) cannot be kept over the wire. */
static long rwv2(struct cnk_call *c, int wr)
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

long sys_preadv2(struct cnk_call *c) { return rwv2(c, 0); }
long sys_pwritev2(struct cnk_call *c) { return rwv2(c, 1); }

long sys_lseek(struct cnk_call *c)
{
    int r;
    long ret;

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    return shipped(c, fwd_lseek(r, c->a[1], (int)c->a[2]));
}

/* ---- for the loader and file-backed mappings ---- */

long ship_open(const char *path, int flags)
{
    int rd;
    int rt = shipc_path_route(AT_FDCWD, path, &rd);

    if (rt < 0)
        return rt;
    if (rt == SHIPC_LOCAL)
        return ksys4(__NR_openat, AT_FDCWD, path, flags, 0);
    return open_ship(rd, path, flags, 0);
}

/* Up to len bytes at off; short only at end of file. */
long ship_pread(int fd, void *buf, size_t len, int64_t off)
{
    int r;
    int rt = shipc_fd_route(fd, &r);
    size_t done = 0;

    if (rt < 0)
        return rt;
    if (off < 0)
        return -EINVAL;
    if (rt == SHIPC_SHIP) {
        struct iovec v = { buf, len };
        return shipc_rw(r, 0, &v, 1, off);
    }
    while (done < len) {
        long n = ksys4(__NR_pread64, fd, (char *)buf + done, len - done, off + (int64_t)done);
        if (n == -EINTR)
            continue;
        if (n <= 0)
            return done ? (long)done : n;
        done += (size_t)n;
    }
    return (long)done;
}

long ship_close(int fd)
{
    int r;
    int rt = shipc_fd_route(fd, &r);

    if (rt < 0)
        return rt;
    if (rt == SHIPC_LOCAL)
        return ksys1(__NR_close, fd);
    return rclose(shipc_fd_forget(fd, 1));
}

/* ---- the stat family ---- */

static void stat_from_wire(const struct lat_stat *w, struct kstat *k)
{
    memset(k, 0, sizeof *k);
    k->dev = w->dev;
    k->ino = w->ino;
    k->nlink = w->nlink;
    k->mode = w->mode;
    k->uid = w->uid;
    k->gid = w->gid;
    k->rdev = w->rdev;
    k->size = w->size;
    k->blksize = w->blksize;
    k->blocks = w->blocks;
    k->atime = (uint64_t)w->atime_sec;
    k->atime_nsec = (uint64_t)w->atime_nsec;
    k->mtime = (uint64_t)w->mtime_sec;
    k->mtime_nsec = (uint64_t)w->mtime_nsec;
    k->ctime = (uint64_t)w->ctime_sec;
    k->ctime_nsec = (uint64_t)w->ctime_nsec;
}

static long fstatat_ship(int rd, const char *path, int flags, void *buf)
{
    struct lat_stat w;
    struct kstat k;

    if (!buf)
        return -EFAULT;
    long r = fwd_fstatat(rd, flags, path, &w);
    if (r < 0)
        return r;
    stat_from_wire(&w, &k);
    memcpy(buf, &k, sizeof k);
    return 0;
}

/* fd's status flags (F_GETFL) and file type (st_mode), wherever it lives:
 * what mmap's errors depend on.  0 or -errno. */
long ship_fd_kind(int fd, long *flags, uint32_t *mode)
{
    struct kstat k;
    int r;
    int rt = shipc_fd_route(fd, &r);

    if (rt < 0)
        return rt;
    *flags = rt == SHIPC_SHIP ? fwd_fcntl(r, F_GETFL, 0) : ksys2(__NR_fcntl, fd, F_GETFL);
    if (*flags < 0)
        return *flags;
    long s = rt == SHIPC_SHIP ? fstatat_ship(r, "", AT_EMPTY_PATH, &k) : ksys2(__NR_fstat, fd, &k);
    if (s < 0)
        return s;
    *mode = k.mode;
    return 0;
}

/* Linux >= 6.11 takes a NULL path with AT_EMPTY_PATH as "". */
static const char *empty_ok(const char *path, int flags)
{
    return !path && (flags & AT_EMPTY_PATH) ? "" : path;
}

static long do_fstatat(struct cnk_call *c, long dirfd, const char *path, void *buf, int flags)
{
    int rd;
    long ret;

    path = empty_ok(path, flags);
    if (!by_path(c, dirfd, path, &rd, &ret))
        return ret;
    return shipped(c, fstatat_ship(rd, path, flags, buf));
}

long sys_stat(struct cnk_call *c) { return do_fstatat(c, AT_FDCWD, PATH(0), (void *)c->a[1], 0); }
long sys_lstat(struct cnk_call *c)
{
    return do_fstatat(c, AT_FDCWD, PATH(0), (void *)c->a[1], AT_SYMLINK_NOFOLLOW);
}
long sys_newfstatat(struct cnk_call *c)
{
    return do_fstatat(c, c->a[0], PATH(1), (void *)c->a[2], (int)c->a[3]);
}

long sys_fstat(struct cnk_call *c)
{
    int r;
    long ret;

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    return shipped(c, fstatat_ship(r, "", AT_EMPTY_PATH, (void *)c->a[1]));
}

/* The wire carries struct statx as is: it lands in the program's buffer. */
long sys_statx(struct cnk_call *c)
{
    int flags = (int)c->a[2], rd;
    const char *path = empty_ok(PATH(1), flags);
    void *buf = (void *)c->a[4];
    long ret;

    if (!by_path(c, c->a[0], path, &rd, &ret))
        return ret;
    if (!buf)
        return shipped(c, -EFAULT);
    return shipped(c, fwd_statx(rd, flags, (int)c->a[3], path, buf));
}

static void statfs_from_wire(const struct lat_statfs *w, void *buf)
{
    struct kstatfs k;

    memset(&k, 0, sizeof k);
    k.type = w->type;
    k.bsize = w->bsize;
    k.blocks = w->blocks;
    k.bfree = w->bfree;
    k.bavail = w->bavail;
    k.files = w->files;
    k.ffree = w->ffree;
    memcpy(k.fsid, &w->fsid, sizeof k.fsid);
    k.namelen = w->namelen;
    k.frsize = w->frsize;
    k.flags = w->flags;
    memcpy(buf, &k, sizeof k);
}

static long statfs_reply(long r, const struct lat_statfs *w, void *buf)
{
    if (r < 0)
        return r;
    statfs_from_wire(w, buf);
    return 0;
}

long sys_statfs(struct cnk_call *c)
{
    struct lat_statfs w;
    int rd;
    long ret;

    if (!by_path(c, AT_FDCWD, PATH(0), &rd, &ret))
        return ret;
    if (!c->a[1])
        return shipped(c, -EFAULT);
    return shipped(c, statfs_reply(fwd_statfs(PATH(0), &w), &w, (void *)c->a[1]));
}

long sys_fstatfs(struct cnk_call *c)
{
    struct lat_statfs w;
    long ret;
    int r;

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    if (!c->a[1])
        return shipped(c, -EFAULT);
    return shipped(c, statfs_reply(fwd_fstatfs(r, &w), &w, (void *)c->a[1]));
}

/* ---- access, readlink ---- */

static long do_access(struct cnk_call *c, long dirfd, const char *path, int mode, int flags)
{
    int rd;
    long ret;

    if (!by_path(c, dirfd, path, &rd, &ret))
        return ret;
    return shipped(c, fwd_faccessat(rd, mode, flags, path));
}

long sys_access(struct cnk_call *c) { return do_access(c, AT_FDCWD, PATH(0), (int)c->a[1], 0); }
long sys_faccessat(struct cnk_call *c) { return do_access(c, c->a[0], PATH(1), (int)c->a[2], 0); }
long sys_faccessat2(struct cnk_call *c)
{
    return do_access(c, c->a[0], PATH(1), (int)c->a[2], (int)c->a[3]);
}

static long do_readlink(struct cnk_call *c, long dirfd, const char *path, char *buf, long size)
{
    int rd;
    long ret;

    if (!by_path(c, dirfd, path, &rd, &ret))
        return ret;
    if ((int)size <= 0)
        return shipped(c, -EINVAL);
    size_t cap = MIN((size_t)(int)size, (size_t)LAT_MAX_IO);
    return shipped(c, fwd_readlinkat(rd, path, buf, (int64_t)cap));
}

long sys_readlink(struct cnk_call *c)
{
    return do_readlink(c, AT_FDCWD, PATH(0), (char *)c->a[1], c->a[2]);
}
long sys_readlinkat(struct cnk_call *c)
{
    return do_readlink(c, c->a[0], PATH(1), (char *)c->a[2], c->a[3]);
}

/* ---- names: unlink, rename, mkdir ---- */

static long do_unlinkat(struct cnk_call *c, long dirfd, const char *path, int flags)
{
    int rd;
    long ret;

    if (!by_path(c, dirfd, path, &rd, &ret))
        return ret;
    return shipped(c, fwd_unlinkat(rd, flags, path));
}

long sys_unlink(struct cnk_call *c) { return do_unlinkat(c, AT_FDCWD, PATH(0), 0); }
long sys_unlinkat(struct cnk_call *c) { return do_unlinkat(c, c->a[0], PATH(1), (int)c->a[2]); }
long sys_rmdir(struct cnk_call *c) { return do_unlinkat(c, AT_FDCWD, PATH(0), AT_REMOVEDIR); }

/* Two names: both local runs the call, one on each node is EXDEV (as
 * across file systems); *ro, *rn are the remote dirfds when both ship. */
static int two_names(struct cnk_call *c, long od, const char *old, long nd, const char *new,
                     int *ro, int *rn, long *ret)
{
    int a = shipc_path_route((int)od, old, ro);
    int b = shipc_path_route((int)nd, new, rn);

    if (a < 0 || b < 0)
        *ret = answered(c, a < 0 ? a : b);
    else if (a == SHIPC_LOCAL && b == SHIPC_LOCAL)
        *ret = local(c);
    else if (a != b)
        *ret = answered(c, -EXDEV);
    else
        return 1;
    return 0;
}

static long do_rename(struct cnk_call *c, long od, const char *old, long nd, const char *new,
                      unsigned flags)
{
    int ro, rn;
    long ret;

    if (!two_names(c, od, old, nd, new, &ro, &rn, &ret))
        return ret;
    return shipped(c, fwd_renameat(ro, rn, (int)flags, old, new));
}

long sys_rename(struct cnk_call *c)
{
    return do_rename(c, AT_FDCWD, PATH(0), AT_FDCWD, PATH(1), 0);
}

long sys_renameat(struct cnk_call *c)
{
    return do_rename(c, c->a[0], PATH(1), c->a[2], PATH(3), 0);
}

long sys_renameat2(struct cnk_call *c)
{
    return do_rename(c, c->a[0], PATH(1), c->a[2], PATH(3), (unsigned)c->a[4]);
}

static long do_mkdirat(struct cnk_call *c, long dirfd, const char *path, int mode)
{
    int rd;
    long ret;

    if (!by_path(c, dirfd, path, &rd, &ret))
        return ret;
    return shipped(c, fwd_mkdirat(rd, mode, path));
}

long sys_mkdir(struct cnk_call *c) { return do_mkdirat(c, AT_FDCWD, PATH(0), (int)c->a[1]); }
long sys_mkdirat(struct cnk_call *c) { return do_mkdirat(c, c->a[0], PATH(1), (int)c->a[2]); }

/* No message exists for these: refused on shipped names, like libcnclient. */
long sys_linkat(struct cnk_call *c)
{
    int ro, rn;
    long ret;

    if (!two_names(c, c->a[0], PATH(1), c->a[2], PATH(3), &ro, &rn, &ret))
        return ret;
    return refused(c, -ENOSYS);
}

long sys_link(struct cnk_call *c)
{
    int ro, rn;
    long ret;

    if (!two_names(c, AT_FDCWD, PATH(0), AT_FDCWD, PATH(1), &ro, &rn, &ret))
        return ret;
    return refused(c, -ENOSYS);
}

static long refuse_shipped_path(struct cnk_call *c, long dirfd, const char *path)
{
    int rd;
    long ret;

    if (!by_path(c, dirfd, path, &rd, &ret))
        return ret;
    return refused(c, -ENOSYS);
}

long sys_symlink(struct cnk_call *c) { return refuse_shipped_path(c, AT_FDCWD, PATH(1)); }
long sys_symlinkat(struct cnk_call *c) { return refuse_shipped_path(c, c->a[1], PATH(2)); }
long sys_chown(struct cnk_call *c) { return refuse_shipped_path(c, AT_FDCWD, PATH(0)); }
long sys_lchown(struct cnk_call *c) { return refuse_shipped_path(c, AT_FDCWD, PATH(0)); }
long sys_fchownat(struct cnk_call *c)
{
    return refuse_shipped_path(c, c->a[0], empty_ok(PATH(1), (int)c->a[4]));
}

long sys_fchown(struct cnk_call *c)
{
    int r;
    long ret;

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    return refused(c, -ENOSYS);
}

/* ---- directories, size, sync ---- */

long sys_getdents64(struct cnk_call *c)
{
    int r;
    long ret;
    unsigned count = (unsigned)c->a[2];

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    /* records arrive as the I/O node's getdents64 wrote them */
    return shipped(c, fwd_getdents64(r, (void *)c->a[1], MIN(count, LAT_MAX_IO)));
}

long sys_truncate(struct cnk_call *c)
{
    int rd;
    long ret;

    if (!by_path(c, AT_FDCWD, PATH(0), &rd, &ret))
        return ret;
    return shipped(c, fwd_truncate(PATH(0), c->a[1]));
}

/* A call on a descriptor with one more integer argument (fn2) or none (fn1). */
static long fd_call(struct cnk_call *c, int64_t (*fn1)(int), int64_t (*fn2)(int, int64_t), int64_t a1)
{
    int r;
    long ret;

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    return shipped(c, fn1 ? fn1(r) : fn2(r, a1));
}

static int64_t fchmod2(int fd, int64_t mode) { return fwd_fchmod(fd, (int)mode); }

long sys_ftruncate(struct cnk_call *c) { return fd_call(c, NULL, fwd_ftruncate, c->a[1]); }
long sys_fsync(struct cnk_call *c) { return fd_call(c, fwd_fsync, NULL, 0); }
long sys_fdatasync(struct cnk_call *c) { return fd_call(c, fwd_fdatasync, NULL, 0); }
long sys_fchmod(struct cnk_call *c) { return fd_call(c, NULL, fchmod2, (int)c->a[1]); }
/* A local directory cannot become the I/O node's cwd: fchdir on one
 * changes only the unused local cwd, as in libcnclient. */
long sys_fchdir(struct cnk_call *c) { return fd_call(c, fwd_fchdir, NULL, 0); }

/* ---- descriptors: dup, fcntl ---- */

/* A fresh program descriptor for new remote descriptor nr. */
static long install_new(long nr, int cloexec, int minfd)
{
    if (nr < 0)
        return nr;
    int fd = shipc_fd_install((int)nr, cloexec, minfd);
    if (fd < 0)
        rclose((int)nr);
    return fd;
}

long sys_dup(struct cnk_call *c)
{
    int r;
    long ret;

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    return shipped(c, install_new(fwd_dup(r), 0, 0));
}

/* A local descriptor dup'ed over a shipped one: the kernel replaced the
 * placeholder, the remote descriptor must go too. */
static long dup_local(struct cnk_call *c, int newfd, int new_shipped)
{
    long ret = local(c);

    if (ret >= 0)
        shipc_fd_closed((unsigned)newfd, (unsigned)newfd);   /* replaced whatever was there */
    if (ret >= 0 && new_shipped) {
        int old = shipc_fd_forget(newfd, 0);
        if (old >= 0) {
            rclose(old);
            c->cls = CNK_SHIPPED;
        }
    }
    return ret;
}

static long dup_to(struct cnk_call *c, int is_dup3)
{
    int oldfd = (int)c->a[0], newfd = (int)c->a[1], flags = is_dup3 ? (int)c->a[2] : 0;
    int ro, rn, old;
    int o = shipc_fd_route(oldfd, &ro), n = shipc_fd_route(newfd, &rn);

    if (o < 0 || n < 0)
        return answered(c, -EBADF);     /* cnk's own, on either side */
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
    if (nr < 0)
        return shipped(c, nr);
    long ret = shipc_fd_install_at((int)nr, flags & O_CLOEXEC, newfd, &old);
    if (ret < 0)
        rclose((int)nr);
    if (old >= 0)
        rclose(old);
    return shipped(c, ret);
}

long sys_dup2(struct cnk_call *c) { return dup_to(c, 0); }
long sys_dup3(struct cnk_call *c) { return dup_to(c, 1); }

/* Descriptor flags live in the table, status flags on the I/O node. */
long sys_fcntl(struct cnk_call *c)
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
        return refused(c, -ENOLCK);     /* no locks across the I/O node */
    default:
        return answered(c, -EINVAL);
    }
}

long sys_ioctl(struct cnk_call *c)
{
    int r;
    long ret;

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    return answered(c, -ENOTTY);        /* a remote file is never a terminal */
}

long sys_flock(struct cnk_call *c)
{
    int r;
    long ret;

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    return refused(c, -ENOSYS);         /* HDF5 & co. read it as "no locking here" */
}

long sys_fadvise64(struct cnk_call *c)
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

/* ---- working directory, umask, modes, times ---- */

/* Always shipped, /proc included: relative names resolve on the I/O node. */
long sys_chdir(struct cnk_call *c)
{
    const char *path = PATH(0);

    if (!path)
        return local(c);
    if (strnlen(path, LAT_MAX_PATH) >= LAT_MAX_PATH)
        return answered(c, -ENAMETOOLONG);
    return shipped(c, fwd_chdir(path));
}

/* The system call's contract: the length with the NUL, ERANGE if short. */
long sys_getcwd(struct cnk_call *c)
{
    size_t cap = MIN((size_t)c->a[1], (size_t)LAT_MAX_IO);
    long ret = fwd_getcwd((char *)c->a[0], (int64_t)cap);

    if (ret > 0 && ((size_t)ret > cap || ((char *)c->a[0])[ret - 1] != '\0'))
        ret = -EIO;
    return shipped(c, ret);
}

/* The local umask follows too: /dev/shm files are created here. */
long sys_umask(struct cnk_call *c)
{
    long mine = ksys1(__NR_umask, c->a[0] & 0777);
    long old = fwd_umask(c->a[0] & 0777);

    return shipped(c, old < 0 ? mine : old);
}

static long do_fchmodat(struct cnk_call *c, long dirfd, const char *path, int mode)
{
    int rd;
    long ret;

    if (!by_path(c, dirfd, path, &rd, &ret))
        return ret;
    return shipped(c, fwd_fchmodat(rd, mode, 0, path));
}

long sys_chmod(struct cnk_call *c) { return do_fchmodat(c, AT_FDCWD, PATH(0), (int)c->a[1]); }
long sys_fchmodat(struct cnk_call *c) { return do_fchmodat(c, c->a[0], PATH(1), (int)c->a[2]); }

static long utimens_ship(int rd, const char *path, const void *times, int flags)
{
    struct lat_timespec w[2] = { { 0, 0 }, { 0, 0 } };
    const int64_t *t = times;       /* struct timespec[2]: sec, nsec, sec, nsec */

    if (t)
        for (int i = 0; i < 2; i++)
            w[i] = (struct lat_timespec){ t[2 * i], t[2 * i + 1] };
    return fwd_utimensat(rd, flags, t != NULL, w, path);
}

/* A NULL path means the descriptor itself (futimens). */
long sys_utimensat(struct cnk_call *c)
{
    const char *path = PATH(1);
    const void *times = (const void *)c->a[2];
    int flags = (int)c->a[3], rd;
    long ret;

    if (!path) {
        if (!by_fd(c, c->a[0], &rd, &ret))
            return ret;
        if (flags)
            return answered(c, -EINVAL);
        return shipped(c, utimens_ship(rd, "", times, AT_EMPTY_PATH));
    }
    if (!by_path(c, c->a[0], path, &rd, &ret))
        return ret;
    return shipped(c, utimens_ship(rd, path, times, flags));
}

/* ---- sendfile, copy_file_range: emulated when a side is shipped ---- */

#define BOUNCE (64 * 1024)

static char bounce[BOUNCE];
static struct klock bounce_lock;    /* taken before conn_lock, never after */

struct end {
    int fd;
    int remote;                     /* -1: local */
    int64_t *off;                   /* NULL: the descriptor's own position */
};

static long end_io(struct end *e, int wr, size_t n)
{
    long r;

    if (e->remote >= 0) {
        struct iovec v = { bounce, n };
        r = shipc_rw(e->remote, wr, &v, 1, e->off ? *e->off : -1);
    } else if (e->off) {
        r = ksys4(wr ? __NR_pwrite64 : __NR_pread64, e->fd, bounce, n, *e->off);
    } else {
        r = ksys3(wr ? __NR_write : __NR_read, e->fd, bounce, n);
    }
    if (r > 0 && e->off)
        *e->off += r;
    return r;
}

/* Give back bytes read but not written, so nothing is skipped. */
static void end_unread(struct end *e, long n)
{
    if (n <= 0)
        return;
    if (e->off)
        *e->off -= n;
    else if (e->remote >= 0)
        fwd_lseek(e->remote, -n, 1 /* SEEK_CUR */);
    else
        ksys3(__NR_lseek, e->fd, -n, 1 /* SEEK_CUR */);
}

static long copy_loop(struct end *in, struct end *out, size_t count)
{
    size_t done = 0;
    long err = 0;

    klock(&bounce_lock);
    while (done < count && done < LAT_MAX_IO) {
        size_t want = MIN(count - done, (size_t)BOUNCE);
        long n = end_io(in, 0, want);
        if (n <= 0) {
            err = n;
            break;
        }
        long w = end_io(out, 1, (size_t)n);
        end_unread(in, n - (w > 0 ? w : 0));
        if (w < 0) {
            err = w;
            break;
        }
        done += (size_t)w;
        if (w < n || (size_t)n < want)
            break;
    }
    kunlock(&bounce_lock);
    return done ? (long)done : err;
}

/* Route both ends: 1 = emulate, 0 = done (*ret). */
static int two_fds(struct cnk_call *c, int in, int out, struct end *ei, struct end *eo, long *ret)
{
    int a = shipc_fd_route(in, &ei->remote), b = shipc_fd_route(out, &eo->remote);

    if (a < 0 || b < 0) {
        *ret = answered(c, -EBADF);
        return 0;
    }
    if (a == SHIPC_LOCAL && b == SHIPC_LOCAL) {
        *ret = local(c);
        return 0;
    }
    if (a == SHIPC_LOCAL)
        ei->remote = -1;
    if (b == SHIPC_LOCAL)
        eo->remote = -1;
    ei->fd = in;
    eo->fd = out;
    return 1;
}

/* An optional loff_t in the program's memory, copied in. */
static int get_off(const int64_t *user, int64_t *mine, int64_t **use)
{
    *use = NULL;
    if (!user)
        return 0;
    if (*user < 0)
        return -EINVAL;
    *mine = *user;
    *use = mine;
    return 0;
}

long sys_sendfile(struct cnk_call *c)
{
    struct end in, out;
    int64_t *user = (int64_t *)c->a[2], off = 0;
    long ret;

    if (!two_fds(c, (int)c->a[1], (int)c->a[0], &in, &out, &ret))
        return ret;
    out.off = NULL;
    if ((ret = get_off(user, &off, &in.off)) < 0)
        return answered(c, ret);
    ret = copy_loop(&in, &out, (size_t)c->a[3]);
    if (user)
        *user = off;
    return shipped(c, ret);
}

long sys_copy_file_range(struct cnk_call *c)
{
    struct end in, out;
    int64_t *uin = (int64_t *)c->a[1], *uout = (int64_t *)c->a[3], oin = 0, oout = 0;
    long ret;

    if (!two_fds(c, (int)c->a[0], (int)c->a[2], &in, &out, &ret))
        return ret;
    if (c->a[5])
        return answered(c, -EINVAL);
    if ((ret = get_off(uin, &oin, &in.off)) < 0 || (ret = get_off(uout, &oout, &out.off)) < 0)
        return answered(c, ret);
    ret = copy_loop(&in, &out, (size_t)c->a[4]);
    if (uin)
        *uin = oin;
    if (uout)
        *uout = oout;
    return shipped(c, ret);
}

/* ---- execve ---- */

/* What execve checks before reading: a regular file, executable by the
 * job's user (the I/O node judges X_OK for a shipped name; the mode bits
 * for a descriptor, as nothing else can be asked of it). */
static long exec_fd_ok(int fd, int by_mode)
{
    struct kstat k;
    int r;
    long ret;
    int rt = shipc_fd_route(fd, &r);

    if (rt < 0)
        return rt;
    ret = rt == SHIPC_SHIP ? fstatat_ship(r, "", AT_EMPTY_PATH, &k) : ksys2(__NR_fstat, fd, &k);
    if (ret < 0)
        return ret;
    if ((k.mode & S_IFMT) != S_IFREG || (by_mode && !(k.mode & 0111)))
        return -EACCES;
    return 0;
}

long ship_exec_open(int dirfd, const char *path, int flags, int *owned)
{
    int nofollow = flags & AT_SYMLINK_NOFOLLOW ? O_NOFOLLOW : 0, rd;
    long r;

    *owned = 0;
    if (!path)
        return -EFAULT;
    if (!path[0] && (flags & AT_EMPTY_PATH)) {     /* fexecve */
        r = exec_fd_ok(dirfd, 1);
        return r < 0 ? r : dirfd;
    }
    int rt = shipc_path_route(dirfd, path, &rd);
    if (rt < 0)
        return rt;
    if (rt == SHIPC_LOCAL) {
        r = ksys4(__NR_faccessat, dirfd, path, 1 /* X_OK */, 0);
        if (r == 0)
            r = ksys4(__NR_openat, dirfd, path, O_RDONLY | O_CLOEXEC | nofollow, 0);
    } else {
        r = fwd_faccessat(rd, 1 /* X_OK */, 0, path);
        if (r == 0)
            r = open_ship(rd, path, O_RDONLY | O_CLOEXEC | nofollow, 0);
    }
    if (r < 0)
        return r;
    long ok = exec_fd_ok((int)r, 0);
    if (ok < 0) {
        ship_close((int)r);
        return ok;
    }
    *owned = 1;
    return r;
}

void ship_exec_cloexec(void)
{
    for (int fd = shipc_fd_next_shipped(0, ~0u); fd >= 0; fd = shipc_fd_next_shipped((unsigned)fd + 1, ~0u))
        if (shipc_fd_cloexec(fd))
            rclose(shipc_fd_forget(fd, 1));
}
