/*
 * net.c - messages from ciod (the connection itself, its handshake and what
 * we send: protocol/peer/peer.c, shared with ciod).
 */
#include <errno.h>
#include <stdlib.h>

#include "cnode.h"

int net_recv(int fd, struct msg *m)
{
    if (!m->p && !(m->p = malloc(LAT_MAX_PAYLOAD)))
        return -1;
    return net_recv_frame(fd, &m->h, m->p, 1);     /* opened if the link is sealed */
}
