/*
 * control.c - the service node's control connections.
 *
 * Each request goes decode -> authorize -> act -> reply.  Handlers return
 * -1 only when the message itself is malformed (the connection is then
 * closed); a request that is understood but refused gets a lat_sysret with
 * ret -1, the errno and a message text.
 */
#include "ciod.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef int (*ctl_fn)(struct conn *c, const struct lat_hdr *h, char *why, size_t whylen);

static int reply_ok(struct conn *c, const struct lat_hdr *h)
{
    return reply_ret(c, h->type, h->seq, 0, 0, NULL, 0);
}

static int reply_refused(struct conn *c, const struct lat_hdr *h, int err, const char *text)
{
    logmsg("%s: request 0x%04x refused: %s", c->peer, h->type, text);
    return reply_ret(c, h->type, h->seq, -1, err, text, strlen(text));
}

static int on_status(struct conn *c, const struct lat_hdr *h, char *why, size_t whylen)
{
    struct lat_ctl_status st;

    (void)why, (void)whylen;
    job_status(&st);
    return conn_send(c, h->type | LAT_REPLY, h->seq, &st, sizeof(st)), 0;
}

static int on_counters(struct conn *c, const struct lat_hdr *h, char *why, size_t whylen)
{
    static _Thread_local uint64_t words[DP_COUNTER_WORDS];
    size_t n = dp_counters(words, DP_COUNTER_WORDS);

    (void)why, (void)whylen;
    return conn_send(c, h->type | LAT_REPLY, h->seq, words, n * sizeof(uint64_t)), 0;
}

static int on_kill(struct conn *c, const struct lat_hdr *h, char *why, size_t whylen)
{
    struct lat_kill k;
    uint64_t running;
    char text[160];

    if (h->len < sizeof(k))
        return errprintf(why, whylen, "CTL_KILL of %u bytes", h->len);
    memcpy(&k, c->buf, sizeof(k));
    if (k.sig < 1 || k.sig >= NSIG)
        return reply_refused(c, h, EINVAL, "no such signal"), 0;
    if (job_signal(k.job, k.sig, "killed at the service node's request", &running) != 0) {
        /* a kill for another job must never reach the one that runs */
        if (running)
            snprintf(text, sizeof(text), "job %" PRIu64 " does not run here (job %" PRIu64 " does): "
                     "signal %d refused", k.job, running, k.sig);
        else
            snprintf(text, sizeof(text), "job %" PRIu64 " does not run here (no job is running): "
                     "signal %d refused", k.job, k.sig);
        ras_event(RAS_WARNING, cfg.location, "%s, from %s", text, c->peer);
        return reply_refused(c, h, ESRCH, text), 0;
    }
    logmsg("job %" PRIu64 ": signal %d requested by %s", k.job, k.sig, c->peer);
    return reply_ok(c, h), 0;
}

static int on_shutdown(struct conn *c, const struct lat_hdr *h, char *why, size_t whylen)
{
    struct conn *nodes[LAT_MAX_PSET];

    (void)why, (void)whylen;
    ras_event(RAS_INFO, cfg.location, "shutdown requested by %s", c->peer);
    job_kill_any("the I/O node was shut down");
    job_nodes(nodes, true, NULL);
    for (uint32_t i = 0; i < cfg.pset_size; i++) {
        if (nodes[i]) {
            conn_send(nodes[i], LAT_NODE_SHUTDOWN, 0, NULL, 0);
            conn_put(nodes[i]);
        }
    }
    reply_ok(c, h);
    net_unlink(cfg.listen);
    exit(0);
}

/* ---- LAT_CTL_JOB ---- */

static const char *next_string(const char **p, const char *end)
{
    const char *s = *p, *nul = memchr(s, '\0', end - s);

    if (!nul)
        return NULL;
    *p = nul + 1;
    return s;
}

static bool good_path(const char *s)
{
    return s[0] == '/' && strlen(s) < LAT_MAX_PATH;
}

/* Slots of a placed job: each within range, no rank or (node, t) twice, and
 * consistent with rank[] (the process t = 0 of each busy node). */
static int check_slots(const struct job_spec *js, char *why, size_t whylen)
{
    const struct lat_job *jh = js->hdr;
    bool t0[LAT_MAX_PSET] = { false };

    for (uint32_t i = 0; i < js->nslots; i++) {
        const struct lat_slot *s = &js->slot[i];
        if (s->rank >= jh->nranks || s->node >= jh->pset_size || s->t >= js->ppn || s->app >= js->napps)
            return errprintf(why, whylen, "slot %u (rank %u node %u t %u app %u) out of range "
                             "(%u ranks, %u nodes, %u per node, %u applications)", i, s->rank, s->node, s->t,
                             s->app, jh->nranks, jh->pset_size, js->ppn, js->napps);
        for (uint32_t k = 0; k < i; k++) {
            if (js->slot[k].rank == s->rank)
                return errprintf(why, whylen, "rank %u placed twice", s->rank);
            if (js->slot[k].node == s->node && js->slot[k].t == s->t)
                return errprintf(why, whylen, "node %u process %u given to ranks %u and %u", s->node, s->t,
                                 js->slot[k].rank, s->rank);
        }
        if (s->t == 0) {
            if (js->rank[s->node] != (int32_t)s->rank)
                return errprintf(why, whylen, "node %u: rank[] says %d, its process 0 is rank %u", s->node,
                                 js->rank[s->node], s->rank);
            t0[s->node] = true;
        }
    }
    for (uint32_t i = 0; i < js->nslots; i++)
        if (!t0[js->slot[i].node])
            return errprintf(why, whylen, "node %u has processes but no process 0", js->slot[i].node);
    for (uint32_t i = 0; i < jh->pset_size; i++)
        if (js->rank[i] >= 0 && !t0[i])
            return errprintf(why, whylen, "node %u: rank[] says %d but no slot runs it", i, js->rank[i]);
    return 0;
}

/* LAT_JOB_CPUS: each slot's lat_cpus, then all their CPUs, at *need. */
static int decode_cpus(const char *p, size_t len, size_t *need, struct job_spec *js, char *why, size_t whylen)
{
    uint64_t total = 0;

    if (len < *need + sizeof(struct lat_cpus) * (size_t)js->nslots)
        return errprintf(why, whylen, "job of %zu bytes cannot hold the CPUs of %u slots", len, js->nslots);
    js->cpus = (const struct lat_cpus *)(p + *need);
    *need += sizeof(struct lat_cpus) * (size_t)js->nslots;
    for (uint32_t i = 0; i < js->nslots; i++) {
        const struct lat_cpus *c = &js->cpus[i];
        if (c->ncpus < 1 || c->ncpus > LAT_CPU_LIMIT)
            return errprintf(why, whylen, "slot %u has %u CPUs (1..%u)", i, c->ncpus, LAT_CPU_LIMIT);
        if (c->progress != 0 && c->progress != 1 && c->progress != LAT_PROGRESS_UNSET)
            return errprintf(why, whylen, "slot %u: progress %d is not 0, 1 or %d", i, c->progress,
                             LAT_PROGRESS_UNSET);
        total += c->ncpus;
    }
    if (total > (len - *need) / sizeof(uint32_t))
        return errprintf(why, whylen, "job of %zu bytes cannot hold %" PRIu64 " CPU numbers", len, total);
    js->cpu = (const uint32_t *)(p + *need);
    *need += sizeof(uint32_t) * (size_t)total;
    for (uint64_t k = 0; k < total; k++)
        if (js->cpu[k] >= LAT_CPU_LIMIT)
            return errprintf(why, whylen, "CPU %u out of range (below %u)", js->cpu[k], LAT_CPU_LIMIT);
    return 0;
}

/* Every count is checked against the payload before it is used. */
static int decode_job(const char *p, size_t len, struct job_spec *js, char *why, size_t whylen)
{
    const struct lat_job *jh = (const void *)p;
    const char *s, *end = p + len;
    const uint32_t *nargs = NULL;
    bool placed = jh->flags & LAT_JOB_PLACED;
    uint64_t strings;
    size_t need;

    memset(js, 0, offsetof(struct job_spec, one));
    js->hdr = jh;
    if (jh->job == 0)
        return errprintf(why, whylen, "job id 0 is reserved");
    if (jh->pset_size != cfg.pset_size)
        return errprintf(why, whylen, "job is laid out for psets of %u nodes, this pset has %u",
                         jh->pset_size, cfg.pset_size);
    if (jh->flags & ~(uint32_t)LAT_JOB_FLAGS_ALL)
        return errprintf(why, whylen, "unknown job flags 0x%x", jh->flags & ~(uint32_t)LAT_JOB_FLAGS_ALL);
    if ((jh->flags & LAT_JOB_TRACE) && !(jh->flags & LAT_JOB_CNK))
        return errprintf(why, whylen, "job flag TRACE needs flag CNK (tracing is done by cnk)");
    if ((jh->flags & LAT_JOB_SANDBOX) && (jh->flags & LAT_JOB_CNK))
        return errprintf(why, whylen, "job flag SANDBOX is for Linux mode, not with flag CNK");
    if ((jh->flags & LAT_JOB_CPUS) && !placed)
        return errprintf(why, whylen, "job flag CPUS needs flag PLACED (CPUs are given per slot)");
    if ((jh->flags & LAT_JOB_STDIN) && !placed)
        return errprintf(why, whylen, "job flag STDIN needs flag PLACED (the reading rank is in the mapping)");
    if (jh->ngroups > CIOD_MAX_GROUPS)
        return errprintf(why, whylen, "%u supplementary groups (at most %u)", jh->ngroups,
                         CIOD_MAX_GROUPS);
    if (jh->nargs < 1)
        return errprintf(why, whylen, "no argv[0]");
    if (jh->nranks < 1)
        return errprintf(why, whylen, "job has no ranks");
    need = sizeof(*jh) + sizeof(int32_t) * (size_t)jh->pset_size + sizeof(uint32_t) * (size_t)jh->ngroups;
    if (len < need)
        return errprintf(why, whylen, "job of %zu bytes cannot hold %u ranks and %u groups",
                         len, jh->pset_size, jh->ngroups);
    js->rank = (const int32_t *)(p + sizeof(*jh));
    js->groups = (const uint32_t *)(p + sizeof(*jh) + sizeof(int32_t) * jh->pset_size);
    if (placed) {
        struct lat_job_ext ext;
        if (len < need + sizeof(ext))
            return errprintf(why, whylen, "placed job of %zu bytes without its rank mapping", len);
        memcpy(&ext, p + need, sizeof(ext));
        if (ext.napps < 1 || ext.napps > LAT_MAX_APPS || ext.ppn < 1 || ext.ppn > LAT_MAX_PPN
            || ext.nslots > jh->pset_size * ext.ppn)
            return errprintf(why, whylen, "rank mapping of %u slots, %u applications, %u per node: out of range "
                             "(applications 1..%u, per node 1..%u)", ext.nslots, ext.napps, ext.ppn,
                             LAT_MAX_APPS, LAT_MAX_PPN);
        need += sizeof(ext);
        if (len < need + sizeof(struct lat_slot) * (size_t)ext.nslots + sizeof(uint32_t) * (size_t)ext.napps)
            return errprintf(why, whylen, "job of %zu bytes cannot hold %u slots and %u applications", len,
                             ext.nslots, ext.napps);
        js->slot = (const struct lat_slot *)(p + need);
        need += sizeof(struct lat_slot) * (size_t)ext.nslots;
        nargs = (const uint32_t *)(p + need);
        need += sizeof(uint32_t) * (size_t)ext.napps;
        js->nslots = ext.nslots;
        js->napps = ext.napps;
        js->ppn = ext.ppn;
        admit_ppn(ext.ppn);             /* the service node's job: its processes may all connect */
        js->stdin_rank = ext.stdin_rank;
        if ((jh->flags & LAT_JOB_STDIN) && ext.stdin_rank != LAT_STDIN_ALL && ext.stdin_rank >= jh->nranks)
            return errprintf(why, whylen, "standard input for rank %u of a job of %u ranks", ext.stdin_rank,
                             jh->nranks);
        if (nargs[0] != jh->nargs)
            return errprintf(why, whylen, "application 0 has %u arguments in the rank mapping, %u in the job",
                             nargs[0], jh->nargs);
        if ((jh->flags & LAT_JOB_CPUS) && decode_cpus(p, len, &need, js, why, whylen) < 0)
            return -1;
    } else {
        js->napps = js->ppn = 1;
    }
    strings = (uint64_t)jh->nenv;
    for (uint32_t a = 0; a < js->napps; a++) {
        js->app[a].nargs = placed ? nargs[a] : jh->nargs;
        if (js->app[a].nargs < 1)
            return errprintf(why, whylen, "application %u has no argv[0]", a);
        strings += js->app[a].nargs;
    }
    if (strings > LAT_MAX_ARGS)
        return errprintf(why, whylen, "%" PRIu64 " argument and environment strings (at most %u)",
                         strings, LAT_MAX_ARGS);
    for (uint32_t i = 0; i < jh->pset_size; i++) {
        int32_t r = js->rank[i];
        if (r < -1 || (r >= 0 && (uint32_t)r >= jh->nranks))
            return errprintf(why, whylen, "node %u: rank %d out of range (job has %u ranks)", i, r,
                             jh->nranks);
        for (uint32_t k = 0; r >= 0 && k < i; k++)
            if (js->rank[k] == r)
                return errprintf(why, whylen, "rank %d given to nodes %u and %u", r, k, i);
        if (!placed && r >= 0)
            js->one[js->nslots++] = (struct lat_slot){ .rank = (uint32_t)r, .node = i };
    }
    if (!placed)
        js->slot = js->one;
    else if (check_slots(js, why, whylen) < 0)
        return -1;

    s = p + need;
    if (!(js->app[0].exe = next_string(&s, end)) || !(js->cwd = next_string(&s, end)))
        return errprintf(why, whylen, "executable and working directory missing or not NUL-terminated");
    js->app[0].argv = s;
    for (uint32_t i = 0; i < jh->nargs; i++)
        if (!next_string(&s, end))
            return errprintf(why, whylen, "argument %u missing or not NUL-terminated", i);
    js->app[0].argvlen = s - js->app[0].argv;
    js->env = s;
    for (uint32_t i = 0; i < jh->nenv; i++)
        if (!next_string(&s, end))
            return errprintf(why, whylen, "environment string %u missing or not NUL-terminated", i);
    js->envlen = s - js->env;
    js->mapping = "";
    if (placed) {
        if (!(js->mapping = next_string(&s, end)))
            return errprintf(why, whylen, "PMI_process_mapping missing or not NUL-terminated");
        for (uint32_t a = 1; a < js->napps; a++) {
            if (!(js->app[a].exe = next_string(&s, end)))
                return errprintf(why, whylen, "application %u: executable missing", a);
            js->app[a].argv = s;
            for (uint32_t i = 0; i < js->app[a].nargs; i++)
                if (!next_string(&s, end))
                    return errprintf(why, whylen, "application %u: argument %u missing or not NUL-terminated",
                                     a, i);
            js->app[a].argvlen = s - js->app[a].argv;
        }
    }
    for (uint32_t a = 0; a < js->napps; a++)
        if (!good_path(js->app[a].exe))
            return errprintf(why, whylen, "executables must be absolute paths shorter than %u bytes",
                             LAT_MAX_PATH);
    if (!good_path(js->cwd))
        return errprintf(why, whylen, "working directory must be an absolute path shorter than %u bytes",
                         LAT_MAX_PATH);
    if (s != end)
        return errprintf(why, whylen, "%zu stray bytes after the last string", (size_t)(end - s));
    js->who.uid = jh->uid;
    js->who.gid = jh->gid;
    js->who.ngroups = jh->ngroups;
    for (uint32_t i = 0; i < jh->ngroups; i++)
        js->who.groups[i] = js->groups[i];
    return 0;
}

/* One executable, opened by the job's worker (the kernel checked that the
 * owner may execute it), read once here. */
static int load_image(const char *exe, char **image, size_t *size, char *why, size_t whylen)
{
    struct stat st;
    char *buf = NULL;
    size_t got = 0;
    int fd, err;

    if ((err = worker_open_exe(exe, &fd, why, whylen)) != 0)
        return err;
    if (fstat(fd, &st) < 0)
        goto syserr_read;
    if ((unsigned long long)st.st_size > LAT_MAX_IMAGE) {
        errno = EFBIG;
        errprintf(why, whylen, "cannot load %s: %lld bytes, more than the %llu a job may have",
                  exe, (long long)st.st_size, (unsigned long long)LAT_MAX_IMAGE);
        goto fail;
    }
    buf = malloc(st.st_size ? (size_t)st.st_size : 1);
    if (!buf)
        goto syserr_read;
    while (got < (size_t)st.st_size) {
        ssize_t n = pread(fd, buf + got, (size_t)st.st_size - got, (off_t)got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            goto syserr_read;
        if (n == 0) {
            errno = EIO;
            errprintf(why, whylen, "cannot read %s: file shrank while being read", exe);
            goto fail;
        }
        got += n;
    }
    close(fd);
    *image = buf;
    *size = got;
    return 0;

syserr_read:
    errprintf(why, whylen, "cannot read %s: %s", exe, strerror(errno));
fail:
    err = errno;
    close(fd);
    free(buf);
    return err ? err : EIO;
}

/* Each application this pset runs, read once. */
static int load_job_files(const struct job_spec *js, char *image[LAT_MAX_APPS], size_t size[LAT_MAX_APPS],
                          char *why, size_t whylen)
{
    int err;

    for (uint32_t a = 0; a < js->napps; a++) {
        bool used = false;
        for (uint32_t i = 0; i < js->nslots && !used; i++)
            used = js->slot[i].app == a;
        if (used && (err = load_image(js->app[a].exe, &image[a], &size[a], why, whylen)) != 0)
            return err;
    }
    return 0;
}

static void put_bytes(char **w, const void *p, size_t n)
{
    memcpy(*w, p, n);
    *w += n;
}

/* JOB + IMAGE chunks to one node; START comes later, to all at once.  A
 * placed job tells the node its processes and the images they need. */
static int push_node(struct conn *n, const struct job_spec *js, uint32_t node,
                     char *const image[LAT_MAX_APPS], const size_t size[LAT_MAX_APPS])
{
    const struct lat_job *jh = js->hdr;
    bool placed = jh->flags & LAT_JOB_PLACED, used[LAT_MAX_APPS] = { false };
    struct lat_node_job nj = { .job = jh->job, .rank = (uint32_t)js->rank[node], .size = jh->nranks,
                               .uid = jh->uid, .gid = jh->gid, .ngroups = jh->ngroups, .nargs = jh->nargs,
                               .nenv = jh->nenv, .flags = jh->flags };
    /* stdin_rank: a sandboxed node pumps the reading ranks' input (compute/cnode/stdin_pump.c) */
    struct lat_job_ext ext = { .napps = js->napps, .ppn = js->ppn, .stdin_rank = js->stdin_rank };
    size_t cap = sizeof(nj) + sizeof(uint32_t) * jh->ngroups + sizeof(ext) + js->envlen
                 + (sizeof(struct lat_slot) + sizeof(struct lat_node_app)) * (size_t)(js->nslots + js->napps);
    char *msg, *w;
    int rc;

    for (uint32_t i = 0; i < js->nslots; i++)
        if (js->slot[i].node == node) {
            used[js->slot[i].app] = true;
            ext.nslots++;
            if (js->cpus)
                cap += sizeof(struct lat_cpus) + sizeof(uint32_t) * (size_t)js->cpus[i].ncpus;
        }
    for (uint32_t a = 0; a < js->napps; a++) {
        cap += js->app[a].argvlen;
        nj.image_size += used[a] ? size[a] : 0;
    }
    if (cap > LAT_MAX_PAYLOAD || !(msg = w = malloc(cap))) {
        errno = cap > LAT_MAX_PAYLOAD ? EMSGSIZE : ENOMEM;
        return -1;
    }
    put_bytes(&w, &nj, sizeof(nj));
    put_bytes(&w, js->groups, sizeof(uint32_t) * jh->ngroups);
    if (placed) {
        put_bytes(&w, &ext, sizeof(ext));
        for (uint32_t i = 0; i < js->nslots; i++)
            if (js->slot[i].node == node)
                put_bytes(&w, &js->slot[i], sizeof(js->slot[i]));
        for (uint32_t a = 0; a < js->napps; a++) {
            struct lat_node_app na = { .image_size = used[a] ? size[a] : 0, .nargs = js->app[a].nargs };
            put_bytes(&w, &na, sizeof(na));
        }
        if (js->cpus) {         /* this node's slots' lat_cpus, then their CPUs, in slot order */
            for (uint32_t i = 0; i < js->nslots; i++)
                if (js->slot[i].node == node)
                    put_bytes(&w, &js->cpus[i], sizeof(js->cpus[i]));
            for (uint32_t i = 0, at = 0; i < js->nslots; at += js->cpus[i++].ncpus)
                if (js->slot[i].node == node)
                    put_bytes(&w, &js->cpu[at], sizeof(uint32_t) * (size_t)js->cpus[i].ncpus);
        }
    }
    put_bytes(&w, js->app[0].argv, js->app[0].argvlen);
    put_bytes(&w, js->env, js->envlen);
    for (uint32_t a = 1; placed && a < js->napps; a++)
        put_bytes(&w, js->app[a].argv, js->app[a].argvlen);

    pthread_mutex_lock(&n->wlock);
    struct iovec v = { msg, (size_t)(w - msg) };
    rc = conn_sendv_locked(n, LAT_NODE_JOB, 0, &v, 1);
    for (uint32_t a = 0; a < js->napps; a++)
        for (size_t off = 0; rc == 0 && used[a] && off < size[a]; off += LAT_MAX_IO) {
            struct iovec chunk = { image[a] + off, size[a] - off < LAT_MAX_IO ? size[a] - off : LAT_MAX_IO };
            rc = conn_sendv_locked(n, LAT_NODE_IMAGE, 0, &chunk, 1);
        }
    pthread_mutex_unlock(&n->wlock);
    free(msg);
    return rc;
}

/* Standard input of the running job, for its worker (stdin.c).  Input for
 * a job that ended meanwhile is dropped; more than the window is refused. */
static int on_stdin(struct conn *c, const struct lat_hdr *h, char *why, size_t whylen)
{
    struct lat_stdin in;

    if (h->len < sizeof(in))
        return errprintf(why, whylen, "CTL_STDIN of %u bytes", h->len);
    memcpy(&in, c->buf, sizeof(in));
    if (in.bytes != h->len - sizeof(in) || in.bytes > LAT_STDIN_MAX || (in.flags & ~LAT_STDIN_EOF))
        return errprintf(why, whylen, "CTL_STDIN of %u bytes announcing %u (at most %u), flags 0x%x", h->len,
                         in.bytes, LAT_STDIN_MAX, in.flags);
    struct conn *owner = job_owner(in.job);
    bool ours = owner == c;
    if (owner)
        conn_put(owner);
    if (!ours)
        return 0;                       /* the job ended, or is not this connection's */
    int err = worker_stdin(in.job, in.flags, c->buf + sizeof(in), in.bytes);
    if (err == ENOBUFS)
        ras_job_event(in.job, RAS_WARNING, cfg.location, "job %" PRIu64 ": standard input over the window of %u bytes "
                  "refused (%u bytes)", in.job, LAT_STDIN_WINDOW, in.bytes);
    return 0;
}

/* The service node completed a fence of the job: publish and release. */
static int on_fence_out(struct conn *c, const struct lat_hdr *h, char *why, size_t whylen)
{
    return pmi_fence_out(c->buf, h->len, why, whylen);
}

/* Where this I/O node sits in the job's PMI fence tree. */
static int on_pmi_tree(struct conn *c, const struct lat_hdr *h, char *why, size_t whylen)
{
    char text[CIOD_ERRLEN];
    int err = tree_start(c->buf, h->len, text, sizeof(text));

    if (err < 0)
        return snprintf(why, whylen, "%s", text), -1;
    if (err)
        return reply_refused(c, h, err, text), 0;
    return reply_ok(c, h), 0;
}

/* The service node answered a rank's name request. */
static int on_name_out(struct conn *c, const struct lat_hdr *h, char *why, size_t whylen)
{
    return pmi_name_out(c->buf, h->len, why, whylen);
}

static int on_job(struct conn *c, const struct lat_hdr *h, char *why, size_t whylen)
{
    struct conn *nodes[LAT_MAX_PSET];
    struct job_spec *js;
    struct lat_job_end start;
    struct lat_sysret ok = { 0 };
    char text[CIOD_ERRLEN];
    char *image[LAT_MAX_APPS] = { NULL };
    size_t size[LAT_MAX_APPS] = { 0 };
    int err;

    /* decode */
    if (h->len < sizeof(struct lat_job))
        return errprintf(why, whylen, "CTL_JOB of %u bytes", h->len);
    if (!(js = malloc(sizeof(*js))))
        return reply_refused(c, h, ENOMEM, "out of memory"), 0;
    if (decode_job(c->buf, h->len, js, text, sizeof(text)) < 0) {
        err = EINVAL;
        goto refused;
    }
    /* authorize */
    if (geteuid() != 0 && js->who.uid != getuid()) {
        snprintf(text, sizeof(text), "ciod runs as uid %u and cannot act as uid %u",
                 (unsigned)getuid(), js->who.uid);
        err = EPERM;
        goto refused;
    }
    if (job_busy()) {                   /* cheap early answer; job_register decides */
        snprintf(text, sizeof(text), "a job is running on this I/O node");
        err = EBUSY;
        goto refused;
    }
    /* act: the job's worker becomes the owner and opens its files, then hand out */
    if ((err = worker_start(js, text, sizeof(text))) != 0)
        goto refused;
    err = load_job_files(js, image, size, text, sizeof(text));
    if (!err)
        err = job_register(js, c, nodes, text, sizeof(text));
    if (err) {
        worker_abort(js->hdr->job);
        goto refused;
    }
    if ((err = worker_run()) != 0)
        logmsg("job %" PRIu64 ": cannot watch its I/O worker: %s", js->hdr->job, strerror(err));
    if (pmi_job_start(js, text, sizeof(text)) != 0)
        ras_job_event(js->hdr->job, RAS_ERROR, cfg.location, "job %" PRIu64 ": no PMI service: %s", js->hdr->job, text);
    logmsg("job %" PRIu64 " from %s: %s, uid %u, %u ranks (%u here, %u per node, %u applications), kernel %s%s",
           js->hdr->job, c->peer, js->app[0].exe, js->who.uid, js->hdr->nranks, js->nslots, js->ppn, js->napps,
           js->hdr->flags & LAT_JOB_CNK ? "cnk" : "linux", js->hdr->flags & LAT_JOB_TRACE ? " (trace)" : "");

    /* Hold our write lock until the reply is out: no exit or output of this
     * job can reach the service node before it learns the job started. */
    pthread_mutex_lock(&c->wlock);
    for (uint32_t i = 0; i < cfg.pset_size; i++)
        if (nodes[i] && push_node(nodes[i], js, i, image, size) < 0)
            logmsg("job %" PRIu64 ": push to node %u failed: %s", js->hdr->job, i, strerror(errno));
    for (uint32_t a = 0; a < LAT_MAX_APPS; a++)
        free(image[a]);
    start.job = js->hdr->job;
    free(js);
    for (uint32_t i = 0; i < cfg.pset_size; i++) {
        if (nodes[i]) {
            conn_send(nodes[i], LAT_NODE_START, 0, &start, sizeof(start));
            conn_put(nodes[i]);
        }
    }
    struct iovec v = { &ok, sizeof(ok) };
    conn_sendv_locked(c, h->type | LAT_REPLY, h->seq, &v, 1);
    if (job_started(start.job)) {       /* no rank of it runs in this pset */
        v = (struct iovec){ &start, sizeof(start) };
        conn_sendv_locked(c, LAT_CTL_JOB_END, 0, &v, 1);
    }
    pthread_mutex_unlock(&c->wlock);
    return 0;

refused:
    for (uint32_t a = 0; a < LAT_MAX_APPS; a++)
        free(image[a]);
    free(js);
    return reply_refused(c, h, err, text), 0;
}

static const ctl_fn handlers[] = {
    [LAT_CTL_STATUS - LAT_CTL_STATUS]   = on_status,
    [LAT_CTL_JOB - LAT_CTL_STATUS]      = on_job,
    [LAT_CTL_KILL - LAT_CTL_STATUS]     = on_kill,
    [LAT_CTL_SHUTDOWN - LAT_CTL_STATUS] = on_shutdown,
    [LAT_CTL_COUNTERS - LAT_CTL_STATUS] = on_counters,
    [LAT_CTL_FENCE_OUT - LAT_CTL_STATUS] = on_fence_out,   /* one-way: no reply */
    [LAT_CTL_NAME_OUT - LAT_CTL_STATUS] = on_name_out,     /* one-way: no reply */
    [LAT_CTL_STDIN - LAT_CTL_STATUS]    = on_stdin,         /* one-way: acknowledged by CTL_STDIN_ACK */
    [LAT_CTL_PMI_TREE - LAT_CTL_STATUS] = on_pmi_tree,
};

void control_serve(struct conn *c)
{
    struct lat_hdr h;
    char why[CIOD_ERRLEN];
    int rc;

    logmsg("control connection from %s", c->peer);
    while ((rc = conn_recv(c, &h, why, sizeof(why))) > 0) {
        unsigned i = (unsigned)h.type - LAT_CTL_STATUS;
        ctl_fn fn = i < sizeof(handlers) / sizeof(handlers[0]) ? handlers[i] : NULL;
        if (!fn) {
            reply_error(c, h.seq, ENOSYS, "message type 0x%04x is not served on a control connection",
                        h.type);
            continue;
        }
        if (fn(c, &h, why, sizeof(why)) < 0) {
            rc = -1;
            break;
        }
    }
    if (rc < 0)
        ras_event(RAS_WARNING, cfg.location, "control connection from %s: %s; closing", c->peer, why);
    conn_hangup(c);
    job_ctl_closed(c);
    logmsg("control connection from %s closed", c->peer);
}
