/*
 * stat.c - file attributes: the stat family in every spelling glibc
 * programs and older binaries use (stat/stat64/fstatat/__xstat...), statx,
 * statfs/statvfs, access, readlink, chmod, utimes.  Missing stat variants
 * are the commonest gap in I/O forwarding layers, so all are here (the
 * plain system calls stat, statx, statfs, access, readlink, chmod... are
 * made from lattice/syscalls.def: interpose.c).
 *
 * Each is the system call it stands for, through the shipping core
 * (lat_sys: compute/shipc/stat.c decides local or shipped, as under cnk);
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

/* ---- stat family: the shipping core's (compute/shipc/stat.c), as under cnk ---- */

static int lat_fstatat_any(int dirfd, const char *path, struct stat *st, int flags)
{
    return (int)lat_sys(SYS_newfstatat, dirfd, (long)path, (long)st, flags, 0, 0);
}

static int do_fstat(int fd, struct stat *st)
{
    return (int)lat_sys(SYS_fstat, fd, (long)st, 0, 0, 0, 0);
}

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

/* statx(fd, "", AT_EMPTY_PATH) is how newer code spells fstat */

/* ---- statfs / statvfs ---- */

int statfs64(const char *path, struct statfs64 *b) { return statfs(path, (struct statfs *)b); }
int fstatfs64(int fd, struct statfs64 *b) { return fstatfs(fd, (struct statfs *)b); }

/* glibc's statvfs calls its internal __statfs, which we cannot catch: the
 * same conversion, here. */
static int statvfs_from_statfs(int r, const struct statfs *s, struct statvfs *v)
{
    if (r < 0)
        return r;
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
    return 0;
}

int statvfs(const char *path, struct statvfs *v)
{
    struct statfs s;
    if (!lat_active())
        return REAL(statvfs)(path, v);
    return statvfs_from_statfs(statfs(path, &s), &s, v);
}

int fstatvfs(int fd, struct statvfs *v)
{
    struct statfs s;
    if (!lat_active())
        return REAL(fstatvfs)(fd, v);
    return statvfs_from_statfs(fstatfs(fd, &s), &s, v);
}

int statvfs64(const char *path, struct statvfs64 *v) { return statvfs(path, (struct statvfs *)v); }
int fstatvfs64(int fd, struct statvfs64 *v) { return fstatvfs(fd, (struct statvfs *)v); }

/* ---- access ---- */

int faccessat(int dirfd, const char *path, int mode, int flags)
{
    if (!flags)
        return (int)lat_sys(SYS_faccessat, dirfd, (long)path, mode, 0, 0, 0);
    return (int)lat_sys(SYS_faccessat2, dirfd, (long)path, mode, flags, 0, 0);
}

int euidaccess(const char *path, int mode) { return faccessat(AT_FDCWD, path, mode, AT_EACCESS); }
int eaccess(const char *path, int mode) { return faccessat(AT_FDCWD, path, mode, AT_EACCESS); }

/* ---- readlink ---- */

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

/* The system call has no flags: glibc's AT_SYMLINK_NOFOLLOW (lchmod) is
 * shipped as such, and left to libc on a local name. */
int fchmodat(int dirfd, const char *path, mode_t mode, int flags)
{
    int rd;
    if (!flags)
        return (int)lat_sys(SYS_fchmodat, dirfd, (long)path, mode, 0, 0, 0);
    switch (lat_path_route(dirfd, path, &rd)) {
    case LAT_SHIP:
        return (int)lcn_ret(fwd_fchmodat(rd, (int)mode, flags, path));
    case LAT_LOCAL:
        return REAL(fchmodat)(dirfd, path, mode, flags);
    default:
        return -1;
    }
}

int lchmod(const char *path, mode_t mode) { return fchmodat(AT_FDCWD, path, mode, AT_SYMLINK_NOFOLLOW); }

/* ---- times ---- */

int utimensat(int dirfd, const char *path, const struct timespec ts[2], int flags)
{
    if (lat_is_null(path))
        return lat_fail(EINVAL);        /* glibc's answer: the system call's NULL is futimens */
    return (int)lat_sys(SYS_utimensat, dirfd, (long)path, (long)ts, flags, 0, 0);
}

int futimens(int fd, const struct timespec ts[2])
{
    return (int)lat_sys(SYS_utimensat, fd, 0, (long)ts, 0, 0, 0);
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
