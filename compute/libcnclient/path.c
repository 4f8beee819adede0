/*
 * path.c - routing a (dirfd, path) pair; the rule deciding which paths stay
 * on the compute node is the shipping core's (compute/shipc/path.c).
 */
#include "client.h"

int lat_path_route(int dirfd, const char *path, int *rdirfd)
{
    if (!lat_active())
        return LAT_LOCAL;
    int r = shipc_path_route(dirfd, path, rdirfd);  /* NULL: local, libc reports EFAULT */
    if (r < 0)
        return lat_fail(-r);
    return r == SHIPC_SHIP ? LAT_SHIP : LAT_LOCAL;
}

int lat_is_null(const void *p)
{
    return p == NULL;
}
