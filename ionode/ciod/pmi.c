/*
 * pmi.c - the connection side of the pset's PMI proxy (docs/protocol.md
 * section 10): which bytes of which process go to the running job's PMI
 * engine (pmi_engine.c, which frames, parses and answers them and counts the
 * fence), and where what it answers goes.
 *
 * A process's PMI bytes come one of two ways: relayed by its cnode
 * (LAT_NODE_PMI, answered with LAT_NODE_PMI_REPLY), or, when its cnode could
 * open one, over a PMI connection of its own to ciod (LAT_ROLE_PMI: the
 * descriptor the process got as PMI_FD), raw in both directions.  The
 * second saves two hops per request: under MPICH every rank is its own node,
 * so each fetches every other rank's business card, N^2 gets per job.  A
 * fence goes up to the job's owner as LAT_CTL_FENCE, an abort as
 * LAT_CTL_ABORT; LAT_CTL_FENCE_OUT comes back (control.c).
 *
 * The engine is under `P.lock`, never held while writing to a socket: its
 * callbacks collect what it produces in a batch, sent after unlocking.
 */
#include "ciod.h"
#include "pmi_engine.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

static struct {
    pthread_mutex_t    lock;
    uint64_t           job;         /* 0: no job */
    struct pmi_engine *e;
    uint32_t           nslots;
    struct conn      **direct;      /* [nslots]: a process's own PMI connection (a reference), or NULL: relayed */
    pthread_cond_t     gone;        /* a process's own PMI connection ended */
} P = { .lock = PTHREAD_MUTEX_INITIALIZER, .gone = PTHREAD_COND_INITIALIZER };

/* How long an exit waits for the rest of the process's own PMI connection
 * (its last bytes, e.g. an abort, then EOF): only a descriptor the process
 * handed on to a survivor keeps it open this long. */
#define DIRECT_DRAIN_MS 2000

/* ---- the batch: what the engine produced, to send once the lock is dropped ---- */

struct out {
    struct out *next;
    struct conn *direct;            /* the process's PMI connection (a reference), or NULL */
    uint32_t    node, rank;
    size_t      len;
    char        data[];
};

struct batch {
    struct out *head, **tail;       /* answers */
    char       *fence;              /* LAT_CTL_FENCE payloads back to back, or NULL */
    size_t      fence_len[PMI_FENCE_CHUNKS];
    int         nfence;
    struct lat_name name;           /* a name request to the service node, if name.op */
    char       *name_strs;          /* its service \0 port \0 */
    size_t      name_len;
    bool        aborted;
    struct pmi_dest who;
    int         code;
    char        msg[LAT_PMI_VAL_MAX + 1];
};

static void batch_init(struct batch *b)
{
    memset(b, 0, sizeof(*b));
    b->tail = &b->head;
}

static void on_answer(void *ctx, const struct pmi_dest *to, const char *data, size_t len)
{
    struct batch *b = ctx;
    struct out *e = malloc(sizeof(*e) + len);

    if (!e) {
        logmsg("pmi: out of memory for a reply to rank %u", to->rank);
        return;
    }
    e->next = NULL;
    e->direct = conn_get(P.direct[to->slot]);
    e->node = to->node;
    e->rank = to->rank;
    e->len = len;
    memcpy(e->data, data, len);
    *b->tail = e;
    b->tail = &e->next;
}

static void on_fence(void *ctx, const char *msg, const size_t *len, int n)
{
    struct batch *b = ctx;
    size_t total = 0;

    for (int i = 0; i < n; i++)
        total += len[i];
    if (!(b->fence = malloc(total))) {
        logmsg("pmi: out of memory for the fence of job %" PRIu64, P.job);
        return;
    }
    memcpy(b->fence, msg, total);
    memcpy(b->fence_len, len, n * sizeof(*len));
    b->nfence = n;
}

static void on_abort(void *ctx, const struct pmi_dest *who, int code, const char *msg)
{
    struct batch *b = ctx;          /* one at most: the engine stops at an abort */

    b->aborted = true;
    b->who = *who;
    b->code = code;
    snprintf(b->msg, sizeof(b->msg), "%s", msg);
}

static void on_name(void *ctx, const struct pmi_dest *who, int op, const char *service, const char *port)
{
    struct batch *b = ctx;          /* one at most: the process waits for the answer */
    size_t sl = strlen(service) + 1, pl = strlen(port) + 1;

    if (!(b->name_strs = malloc(sl + pl))) {
        logmsg("pmi: out of memory for a name request of rank %u", who->rank);
        return;
    }
    memcpy(b->name_strs, service, sl);
    memcpy(b->name_strs + sl, port, pl);
    b->name_len = sl + pl;
    b->name = (struct lat_name){ .job = P.job, .rank = who->rank, .op = (uint32_t)op };
}

static void on_bad_request(void *ctx, const struct pmi_dest *who, const char *text)
{
    char loc[128];

    (void)ctx;
    node_location(who->node, loc, sizeof(loc));
    ras_event(RAS_WARNING, loc, "job %" PRIu64 " rank %u: bad PMI request: %s", P.job, who->rank, text);
}

static void on_note(void *ctx, const char *text)
{
    (void)ctx;
    logmsg("%s", text);
}

static const struct pmi_ops ops = {
    .answer = on_answer,
    .fence = on_fence,
    .name = on_name,
    .abort = on_abort,
    .bad_request = on_bad_request,
    .note = on_note,
};

/* Raw bytes to a process's own PMI connection; a process that went away just loses them. */
static void send_direct(struct conn *c, const char *data, size_t len)
{
    pthread_mutex_lock(&c->wlock);
    while (len) {
        ssize_t n = send(c->fd, data, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        data += n;
        len -= (size_t)n;
    }
    pthread_mutex_unlock(&c->wlock);
}

/* Whether some answer goes through a node connection (not a process's own). */
static bool batch_relayed(const struct batch *b)
{
    for (const struct out *e = b->head; e; e = e->next)
        if (!e->direct)
            return true;
    return false;
}

/* The fence's chunks to the job's owner, kept together. */
static void send_fence(uint64_t job, const struct batch *b)
{
    struct conn *ctl = job_owner(job);
    size_t w = 0;

    if (!ctl)
        return;
    pthread_mutex_lock(&ctl->wlock);
    for (int i = 0; i < b->nfence; i++) {
        struct iovec v = { b->fence + w, b->fence_len[i] };
        conn_sendv_locked(ctl, LAT_CTL_FENCE, 0, &v, 1);
        w += b->fence_len[i];
    }
    pthread_mutex_unlock(&ctl->wlock);
    conn_put(ctl);
}

/* abort: no reply; the service node ends the job. */
static void send_abort(uint64_t job, const struct batch *b)
{
    struct lat_abort a = { .job = job, .rank = b->who.rank, .code = b->code };
    char loc[128];
    struct conn *ctl = job_owner(job);

    node_location(b->who.node, loc, sizeof(loc));
    ras_event(RAS_ERROR, loc, "job %" PRIu64 " rank %u called PMI abort with code %d: %s", job, b->who.rank,
              b->code, *b->msg ? b->msg : "(no message)");
    if (ctl) {
        struct iovec v[2] = { { &a, sizeof(a) }, { (void *)b->msg, strlen(b->msg) } };
        conn_sendv(ctl, LAT_CTL_ABORT, 0, v, 2);
        conn_put(ctl);
    }
}

/* Sends the batch: each answer over the process's own PMI connection, else
 * relayed through its node's connection (nc for node `node` if given, else
 * the job's); then the fence, then the abort. */
static void batch_send(struct batch *b, uint64_t job, uint32_t node, struct conn *nc)
{
    struct conn *nodes[LAT_MAX_PSET] = { 0 };
    bool held = false;

    if (nc)
        nodes[node] = nc;
    else if ((held = batch_relayed(b)))
        job_nodes(nodes, false, NULL);
    for (struct out *e = b->head, *n; e; e = n) {
        n = e->next;
        struct conn *c = e->node < LAT_MAX_PSET ? nodes[e->node] : NULL;
        struct lat_pmi h = { .rank = e->rank };
        struct iovec v[2] = { { &h, sizeof(h) }, { e->data, e->len } };
        if (e->direct)
            send_direct(e->direct, e->data, e->len);
        else if (c)
            conn_sendv(c, LAT_NODE_PMI_REPLY, 0, v, 2);
        conn_put(e->direct);
        free(e);
    }
    for (uint32_t i = 0; held && i < cfg.pset_size; i++)
        conn_put(nodes[i]);
    if (b->fence)
        send_fence(job, b);
    free(b->fence);
    if (b->name.op) {
        struct conn *ctl = job_owner(job);
        struct iovec v[2] = { { &b->name, sizeof(b->name) }, { b->name_strs, b->name_len } };
        if (ctl) {
            conn_sendv(ctl, LAT_CTL_NAME, 0, v, 2);
            conn_put(ctl);
        }
    }
    free(b->name_strs);
    if (b->aborted)
        send_abort(job, b);
    batch_init(b);
}

/* ---- the entry points ---- */

/* The running job's slot of rank, if it runs on node (node -1: anywhere); -1 if none. */
static int slot_of(uint32_t rank, uint32_t node)
{
    uint32_t where;
    int slot = P.e ? pmi_engine_slot(P.e, rank, &where) : -1;

    return slot >= 0 && (node == UINT32_MAX || where == node) ? slot : -1;
}

void pmi_input(uint32_t node, struct conn *nc, uint32_t rank, const char *data, size_t len)
{
    struct batch b;
    char loc[128];
    uint64_t job;

    batch_init(&b);
    pthread_mutex_lock(&P.lock);
    job = P.job;
    int slot = slot_of(rank, node);
    if (slot < 0) {
        pthread_mutex_unlock(&P.lock);
        node_location(node, loc, sizeof(loc));
        ras_event(RAS_WARNING, loc, "PMI data for rank %u, which does not run on node %u: ignored", rank, node);
        return;
    }
    pmi_engine_input(P.e, (uint32_t)slot, data, len, &b);
    pthread_mutex_unlock(&P.lock);
    batch_send(&b, job, node, nc);
}

/* A process's own PMI connection (LAT_ROLE_PMI): the hello names its node,
 * its index t there (bits 16..31 of hello->node) and the job; the rank is
 * what the job placed there.  Then raw PMI until the process closes it. */
void pmi_serve(struct conn *c, const struct lat_hello *hello, uint32_t seq)
{
    uint32_t node = hello->node & 0xffff, t = hello->node >> 16;
    char buf[16384];
    int32_t rank = -1;
    struct conn *drop = NULL;
    bool ok = false;
    int slot;

    if (node < cfg.pset_size && job_proc_rank(node, t, hello->job, &rank) == 0) {
        pthread_mutex_lock(&P.lock);
        slot = P.job == hello->job ? slot_of((uint32_t)rank, node) : -1;
        if ((ok = slot >= 0 && !P.direct[slot]))
            P.direct[slot] = conn_get(c);
        pthread_mutex_unlock(&P.lock);
    }
    if (!ok) {
        ras_event(RAS_WARNING, cfg.location, "PMI connection from %s for node %u process %u of job %" PRIu64
                  " refused: no such process, or it has one", c->peer, node, t, hello->job);
        hello_ack(c, seq, EACCES);
        return;
    }
    pthread_setname_np(pthread_self(), "ciod-pmi");
    if (hello_ack(c, seq, 0) == 0) {
        for (;;) {
            ssize_t n = recv(c->fd, buf, sizeof(buf), 0);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;
            pmi_input(node, NULL, (uint32_t)rank, buf, (size_t)n);
        }
    }
    pthread_mutex_lock(&P.lock);
    slot = P.job == hello->job ? slot_of((uint32_t)rank, UINT32_MAX) : -1;
    if (slot >= 0 && P.direct[slot] == c) {
        P.direct[slot] = NULL;
        drop = c;
    }
    pthread_cond_broadcast(&P.gone);
    pthread_mutex_unlock(&P.lock);
    conn_put(drop);
}

/* A rank ended: the engine judges whether it left MPI without finalize (and
 * so aborts the job). */
void pmi_rank_exit(uint32_t rank, int status)
{
    struct batch b;
    struct timespec until;

    batch_init(&b);
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += DIRECT_DRAIN_MS / 1000;
    pthread_mutex_lock(&P.lock);
    uint64_t job = P.job;
    int slot = job ? slot_of(rank, UINT32_MAX) : -1;
    /* Its own PMI connection is not ordered with the node's exit report: let
     * its last requests (a finalize, an abort) be served first.  The process
     * is gone, so the connection ends as soon as they are read. */
    while (slot >= 0 && P.direct[slot] && pthread_cond_timedwait(&P.gone, &P.lock, &until) == 0)
        slot = P.job == job ? slot_of(rank, UINT32_MAX) : -1;
    if (slot >= 0)
        pmi_engine_exit(P.e, (uint32_t)slot, status, &b);
    pthread_mutex_unlock(&P.lock);
    batch_send(&b, job, 0, NULL);
}

/* LAT_CTL_FENCE_OUT: publish, then release the pset. */
int pmi_fence_out(const char *p, size_t len, char *why, size_t whylen)
{
    struct lat_fence f;
    struct batch b;
    uint64_t job;
    bool matched;

    if (pmi_fence_check(p, len, why, whylen) < 0)
        return -1;
    memcpy(&f, p, sizeof(f));
    batch_init(&b);
    pthread_mutex_lock(&P.lock);
    job = P.job;
    matched = P.e && pmi_engine_fence_out(P.e, p, &b);
    pthread_mutex_unlock(&P.lock);
    if (!matched) {
        ras_event(RAS_WARNING, cfg.location, "fence %u of job %" PRIu64 " from the service node does not "
                  "match a fence waiting here: ignored", f.epoch, f.job);
        return 0;
    }
    batch_send(&b, job, 0, NULL);
    return 0;
}

static void clear_locked(void)
{
    for (uint32_t i = 0; P.direct && i < P.nslots; i++)
        conn_put(P.direct[i]);
    free(P.direct);
    pmi_engine_free(P.e);
    P.direct = NULL;
    P.e = NULL;
    P.job = 0;
    P.nslots = 0;
}

int pmi_job_start(const struct job_spec *js, char *why, size_t whylen)
{
    struct pmi_job job = { .id = js->hdr->job, .nranks = js->hdr->nranks, .nslots = js->nslots,
                           .slot = js->slot, .mapping = js->mapping };
    int err = 0;

    pthread_mutex_lock(&P.lock);
    clear_locked();
    P.e = pmi_engine_new(&job, &ops);
    P.direct = calloc(js->nslots ? js->nslots : 1, sizeof(*P.direct));
    if (!P.e || !P.direct) {
        clear_locked();
        err = ENOMEM;
        errprintf(why, whylen, "out of memory for the job's PMI state");
    } else {
        P.job = job.id;
        P.nslots = js->nslots;
    }
    pthread_mutex_unlock(&P.lock);
    return err;
}

void pmi_job_end(uint64_t id)
{
    pthread_mutex_lock(&P.lock);
    if (P.job == id)
        clear_locked();
    pthread_mutex_unlock(&P.lock);
}

/* LAT_CTL_NAME_OUT: the service node's answer to a rank's name request. */
int pmi_name_out(const char *p, size_t len, char *why, size_t whylen)
{
    struct lat_name n;
    const char *port = "";
    struct batch b;
    uint64_t job;
    bool matched;

    if (len < sizeof(n))
        return snprintf(why, whylen, "NAME_OUT of %zu bytes", len), -1;
    memcpy(&n, p, sizeof(n));
    if (len > sizeof(n)) {
        port = p + sizeof(n);
        if (p[len - 1] != '\0' || strlen(port) + 1 != len - sizeof(n) || strlen(port) > LAT_PMI_VAL_MAX)
            return snprintf(why, whylen, "NAME_OUT's port is not one string of at most 1024 bytes"), -1;
    }
    batch_init(&b);
    pthread_mutex_lock(&P.lock);
    job = P.job;
    matched = P.e && n.job == job &&
              pmi_engine_name_out(P.e, n.rank, (int)n.op, n.rc, port, &b);
    pthread_mutex_unlock(&P.lock);
    if (!matched) {
        ras_event(RAS_WARNING, cfg.location, "name answer for job %" PRIu64 " rank %u does not match a request "
                  "waiting here: ignored", n.job, n.rank);
        return 0;
    }
    batch_send(&b, job, 0, NULL);
    return 0;
}
