/*
 * path.c - routing a (dirfd, path) pair; the rule deciding which paths stay
 * on the compute node is the shipping core's (compute/shipc/path.c).
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>

#include "shipc.h"

#include "client.h"

int lat_path_route(int dirfd, const char *path, int *rdirfd)
{
    if (!lat_active() || !path)
        return LAT_LOCAL;  /* NULL: libc reports EFAULT */
    if (strnlen(path, LAT_MAX_PATH) >= LAT_MAX_PATH)
        return lat_fail(ENAMETOOLONG);
    if (path[0] == '/') {
        if (shipc_path_is_local(path))
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
