/*
 * net.c - messages from ciod (the connection itself, its handshake and what
 * we send: protocol/peer/peer.c, shared with ciod).
 */
#include <errno.h>
#include <stdlib.h>

#include "cnode.h"

int net_recv(int fd, struct msg *m)
{
    int r = net_read_full(fd, &m->h, sizeof m->h, 1);
    if (r <= 0)
        return r;
    if (m->h.magic != LAT_MAGIC || m->h.version != LAT_VERSION || m->h.len > LAT_MAX_PAYLOAD) {
        errno = EPROTO;
        return -1;
    }
    if (!m->p && !(m->p = malloc(LAT_MAX_PAYLOAD)))
        return -1;
    if (m->h.len && net_read_full(fd, m->p, m->h.len, 0) < 0)
        return -1;
    return 1;
}

