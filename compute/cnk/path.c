/*
 * path.c - routing a (dirfd, name) pair: the rule itself is the shipping
 * core's (compute/shipc/path.c).
 */
#include <linux/errno.h>
#include <linux/fcntl.h>

#include <lattice/wire.h>

#include "cnk.h"

int path_route(int dirfd, const char *path, int *rdirfd)
{
    if (!path)
        return ROUTE_LOCAL;         /* the kernel answers EFAULT */
    if (strnlen(path, LAT_MAX_PATH) >= LAT_MAX_PATH)
        return -ENAMETOOLONG;
    if (path[0] == '/') {
        if (shipc_path_is_local(path))
            return ROUTE_LOCAL;
        *rdirfd = LAT_AT_FDCWD;     /* dirfd is ignored for absolute names */
        return ROUTE_SHIP;
    }
    if (dirfd == AT_FDCWD) {
        *rdirfd = LAT_AT_FDCWD;     /* the cwd is the I/O node's */
        return ROUTE_SHIP;
    }
    return fd_route(dirfd, rdirfd);
}
