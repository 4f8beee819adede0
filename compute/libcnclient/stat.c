/*
 * stat.c - file attributes: the stat family in every spelling glibc
 * programs and older binaries use (stat/stat64/fstatat/__xstat...), statx,
 * statfs/statvfs, access, readlink, chmod, utimes.  Missing stat variants
 * are the commonest gap in I/O forwarding layers, so all are here.
 *
 * Local pass-through of the stat family uses the system calls directly:
 * on x86-64 struct stat == struct stat64 == the kernel's layout.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <utime.h>

#include "client.h"

int __xstat(int ver, const char *path, struct stat *st);
int __lxstat(int ver, const char *path, struct stat *st);
int __fxstat(int ver, int fd, struct stat *st);
int __fxstatat(int ver, int dirfd, const char *path, struct stat *st, int flags);
int __xstat64(int ver, const char *path, struct stat64 *st);
int __lxstat64(int ver, const char *path, struct stat64 *st);
int __fxstat64(int ver, int fd, struct stat64 *st);
int __fxstatat64(int ver, int dirfd, const char *path, struct stat64 *st, int flags);
ssize_t __readlink_chk(const char *path, char *buf, size_t len, size_t buflen);
ssize_t __readlinkat_chk(int dirfd, const char *path, char *buf, size_t len, size_t buflen);

_Static_assert(sizeof(struct stat) == sizeof(struct stat64), "x86-64 stat layout");
_Static_assert(sizeof(struct statfs) == sizeof(struct statfs64), "x86-64 statfs layout");

/* ---- stat family ---- */

static void from_wire(const struct lat_stat *w, struct stat *st)
{
    memset(st, 0, sizeof *st);
    st->st_dev = w->dev;
    st->st_ino = w->ino;
    st->st_nlink = w->nlink;
    st->st_mode = w->mode;
    st->st_uid = w->uid;
    st->st_gid = w->gid;
    st->st_rdev = w->rdev;
    st->st_size = w->size;
    st->st_blksize = w->blksize;
    st->st_blocks = w->blocks;
    st->st_atim.tv_sec = w->atime_sec;
    st->st_atim.tv_nsec = w->atime_nsec;
    st->st_mtim.tv_sec = w->mtime_sec;
    st->st_mtim.tv_nsec = w->mtime_nsec;
    st->st_ctim.tv_sec = w->ctime_sec;
    st->st_ctim.tv_nsec = w->ctime_nsec;
}

static int ship_fstatat(int rdirfd, const char *path, struct stat *st, int flags)
{
    struct lat_stat w;
    if (lcn_ret(fwd_fstatat(rdirfd, flags, path, &w)) < 0)
        return -1;
    from_wire(&w, st);
    return 0;
}

int lat_fstatat_any(int dirfd, const char *path, struct stat *st, int flags)
{
    int rd;
    switch (lat_path_route(dirfd, path, &rd)) {
    case LAT_SHIP:
        return ship_fstatat(rd, path, st, flags);
    case LAT_LOCAL:
        return (int)syscall(SYS_newfstatat, dirfd, path, st, flags);
    default:
        return -1;
    }
}

static int do_fstat(int fd, struct stat *st)
{
    int r;
    switch (lat_fd_route(fd, &r)) {
    case LAT_SHIP:
        return ship_fstatat(r, "", st, AT_EMPTY_PATH);
    case LAT_HIDE:
        return lat_fail(EBADF);
    case LAT_LOCAL:
        break;
    }
    return (int)syscall(SYS_fstat, fd, st);
}

int stat(const char *p, struct stat *st) { return lat_fstatat_any(AT_FDCWD, p, st, 0); }
int lstat(const char *p, struct stat *st) { return lat_fstatat_any(AT_FDCWD, p, st, AT_SYMLINK_NOFOLLOW); }
int fstat(int fd, struct stat *st) { return do_fstat(fd, st); }
int fstatat(int d, const char *p, struct stat *st, int fl) { return lat_fstatat_any(d, p, st, fl); }

int stat64(const char *p, struct stat64 *st) { return stat(p, (struct stat *)st); }
int lstat64(const char *p, struct stat64 *st) { return lstat(p, (struct stat *)st); }
int fstat64(int fd, struct stat64 *st) { return do_fstat(fd, (struct stat *)st); }
int fstatat64(int d, const char *p, struct stat64 *st, int fl)
{
    return lat_fstatat_any(d, p, (struct stat *)st, fl);
}

/* glibc < 2.33 binaries and libraries call these; ver is always the kernel layout on x86-64 */
int __xstat(int ver, const char *p, struct stat *st) { (void)ver; return stat(p, st); }
int __lxstat(int ver, const char *p, struct stat *st) { (void)ver; return lstat(p, st); }
int __fxstat(int ver, int fd, struct stat *st) { (void)ver; return do_fstat(fd, st); }
int __fxstatat(int ver, int d, const char *p, struct stat *st, int fl)
{
    (void)ver;
    return lat_fstatat_any(d, p, st, fl);
}
int __xstat64(int ver, const char *p, struct stat64 *st) { (void)ver; return stat64(p, st); }
int __lxstat64(int ver, const char *p, struct stat64 *st) { (void)ver; return lstat64(p, st); }
int __fxstat64(int ver, int fd, struct stat64 *st) { (void)ver; return fstat64(fd, st); }
int __fxstatat64(int ver, int d, const char *p, struct stat64 *st, int fl)
{
    (void)ver;
    return fstatat64(d, p, st, fl);
}

int statx(int dirfd, const char *path, int flags, unsigned int mask, struct statx *stx)
{
    int rd;
    /* statx(fd, "", AT_EMPTY_PATH) is how newer code spells fstat */
    switch (lat_path_route(dirfd, path, &rd)) {
    case LAT_SHIP: {
        return lcn_ret(fwd_statx(rd, flags, (int)mask, path, (struct lat_statx *)stx)) < 0 ? -1 : 0;
    }
    case LAT_LOCAL:
        return REAL(statx)(dirfd, path, flags, mask, stx);
    default:
        return -1;
    }
}
_Static_assert(sizeof(struct statx) == sizeof(struct lat_statx), "statx on the wire");

/* ---- statfs / statvfs ---- */

static void statfs_from_wire(const struct lat_statfs *w, struct statfs *b)
{
    memset(b, 0, sizeof *b);
    b->f_type = w->type;
    b->f_bsize = w->bsize;
    b->f_blocks = w->blocks;
    b->f_bfree = w->bfree;
    b->f_bavail = w->bavail;
    b->f_files = w->files;
    b->f_ffree = w->ffree;
    memcpy(&b->f_fsid, &w->fsid, sizeof b->f_fsid);
    b->f_namelen = w->namelen;
    b->f_frsize = w->frsize;
    b->f_flags = w->flags;
}

/* 1: shipped (result in *b or -1), 0: local */
static int ship_statfs(const char *path, int fd, struct statfs *b, int *ret)
{
    struct lat_statfs w;
    int64_t r;
    if (path) {
        int rd;
        int route = lat_path_route(AT_FDCWD, path, &rd);
        if (route == LAT_LOCAL)
            return 0;
        r = route < 0 ? -1 : lcn_ret(fwd_statfs(path, &w));
    } else {
        int rfd;
        switch (lat_fd_route(fd, &rfd)) {
        case LAT_LOCAL:
            return 0;
        case LAT_HIDE:
            *ret = lat_fail(EBADF);
            return 1;
        case LAT_SHIP:
            break;
        }
        r = lcn_ret(fwd_fstatfs(rfd, &w));
    }
    if (r >= 0)
        statfs_from_wire(&w, b);
    *ret = r < 0 ? -1 : 0;
    return 1;
}

int statfs(const char *path, struct statfs *b)
{
    int ret;
    return ship_statfs(path, -1, b, &ret) ? ret : REAL(statfs)(path, b);
}

int fstatfs(int fd, struct statfs *b)
{
    int ret;
    return ship_statfs(NULL, fd, b, &ret) ? ret : REAL(fstatfs)(fd, b);
}

int statfs64(const char *path, struct statfs64 *b) { return statfs(path, (struct statfs *)b); }
int fstatfs64(int fd, struct statfs64 *b) { return fstatfs(fd, (struct statfs *)b); }

/* glibc's statvfs calls its internal __statfs, which we cannot catch. */
static void statvfs_from_statfs(const struct statfs *s, struct statvfs *v)
{
    memset(v, 0, sizeof *v);
    v->f_bsize = (unsigned long)s->f_bsize;
    v->f_frsize = (unsigned long)(s->f_frsize ? s->f_frsize : s->f_bsize);
    v->f_blocks = s->f_blocks;
    v->f_bfree = s->f_bfree;
    v->f_bavail = s->f_bavail;
    v->f_files = s->f_files;
    v->f_ffree = s->f_ffree;
    v->f_favail = s->f_ffree;
    memcpy(&v->f_fsid, &s->f_fsid, sizeof v->f_fsid);
    v->f_flag = (unsigned long)s->f_flags & ~0x20ul;  /* drop the kernel's ST_VALID */
    v->f_namemax = (unsigned long)s->f_namelen;
}

int statvfs(const char *path, struct statvfs *v)
{
    struct statfs s;
    int ret;
    if (!ship_statfs(path, -1, &s, &ret))
        return REAL(statvfs)(path, v);
    if (ret == 0)
        statvfs_from_statfs(&s, v);
    return ret;
}

int fstatvfs(int fd, struct statvfs *v)
{
    struct statfs s;
    int ret;
    if (!ship_statfs(NULL, fd, &s, &ret))
        return REAL(fstatvfs)(fd, v);
    if (ret == 0)
        statvfs_from_statfs(&s, v);
    return ret;
}

int statvfs64(const char *path, struct statvfs64 *v) { return statvfs(path, (struct statvfs *)v); }
int fstatvfs64(int fd, struct statvfs64 *v) { return fstatvfs(fd, (struct statvfs *)v); }

/* ---- access ---- */

int faccessat(int dirfd, const char *path, int mode, int flags)
{
    int rd;
    switch (lat_path_route(dirfd, path, &rd)) {
    case LAT_SHIP:
        return (int)lcn_ret(fwd_faccessat(rd, mode, flags, path));
    case LAT_LOCAL:
        return REAL(faccessat)(dirfd, path, mode, flags);
    default:
        return -1;
    }
}

int access(const char *path, int mode) { return faccessat(AT_FDCWD, path, mode, 0); }
int euidaccess(const char *path, int mode) { return faccessat(AT_FDCWD, path, mode, AT_EACCESS); }
int eaccess(const char *path, int mode) { return faccessat(AT_FDCWD, path, mode, AT_EACCESS); }

/* ---- readlink ---- */

ssize_t readlinkat(int dirfd, const char *path, char *buf, size_t len)
{
    int rd;
    switch (lat_path_route(dirfd, path, &rd)) {
    case LAT_SHIP: {
        if (len == 0)
            return lat_fail(EINVAL);
        size_t cap = len > LAT_MAX_PATH ? LAT_MAX_PATH : len;
        return (ssize_t)lcn_ret(fwd_readlinkat(rd, path, buf, (int64_t)cap));
    }
    case LAT_LOCAL:
        return REAL(readlinkat)(dirfd, path, buf, len);
    default:
        return -1;
    }
}

ssize_t readlink(const char *path, char *buf, size_t len) { return readlinkat(AT_FDCWD, path, buf, len); }

ssize_t __readlink_chk(const char *path, char *buf, size_t len, size_t buflen)
{
    if (len > buflen)
        __chk_fail();
    return readlinkat(AT_FDCWD, path, buf, len);
}

ssize_t __readlinkat_chk(int dirfd, const char *path, char *buf, size_t len, size_t buflen)
{
    if (len > buflen)
        __chk_fail();
    return readlinkat(dirfd, path, buf, len);
}

/* ---- chmod ---- */

int fchmodat(int dirfd, const char *path, mode_t mode, int flags)
{
    int rd;
    switch (lat_path_route(dirfd, path, &rd)) {
    case LAT_SHIP:
        return (int)lcn_ret(fwd_fchmodat(rd, (int)mode, flags, path));
    case LAT_LOCAL:
        return REAL(fchmodat)(dirfd, path, mode, flags);
    default:
        return -1;
    }
}

int chmod(const char *path, mode_t mode) { return fchmodat(AT_FDCWD, path, mode, 0); }
int lchmod(const char *path, mode_t mode) { return fchmodat(AT_FDCWD, path, mode, AT_SYMLINK_NOFOLLOW); }

int fchmod(int fd, mode_t mode)
{
    int r;
    switch (lat_fd_route(fd, &r)) {
    case LAT_SHIP:
        return (int)lcn_ret(fwd_fchmod(r, (int)mode));
    case LAT_HIDE:
        return lat_fail(EBADF);
    case LAT_LOCAL:
        break;
    }
    return REAL(fchmod)(fd, mode);
}

/* ---- times ---- */

static int ship_utimens(int rdirfd, const char *path, const struct timespec ts[2], int flags)
{
    struct lat_timespec w[2] = { { 0, 0 }, { 0, 0 } };
    if (ts)
        for (int i = 0; i < 2; i++)
            w[i] = (struct lat_timespec){ ts[i].tv_sec, ts[i].tv_nsec };
    return (int)lcn_ret(fwd_utimensat(rdirfd, flags, ts != NULL, w, path));
}

int utimensat(int dirfd, const char *path, const struct timespec ts[2], int flags)
{
    int rd;
    switch (lat_path_route(dirfd, path, &rd)) {
    case LAT_SHIP:
        return ship_utimens(rd, path, ts, flags);
    case LAT_LOCAL:
        return REAL(utimensat)(dirfd, path, ts, flags);
    default:
        return -1;
    }
}

int futimens(int fd, const struct timespec ts[2])
{
    int r;
    switch (lat_fd_route(fd, &r)) {
    case LAT_SHIP:
        return ship_utimens(r, "", ts, AT_EMPTY_PATH);
    case LAT_HIDE:
        return lat_fail(EBADF);
    case LAT_LOCAL:
        break;
    }
    return REAL(futimens)(fd, ts);
}

/* timeval pair -> timespec pair; NULL stays NULL ("now") */
static const struct timespec *tv2ts(const struct timeval tv[2], struct timespec ts[2], int *bad)
{
    *bad = 0;
    if (!tv)
        return NULL;
    for (int i = 0; i < 2; i++) {
        if (tv[i].tv_usec < 0 || tv[i].tv_usec >= 1000000)
            *bad = 1;
        ts[i].tv_sec = tv[i].tv_sec;
        ts[i].tv_nsec = tv[i].tv_usec * 1000;
    }
    return ts;
}

int utimes(const char *path, const struct timeval tv[2])
{
    struct timespec ts[2];
    int bad;
    const struct timespec *p = tv2ts(tv, ts, &bad);
    return bad ? lat_fail(EINVAL) : utimensat(AT_FDCWD, path, p, 0);
}

int lutimes(const char *path, const struct timeval tv[2])
{
    struct timespec ts[2];
    int bad;
    const struct timespec *p = tv2ts(tv, ts, &bad);
    return bad ? lat_fail(EINVAL) : utimensat(AT_FDCWD, path, p, AT_SYMLINK_NOFOLLOW);
}

int futimes(int fd, const struct timeval tv[2])
{
    struct timespec ts[2];
    int bad;
    const struct timespec *p = tv2ts(tv, ts, &bad);
    return bad ? lat_fail(EINVAL) : futimens(fd, p);
}

int futimesat(int dirfd, const char *path, const struct timeval tv[2])
{
    struct timespec ts[2];
    int bad;
    const struct timespec *p = tv2ts(tv, ts, &bad);
    if (bad)
        return lat_fail(EINVAL);
    return path ? utimensat(dirfd, path, p, 0) : futimens(dirfd, p);
}

int utime(const char *path, const struct utimbuf *ub)
{
    struct timespec ts[2];
    if (ub) {
        ts[0] = (struct timespec){ ub->actime, 0 };
        ts[1] = (struct timespec){ ub->modtime, 0 };
    }
    return utimensat(AT_FDCWD, path, ub ? ts : NULL, 0);
}

/* ---- extended attributes: not in the protocol; "not supported here" is
 * what tools (ls -l, cp -a) expect from such a file system ---- */


static int xattr_path(const char *path, int *ship)
{
    int rd;
    int r = lat_path_route(AT_FDCWD, path, &rd);
    *ship = r == LAT_SHIP;
    return r;
}

static int xattr_fd(int fd, int *ship)
{
    int r;
    enum lat_route route = lat_fd_route(fd, &r);
    *ship = route != LAT_LOCAL;
    return route == LAT_HIDE ? lat_fail(EBADF) : route == LAT_SHIP ? lat_fail(ENOTSUP) : 0;
}

#define XATTR_PATH(call)                                  \
    do {                                                  \
        int ship_;                                        \
        if (xattr_path(path, &ship_) < 0)                 \
            return -1;                                    \
        if (ship_)                                        \
            return lat_fail(ENOTSUP);                     \
        return call;                                      \
    } while (0)

#define XATTR_FD(call)                                    \
    do {                                                  \
        int ship_;                                        \
        int r_ = xattr_fd(fd, &ship_);                    \
        return ship_ ? r_ : call;                         \
    } while (0)

ssize_t getxattr(const char *path, const char *name, void *v, size_t n)
{
    XATTR_PATH(REAL(getxattr)(path, name, v, n));
}
ssize_t lgetxattr(const char *path, const char *name, void *v, size_t n)
{
    XATTR_PATH(REAL(lgetxattr)(path, name, v, n));
}
ssize_t fgetxattr(int fd, const char *name, void *v, size_t n) { XATTR_FD(REAL(fgetxattr)(fd, name, v, n)); }
ssize_t listxattr(const char *path, char *list, size_t n) { XATTR_PATH(REAL(listxattr)(path, list, n)); }
ssize_t llistxattr(const char *path, char *list, size_t n) { XATTR_PATH(REAL(llistxattr)(path, list, n)); }
ssize_t flistxattr(int fd, char *list, size_t n) { XATTR_FD(REAL(flistxattr)(fd, list, n)); }
int setxattr(const char *path, const char *name, const void *v, size_t n, int fl)
{
    XATTR_PATH(REAL(setxattr)(path, name, v, n, fl));
}
int lsetxattr(const char *path, const char *name, const void *v, size_t n, int fl)
{
    XATTR_PATH(REAL(lsetxattr)(path, name, v, n, fl));
}
int fsetxattr(int fd, const char *name, const void *v, size_t n, int fl)
{
    XATTR_FD(REAL(fsetxattr)(fd, name, v, n, fl));
}
int removexattr(const char *path, const char *name) { XATTR_PATH(REAL(removexattr)(path, name)); }
int lremovexattr(const char *path, const char *name) { XATTR_PATH(REAL(lremovexattr)(path, name)); }
int fremovexattr(int fd, const char *name) { XATTR_FD(REAL(fremovexattr)(fd, name)); }
