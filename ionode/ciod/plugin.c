/*
 * plugin.c - plug-ins (docs/plugins.md): load the shared objects named by
 * --plugin PATH[:LIMIT][;CONFIG], run their init/fini hooks, and serve
 * LAT_PLUG_CALL on a process's connection: decode -> check plug-in,
 * function and size -> dispatch on the caller's own thread -> reply.
 *
 * The table is filled before any connection thread runs and is read-only
 * afterwards.  A bad call gets an error reply and a RAS event; the
 * connection stays up.
 *
 * Each call's zoid_caller comes from what the monitor knows: job, rank and
 * node from the process's authenticated hello (the plug-in line's thread),
 * the owner from the job record (the service node's job request), looked up
 * per call so that a call of a job that no longer runs here is refused.
 */
#include "ciod.h"

#include <dlfcn.h>
#include <poll.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../include/lattice/zoid_ion.h"

_Static_assert(sizeof(gid_t) == sizeof(uint32_t), "zoid_caller.groups are the job's gid_t groups");

#define MAX_PLUGINS   16
#define LIMIT_DEFAULT (256u << 10)
#define LIMIT_MAX     LAT_MAX_IO

struct plugin {
    char        *path;
    char        *config;
    size_t       limit;             /* per call, request and reply each */
    void        *so;
    const struct zoid_plugin *d;
};

static struct plugin plugins[MAX_PLUGINS];
static unsigned nplugins;
/* Outside a call (init, a thread of the plug-in's own): uid and gid -1, which
 * no user has; 0 would be root's. */
#define NO_CALLER_INIT { .rank = -1, .uid = UINT32_MAX, .gid = UINT32_MAX }
#define NO_CALLER ((struct zoid_caller)NO_CALLER_INIT)
static _Thread_local struct zoid_caller current = NO_CALLER_INIT;
static _Thread_local int current_fd = -1;     /* the caller's connection */
static _Thread_local struct ident current_who; /* current.groups points into it */

static const struct zoid_caller *api_caller(void) { return &current; }

static int api_running(uint64_t *job, uint32_t *uid, uint32_t *gid)
{
    struct ident who;
    uint64_t id = 0;

    if (job_who(&id, &who))
        return ESRCH;
    if (job)
        *job = id;
    if (uid)
        *uid = who.uid;
    if (gid)
        *gid = who.gid;
    return 0;
}

/* The process hung up (or died): nobody will read the reply. */
static int api_gone(void)
{
    struct pollfd p = { .fd = current_fd, .events = POLLRDHUP };

    return current_fd < 0 || (poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)));
}

static void api_ras(enum zoid_sev sev, const char *msg)
{
    ras_event(sev == ZOID_ERROR ? RAS_ERROR : sev == ZOID_WARNING ? RAS_WARNING : RAS_INFO,
              cfg.location, "plug-in: %s", msg);
}

static struct zoid_api api = { .abi = ZOID_ABI, .caller = api_caller, .ras = api_ras, .gone = api_gone,
                               .running = api_running };

/* PATH[:LIMIT][;CONFIG], LIMIT in bytes with an optional K or M. */
int plugin_add(const char *spec, char *err, size_t errlen)
{
    struct plugin *p = &plugins[nplugins];
    const char *semi = strchr(spec, ';');
    size_t plen = semi ? (size_t)(semi - spec) : strlen(spec);
    char *colon;

    if (nplugins == MAX_PLUGINS)
        return errprintf(err, errlen, "--plugin: at most %u plug-ins", MAX_PLUGINS);
    p->path = strndup(spec, plen);
    p->config = strdup(semi ? semi + 1 : "");
    if (!p->path || !p->config)
        return errprintf(err, errlen, "--plugin: out of memory");
    p->limit = LIMIT_DEFAULT;
    colon = strrchr(p->path, ':');
    if (colon) {
        char *end;
        unsigned long long v;
        errno = 0;
        v = strtoull(colon + 1, &end, 10);
        if (*end == 'K' || *end == 'k')
            v <<= 10, end++;
        else if (*end == 'M' || *end == 'm')
            v <<= 20, end++;
        if (errno || end == colon + 1 || *end || colon[1] == '-' || v < 64 || v > LIMIT_MAX)
            return errprintf(err, errlen, "--plugin %s: the limit must be 64..%u bytes", spec,
                             LIMIT_MAX);
        p->limit = (size_t)v;
        *colon = 0;
    }
    if (p->path[0] == 0)
        return errprintf(err, errlen, "--plugin %s: no path", spec);
    nplugins++;
    return 0;
}

static void fini_all(void)
{
    for (unsigned i = nplugins; i-- > 0;)
        if (plugins[i].d && plugins[i].d->fini)
            plugins[i].d->fini();
}

int plugin_load_all(char *err, size_t errlen)
{
    api.pset = cfg.pset;
    api.pset_size = cfg.pset_size;
    for (unsigned i = 0; i < nplugins; i++) {
        struct plugin *p = &plugins[i];
        p->so = dlopen(p->path, RTLD_NOW | RTLD_LOCAL);
        if (!p->so)
            return errprintf(err, errlen, "plug-in %s: %s", p->path, dlerror());
        const struct zoid_plugin *d = dlsym(p->so, "zoid_plugin");
        if (d && d->abi != ZOID_ABI && d->abi > 0 && d->abi < 1000) {
            /* a descriptor of another plug-in ABI (another lattice-pluggen): its structs differ */
            ras_event(RAS_ERROR, cfg.location, "plug-in %s was built for plug-in ABI %u, this ciod "
                      "serves ABI %u: rebuild it with lattice-pluggen (docs/plugins.md)",
                      p->path, d->abi, ZOID_ABI);
            return errprintf(err, errlen, "plug-in %s: built for plug-in ABI %u, this ciod serves ABI %u: "
                             "rebuild it with lattice-pluggen", p->path, d->abi, ZOID_ABI);
        }
        if (!d || d->abi != ZOID_ABI || !d->dispatch || !d->api || !d->name)
            return errprintf(err, errlen, "plug-in %s: no zoid_plugin descriptor of ABI %u "
                             "(not built by lattice-pluggen?)", p->path, ZOID_ABI);
        for (unsigned j = 0; j < i; j++)
            if (plugins[j].d->id == d->id)
                return errprintf(err, errlen, "plug-in %s: id %u is already taken by %s",
                                 p->path, d->id, plugins[j].path);
        *d->api = &api;
        int rc = d->init ? d->init(p->config) : 0;
        if (rc)
            return errprintf(err, errlen, "plug-in %s (%s): init failed: %s", p->path, d->name,
                             strerror(rc));
        p->d = d;
        ras_event(RAS_INFO, cfg.location, "plug-in %s (id %u, %u functions, %zu bytes per call) loaded from %s",
                  d->name, d->id, d->nfuncs, p->limit, p->path);
        if (i == 0)
            atexit(fini_all);
    }
    return 0;
}

static int refuse(struct conn *c, const struct lat_hdr *h, int err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int refuse(struct conn *c, const struct lat_hdr *h, int err, const char *fmt, ...)
{
    char msg[CIOD_ERRLEN];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    ras_event(RAS_WARNING, cfg.location, "plug-in call refused: %s", msg);
    return reply_ret(c, h->type, h->seq, -1, err, NULL, 0);
}

/* The call, with `current` set: dispatch, then the reply; < 0 only if it could not be sent. */
static int call(struct conn *c, const struct lat_hdr *h, const struct plugin *p, const struct lat_sysreq *rq,
                size_t len)
{
    struct zoid_reply rep;
    struct lat_sysret rs = { 0, 0, 0 };
    struct iovec v[ZOID_REPLY_IOV + 1];
    uint64_t job = current.job;
    int32_t rank = current.rank;

    memset(&rep, 0, sizeof(rep));
    errno = 0;
    int rc = p->d->dispatch((uint32_t)rq->a[1], c->buf + sizeof(*rq), len, p->limit, &rep);
    if (rc) {
        if (rep.done)
            rep.done(&rep);
        return refuse(c, h, rc, "job %" PRIu64 " rank %d: plug-in %s function %" PRId64 ": %s",
                      job, rank, p->d->name, rq->a[1], strerror(rc));
    }
    v[0] = (struct iovec){ &rs, sizeof(rs) };
    size_t total = 0;
    for (int i = 0; i < rep.n; i++) {
        v[1 + i] = rep.iov[i];
        total += rep.iov[i].iov_len;
    }
    if (rq->a[2] < 0 || total > (uint64_t)rq->a[2]) {
        /* the stub could not take it: a stub of another version of the header */
        rep.done(&rep);
        return refuse(c, h, EMSGSIZE, "job %" PRIu64 " rank %d: plug-in %s function %" PRId64
                      ": %zu reply bytes, the caller takes %" PRId64, job, rank, p->d->name,
                      rq->a[1], total, rq->a[2]);
    }
    int r = conn_sendv(c, h->type | LAT_REPLY, h->seq, v, rep.n + 1);
    if (rep.done)
        rep.done(&rep);
    return r;
}

int plugin_serve(struct conn *c, const struct lat_hdr *h, uint64_t job, int32_t rank, uint32_t node)
{
    struct lat_sysreq rq;
    struct plugin *p = NULL;

    if (h->len < sizeof(rq))
        return refuse(c, h, EPROTO, "job %" PRIu64 " rank %d: %u bytes, less than a call", job, rank, h->len);
    memcpy(&rq, c->buf, sizeof(rq));
    for (unsigned i = 0; i < nplugins; i++)
        if ((int64_t)plugins[i].d->id == rq.a[0])
            p = &plugins[i];
    if (!p)
        return refuse(c, h, ENOENT, "job %" PRIu64 " rank %d: no plug-in with id %" PRId64,
                      job, rank, rq.a[0]);
    if (rq.a[1] < 0 || rq.a[1] >= p->d->nfuncs)
        return refuse(c, h, ENOSYS, "job %" PRIu64 " rank %d: plug-in %s has no function %" PRId64,
                      job, rank, p->d->name, rq.a[1]);
    size_t len = h->len - sizeof(rq);
    if (len > p->limit)
        return refuse(c, h, E2BIG, "job %" PRIu64 " rank %d: %zu argument bytes for plug-in %s, over its limit of %zu",
                      job, rank, len, p->d->name, p->limit);
    uint64_t id = job;
    if (job_who(&id, &current_who))
        return refuse(c, h, ESRCH, "job %" PRIu64 " rank %d: the job no longer runs here", job, rank);
    current = (struct zoid_caller){ .job = job, .rank = rank, .node = node, .uid = current_who.uid,
                                    .gid = current_who.gid, .ngroups = current_who.ngroups,
                                    .groups = (const uint32_t *)current_who.groups };
    current_fd = c->fd;
    job_proc_place(job, rank, &current.index, &current.count);
    int r = call(c, h, p, &rq, len);
    current = NO_CALLER;                /* nobody's, never root's, until the next call */
    current_fd = -1;
    return r;
}

unsigned plugin_count(void)
{
    return nplugins;
}
