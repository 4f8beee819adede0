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
 * LAT_CTL_ABORT; LAT_CTL_FENCE_OUT comes back (control.c).  In a job's PMI
 * fence tree (LAT_JOB_TREE, docs/protocol.md section 10) the fence waits for
 * the I/O nodes below this one too and goes to the one above, and the
 * FENCE_OUT is passed on down: this file keeps the tree's state, tree.c its
 * connections.
 *
 * The engine is under `P.lock`, never held while writing to a socket: its
 * callbacks collect what it produces in a batch, sent after unlocking.
 *
 * Everything here is one job's and ends with it (docs/security.md "A
 * connection belongs to its job"): a process's own connection is bound at
 * its hello to the job's instance (P.gen, new at every start) and slot, is
 * closed when the process's exit is reported and when the job ends, and
 * what still comes on it is refused; the engine's key space is bounded
 * (pmi_engine.h, struct pmi_limits) and freed at the end.
 */
#include "ciod.h"
#include "pmi_engine.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <malloc.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>

static struct {
    pthread_mutex_t    lock;
    uint64_t           job;         /* 0: no job */
    uint64_t           gen;         /* this job's instance here: every job start takes a new one */
    uint64_t           gens;        /* the last one given */
    struct pmi_engine *e;
    uint32_t           nslots;
    struct conn      **direct;      /* [nslots]: a process's own PMI connection (a reference), or NULL: relayed */
    bool              *sealed;      /* [nslots]: the process ended: no PMI from it or for it any more */
    pthread_cond_t     gone;        /* a process's own PMI connection ended */
    /* the job's PMI fence tree (LAT_JOB_TREE) */
    bool               tree;        /* the job has one */
    bool               tree_known;  /* its LAT_CTL_PMI_TREE came: the children below are known */
    bool               has_parent;  /* the fence goes to an I/O node above, not the service node */
    bool               failed;      /* LAT_CTL_TREE_FAIL was sent */
    uint32_t           nchildren;
    uint32_t          *child_pset;  /* [nchildren] */
    struct conn      **child;       /* [nchildren]: a child's connection (a reference) after its hello */
    struct conn       *up;          /* to the I/O node above (a reference), NULL if none or gone */
    char               no_up[CIOD_ERRLEN];  /* why there is none, when there should be */
    uint64_t           last_job;    /* the last job started here: ids only grow */
    pthread_cond_t     tree_set;    /* tree_known, or the job changed */
} P = { .lock = PTHREAD_MUTEX_INITIALIZER, .gone = PTHREAD_COND_INITIALIZER, .tree_set = PTHREAD_COND_INITIALIZER };

/* How long an exit waits for the rest of the process's own PMI connection
 * (its last bytes, e.g. an abort, then EOF): only a descriptor the process
 * handed on to a survivor keeps it open this long. */
#define DIRECT_DRAIN_MS 2000

/* How long an answer may wait for a process to read its PMI connection:
 * PMI is request and answer, so only a process that stopped reading fills
 * the socket; it loses the connection instead of holding the thread that
 * answers (the control connection's, for a FENCE_OUT) for ever. */
#define DIRECT_SEND_S 10

/* How long a child's hello waits for this I/O node to learn the job's tree. */
#define TREE_WAIT_MS 10000

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
    size_t     *fence_len;
    int         nfence;
    struct conn *up;                /* where the fence goes: the I/O node above (a reference), or NULL */
    char        no_way_up[CIOD_ERRLEN]; /* there is one above, but no connection to it: why */
    char        broken[160];        /* why the job's fence cannot complete, if it cannot */
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
    b->fence = malloc(total);
    b->fence_len = malloc(n * sizeof(*len));
    if (!b->fence || !b->fence_len) {
        logmsg("pmi: out of memory for the fence of job %" PRIu64, P.job);
        free(b->fence);
        free(b->fence_len);
        b->fence = NULL;
        b->fence_len = NULL;
        return;
    }
    memcpy(b->fence, msg, total);
    memcpy(b->fence_len, len, n * sizeof(*len));
    b->nfence = n;
    /* called under P.lock: where it goes is decided now */
    b->up = conn_get(P.up);
    if (P.has_parent && !P.up)
        snprintf(b->no_way_up, sizeof(b->no_way_up), "%s", P.no_up);
}

static void on_broken(void *ctx, const char *text)
{
    struct batch *b = ctx;

    snprintf(b->broken, sizeof(b->broken), "%s", text);
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
    ras_job_event(P.job, RAS_WARNING, loc, "job %" PRIu64 " rank %u: bad PMI request: %s", P.job, who->rank, text);
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
    .broken = on_broken,
};

/* Raw bytes to a process's own PMI connection; a process that went away
 * just loses them, one that does not read them for DIRECT_SEND_S loses the
 * connection. */
static void send_direct(struct conn *c, const char *data, size_t len)
{
    pthread_mutex_lock(&c->wlock);
    while (len) {
        ssize_t n = send(c->fd, data, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            ras_event(RAS_WARNING, cfg.location, "PMI connection from %s: its process read no answer for %d s: "
                      "closed", c->peer, DIRECT_SEND_S);
            conn_hangup(c);
        }
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

/* The fence's chunks, kept together, to the I/O node above in the job's
 * tree, else to the job's owner. */
static void send_fence(uint64_t job, const struct batch *b)
{
    struct conn *to = b->up ? conn_get(b->up) : job_owner(job);
    size_t w = 0;
    int rc = 0;

    if (b->no_way_up[0]) {
        pmi_tree_fail(job, "fence of job %" PRIu64 " cannot go up: %s", job, b->no_way_up);
        return;
    }
    if (!to)
        return;
    pthread_mutex_lock(&to->wlock);
    for (int i = 0; i < b->nfence && rc == 0; i++) {
        struct iovec v = { .iov_base = b->fence + w, .iov_len = b->fence_len[i] };
        /* a tree connection numbers what it sends (docs/protocol.md 3.2) */
        rc = conn_sendv_locked(to, LAT_CTL_FENCE, b->up ? ++to->seq_out : 0, &v, 1);
        w += b->fence_len[i];
    }
    pthread_mutex_unlock(&to->wlock);
    conn_put(to);
    if (rc < 0 && b->up)
        pmi_tree_fail(job, "fence of job %" PRIu64 " cannot go up to the I/O node above (%s): %s", job,
                      b->up->peer, strerror(errno));
}

/* abort: no reply; the service node ends the job. */
static void send_abort(uint64_t job, const struct batch *b)
{
    struct lat_abort a = { .job = job, .rank = b->who.rank, .code = b->code };
    char loc[128];
    struct conn *ctl = job_owner(job);

    node_location(b->who.node, loc, sizeof(loc));
    ras_job_event(job, RAS_ERROR, loc, "job %" PRIu64 " rank %u called PMI abort with code %d: %s", job, b->who.rank,
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
    free(b->fence_len);
    conn_put(b->up);
    if (b->broken[0])
        pmi_tree_fail(job, "%s", b->broken);
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

/* The bounds of a job's PMI here: the defaults, lowered by
 * LATTICE_PMI_JOB_KEYS, _JOB_BYTES, _PROC_KEYS and _PROC_BYTES (tests). */
static struct pmi_limits limits = { PMI_JOB_KEYS, PMI_JOB_BYTES, PMI_PROC_KEYS, PMI_PROC_BYTES };
static pthread_once_t limits_once = PTHREAD_ONCE_INIT;

static void lower(const char *name, size_t *v)
{
    const char *s = getenv(name);
    char *end;

    if (!s || !*s)
        return;
    errno = 0;
    unsigned long long n = strtoull(s, &end, 10);
    if (errno || *end || s[0] == '-' || n == 0)
        logmsg("%s=\"%s\" is not a number >= 1: ignored", name, s);
    else if (n < *v)
        *v = (size_t)n;
}

static void limits_init(void)
{
    size_t jk = limits.job_keys, pk = limits.proc_keys;

    lower("LATTICE_PMI_JOB_KEYS", &jk);
    lower("LATTICE_PMI_JOB_BYTES", &limits.job_bytes);
    lower("LATTICE_PMI_PROC_KEYS", &pk);
    lower("LATTICE_PMI_PROC_BYTES", &limits.proc_bytes);
    limits.job_keys = (uint32_t)jk;
    limits.proc_keys = (uint32_t)pk;
}

/* The running job's slot of rank, if it runs on node (node -1: anywhere); -1 if none. */
static int slot_of(uint32_t rank, uint32_t node)
{
    uint32_t where;
    int slot = P.e ? pmi_engine_slot(P.e, rank, &where) : -1;

    return slot >= 0 && (node == UINT32_MAX || where == node) ? slot : -1;
}

/* Relayed by a compute node, which relays only for the job it runs: PMI of
 * a process that ended (a survivor holding its PMI_FD) is refused. */
void pmi_input(uint32_t node, struct conn *nc, uint32_t rank, const char *data, size_t len)
{
    struct batch b;
    char loc[128];
    uint64_t job;

    batch_init(&b);
    pthread_mutex_lock(&P.lock);
    job = P.job;
    int slot = slot_of(rank, node);
    bool sealed = slot >= 0 && P.sealed[slot];
    if (slot < 0 || sealed) {
        pthread_mutex_unlock(&P.lock);
        node_location(node, loc, sizeof(loc));
        if (sealed)
            ras_job_event(job, RAS_WARNING, loc, "PMI data for rank %u of job %" PRIu64 ", which has ended: refused",
                      rank, job);
        else
            ras_event(RAS_WARNING, loc, "PMI data for rank %u, which does not run on node %u: ignored", rank,
                      node);
        return;
    }
    pmi_engine_input(P.e, (uint32_t)slot, data, len, &b);
    pthread_mutex_unlock(&P.lock);
    batch_send(&b, job, node, nc);
}

/* Bytes on a process's own PMI connection c, bound at its hello to the
 * job instance gen and the slot: fed to that job's engine only while c is
 * still that slot's connection.  NULL, or refused: what ended ("job", or
 * "process"), and the caller hangs up. */
static const char *direct_input(struct conn *c, uint64_t gen, int slot, uint32_t node, const char *data,
                                size_t len)
{
    struct batch b;
    uint64_t job;

    batch_init(&b);
    pthread_mutex_lock(&P.lock);
    job = P.job;
    bool same = P.e && P.gen == gen;
    bool ours = same && (uint32_t)slot < P.nslots && P.direct[slot] == c && !P.sealed[slot];
    if (ours)
        pmi_engine_input(P.e, (uint32_t)slot, data, len, &b);
    pthread_mutex_unlock(&P.lock);
    if (!ours)
        return same ? "process" : "job";
    batch_send(&b, job, node, NULL);
    return NULL;
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
    uint64_t gen = 0;
    bool ok = false;
    int slot = -1;

    if (node < cfg.pset_size && job_proc_rank(node, t, hello->job, &rank) == 0) {
        pthread_mutex_lock(&P.lock);
        slot = P.job == hello->job ? slot_of((uint32_t)rank, node) : -1;
        if ((ok = slot >= 0 && !P.direct[slot] && !P.sealed[slot])) {
            P.direct[slot] = conn_get(c);
            gen = P.gen;                /* the connection belongs to this instance of the job */
        }
        pthread_mutex_unlock(&P.lock);
    }
    if (!ok) {
        ras_event(RAS_WARNING, cfg.location, "PMI connection from %s for node %u process %u of job %" PRIu64
                  " refused: no such process, or it has one", c->peer, node, t, hello->job);
        hello_ack(c, seq, EACCES);
        return;
    }
    pthread_setname_np(pthread_self(), "ciod-pmi");
    struct timeval tv = { .tv_sec = DIRECT_SEND_S };
    setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (hello_ack(c, seq, 0) == 0) {
        for (;;) {
            ssize_t n = recv(c->fd, buf, sizeof(buf), 0);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;
            const char *ended = direct_input(c, gen, slot, node, buf, (size_t)n);
            if (ended) {
                char loc[128];
                node_location(node, loc, sizeof(loc));
                ras_event(RAS_WARNING, loc, "PMI from %s on the connection of rank %d of job %" PRIu64 " after "
                          "that %s ended: refused, connection closed", c->peer, rank, hello->job, ended);
                break;
            }
        }
    }
    conn_hangup(c);                     /* whoever holds the other end sees it closed */
    pthread_mutex_lock(&P.lock);
    if (P.gen == gen && (uint32_t)slot < P.nslots && P.direct[slot] == c) {
        P.direct[slot] = NULL;
        drop = c;
    }
    pthread_cond_broadcast(&P.gone);
    pthread_mutex_unlock(&P.lock);
    conn_put(drop);
}

/* A rank of job ended.  coded: it exited (status its code), and the engine
 * judges whether it left MPI without finalize (and so aborts the job).
 * Then its PMI is sealed: its own connection, which a process it left
 * behind may still hold, is closed, and nothing more is taken for it. */
void pmi_rank_exit(uint64_t job, uint32_t rank, bool coded, int status)
{
    struct batch b;
    struct timespec until;
    struct conn *drop = NULL;

    batch_init(&b);
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += DIRECT_DRAIN_MS / 1000;
    pthread_mutex_lock(&P.lock);
    uint64_t gen = P.gen;
    int slot = job && P.job == job ? slot_of(rank, UINT32_MAX) : -1;
    /* Its own PMI connection is not ordered with the node's exit report: let
     * its last requests (a finalize, an abort) be served first.  The process
     * is gone, so the connection ends as soon as they are read, unless a
     * survivor holds it: then it is closed below. */
    while (coded && slot >= 0 && P.direct[slot] && pthread_cond_timedwait(&P.gone, &P.lock, &until) == 0)
        slot = P.gen == gen ? slot : -1;
    if (slot >= 0 && coded)
        pmi_engine_exit(P.e, (uint32_t)slot, status, &b);
    if (slot >= 0) {
        P.sealed[slot] = true;
        if ((drop = P.direct[slot])) {
            P.direct[slot] = NULL;
            conn_hangup(drop);
        }
    }
    pthread_mutex_unlock(&P.lock);
    conn_put(drop);
    batch_send(&b, job, 0, NULL);
}

/* LAT_CTL_FENCE_OUT (from the service node, or the I/O node above):
 * passed on down the tree, published here, and the pset released. */
int pmi_fence_out(const char *p, size_t len, char *why, size_t whylen)
{
    struct lat_fence f;
    struct batch b;
    struct conn **down = NULL;
    uint32_t ndown = 0;
    uint64_t job;
    bool matched;

    if (pmi_fence_check(p, len, why, whylen) < 0)
        return -1;
    memcpy(&f, p, sizeof(f));
    batch_init(&b);
    pthread_mutex_lock(&P.lock);
    job = P.job;
    matched = P.e && pmi_engine_fence_out(P.e, p, &b);
    if (matched && P.nchildren && (down = calloc(P.nchildren, sizeof(*down))))
        for (uint32_t i = 0; i < P.nchildren; i++)
            if ((down[ndown] = conn_get(P.child[i])))
                ndown++;
    pthread_mutex_unlock(&P.lock);
    if (!matched) {
        ras_job_event(f.job, RAS_WARNING, cfg.location, "fence %u of job %" PRIu64 " from above does not "
                  "match a fence waiting here: ignored", f.epoch, f.job);
        return 0;
    }
    /* down first: the subtree is the longer way */
    for (uint32_t i = 0; i < ndown; i++) {
        struct iovec v = { .iov_base = (void *)p, .iov_len = len };
        pthread_mutex_lock(&down[i]->wlock);
        conn_sendv_locked(down[i], LAT_CTL_FENCE_OUT, ++down[i]->seq_out, &v, 1);
        pthread_mutex_unlock(&down[i]->wlock);
        conn_put(down[i]);              /* a child that is gone shows on its own connection */
    }
    free(down);
    batch_send(&b, job, 0, NULL);
    return 0;
}

/* ---- the job's PMI fence tree (LAT_JOB_TREE): its state; tree.c has the connections ---- */

void pmi_tree_fail(uint64_t job, const char *fmt, ...)
{
    struct lat_job_end end = { .job = job };
    char text[CIOD_ERRLEN];
    struct conn *ctl;
    va_list ap;
    bool first;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&P.lock);
    first = P.job == job && !P.failed;
    if (first)
        P.failed = true;
    pthread_mutex_unlock(&P.lock);
    if (!first)
        return;                         /* said once per job; a job that ended needs nothing */
    ras_job_event(job, RAS_ERROR, cfg.location, "job %" PRIu64 ": PMI fence tree broken: %s", job, text);
    if ((ctl = job_owner(job))) {
        struct iovec v[2] = { { .iov_base = &end, .iov_len = sizeof(end) },
                              { .iov_base = text, .iov_len = strlen(text) } };
        conn_sendv(ctl, LAT_CTL_TREE_FAIL, 0, v, 2);
        conn_put(ctl);
    }
}

int pmi_tree_set(uint64_t job, uint32_t n, const uint32_t *psets, bool has_parent, char *why, size_t whylen)
{
    uint32_t *copy = calloc(n ? n : 1, sizeof(*copy));
    struct conn **child = calloc(n ? n : 1, sizeof(*child));
    int err = 0;

    pthread_mutex_lock(&P.lock);
    if (P.job != job || !P.e)
        err = ESRCH, errprintf(why, whylen, "job %" PRIu64 " does not run here", job);
    else if (!P.tree || P.tree_known)
        err = EINVAL, errprintf(why, whylen, "job %" PRIu64 " %s", job,
                                P.tree ? "was given its PMI tree already" : "was not sent as a tree job");
    else if (!copy || !child || pmi_engine_tree(P.e, n) < 0)
        err = ENOMEM, errprintf(why, whylen, "out of memory for the job's PMI tree");
    if (!err) {
        memcpy(copy, psets, n * sizeof(*copy));
        P.child_pset = copy;
        P.child = child;
        P.nchildren = n;
        P.has_parent = has_parent;
        P.tree_known = true;
        copy = NULL;
        child = NULL;
        pthread_cond_broadcast(&P.tree_set);     /* children that said hello early wait for this */
    }
    pthread_mutex_unlock(&P.lock);
    free(copy);
    free(child);
    return err;
}

int pmi_tree_up(uint64_t job, struct conn *up, const char *why)
{
    struct batch b;
    bool ours;

    batch_init(&b);
    pthread_mutex_lock(&P.lock);
    if ((ours = P.job == job && P.tree_known)) {
        P.up = conn_get(up);
        snprintf(P.no_up, sizeof(P.no_up), "%s", why ? why : "");
        pmi_engine_tree_up(P.e, &b);    /* the pset may be in its fence already */
    }
    pthread_mutex_unlock(&P.lock);
    batch_send(&b, job, 0, NULL);
    return ours ? 0 : ESRCH;
}

int pmi_tree_child_attach(uint64_t job, uint32_t pset, struct conn *c, uint32_t *child)
{
    struct timespec until;
    int err = EACCES;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += TREE_WAIT_MS / 1000;
    pthread_mutex_lock(&P.lock);
    /* its parent may not have been told of the tree yet: the service node
     * sends LAT_CTL_PMI_TREE to every I/O node at once */
    while (!(P.job == job && (P.tree_known || !P.tree)) && P.last_job <= job
           && !(P.last_job == job && P.job != job) && pthread_cond_timedwait(&P.tree_set, &P.lock, &until) == 0)
        ;                               /* (a job that ended here, or was followed by another, never comes) */
    for (uint32_t i = 0; P.job == job && P.tree_known && i < P.nchildren; i++)
        if (P.child_pset[i] == pset && !P.child[i]) {
            P.child[i] = conn_get(c);
            *child = i;
            err = 0;
        }
    pthread_mutex_unlock(&P.lock);
    return err;
}

int pmi_tree_child_fence(uint64_t job, uint32_t child, const char *p, size_t len, char *why, size_t whylen)
{
    struct batch b;
    int rc = 0;

    if (pmi_fence_check(p, len, why, whylen) < 0)
        return -1;
    batch_init(&b);
    pthread_mutex_lock(&P.lock);
    if (P.job == job)                   /* else the job ended here: nothing to do */
        rc = pmi_engine_child_fence(P.e, child, p, why, whylen, &b);
    pthread_mutex_unlock(&P.lock);
    batch_send(&b, job, 0, NULL);
    return rc;
}

void pmi_tree_child_gone(uint64_t job, uint32_t child, struct conn *c)
{
    struct batch b;
    struct conn *drop = NULL;

    batch_init(&b);
    pthread_mutex_lock(&P.lock);
    if (P.job == job && child < P.nchildren && P.child[child] == c) {
        drop = c;
        P.child[child] = NULL;
        pmi_engine_child_gone(P.e, child, &b);
    }
    pthread_mutex_unlock(&P.lock);
    conn_put(drop);
    batch_send(&b, job, 0, NULL);
}

void pmi_tree_up_gone(uint64_t job, struct conn *up)
{
    struct conn *drop = NULL;
    bool waiting = false;

    pthread_mutex_lock(&P.lock);
    if (P.job == job && P.up == up) {
        drop = up;
        P.up = NULL;
        snprintf(P.no_up, sizeof(P.no_up), "the connection to the I/O node above (%s) has ended", up->peer);
        waiting = pmi_engine_fence_waits(P.e);
    }
    pthread_mutex_unlock(&P.lock);
    conn_put(drop);
    if (waiting)
        pmi_tree_fail(job, "the connection to the I/O node above this one ended during a fence");
}

static void clear_locked(void)
{
    /* every PMI connection of the job ends with it: a process left behind
     * that holds one sees it closed, and its thread ends */
    for (uint32_t i = 0; P.direct && i < P.nslots; i++)
        if (P.direct[i]) {
            conn_hangup(P.direct[i]);
            conn_put(P.direct[i]);
        }
    free(P.direct);
    free(P.sealed);
    P.sealed = NULL;
    /* the tree's connections end with the job here (their threads see it) */
    for (uint32_t i = 0; P.child && i < P.nchildren; i++)
        if (P.child[i]) {
            conn_hangup(P.child[i]);
            conn_put(P.child[i]);
        }
    if (P.up) {
        conn_hangup(P.up);
        conn_put(P.up);
    }
    free(P.child);
    free(P.child_pset);
    P.child = NULL;
    P.child_pset = NULL;
    P.up = NULL;
    P.nchildren = 0;
    P.tree = P.tree_known = P.has_parent = P.failed = false;
    pthread_cond_broadcast(&P.tree_set);
    pmi_engine_free(P.e);
    P.direct = NULL;
    P.e = NULL;
    P.job = 0;
    P.gen = 0;
    P.nslots = 0;
}

int pmi_job_start(const struct job_spec *js, char *why, size_t whylen)
{
    struct pmi_job job = { .id = js->hdr->job, .nranks = js->hdr->nranks, .nslots = js->nslots,
                           .slot = js->slot, .mapping = js->mapping,
                           .tree = (js->hdr->flags & LAT_JOB_TREE) != 0 };
    int err = 0;

    pthread_once(&limits_once, limits_init);
    job.lim = limits;
    pthread_mutex_lock(&P.lock);
    clear_locked();
    P.e = pmi_engine_new(&job, &ops);
    P.direct = calloc(js->nslots ? js->nslots : 1, sizeof(*P.direct));
    P.sealed = calloc(js->nslots ? js->nslots : 1, sizeof(*P.sealed));
    if (!P.e || !P.direct || !P.sealed) {
        clear_locked();
        err = ENOMEM;
        errprintf(why, whylen, "out of memory for the job's PMI state");
    } else {
        P.job = P.last_job = job.id;
        P.gen = ++P.gens;
        P.nslots = js->nslots;
        P.tree = job.tree;
        pthread_cond_broadcast(&P.tree_set);     /* a child waiting for an earlier job gives up */
    }
    pthread_mutex_unlock(&P.lock);
    return err;
}

void pmi_job_end(uint64_t id)
{
    bool ended;

    pthread_mutex_lock(&P.lock);
    if ((ended = P.job == id))
        clear_locked();
    pthread_mutex_unlock(&P.lock);
    if (ended)
        malloc_trim(0);                 /* the job's key space goes back to the system, not to a free list */
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
        ras_job_event(n.job, RAS_WARNING, cfg.location, "name answer for job %" PRIu64 " rank %u does not match a request "
                  "waiting here: ignored", n.job, n.rank);
        return 0;
    }
    batch_send(&b, job, 0, NULL);
    return 0;
}
