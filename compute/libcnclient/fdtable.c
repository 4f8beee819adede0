/*
 * fdtable.c - libcnclient's view of the shipping core's descriptor table
 * (compute/shipc/fdtab.c): routes as LAT_LOCAL/LAT_SHIP/LAT_HIDE, and
 * installs that close the remote descriptor themselves and set errno, as
 * the interposers here expect.
 */
#include "shipc.h"

#include "client.h"

enum lat_route lat_fd_route(int fd, int *remote)
{
    if (!lat_active())
        return LAT_LOCAL;
    int r = shipc_fd_route(fd, remote);
    return r < 0 ? LAT_HIDE : r == SHIPC_SHIP ? LAT_SHIP : LAT_LOCAL;
}

int lat_fd_install_at(int remote, int cloexec, int fd)
{
    int old, r = shipc_fd_install_at(remote, cloexec, fd, &old);
    if (r < 0) {
        lat_ship_close(remote);
        return lat_fail(-r);
    }
    if (old >= 0)
        lat_ship_close(old);
    return fd;
}

/* The connection and the seq page are the client's own; descriptors
 * 0, 1, 2 stand for the rank's remote ones. */
void lat_fd_init(int conn, int seq_fd)
{
    shipc_fd_setup(0);
    shipc_fd_hide(conn);
    if (seq_fd >= 0)
        shipc_fd_hide(seq_fd);
    shipc_fd_on_close(shipc_epoll_closed);
}
