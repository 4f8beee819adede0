/*
 * tree.c - the connections of a job's PMI fence tree (docs/protocol.md
 * section 10): the I/O nodes that run ranks of a job form a k-ary tree
 * under the service node, so that no process sends a fence to more than k
 * others.  Each I/O node learns its place from LAT_CTL_PMI_TREE: the psets
 * below it and the address of the one above ("" : the service node).
 *
 * A child connects to its parent like any peer: the challenge, a
 * LAT_ROLE_TREE hello MACed with the block key (naming its pset and the
 * job), the parent's proof; both sides number what they send (3.2).  Up
 * goes one LAT_CTL_FENCE per fence with the subtree's keys, down the
 * LAT_CTL_FENCE_OUT.  Anything else on such a connection, a malformed
 * fence, or a connection that ends while a fence needs it, breaks the tree:
 * the I/O node that sees it tells the service node (LAT_CTL_TREE_FAIL),
 * which ends the job.  The state is pmi.c's (pmi_tree_*).
 */
#include "ciod.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <lattice/peer.h>

#define TREE_CONNECT_S   5.0         /* the parent is booted; retried only while it is not listening */
#define TREE_HANDSHAKE_S 10          /* seconds the parent may take to answer our hello */
#define TREE_ADDR_MAX    256u        /* unix:/path or tcp:HOST:PORT */

static void set_timeouts(int fd, int seconds)
{
    struct timeval tv = { .tv_sec = seconds };

    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

struct uplink {
    struct conn *c;
    uint64_t     job;
    char         addr[TREE_ADDR_MAX];
};

/* Connects and says hello to the parent: a connection, or NULL (why set). */
static struct conn *connect_up(const char *addr, uint64_t job, char *why, size_t whylen)
{
    int fd = net_connect(addr, TREE_CONNECT_S);
    struct conn *c;

    if (fd < 0) {
        errprintf(why, whylen, "cannot reach the I/O node above at %s: %s", addr, strerror(errno));
        return NULL;
    }
    set_timeouts(fd, TREE_HANDSHAKE_S);
    if (net_hello(fd, LAT_ROLE_TREE, cfg.pset, job, cfg.key, 1) < 0) {
        errprintf(why, whylen, "the I/O node above at %s refused us: %s", addr,
                  errno == EBADMSG ? "it does not hold the block key" : strerror(errno));
        close(fd);
        return NULL;
    }
    set_timeouts(fd, 0);
    if (!(c = conn_new(fd))) {
        net_forget(fd);
        close(fd);
        errprintf(why, whylen, "out of memory");
        return NULL;
    }
    struct lat_seal_keys k;
    int sealed = net_seal_take(fd, &k);         /* a link between hosts: its session keys */
    int rc = sealed ? conn_seal(c, &k) : 0;
    lat_seal_wipe(&k, sizeof(k));
    if (rc < 0 || (c->tcp && !c->seal)) {
        conn_put(c);
        errprintf(why, whylen, "cannot seal the connection to the I/O node above");
        return NULL;
    }
    snprintf(c->peer, sizeof(c->peer), "%.95s", addr);
    c->seq_out = 1;                     /* the hello's */
    c->seq_seen = true;                 /* the parent numbers from 1 */
    c->seq_last = 0;
    return c;
}

/* The thread of the way up: connects to the parent (the control thread
 * that got LAT_CTL_PMI_TREE has answered meanwhile), then takes its
 * FENCE_OUTs until the connection ends. */
static void *uplink_thread(void *arg)
{
    struct uplink *u = arg;
    struct lat_hdr h;
    char why[CIOD_ERRLEN];
    int rc;

    pthread_setname_np(pthread_self(), "ciod-tree-up");
    u->c = connect_up(u->addr, u->job, why, sizeof(why));
    if (pmi_tree_up(u->job, u->c, why) != 0 || !u->c) {
        if (u->c)
            conn_hangup(u->c);
        conn_put(u->c);
        free(u);
        return NULL;                    /* the job ended meanwhile, or its fences break with why */
    }
    while ((rc = conn_recv(u->c, &h, why, sizeof(why))) > 0) {
        if (h.type != LAT_CTL_FENCE_OUT) {
            snprintf(why, sizeof(why), "message type 0x%04x from the I/O node above, not a FENCE_OUT", h.type);
            rc = -1;
            break;
        }
        if (pmi_fence_out(u->c->buf, h.len, why, sizeof(why)) < 0) {
            rc = -1;
            break;
        }
    }
    if (rc < 0)
        pmi_tree_fail(u->job, "from the I/O node above (%s): %s", u->c->peer, why);
    conn_hangup(u->c);
    pmi_tree_up_gone(u->job, u->c);
    conn_put(u->c);
    free(u);
    return NULL;
}

int tree_start(const char *p, size_t len, char *why, size_t whylen)
{
    struct lat_pmi_tree t;
    const uint32_t *pset;
    const char *parent;
    int err;

    *why = '\0';
    /* decode: every count against the payload */
    if (len < sizeof(t))
        return errprintf(why, whylen, "CTL_PMI_TREE of %zu bytes", len);
    memcpy(&t, p, sizeof(t));
    if (t.nchildren > (len - sizeof(t)) / sizeof(uint32_t))
        return errprintf(why, whylen, "CTL_PMI_TREE of %zu bytes cannot hold %u children", len, t.nchildren);
    pset = (const uint32_t *)(p + sizeof(t));
    parent = p + sizeof(t) + sizeof(uint32_t) * (size_t)t.nchildren;
    if (parent >= p + len || p[len - 1] != '\0' || strlen(parent) != (size_t)(p + len - parent) - 1)
        return errprintf(why, whylen, "CTL_PMI_TREE: the parent's address is not one NUL-terminated string");
    /* check: a refusal the service node turns into the job's end */
    if (*parent && (strlen(parent) >= TREE_ADDR_MAX || (strncmp(parent, "unix:/", 6) && strncmp(parent, "tcp:", 4))))
        return errprintf(why, whylen, "the parent's address %.80s is not unix:/PATH or tcp:HOST:PORT "
                         "(shorter than %u)", parent, TREE_ADDR_MAX), EINVAL;
    for (uint32_t i = 0; i < t.nchildren; i++) {
        if (pset[i] == cfg.pset)
            return errprintf(why, whylen, "pset %u cannot be its own child", pset[i]), EINVAL;
        for (uint32_t k = 0; k < i; k++)
            if (pset[k] == pset[i])
                return errprintf(why, whylen, "child pset %u given twice", pset[i]), EINVAL;
    }
    /* act: children first (they may be connecting already), then the way up */
    if ((err = pmi_tree_set(t.job, t.nchildren, pset, *parent != '\0', why, whylen)) != 0)
        return err;
    logmsg("job %" PRIu64 ": PMI tree: above %s, %u below", t.job, *parent ? parent : "the service node",
           t.nchildren);
    if (!*parent) {                     /* the service node is above: fences go up at once */
        if (pmi_tree_up(t.job, NULL, NULL) != 0)
            return errprintf(why, whylen, "job %" PRIu64 " ended meanwhile", t.job), ESRCH;
        return 0;
    }
    struct uplink *u = calloc(1, sizeof(*u));
    pthread_t th;
    if (!u)
        return errprintf(why, whylen, "out of memory"), ENOMEM;
    u->job = t.job;
    snprintf(u->addr, sizeof(u->addr), "%s", parent);
    if ((err = pthread_create(&th, NULL, uplink_thread, u)) != 0) {
        free(u);
        return errprintf(why, whylen, "cannot start the thread of the tree's connection: %s", strerror(err)), err;
    }
    pthread_detach(th);
    return 0;
}

void tree_serve_child(struct conn *c, const struct lat_hello *hello, uint32_t seq)
{
    struct lat_hdr h;
    char why[CIOD_ERRLEN] = "cannot answer its hello";
    uint32_t child = 0;
    int rc;

    if (pmi_tree_child_attach(hello->job, hello->node, c, &child) != 0) {
        ras_event(RAS_WARNING, cfg.location, "PMI tree connection from %s for pset %u of job %" PRIu64
                  " refused: not an I/O node below this one in that job, or connected already", c->peer,
                  hello->node, hello->job);
        hello_ack(c, seq, EACCES);
        return;
    }
    pthread_setname_np(pthread_self(), "ciod-tree-down");
    logmsg("job %" PRIu64 ": PMI tree: pset %u below connected from %s", hello->job, hello->node, c->peer);
    rc = hello_ack(c, seq, 0);
    while (rc == 0 && (rc = conn_recv(c, &h, why, sizeof(why))) > 0) {
        rc = 0;
        if (h.type != LAT_CTL_FENCE) {
            snprintf(why, sizeof(why), "message type 0x%04x, not a fence", h.type);
            rc = -1;
        } else {
            rc = pmi_tree_child_fence(hello->job, child, c->buf, h.len, why, sizeof(why));
        }
    }
    if (rc < 0)
        pmi_tree_fail(hello->job, "from the I/O node of pset %u below (%s): %s", hello->node, c->peer, why);
    conn_hangup(c);
    pmi_tree_child_gone(hello->job, child, c);
}
