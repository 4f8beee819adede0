/*
 * path.c - which paths stay on the compute node.
 *
 * The one rule table: paths under these prefixes describe or belong to the
 * compute node itself (its processes, devices, kernel) and are used locally.
 * Every other path, relative paths included, is shipped to the I/O node:
 * the working directory lives there, as on Blue Gene/L.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>

#include "client.h"

static const char *const local_prefixes[] = {
    "/proc",        /* this node's processes */
    "/sys",         /* this node's kernel and hardware */
    "/dev/shm",     /* memory shared by the processes of this node */
    "/dev/fd",      /* this process's own descriptors */
    "/dev/stdin",
    "/dev/stdout",
    "/dev/stderr",
};
/* Other devices (/dev/null, /dev/zero, /dev/urandom) are the I/O node's,
 * as on Blue Gene/L, where CIOD served them. */

/* Lexically normalise an absolute path ("//", ".", "..") so that
 * "/tmp/../proc/x" and "//proc" are judged by where they point. */
static size_t normalise(const char *path, char *out, size_t cap)
{
    size_t n = 0;
    const char *p = path;
    while (*p) {
        while (*p == '/')
            p++;
        const char *c = p;
        while (*p && *p != '/')
            p++;
        size_t len = (size_t)(p - c);
        if (len == 0 || (len == 1 && c[0] == '.'))
            continue;
        if (len == 2 && c[0] == '.' && c[1] == '.') {
            while (n > 0 && out[n - 1] != '/')
                n--;
            if (n > 0)
                n--;
            continue;
        }
        if (n + 1 + len + 1 > cap)
            break;
        out[n++] = '/';
        memcpy(out + n, c, len);
        n += len;
    }
    if (n == 0)
        out[n++] = '/';
    out[n] = '\0';
    return n;
}

int lat_path_is_local(const char *path)
{
    if (path[0] != '/')
        return 0;
    char norm[LAT_MAX_PATH];
    normalise(path, norm, sizeof norm);
    for (size_t i = 0; i < sizeof local_prefixes / sizeof local_prefixes[0]; i++) {
        size_t len = strlen(local_prefixes[i]);
        if (strncmp(norm, local_prefixes[i], len) == 0 && (norm[len] == '/' || norm[len] == '\0'))
            return 1;
    }
    return 0;
}

int lat_path_route(int dirfd, const char *path, int *rdirfd)
{
    if (!lat_active() || !path)
        return LAT_LOCAL;  /* NULL: libc reports EFAULT */
    if (strnlen(path, LAT_MAX_PATH) >= LAT_MAX_PATH)
        return lat_fail(ENAMETOOLONG);
    if (path[0] == '/') {
        if (lat_path_is_local(path))
            return LAT_LOCAL;
        *rdirfd = LAT_AT_FDCWD;  /* dirfd is ignored for absolute paths */
        return LAT_SHIP;
    }
    if (dirfd == AT_FDCWD) {
        *rdirfd = LAT_AT_FDCWD;
        return LAT_SHIP;
    }
    int remote;
    switch (lat_fd_route(dirfd, &remote)) {
    case LAT_SHIP:
        *rdirfd = remote;
        return LAT_SHIP;
    case LAT_HIDE:
        return lat_fail(EBADF);
    case LAT_LOCAL:
        break;
    }
    return LAT_LOCAL;
}

int lat_is_null(const void *p)
{
    return p == NULL;
}
