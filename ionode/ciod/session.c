/*
 * session.c - the thread of one connection: authenticate the hello, then
 * serve the role it asked for until the peer hangs up or misbehaves.
 */
#include "ciod.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>

#define HELLO_TIMEOUT 30                /* seconds a new connection may stay silent */

static void set_timeout(struct conn *c, int seconds)
{
    struct timeval tv = { .tv_sec = seconds };
    setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

static void refuse(struct conn *c, uint32_t seq, int err, const char *why)
{
    ras_event(RAS_WARNING, cfg.location, "connection from %s refused: %s", c->peer, why);
    hello_ack(c, seq, err);
}

/* The thread of a connection admitted by admit_new: until its hello is
 * accepted, what it causes is an untrusted peer's (RAS events folded). */
void *session_thread(void *arg)
{
    struct conn *c = conn_get(arg);     /* session_main puts the thread's reference */

    ras_thread_peer(c->who);
    session_main(c);
    admit_end(c);
    conn_put(c);
    return NULL;
}

void *session_main(void *arg)
{
    struct conn *c = arg;
    struct lat_hdr h = { 0 };
    struct lat_hello hello;
    struct lat_hello_proc hp;
    bool has_hp;
    char why[CIOD_ERRLEN];
    int rc;

    pthread_setname_np(pthread_self(), "ciod-hello");
    const char *t = getenv("LATTICE_HELLO_TIMEOUT");     /* tests shorten it */
    int hello_s = t && atoi(t) > 0 ? atoi(t) : HELLO_TIMEOUT;
    set_timeout(c, hello_s);
    if (auth_challenge(c) < 0) {
        /* a peer that connected and left at once (a probe) is no news, as
         * when it leaves after the challenge: a line per probe would let
         * anyone who may connect flood the daemon's log */
        if (errno != EPIPE && errno != ECONNRESET && errno != ENOTCONN)
            logmsg("connection from %s: cannot send the challenge: %s", c->peer, strerror(errno));
        goto out;
    }
    rc = conn_recv(c, &h, why, sizeof(why));
    if (rc == 0 || (rc < 0 && errno == ECONNRESET && c->ra_len == 0))
        goto out;                       /* connected and left, its challenge unread (a reset): a probe */
    if (rc < 0) {
        if (h.magic == LAT_MAGIC && h.version != LAT_VERSION)
            refuse(c, h.seq, EPROTO, why);
        else if (errno == EAGAIN || errno == EWOULDBLOCK)      /* the deadline: say which */
            ras_event(RAS_WARNING, cfg.location, "connection from %s closed: no hello within %d s",
                      c->peer, hello_s);
        else
            ras_event(RAS_WARNING, cfg.location, "connection from %s closed: %s", c->peer, why);
        goto out;
    }
    /* a PROC hello may carry lat_hello_proc (the data path, section 3.1) */
    has_hp = h.len == sizeof(hello) + sizeof(hp);
    if (h.type != LAT_HELLO || (h.len != sizeof(hello) && !has_hp)) {
        snprintf(why, sizeof(why), "first message is type 0x%04x with %u bytes, not a hello",
                 h.type, h.len);
        refuse(c, h.seq, EPROTO, why);
        goto out;
    }
    memcpy(&hello, c->buf, sizeof(hello));
    if (has_hp)
        memcpy(&hp, c->buf + sizeof(hello), sizeof(hp));
    if (!auth_hello_ok(c, &hello, has_hp ? &hp : NULL)) {
        refuse(c, h.seq, EACCES, "the hello's mac is wrong (not the block key, or replayed)");
        goto out;
    }
    if (!admit_hello_done(c, hello.role))
        goto out;                       /* evicted while its hello was read */
    set_timeout(c, 0);
    switch (hello.role) {
    case LAT_ROLE_CONTROL:
        pthread_setname_np(pthread_self(), "ciod-control");
        if (hello_ack(c, h.seq, 0) == 0)
            control_serve(c);
        break;
    case LAT_ROLE_NODE:
        node_serve(c, hello.node, h.seq);
        break;
    case LAT_ROLE_PROC:                 /* served by the job's worker, as its owner */
        if (worker_take_proc(c, &hello, has_hp ? &hp : NULL, h.seq)) {
            conn_put(c);                /* the worker has the socket now: no hang-up */
            return NULL;
        }
        break;
    case LAT_ROLE_PMI:
        /* raw PMI text after the hello is not framed, so it cannot be
         * sealed: between hosts PMI rides the (sealed) node connection */
        if (c->tcp) {
            refuse(c, h.seq, EPROTO, "a PMI connection from another host (PMI between hosts "
                   "travels on the node connection)");
            break;
        }
        pmi_serve(c, &hello, h.seq);
        break;
    case LAT_ROLE_TREE:                 /* an I/O node below this one in a job's PMI fence tree */
        tree_serve_child(c, &hello, h.seq);
        break;
    default:
        snprintf(why, sizeof(why), "unknown role %u", hello.role);
        refuse(c, h.seq, EPROTO, why);
        break;
    }
out:
    conn_hangup(c);
    conn_put(c);
    return NULL;
}
