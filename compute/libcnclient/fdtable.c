/*
 * fdtable.c - libcnclient's view of the shipping core's descriptor table
 * (compute/shipc/fdtab.c): routes as LAT_LOCAL/LAT_SHIP/LAT_HIDE for the
 * interposers that are not a system call of their own (DIR and FILE
 * streams, xattrs), and the table's start.
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
