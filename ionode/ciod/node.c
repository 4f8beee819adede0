/*
 * node.c - the connection of one compute node supervisor (cnode).
 *
 * ciod pushes jobs down this connection (control.c); what comes up is the
 * output and exit of each process of the node, forwarded to the job's owner
 * with the rank checked, and the processes' PMI traffic (pmi.c).  When the connection drops, the node is gone: job.c
 * reports the rank it ran as LOST.
 */
#include "ciod.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

struct node_ctx {
    struct conn *c;
    uint32_t     node;
    char         loc[128];
};

typedef int (*node_fn)(struct node_ctx *n, const struct lat_hdr *h, char *why, size_t whylen);

static int on_output(struct node_ctx *n, const struct lat_hdr *h, char *why, size_t whylen)
{
    struct lat_output o;

    if (h->len < sizeof(o))
        return errprintf(why, whylen, "NODE_OUTPUT of %u bytes", h->len);
    memcpy(&o, n->c->buf, sizeof(o));
    if (o.stream != LAT_STDOUT && o.stream != LAT_STDERR)
        return errprintf(why, whylen, "NODE_OUTPUT for stream %u", o.stream);
    job_output(n->node, o.rank, o.stream, n->c->buf + sizeof(o), h->len - sizeof(o));
    return 0;
}

/* A rank's PMI bytes: the pset's PMI proxy (pmi.c) answers on this connection. */
static int on_pmi(struct node_ctx *n, const struct lat_hdr *h, char *why, size_t whylen)
{
    struct lat_pmi m;

    if (h->len < sizeof(m))
        return errprintf(why, whylen, "NODE_PMI of %u bytes", h->len);
    memcpy(&m, n->c->buf, sizeof(m));
    if (h->len > sizeof(m))
        pmi_input(n->node, n->c, m.rank, n->c->buf + sizeof(m), h->len - sizeof(m));
    return 0;
}

static int on_exit_msg(struct node_ctx *n, const struct lat_hdr *h, char *why, size_t whylen)
{
    struct lat_exit ex;

    if (h->len < sizeof(ex))
        return errprintf(why, whylen, "NODE_EXIT of %u bytes", h->len);
    memcpy(&ex, n->c->buf, sizeof(ex));
    if (ex.how < LAT_EXIT_CODE || ex.how > LAT_EXIT_LAUNCH)
        return errprintf(why, whylen, "NODE_EXIT with how=%u", ex.how);
    job_rank_exit(n->node, &ex, n->c->buf + sizeof(ex), h->len - sizeof(ex));
    return 0;
}

static const struct {
    uint16_t    type;
    node_fn     fn;
} handlers[] = {
    { LAT_NODE_OUTPUT, on_output },
    { LAT_NODE_EXIT, on_exit_msg },
    { LAT_NODE_PMI, on_pmi },
};

void node_serve(struct conn *c, uint32_t node, uint32_t seq)
{
    struct node_ctx n = { .c = c, .node = node };
    struct lat_hdr h;
    char why[CIOD_ERRLEN], name[16];
    int err, rc;

    if (node >= cfg.pset_size) {
        ras_event(RAS_WARNING, cfg.location, "node hello from %s for node %u: pset has %u nodes",
                  c->peer, node, cfg.pset_size);
        hello_ack(c, seq, EPROTO);
        return;
    }
    node_location(node, n.loc, sizeof(n.loc));
    err = node_attach(node, c);
    if (err) {
        ras_event(RAS_WARNING, n.loc, "second connection for compute node %s from %s refused",
                  n.loc, c->peer);
        hello_ack(c, seq, err);
        return;
    }
    snprintf(name, sizeof(name), "ciod-node%u", node & 0xffff);
    pthread_setname_np(pthread_self(), name);
    logmsg("compute node %s (node %u) connected from %s", n.loc, node, c->peer);
    if (hello_ack(c, seq, 0) < 0)
        goto out;

    while ((rc = conn_recv(c, &h, why, sizeof(why))) > 0) {
        node_fn fn = NULL;
        for (size_t i = 0; i < sizeof(handlers) / sizeof(handlers[0]); i++)
            if (handlers[i].type == h.type)
                fn = handlers[i].fn;
        if (!fn) {
            reply_error(c, h.seq, ENOSYS, "message type 0x%04x is not served on a node connection",
                        h.type);
            continue;
        }
        if (fn(&n, &h, why, sizeof(why)) < 0) {
            rc = -1;
            break;
        }
    }
    if (rc < 0)
        ras_event(RAS_WARNING, n.loc, "compute node %s sent a bad message: %s; closing", n.loc, why);
out:
    node_detach(node, c);
}
