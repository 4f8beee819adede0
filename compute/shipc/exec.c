/*
 * exec.c - files for the kernel itself rather than the program's calls:
 * the loader's and file-backed mappings' open/pread/close of a program
 * descriptor wherever it lives, and execve's checks and close-on-exec of
 * shipped descriptors.
 */
#include <linux/stat.h>
#include <linux/fcntl.h>

#include <lattice/fwd_posix.h>

#include "internal.h"

/* ---- for the loader and file-backed mappings ---- */

long shipc_open(const char *path, int flags)
{
    int rd;
    int rt = shipc_path_route(AT_FDCWD, path, &rd);

    if (rt < 0)
        return rt;
    if (rt == SHIPC_LOCAL)
        return ksys4(__NR_openat, AT_FDCWD, path, flags, 0);
    return shipc_open_ship(rd, path, flags, 0);
}

/* Up to len bytes at off; short only at end of file. */
long shipc_pread(int fd, void *buf, size_t len, int64_t off)
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

long shipc_close(int fd)
{
    int r;
    int rt = shipc_fd_route(fd, &r);

    if (rt < 0)
        return rt;
    if (rt == SHIPC_LOCAL)
        return ksys1(__NR_close, fd);
    return shipc_fd_release(fd);
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
    ret = rt == SHIPC_SHIP ? shipc_fstatat_ship(r, "", AT_EMPTY_PATH, &k) : ksys2(__NR_fstat, fd, &k);
    if (ret < 0)
        return ret;
    if ((k.mode & S_IFMT) != S_IFREG || (by_mode && !(k.mode & 0111)))
        return -EACCES;
    return 0;
}

long shipc_exec_open(int dirfd, const char *path, int flags, int *owned)
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
            r = shipc_open_ship(rd, path, O_RDONLY | O_CLOEXEC | nofollow, 0);
    }
    if (r < 0)
        return r;
    long ok = exec_fd_ok((int)r, 0);
    if (ok < 0) {
        shipc_close((int)r);
        return ok;
    }
    *owned = 1;
    return r;
}

void shipc_exec_cloexec(void)
{
    for (int fd = shipc_fd_next_shipped(0, ~0u); fd >= 0; fd = shipc_fd_next_shipped((unsigned)fd + 1, ~0u))
        if (shipc_fd_cloexec(fd))
            shipc_fd_release(fd);
}
