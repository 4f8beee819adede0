/*
 * misc.c - remove, getcwd (the working directory lives on the I/O node),
 * realpath, temporary files, ttyname.  The name calls (unlink, rename,
 * mkdir, link, chown...), chdir and umask are made from
 * lattice/syscalls.def (interpose.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "client.h"

char *__getcwd_chk(char *buf, size_t size, size_t buflen);
char *__realpath_chk(const char *path, char *resolved, size_t resolvedlen);

#define SYS(nr, a0, a1, a2, a3, a4) lat_sys((nr), (long)(a0), (long)(a1), (long)(a2), (long)(a3), (long)(a4), 0)

/* ---- names ---- */

/* glibc's remove() calls its internal unlink/rmdir: the same, through the core */
int remove(const char *path)
{
    if (lat_sys(SYS_unlinkat, AT_FDCWD, (long)path, 0, 0, 0, 0) == 0)
        return 0;
    if (errno != EISDIR)
        return -1;
    return (int)lat_sys(SYS_unlinkat, AT_FDCWD, (long)path, AT_REMOVEDIR, 0, 0, 0);
}

/* glibc's mkfifo and mkfifoat call its internal mknodat: interposed here
 * (link, symlink, chown, mknod... are made from lattice/syscalls.def). */
int mkfifoat(int dirfd, const char *path, mode_t mode)
{
    return (int)lat_sys(SYS_mknodat, dirfd, (long)path, mode | S_IFIFO, 0, 0, 0);
}

int mkfifo(const char *path, mode_t mode) { return mkfifoat(AT_FDCWD, path, mode); }

/* ---- working directory: on the I/O node ---- */

char *getcwd(char *buf, size_t size)
{
    if (!lat_active())
        return REAL(getcwd)(buf, size);
    if (buf && size == 0) {
        lat_fail(EINVAL);
        return NULL;
    }
    /* glibc extension: buf NULL allocates (size 0: as large as needed) */
    char tmp[LAT_MAX_PATH];
    char *dst = buf ? buf : tmp;
    size_t cap = buf ? size : sizeof tmp;
    if (cap > LAT_MAX_PATH)
        cap = LAT_MAX_PATH;
    long r = SYS(SYS_getcwd, dst, cap, 0, 0, 0);     /* the length with the NUL, checked */
    if (r < 0)
        return NULL;
    size_t got = (size_t)r;
    if (got == 0) {
        lat_fail(EIO);
        return NULL;
    }
    if (buf)
        return buf;
    if (size && got > size) {
        lat_fail(ERANGE);
        return NULL;
    }
    char *m = malloc(size ? size : got);
    if (!m) {
        lat_fail(ENOMEM);
        return NULL;
    }
    memcpy(m, tmp, got);
    return m;
}

char *__getcwd_chk(char *buf, size_t size, size_t buflen)
{
    if (size > buflen)
        __chk_fail();
    return getcwd(buf, size);
}

/* glibc's version trusts $PWD and its internal getcwd: both are local. */
char *get_current_dir_name(void)
{
    if (!lat_active())
        return REAL(get_current_dir_name)();
    return getcwd(NULL, 0);
}

/* the local umask follows too: /dev/shm files are created here */

/* ---- realpath: resolved on the I/O node with lstat/readlink/getcwd ---- */

static int ship_lstat(const char *path, struct stat *st)
{
    return fstatat(AT_FDCWD, path, st, AT_SYMLINK_NOFOLLOW);
}

static char *ship_realpath(const char *path, char *resolved)
{
    char out[PATH_MAX], rest[PATH_MAX], link[PATH_MAX];
    size_t olen = 0;
    int links = 0;

    if (strlen(path) >= sizeof rest) {
        lat_fail(ENAMETOOLONG);
        return NULL;
    }
    strcpy(rest, path);
    if (path[0] != '/') {
        if (!getcwd(out, sizeof out))
            return NULL;
        olen = strlen(out);
        if (olen == 1)
            olen = 0;  /* "/" */
    }
    char *p = rest;
    while (*p) {
        while (*p == '/')
            p++;
        char *c = p;
        while (*p && *p != '/')
            p++;
        size_t len = (size_t)(p - c);
        if (len == 0 || (len == 1 && c[0] == '.'))
            continue;
        if (len == 2 && c[0] == '.' && c[1] == '.') {
            while (olen > 0 && out[olen - 1] != '/')
                olen--;
            if (olen > 0)
                olen--;
            continue;
        }
        if (olen + 1 + len + 1 > sizeof out) {
            lat_fail(ENAMETOOLONG);
            return NULL;
        }
        size_t before = olen;
        out[olen++] = '/';
        memcpy(out + olen, c, len);
        olen += len;
        out[olen] = '\0';
        struct stat st;
        if (ship_lstat(out, &st) < 0)
            return NULL;
        if (S_ISLNK(st.st_mode)) {
            if (++links > 40) {
                lat_fail(ELOOP);
                return NULL;
            }
            ssize_t n = readlink(out, link, sizeof link - 1);
            if (n < 0)
                return NULL;
            link[n] = '\0';
            /* new rest = target + remaining */
            size_t remain = strlen(p);
            if ((size_t)n + 1 + remain + 1 > sizeof rest) {
                lat_fail(ENAMETOOLONG);
                return NULL;
            }
            memmove(rest + n + 1, p, remain + 1);
            memcpy(rest, link, (size_t)n);
            rest[n] = '/';
            p = rest;
            olen = link[0] == '/' ? 0 : before;
            continue;
        }
        while (*p == '/')
            p++;
        if (*p && !S_ISDIR(st.st_mode)) {
            lat_fail(ENOTDIR);
            return NULL;
        }
    }
    if (olen == 0)
        out[olen++] = '/';
    out[olen] = '\0';
    if (!resolved) {
        char *m = strdup(out);
        if (!m)
            lat_fail(ENOMEM);
        return m;
    }
    memcpy(resolved, out, olen + 1);
    return resolved;
}

char *realpath(const char *path, char *resolved)
{
    int rd;
    if (!path) {
        lat_fail(EINVAL);
        return NULL;
    }
    if (!path[0]) {
        lat_fail(ENOENT);
        return NULL;
    }
    switch (lat_path_route(AT_FDCWD, path, &rd)) {
    case LAT_SHIP:
        return ship_realpath(path, resolved);
    case LAT_LOCAL:
        return REAL(realpath)(path, resolved);
    default:
        return NULL;
    }
}

char *canonicalize_file_name(const char *path) { return realpath(path, NULL); }

char *__realpath_chk(const char *path, char *resolved, size_t resolvedlen)
{
    if (resolvedlen < PATH_MAX)
        __chk_fail();
    return realpath(path, resolved);
}

/* ---- temporary files: glibc's mkstemp uses its internal open ---- */

static int fill_x(char *x)
{
    static const char set[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    unsigned char r[6];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
        return -1;
    for (int i = 0; i < 6; i++)
        x[i] = set[r[i] % (sizeof set - 1)];
    return 0;
}

/* dir: make a directory instead of a file */
static int make_temp(char *tmpl, int suffixlen, int flags, int dir)
{
    size_t len = strlen(tmpl);
    if (suffixlen < 0 || len < 6 + (size_t)suffixlen ||
        memcmp(tmpl + len - suffixlen - 6, "XXXXXX", 6) != 0)
        return lat_fail(EINVAL);
    char *x = tmpl + len - suffixlen - 6;
    for (int tries = 0; tries < 1000; tries++) {
        if (fill_x(x) < 0)
            return -1;
        int r = dir ? mkdir(tmpl, 0700)
                    : open(tmpl, (flags & ~O_ACCMODE) | O_RDWR | O_CREAT | O_EXCL, 0600);
        if (r >= 0 || errno != EEXIST)
            return r;
    }
    return lat_fail(EEXIST);
}

static int tmpl_local(const char *tmpl)
{
    int rd;
    return lat_path_route(AT_FDCWD, tmpl, &rd) != LAT_SHIP;
}

int mkostemps(char *t, int suffixlen, int flags)
{
    if (tmpl_local(t))
        return REAL(mkostemps)(t, suffixlen, flags);
    return make_temp(t, suffixlen, flags, 0);
}

int mkstemp(char *t) { return mkostemps(t, 0, 0); }
int mkstemp64(char *t) { return mkostemps(t, 0, 0); }
int mkostemp(char *t, int flags) { return mkostemps(t, 0, flags); }
int mkostemp64(char *t, int flags) { return mkostemps(t, 0, flags); }
int mkstemps(char *t, int suffixlen) { return mkostemps(t, suffixlen, 0); }
int mkstemps64(char *t, int suffixlen) { return mkostemps(t, suffixlen, 0); }
int mkostemps64(char *t, int suffixlen, int flags) { return mkostemps(t, suffixlen, flags); }

char *mkdtemp(char *t)
{
    if (tmpl_local(t))
        return REAL(mkdtemp)(t);
    return make_temp(t, 0, 0, 1) < 0 ? NULL : t;
}

/* ---- terminals ---- */

/* glibc's own terminal check cannot see through a placeholder: ours
 * (isatty, the core's ioctl) first. */
int ttyname_r(int fd, char *buf, size_t len)
{
    if (!isatty(fd))
        return errno;
    return REAL(ttyname_r)(fd, buf, len);
}

char *ttyname(int fd)
{
    return isatty(fd) ? REAL(ttyname)(fd) : NULL;
}
