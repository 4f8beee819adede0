/*
 * stat.c - the stat family, statx, statfs, access, readlink, chmod family
 * and utimensat: the I/O node's answers in the kernel's x86-64 layouts.
 */
#include <linux/stat.h>
#include <linux/fcntl.h>

#include <lattice/fwd_posix.h>

#include "internal.h"

_Static_assert(sizeof(struct statx) == sizeof(struct lat_statx), "statx on the wire");

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

long shipc_fstatat_ship(int rd, const char *path, int flags, void *buf)
{
    struct lat_stat w;
    struct kstat k;

    if (!buf)
        return -EFAULT;
    long r = fwd_fstatat(rd, flags, path, &w);
    if (r < 0)
        return r;
    stat_from_wire(&w, &k);
    return shipc_put(buf, &k, sizeof k);
}

/* fd's status flags (F_GETFL) and file type (st_mode), wherever it lives:
 * what mmap's errors depend on.  0 or -errno. */
long shipc_fd_kind(int fd, long *flags, uint32_t *mode)
{
    struct kstat k;
    int r;
    int rt = shipc_fd_route(fd, &r);

    if (rt < 0)
        return rt;
    *flags = rt == SHIPC_SHIP ? fwd_fcntl(r, F_GETFL, 0) : ksys2(__NR_fcntl, fd, F_GETFL);
    if (*flags < 0)
        return *flags;
    long s = rt == SHIPC_SHIP ? shipc_fstatat_ship(r, "", AT_EMPTY_PATH, &k) : ksys2(__NR_fstat, fd, &k);
    if (s < 0)
        return s;
    *mode = k.mode;
    return 0;
}

/* What Linux's mmap says of fd where the client cannot map it (a shared
 * writable view of an I/O-node file: err -ENODEV) or could not read it
 * (err), in Linux's order: EBADF for O_PATH; EACCES for a descriptor not
 * open for reading, or not for writing when the view is shared and
 * writable; ENODEV for what has no pages to map (socket, directory, FIFO,
 * character device); else err. */
long shipc_map_errno(int fd, int shared_write, long err)
{
    long fl;
    uint32_t mode;
    long r = shipc_fd_kind(fd, &fl, &mode);
    if (r < 0)
        return r;
    if (fl & O_PATH)
        return -EBADF;
    if ((fl & O_ACCMODE) == O_WRONLY || (shared_write && (fl & O_ACCMODE) != O_RDWR))
        return -EACCES;
    if ((mode & S_IFMT) != S_IFREG && (mode & S_IFMT) != S_IFBLK)
        return -ENODEV;
    return err;
}

/* Linux >= 6.11 takes a NULL path with AT_EMPTY_PATH as "". */
const char *shipc_empty_ok(const char *path, int flags)
{
    return !path && (flags & AT_EMPTY_PATH) ? "" : path;
}

static long do_fstatat(struct shipc_call *c, long dirfd, const char *path, void *buf, int flags)
{
    int rd;
    long ret;

    path = shipc_empty_ok(path, flags);
    if (!by_path(c, dirfd, path, &rd, &ret))
        return ret;
    return shipped(c, shipc_fstatat_ship(rd, path, flags, buf));
}

long shipc_sys_stat(struct shipc_call *c) { return do_fstatat(c, AT_FDCWD, PATH(0), (void *)c->a[1], 0); }
long shipc_sys_lstat(struct shipc_call *c)
{
    return do_fstatat(c, AT_FDCWD, PATH(0), (void *)c->a[1], AT_SYMLINK_NOFOLLOW);
}
long shipc_sys_newfstatat(struct shipc_call *c)
{
    return do_fstatat(c, c->a[0], PATH(1), (void *)c->a[2], (int)c->a[3]);
}

long shipc_sys_fstat(struct shipc_call *c)
{
    int r;
    long ret;

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    return shipped(c, shipc_fstatat_ship(r, "", AT_EMPTY_PATH, (void *)c->a[1]));
}

/* The wire carries struct statx as is: it lands in the program's buffer. */
long shipc_sys_statx(struct shipc_call *c)
{
    int flags = (int)c->a[2], rd;
    const char *path = shipc_empty_ok(PATH(1), flags);
    void *buf = (void *)c->a[4];
    long ret;

    if (!by_path(c, c->a[0], path, &rd, &ret))
        return ret;
    if (!buf)
        return shipped(c, -EFAULT);
    return shipped(c, fwd_statx(rd, flags, (int)c->a[3], path, buf));
}

static int statfs_from_wire(const struct lat_statfs *w, void *buf)
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
    return shipc_put(buf, &k, sizeof k);
}

static long statfs_reply(long r, const struct lat_statfs *w, void *buf)
{
    if (r < 0)
        return r;
    return statfs_from_wire(w, buf);
}

long shipc_sys_statfs(struct shipc_call *c)
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

long shipc_sys_fstatfs(struct shipc_call *c)
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

static long do_access(struct shipc_call *c, long dirfd, const char *path, int mode, int flags)
{
    int rd;
    long ret;

    if (!by_path(c, dirfd, path, &rd, &ret))
        return ret;
    return shipped(c, fwd_faccessat(rd, mode, flags, path));
}

long shipc_sys_access(struct shipc_call *c) { return do_access(c, AT_FDCWD, PATH(0), (int)c->a[1], 0); }
long shipc_sys_faccessat(struct shipc_call *c) { return do_access(c, c->a[0], PATH(1), (int)c->a[2], 0); }
long shipc_sys_faccessat2(struct shipc_call *c)
{
    return do_access(c, c->a[0], PATH(1), (int)c->a[2], (int)c->a[3]);
}

static long do_readlink(struct shipc_call *c, long dirfd, const char *path, char *buf, long size)
{
    int rd;
    long ret;

    if (!by_path(c, dirfd, path, &rd, &ret))
        return ret;
    if ((int)size <= 0)
        return shipped(c, -EINVAL);
    size_t cap = SHIPC_MIN((size_t)(int)size, (size_t)LAT_MAX_IO);
    return shipped(c, fwd_readlinkat(rd, path, buf, (int64_t)cap));
}

long shipc_sys_readlink(struct shipc_call *c)
{
    return do_readlink(c, AT_FDCWD, PATH(0), (char *)c->a[1], c->a[2]);
}
long shipc_sys_readlinkat(struct shipc_call *c)
{
    return do_readlink(c, c->a[0], PATH(1), (char *)c->a[2], c->a[3]);
}

static long do_fchmodat(struct shipc_call *c, long dirfd, const char *path, int mode)
{
    int rd;
    long ret;

    if (!by_path(c, dirfd, path, &rd, &ret))
        return ret;
    return shipped(c, fwd_fchmodat(rd, mode, 0, path));
}

long shipc_sys_chmod(struct shipc_call *c) { return do_fchmodat(c, AT_FDCWD, PATH(0), (int)c->a[1]); }
long shipc_sys_fchmodat(struct shipc_call *c) { return do_fchmodat(c, c->a[0], PATH(1), (int)c->a[2]); }

static long utimens_ship(int rd, const char *path, const void *times, int flags)
{
    struct lat_timespec w[2] = { { 0, 0 }, { 0, 0 } };
    int64_t t[4];                   /* struct timespec[2]: sec, nsec, sec, nsec */

    if (times) {
        int r = shipc_get(t, times, sizeof t);
        if (r < 0)
            return r;
        for (int i = 0; i < 2; i++)
            w[i] = (struct lat_timespec){ t[2 * i], t[2 * i + 1] };
    }
    return fwd_utimensat(rd, flags, times != NULL, w, path);
}

/* A NULL path means the descriptor itself (futimens). */
long shipc_sys_utimensat(struct shipc_call *c)
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
