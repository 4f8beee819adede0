/*
 * job.c - the pset's shared state: which compute nodes are connected and
 * the one job that may run on them.
 *
 * Everything here is under `g.lock`, held only for short bookkeeping and
 * never across socket writes.  To send, a thread takes a reference to the
 * connection under the lock and writes after dropping it.  Rank exits are
 * the one place where order matters (every CTL_EXIT before JOB_END, and
 * none before the JOB reply): they are decided and sent while holding the
 * owner's write lock, which the JOB handler also holds until it replied.
 * Before that, each exit passes through the job's I/O worker (worker.c,
 * worker_hold_exit), so that it goes out behind everything its rank wrote.
 */
#include "ciod.h"

#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct jslot {                          /* one process of the job in this pset */
    int32_t      rank;
    uint32_t     node, t;
    bool         running;
    bool         connected;             /* its PROC connection is open: one at a time */
};

struct job {
    uint64_t     id;
    struct conn *ctl;                   /* the control connection that owns it (a reference) */
    struct ident who;
    char         cwd[LAT_MAX_PATH];
    uint32_t     nranks;
    int32_t      rank[LAT_MAX_PSET];    /* per pset-local node: its process t = 0, -1 = idle */
    struct jslot *slot;
    uint32_t     nslots;
    uint32_t     left;                  /* processes still running */
    bool         orphaned;              /* owner hung up: killed, waiting for the exits */
    int          killed;                /* the signal ciod sent its ranks (KILL, owner gone), 0 if none */
    const char  *killed_by;             /* why, for RAS (a string constant) */
    bool         failed;                /* LAT_CTL_JOB_FAIL was sent: said once */
    bool         sandbox;               /* LAT_JOB_SANDBOX: each node may connect its file client */
    bool         fs[LAT_MAX_PSET];      /* per node: its file client (LAT_PROC_FS) is connected */
};

static struct {
    pthread_mutex_t lock;
    struct conn    *node[LAT_MAX_PSET];
    struct job     *job;
    bool            announced;          /* "ready" went to the notify fd */
} g = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void job_free(struct job *j)
{
    if (j) {
        pmi_job_end(j->id);
        conn_put(j->ctl);
        free(j->slot);
        free(j);
    }
}

/* The process of `node` that reported as `rank`; a node that runs one
 * process needs not say which (older nodes send rank 0). */
static struct jslot *slot_of(struct job *j, uint32_t node, uint32_t rank)
{
    struct jslot *only = NULL;
    int n = 0;

    for (uint32_t i = 0; i < j->nslots; i++) {
        struct jslot *s = &j->slot[i];
        if (s->node != node)
            continue;
        if ((uint32_t)s->rank == rank)
            return s;
        only = s;
        n++;
    }
    return n == 1 ? only : NULL;
}

int node_attach(uint32_t node, struct conn *c)
{
    int err = 0;

    pthread_mutex_lock(&g.lock);
    if (g.node[node])
        err = EBUSY;
    else
        g.node[node] = conn_get(c);
    if (!err && !g.announced) {     /* the pset's last node: tell the host agent, once (an event, not a poll) */
        uint32_t n = 0;
        for (uint32_t i = 0; i < cfg.pset_size; i++)
            n += g.node[i] != NULL;
        notify("node %u", node);    /* boot progress: the agent counts nodes up (a stall, not a slow boot, fails) */
        if (n == cfg.pset_size) {
            g.announced = true;
            notify("ready");
        }
    }
    pthread_mutex_unlock(&g.lock);
    return err;
}

void node_detach(uint32_t node, struct conn *c)
{
    struct conn *old = NULL;
    struct lat_exit ex = { .node = node, .how = LAT_EXIT_LOST };
    char loc[128], msg[256];
    uint32_t nlost = 0, *lost = NULL;

    pthread_mutex_lock(&g.lock);
    if (g.node[node] == c) {
        old = g.node[node];
        g.node[node] = NULL;
    }
    if (g.job && (lost = calloc(g.job->nslots + 1, sizeof(*lost)))) {
        ex.job = g.job->id;
        for (uint32_t i = 0; i < g.job->nslots; i++)
            if (g.job->slot[i].node == node && g.job->slot[i].running)
                lost[nlost++] = (uint32_t)g.job->slot[i].rank;
    }
    pthread_mutex_unlock(&g.lock);

    node_location(node, loc, sizeof(loc));
    if (nlost) {
        snprintf(msg, sizeof(msg), "compute node %s lost (connection to its I/O node closed)", loc);
        for (uint32_t i = 0; i < nlost; i++) {
            ex.rank = lost[i];
            ras_job_event(ex.job, RAS_ERROR, loc, "compute node %s (pset %u node %u) lost while running rank %u of job %"
                      PRIu64, loc, cfg.pset, node, ex.rank, ex.job);
            job_rank_exit(node, &ex, msg, strlen(msg));
        }
    } else {
        ras_event(RAS_ERROR, loc, "compute node %s (pset %u node %u) disconnected", loc, cfg.pset, node);
    }
    free(lost);
    conn_put(old);
}

void job_status(struct lat_ctl_status *st)
{
    memset(st, 0, sizeof(*st));
    st->pset_size = cfg.pset_size;
    pthread_mutex_lock(&g.lock);
    for (uint32_t i = 0; i < cfg.pset_size; i++)
        st->nodes_connected += g.node[i] != NULL;
    st->job = g.job ? g.job->id : 0;
    pthread_mutex_unlock(&g.lock);
}

bool job_busy(void)
{
    bool busy;

    pthread_mutex_lock(&g.lock);
    busy = g.job != NULL;
    pthread_mutex_unlock(&g.lock);
    return busy;
}

int job_register(const struct job_spec *js, struct conn *ctl,
                 struct conn *nodes[LAT_MAX_PSET], char *why, size_t whylen)
{
    struct job *j = calloc(1, sizeof(*j));
    char loc[128];
    int err = 0;

    if (!j) {
        errprintf(why, whylen, "out of memory");
        return ENOMEM;
    }
    j->id = js->hdr->job;
    j->who = js->who;
    snprintf(j->cwd, sizeof(j->cwd), "%s", js->cwd);
    j->nranks = js->hdr->nranks;
    j->nslots = js->nslots;
    j->sandbox = (js->hdr->flags & LAT_JOB_SANDBOX) != 0;
    if (!(j->slot = calloc(js->nslots + 1, sizeof(*j->slot)))) {
        free(j);
        errprintf(why, whylen, "out of memory");
        return ENOMEM;
    }
    for (uint32_t i = 0; i < js->nslots; i++)
        j->slot[i] = (struct jslot){ .rank = (int32_t)js->slot[i].rank, .node = js->slot[i].node,
                                     .t = js->slot[i].t, .running = true };

    pthread_mutex_lock(&g.lock);
    if (g.job) {
        err = EBUSY;
        errprintf(why, whylen, "job %" PRIu64 " is running on this I/O node", g.job->id);
        goto out;
    }
    for (uint32_t i = 0; i < cfg.pset_size; i++) {
        j->rank[i] = js->rank[i];
        if (js->rank[i] < 0)
            continue;
        if (!g.node[i]) {
            node_location(i, loc, sizeof(loc));
            err = EHOSTDOWN;
            errprintf(why, whylen, "compute node %s (node %u of pset %u) is not connected",
                      loc, i, cfg.pset);
            goto out;
        }
    }
    j->left = j->nslots;
    for (uint32_t i = 0; i < cfg.pset_size; i++)
        nodes[i] = j->rank[i] >= 0 ? conn_get(g.node[i]) : NULL;
    j->ctl = conn_get(ctl);
    g.job = j;
    j = NULL;
out:
    pthread_mutex_unlock(&g.lock);
    if (j)
        free(j->slot);
    free(j);
    return err;
}

bool job_started(uint64_t id)
{
    struct job *done = NULL;

    pthread_mutex_lock(&g.lock);
    if (g.job && g.job->id == id && g.job->left == 0) {
        done = g.job;
        g.job = NULL;
    }
    pthread_mutex_unlock(&g.lock);
    if (done)
        worker_end(id);
    job_free(done);
    return done != NULL;
}

int job_nodes(struct conn *nodes[LAT_MAX_PSET], bool all, uint64_t *id)
{
    int n = 0;

    pthread_mutex_lock(&g.lock);
    for (uint32_t i = 0; i < cfg.pset_size; i++) {
        bool want = g.node[i] && (all || (g.job && g.job->rank[i] >= 0));
        nodes[i] = want ? conn_get(g.node[i]) : NULL;
        n += want;
    }
    if (id)
        *id = g.job ? g.job->id : 0;
    pthread_mutex_unlock(&g.lock);
    return n;
}

/* Under g.lock: references to the nodes of job j, which is being sent sig. */
static void take_job_nodes(struct job *j, struct conn *nodes[LAT_MAX_PSET], int sig, const char *by)
{
    for (uint32_t i = 0; i < cfg.pset_size; i++)
        nodes[i] = j->rank[i] >= 0 && g.node[i] ? conn_get(g.node[i]) : NULL;
    if (!j->killed) {
        j->killed = sig;
        j->killed_by = by;
    }
}

static void kill_nodes(struct conn *nodes[LAT_MAX_PSET], uint64_t id, int sig)
{
    struct lat_kill k = { .job = id, .sig = sig };

    for (uint32_t i = 0; i < cfg.pset_size; i++) {
        if (nodes[i]) {
            conn_send(nodes[i], LAT_NODE_KILL, 0, &k, sizeof(k));
            conn_put(nodes[i]);
        }
    }
}

int job_signal(uint64_t id, int sig, const char *by, uint64_t *running)
{
    struct conn *nodes[LAT_MAX_PSET] = { 0 };
    bool ours = false;

    pthread_mutex_lock(&g.lock);
    *running = g.job ? g.job->id : 0;
    if (g.job && g.job->id == id) {
        ours = true;
        take_job_nodes(g.job, nodes, sig, by);
    }
    pthread_mutex_unlock(&g.lock);
    if (!ours)
        return ESRCH;
    kill_nodes(nodes, id, sig);
    return 0;
}

void job_kill_any(const char *by)
{
    struct conn *nodes[LAT_MAX_PSET] = { 0 };
    uint64_t id = 0;

    pthread_mutex_lock(&g.lock);
    if (g.job) {
        id = g.job->id;
        take_job_nodes(g.job, nodes, SIGKILL, by);
    }
    pthread_mutex_unlock(&g.lock);
    if (id)
        kill_nodes(nodes, id, SIGKILL);
}

void job_ctl_closed(struct conn *ctl)
{
    struct conn *nodes[LAT_MAX_PSET] = { 0 };
    uint64_t id = 0;
    bool orphan = false;

    pthread_mutex_lock(&g.lock);
    if (g.job && g.job->ctl == ctl && !g.job->orphaned) {
        g.job->orphaned = orphan = true;
        id = g.job->id;
        take_job_nodes(g.job, nodes, SIGKILL, "its lattice run went away (control connection closed)");
    }
    pthread_mutex_unlock(&g.lock);
    if (!orphan)
        return;
    ras_job_event(id, RAS_WARNING, cfg.location,
              "control connection (%s) of job %" PRIu64 " closed while it ran (its lattice run ended): "
              "killing the job", ctl->peer, id);
    kill_nodes(nodes, id, SIGKILL);
}

bool job_fail(uint64_t id, const char *by, const char *text)
{
    struct conn *nodes[LAT_MAX_PSET] = { 0 };
    struct lat_job_end end = { .job = id };
    struct conn *ctl = NULL;
    bool first = false;

    pthread_mutex_lock(&g.lock);
    if (g.job && g.job->id == id && !g.job->failed) {
        g.job->failed = first = true;
        if (!g.job->orphaned)
            ctl = conn_get(g.job->ctl);
        take_job_nodes(g.job, nodes, SIGKILL, by);
    }
    pthread_mutex_unlock(&g.lock);
    if (!first)
        return false;                   /* it ended meanwhile, or was failed already */
    ras_job_event(id, RAS_ERROR, cfg.location, "job %" PRIu64 " ended with an error: %s", id, text);
    if (ctl) {                          /* before the exits its ranks' kill brings: the cause first */
        struct iovec v[2] = { { &end, sizeof(end) }, { (void *)text, strlen(text) } };
        conn_sendv(ctl, LAT_CTL_JOB_FAIL, 0, v, 2);
        conn_put(ctl);
    }
    kill_nodes(nodes, id, SIGKILL);
    return true;
}

void job_output(uint32_t node, uint32_t rank, uint32_t stream, const void *data, size_t len)
{
    struct lat_output o = { .stream = stream };
    struct conn *ctl = NULL;
    struct jslot *s;

    pthread_mutex_lock(&g.lock);
    if (g.job && (s = slot_of(g.job, node, rank)) && s->running) {
        o.rank = (uint32_t)s->rank;
        ctl = conn_get(g.job->ctl);
    }
    pthread_mutex_unlock(&g.lock);
    if (!ctl)
        return;                         /* no job: nobody to tell */
    struct iovec v[2] = { { &o, sizeof(o) }, { (void *)data, len } };
    conn_sendv(ctl, LAT_CTL_OUTPUT, 0, v, 2);    /* a dead owner just loses it */
    conn_put(ctl);
}

void job_rank_output(int32_t rank, uint64_t id, uint32_t stream, const void *data, size_t len)
{
    struct lat_output o = { .rank = (uint32_t)rank, .stream = stream };
    struct conn *ctl = NULL;

    pthread_mutex_lock(&g.lock);
    if (g.job && g.job->id == id)
        ctl = conn_get(g.job->ctl);
    pthread_mutex_unlock(&g.lock);
    if (!ctl)
        return;
    struct iovec v[2] = { { &o, sizeof(o) }, { (void *)data, len } };
    conn_sendv(ctl, LAT_CTL_OUTPUT, 0, v, 2);
    conn_put(ctl);
}

/* killed: the signal ciod had sent the job, by: who asked; a rank that
 * died of it was ended on purpose and is logged apart from a rank that failed. */
static void ras_exit(const struct lat_exit *ex, const char *msg, size_t mlen, int killed, const char *by)
{
    char loc[128];
    int n = (int)strnlen(msg, mlen);

    node_location(ex->node, loc, sizeof(loc));
    if (killed && ex->how == LAT_EXIT_SIGNAL && ex->value == killed) {
        ras_job_event(ex->job, RAS_INFO, loc, "job %" PRIu64 " rank %u ended by signal %d on purpose: %s",
                  ex->job, ex->rank, ex->value, by ? by : "killed at the service node's request");
        return;
    }
    switch (ex->how) {
    case LAT_EXIT_CODE:
        if (ex->value != 0)
            ras_job_event(ex->job, RAS_INFO, loc, "job %" PRIu64 " rank %u exited with code %d",
                      ex->job, ex->rank, ex->value);
        break;
    case LAT_EXIT_SIGNAL:
        ras_job_event(ex->job, RAS_WARNING, loc, "job %" PRIu64 " rank %u killed by signal %d",
                  ex->job, ex->rank, ex->value);
        break;
    case LAT_EXIT_LAUNCH:
        ras_job_event(ex->job, RAS_WARNING, loc, "job %" PRIu64 " rank %u could not start: %.*s (errno %d)",
                  ex->job, ex->rank, n, msg, ex->value);
        break;
    default:
        break;                          /* LOST: node_detach reported it */
    }
}

void job_rank_exit(uint32_t node, const struct lat_exit *ex, const char *msg, size_t mlen)
{
    bool ours;
    struct jslot *s;
    uint32_t t = 0, rank = 0;

    pthread_mutex_lock(&g.lock);
    ours = g.job && g.job->id == ex->job && (s = slot_of(g.job, node, ex->rank)) && s->running;
    if (ours) {
        t = s->t;
        rank = (uint32_t)s->rank;
    }
    pthread_mutex_unlock(&g.lock);
    if (!ours) {
        logmsg("node %u: exit for job %" PRIu64 " that does not run there: ignored", node, ex->job);
        return;
    }
    /* at once, even when the report waits: the job may still be waiting on it,
     * and whatever the rank left behind holds no PMI of the job after it
     * (relayed PMI that follows the exit on the node's connection is refused) */
    pmi_rank_exit(ex->job, rank, ex->how == LAT_EXIT_CODE, ex->value);
    /* its output first: what it wrote may still be in its worker's channel */
    if (!worker_hold_exit(node, t, ex, msg, mlen))
        job_rank_exit_report(node, ex, msg, mlen);
}

void job_rank_exit_report(uint32_t node, const struct lat_exit *ex, const char *msg, size_t mlen)
{
    struct lat_exit out = *ex;
    struct lat_job_end end = { .job = ex->job };
    struct conn *ctl = NULL;
    struct job *done = NULL;
    struct jslot *s;
    bool report = false, last = false;
    int killed = 0;
    const char *killed_by = NULL;

    pthread_mutex_lock(&g.lock);
    if (g.job && g.job->id == ex->job && (s = slot_of(g.job, node, ex->rank)) && s->running)
        ctl = conn_get(g.job->ctl);
    pthread_mutex_unlock(&g.lock);
    if (!ctl) {
        logmsg("node %u: exit for job %" PRIu64 " that does not run there: ignored", node, ex->job);
        return;
    }
    /* Decide and send under the owner's write lock: exits keep their order. */
    pthread_mutex_lock(&ctl->wlock);
    pthread_mutex_lock(&g.lock);
    if (g.job && g.job->id == ex->job && g.job->ctl == ctl && (s = slot_of(g.job, node, ex->rank))
        && s->running) {
        s->running = false;
        report = true;
        killed = g.job->killed;
        killed_by = g.job->killed_by;
        out.rank = (uint32_t)s->rank;
        out.node = node;
        last = --g.job->left == 0;
        if (last) {
            done = g.job;
            g.job = NULL;
        }
    }                                   /* else somebody else reported it meanwhile */
    pthread_mutex_unlock(&g.lock);
    if (last) {                         /* its worker finishes, and its PMI connections are */
        worker_end(ex->job);            /* closed and its key space freed, before JOB_END goes out */
        pmi_job_end(ex->job);
    }
    if (report) {
        struct iovec v[2] = { { &out, sizeof(out) }, { (void *)msg, mlen } };
        conn_sendv_locked(ctl, LAT_CTL_EXIT, 0, v, 2);
        if (last) {
            struct iovec e = { &end, sizeof(end) };
            conn_sendv_locked(ctl, LAT_CTL_JOB_END, 0, &e, 1);
        }
    }
    pthread_mutex_unlock(&ctl->wlock);

    if (report) {
        ras_exit(&out, msg, mlen, killed, killed_by);
        if (last)
            logmsg("job %" PRIu64 " ended", ex->job);
    }
    job_free(done);
    conn_put(ctl);
}

/* The slot of process t of node in job id, under g.lock; NULL if none. */
static struct jslot *proc_slot(uint32_t node, uint32_t t, uint64_t id)
{
    for (uint32_t i = 0; g.job && g.job->id == id && !g.job->orphaned && i < g.job->nslots; i++)
        if (g.job->slot[i].node == node && g.job->slot[i].t == t)
            return &g.job->slot[i];
    return NULL;
}

int job_proc_rank(uint32_t node, uint32_t t, uint64_t id, int32_t *rank)
{
    pthread_mutex_lock(&g.lock);
    struct jslot *s = proc_slot(node, t, id);
    if (s)
        *rank = s->rank;
    pthread_mutex_unlock(&g.lock);
    return s ? 0 : EACCES;
}

/* The file client of node (LAT_PROC_FS) in sandboxed job id, under g.lock:
 * its connected flag, or NULL if the node runs no process of that job. */
static bool *fs_slot(uint32_t node, uint64_t id)
{
    struct job *j = g.job;
    if (!j || j->id != id || j->orphaned || !j->sandbox || node >= LAT_MAX_PSET || node >= cfg.pset_size ||
        j->rank[node] < 0)
        return NULL;
    return &j->fs[node];
}

int job_proc_attach(uint32_t node, uint32_t t, uint64_t id, int32_t *rank)
{
    int err = EACCES;

    pthread_mutex_lock(&g.lock);
    if (t == LAT_PROC_FS) {             /* no rank: one per node, bound to the job all the same */
        bool *fs = fs_slot(node, id);
        if (fs) {
            *rank = -1;
            err = *fs ? EBUSY : 0;
            *fs = true;
        }
        pthread_mutex_unlock(&g.lock);
        return err;
    }
    struct jslot *s = proc_slot(node, t, id);
    if (s) {
        *rank = s->rank;
        err = s->connected ? EBUSY : 0;
        s->connected = true;
    }
    pthread_mutex_unlock(&g.lock);
    return err;
}

void job_proc_detach(uint32_t node, uint32_t t, uint64_t id)
{
    pthread_mutex_lock(&g.lock);
    bool *fs = t == LAT_PROC_FS ? fs_slot(node, id) : NULL;
    if (fs)
        *fs = false;
    struct jslot *s = t == LAT_PROC_FS ? NULL : proc_slot(node, t, id);
    if (s)
        s->connected = false;
    pthread_mutex_unlock(&g.lock);
}

struct conn *job_owner(uint64_t id)
{
    struct conn *ctl = NULL;

    pthread_mutex_lock(&g.lock);
    if (g.job && g.job->id == id && !g.job->orphaned)
        ctl = conn_get(g.job->ctl);
    pthread_mutex_unlock(&g.lock);
    return ctl;
}

int job_who(uint64_t *id, struct ident *who)
{
    int err = ESRCH;

    pthread_mutex_lock(&g.lock);
    if (g.job && !g.job->orphaned && (*id == 0 || g.job->id == *id)) {
        const struct ident *w = &g.job->who;
        *id = g.job->id;
        who->uid = w->uid;
        who->gid = w->gid;
        who->ngroups = w->ngroups;
        memcpy(who->groups, w->groups, w->ngroups * sizeof(w->groups[0]));   /* not the whole table: per call */
        err = 0;
    }
    pthread_mutex_unlock(&g.lock);
    return err;
}

void job_proc_place(uint64_t id, int32_t rank, uint32_t *index, uint32_t *count)
{
    *index = *count = 0;
    pthread_mutex_lock(&g.lock);
    if (g.job && g.job->id == id) {
        *count = g.job->nslots;
        for (uint32_t i = 0; i < g.job->nslots; i++)
            *index += g.job->slot[i].rank < rank;
    }
    pthread_mutex_unlock(&g.lock);
}
