/*
 * admit.c - what a peer can cost ciod.  Every connection has a thread, so
 * connections are capped.  Those still waiting for their hello (each shut
 * after LATTICE_HELLO_TIMEOUT, session.c) at ADMIT_HELLO_MAX: a new one
 * beyond it evicts the oldest, since an honest peer sends its hello at once
 * and only a silent one grows old, so a flood of idle connections cannot
 * keep the service node or a compute node out.  All connections at what
 * an authenticated pset can use, plus the pending ones:
 *
 *   ADMIT_CONTROL_MAX + pset_size * (1 node + ppn * (PROC + PMI)) + ADMIT_HELLO_MAX
 *
 * beyond which a new connection is closed at once; ppn is ADMIT_PPN (64) or
 * the most processes per node a job the service node sent has had (admit_ppn:
 * a node with more cores runs more in virtual node mode, LAT_MAX_PPN at most).
 * LATTICE_MAX_CONNS and LATTICE_MAX_HELLO lower the caps (tests).  Refusals and evictions are
 * counted (in their RAS events, folded per peer by ras.c).
 */
#include "ciod.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct conn *head, *tail;        /* pending, oldest first */
static uint32_t nconns, npending, max_conns, max_pending, max_ppn = ADMIT_PPN;
static uint64_t nrefused, nevicted;
static bool lowered;                    /* LATTICE_MAX_CONNS set the cap: jobs do not raise it */

static int env_cap(const char *name, uint32_t *cap, char *err, size_t errlen)
{
    const char *s = getenv(name);
    char *end;
    unsigned long v;

    if (!s || !*s)
        return 0;
    errno = 0;
    v = strtoul(s, &end, 10);
    if (errno || *end || s[0] == '-' || v == 0)
        return errprintf(err, errlen, "%s must be a number of connections >= 1, not \"%s\"", name, s);
    if (v < *cap)                       /* it lowers the cap, never raises it */
        *cap = (uint32_t)v;
    return 0;
}

int admit_init(char *err, size_t errlen)
{
    uint32_t base = max_conns = ADMIT_CONTROL_MAX + cfg.pset_size * (1 + 2 * ADMIT_PPN) + ADMIT_HELLO_MAX;
    max_pending = ADMIT_HELLO_MAX;
    if (env_cap("LATTICE_MAX_CONNS", &max_conns, err, errlen) < 0
        || env_cap("LATTICE_MAX_HELLO", &max_pending, err, errlen) < 0)
        return -1;
    lowered = max_conns < base;
    if (max_pending > max_conns)
        max_pending = max_conns;
    logmsg("at most %u connections, %u of them waiting for their hello", max_conns, max_pending);
    return 0;
}

static void unlink_pending(struct conn *c)
{
    if (c->pprev)
        c->pprev->pnext = c->pnext;
    else
        head = c->pnext;
    if (c->pnext)
        c->pnext->pprev = c->pprev;
    else
        tail = c->pprev;
    c->pnext = c->pprev = NULL;
    c->pending = false;
    npending--;
}

bool admit_new(struct conn *c)
{
    char peer[sizeof(c->peer)], who[sizeof(c->who)];
    uint64_t n;
    bool evicted = false;

    pthread_mutex_lock(&lock);
    if (nconns >= max_conns) {
        n = ++nrefused;
        pthread_mutex_unlock(&lock);
        ras_event_from(c->who, RAS_WARNING, cfg.location, "connection from %s refused: %u connections "
                       "already, the most this I/O node serves (%" PRIu64 " refused since start)",
                       c->peer, max_conns, n);
        return false;
    }
    if (npending >= max_pending && head) {
        struct conn *old = head;        /* alive: its thread takes it off the list before it ends */
        unlink_pending(old);
        old->evicted = true;
        shutdown(old->fd, SHUT_RDWR);   /* its thread's read ends */
        memcpy(peer, old->peer, sizeof(peer));
        memcpy(who, old->who, sizeof(who));
        n = ++nevicted;
        evicted = true;
    }
    c->pprev = tail;
    c->pnext = NULL;
    if (tail)
        tail->pnext = c;
    else
        head = c;
    tail = c;
    c->pending = true;
    npending++;
    nconns++;
    pthread_mutex_unlock(&lock);
    if (evicted)
        ras_event_from(who, RAS_WARNING, cfg.location, "connection from %s closed before its hello: "
                       "%u connections were waiting for theirs, the most this I/O node keeps "
                       "(%" PRIu64 " closed so since start)", peer, max_pending, n);
    return true;
}

void admit_undo(struct conn *c)
{
    pthread_mutex_lock(&lock);
    if (c->pending)
        unlink_pending(c);
    nconns--;
    pthread_mutex_unlock(&lock);
}

bool admit_hello_done(struct conn *c, uint32_t role)
{
    bool ok;

    pthread_mutex_lock(&lock);
    ok = !c->evicted;
    if (c->pending)
        unlink_pending(c);
    pthread_mutex_unlock(&lock);
    /* the service node and compute nodes are trusted; a compute process runs the user's code */
    ras_thread_peer(role == LAT_ROLE_PROC || role == LAT_ROLE_PMI ? c->who : NULL);
    return ok;
}

void admit_end(struct conn *c)
{
    ras_thread_peer(NULL);
    admit_undo(c);
}

void admit_ppn(uint32_t ppn)
{
    pthread_mutex_lock(&lock);
    if (ppn > max_ppn && ppn <= LAT_MAX_PPN && !lowered) {
        max_conns += cfg.pset_size * 2 * (ppn - max_ppn);
        max_ppn = ppn;
        logmsg("a job of %u processes per node: at most %u connections now", ppn, max_conns);
    }
    pthread_mutex_unlock(&lock);
}
