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
    uint64_t calls[NSYS];

    (void)why, (void)whylen;
    for (unsigned i = 0; i < NSYS; i++)
        calls[i] = atomic_load(&sys_calls[i]);
    return conn_send(c, h->type | LAT_REPLY, h->seq, calls, sizeof(calls)), 0;
}

static int on_kill(struct conn *c, const struct lat_hdr *h, char *why, size_t whylen)
{
    struct conn *nodes[LAT_MAX_PSET];
    struct lat_kill k;
    uint64_t id;

    if (h->len < sizeof(k))
        return errprintf(why, whylen, "CTL_KILL of %u bytes", h->len);
    memcpy(&k, c->buf, sizeof(k));
    if (k.sig < 1 || k.sig >= NSIG)
        return reply_refused(c, h, EINVAL, "no such signal"), 0;
    job_nodes(nodes, false, &id);
    if (!id) {
        for (uint32_t i = 0; i < cfg.pset_size; i++)
            conn_put(nodes[i]);
        return reply_refused(c, h, ESRCH, "no job is running"), 0;
    }
    logmsg("job %" PRIu64 ": signal %d requested by %s", id, k.sig, c->peer);
    for (uint32_t i = 0; i < cfg.pset_size; i++) {
        if (nodes[i]) {
            conn_send(nodes[i], LAT_NODE_KILL, 0, &k, sizeof(k));
            conn_put(nodes[i]);
        }
    }
    return reply_ok(c, h), 0;
}

static int on_shutdown(struct conn *c, const struct lat_hdr *h, char *why, size_t whylen)
{
    struct conn *nodes[LAT_MAX_PSET];
    struct lat_kill k = { .sig = SIGKILL };

    (void)why, (void)whylen;
    ras_event(RAS_INFO, cfg.location, "shutdown requested by %s", c->peer);
    job_nodes(nodes, false, NULL);
    for (uint32_t i = 0; i < cfg.pset_size; i++) {
        if (nodes[i]) {
            conn_send(nodes[i], LAT_NODE_KILL, 0, &k, sizeof(k));
            conn_put(nodes[i]);
        }
    }
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

/* Every count is checked against the payload before it is used. */
static int decode_job(const char *p, size_t len, struct job_spec *js, char *why, size_t whylen)
{
    const struct lat_job *jh = (const void *)p;
    const char *s, *end = p + len;
    size_t need;

    memset(js, 0, sizeof(*js));
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
    if (jh->ngroups > CIOD_MAX_GROUPS)
        return errprintf(why, whylen, "%u supplementary groups (at most %u)", jh->ngroups,
                         CIOD_MAX_GROUPS);
    if (jh->nargs < 1)
        return errprintf(why, whylen, "no argv[0]");
    if ((uint64_t)jh->nargs + jh->nenv > LAT_MAX_ARGS)
        return errprintf(why, whylen, "%u arguments and %u environment strings (at most %u)",
                         jh->nargs, jh->nenv, LAT_MAX_ARGS);
    if (jh->nranks < 1)
        return errprintf(why, whylen, "job has no ranks");
    need = sizeof(*jh) + sizeof(int32_t) * (size_t)jh->pset_size + sizeof(uint32_t) * (size_t)jh->ngroups;
    if (len < need)
        return errprintf(why, whylen, "job of %zu bytes cannot hold %u ranks and %u groups",
                         len, jh->pset_size, jh->ngroups);
    js->rank = (const int32_t *)(p + sizeof(*jh));
    js->groups = (const uint32_t *)(p + sizeof(*jh) + sizeof(int32_t) * jh->pset_size);
    for (uint32_t i = 0; i < jh->pset_size; i++) {
        int32_t r = js->rank[i];
        if (r < -1 || (r >= 0 && (uint32_t)r >= jh->nranks))
            return errprintf(why, whylen, "node %u: rank %d out of range (job has %u ranks)", i, r,
                             jh->nranks);
        for (uint32_t k = 0; r >= 0 && k < i; k++)
            if (js->rank[k] == r)
                return errprintf(why, whylen, "rank %d given to nodes %u and %u", r, k, i);
    }
    s = p + need;
    if (!(js->exe = next_string(&s, end)) || !(js->cwd = next_string(&s, end)))
        return errprintf(why, whylen, "executable and working directory missing or not NUL-terminated");
    if (!good_path(js->exe) || !good_path(js->cwd))
        return errprintf(why, whylen, "executable and working directory must be absolute paths "
                         "shorter than %u bytes", LAT_MAX_PATH);
    js->args = s;
    for (uint64_t i = 0; i < (uint64_t)jh->nargs + jh->nenv; i++)
        if (!next_string(&s, end))
            return errprintf(why, whylen, "argument/environment string %" PRIu64
                             " missing or not NUL-terminated", i);
    if (s != end)
        return errprintf(why, whylen, "%zu stray bytes after the last string", (size_t)(end - s));
    js->argslen = s - js->args;
    js->who.uid = jh->uid;
    js->who.gid = jh->gid;
    js->who.ngroups = jh->ngroups;
    for (uint32_t i = 0; i < jh->ngroups; i++)
        js->who.groups[i] = js->groups[i];
    return 0;
}

/* As the job owner: the executable, read once, and a usable working directory. */
static int load_job_files(const struct job_spec *js, char **image, size_t *size,
                          char *why, size_t whylen)
{
    struct stat st;
    char *buf = NULL;
    size_t got = 0;
    int fd, dfd, err;

    fd = open(js->exe, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0)
        goto syserr_read;
    if (fstat(fd, &st) < 0)
        goto syserr_read;
    if (!S_ISREG(st.st_mode)) {
        errno = EACCES;                 /* what execve says about non-files */
        errprintf(why, whylen, "cannot execute %s: not a regular file", js->exe);
        goto fail;
    }
    if (!ident_may(&js->who, &st, X_OK)) {
        errno = EACCES;
        errprintf(why, whylen, "cannot execute %s: %s", js->exe, strerror(errno));
        goto fail;
    }
    if ((unsigned long long)st.st_size > LAT_MAX_IMAGE) {
        errno = EFBIG;
        errprintf(why, whylen, "cannot load %s: %lld bytes, more than the %llu a job may have",
                  js->exe, (long long)st.st_size, (unsigned long long)LAT_MAX_IMAGE);
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
            errprintf(why, whylen, "cannot read %s: file shrank while being read", js->exe);
            goto fail;
        }
        got += n;
    }
    close(fd);
    fd = -1;

    dfd = open(js->cwd, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        /* looking up "." needs search permission on the directory itself */
        int fd2 = openat(dfd, ".", O_PATH | O_CLOEXEC);
        err = errno;
        close(dfd);
        if (fd2 >= 0)
            close(fd2);
        dfd = fd2;
        errno = err;
    }
    if (dfd < 0) {
        errprintf(why, whylen, "cannot use working directory %s: %s", js->cwd, strerror(errno));
        goto fail;
    }
    *image = buf;
    *size = got;
    return 0;

syserr_read:
    errprintf(why, whylen, "cannot read %s: %s", js->exe, strerror(errno));
fail:
    err = errno;
    if (fd >= 0)
        close(fd);
    free(buf);
    return err ? err : EIO;
}

/* JOB + IMAGE chunks to one node; START comes later, to all at once. */
static int push_node(struct conn *n, const struct job_spec *js, int32_t rank,
                     const char *image, size_t size)
{
    const struct lat_job *jh = js->hdr;
    struct lat_node_job nj = { .job = jh->job, .image_size = size, .rank = (uint32_t)rank,
                               .size = jh->nranks, .uid = jh->uid, .gid = jh->gid,
                               .ngroups = jh->ngroups, .nargs = jh->nargs, .nenv = jh->nenv,
                               .flags = jh->flags };
    struct iovec v[3] = { { &nj, sizeof(nj) },
                          { (void *)js->groups, sizeof(uint32_t) * jh->ngroups },
                          { (void *)js->args, js->argslen } };
    int rc;

    pthread_mutex_lock(&n->wlock);
    rc = conn_sendv_locked(n, LAT_NODE_JOB, 0, v, 3);
    for (size_t off = 0; rc == 0 && off < size; off += LAT_MAX_IO) {
        struct iovec chunk = { (void *)(image + off), size - off < LAT_MAX_IO ? size - off : LAT_MAX_IO };
        rc = conn_sendv_locked(n, LAT_NODE_IMAGE, 0, &chunk, 1);
    }
    pthread_mutex_unlock(&n->wlock);
    return rc;
}

static int on_job(struct conn *c, const struct lat_hdr *h, char *why, size_t whylen)
{
    struct conn *nodes[LAT_MAX_PSET];
    struct job_spec js;
    struct lat_job_end start;
    struct lat_sysret ok = { 0 };
    char text[CIOD_ERRLEN];
    char *image = NULL;
    size_t size = 0;
    int err;

    /* decode */
    if (h->len < sizeof(struct lat_job))
        return errprintf(why, whylen, "CTL_JOB of %u bytes", h->len);
    if (decode_job(c->buf, h->len, &js, text, sizeof(text)) < 0)
        return reply_refused(c, h, EINVAL, text), 0;
    /* authorize */
    if (!ident_is_root() && js.who.uid != getuid()) {
        snprintf(text, sizeof(text), "ciod runs as uid %u and cannot act as uid %u",
                 (unsigned)getuid(), js.who.uid);
        return reply_refused(c, h, EPERM, text), 0;
    }
    if (job_busy())                     /* cheap early answer; job_register decides */
        return reply_refused(c, h, EBUSY, "a job is running on this I/O node"), 0;
    /* act: read as the owner, then hand out */
    err = ident_enter(&js.who);
    if (err) {
        snprintf(text, sizeof(text), "cannot take the identity of uid %u: %s", js.who.uid,
                 strerror(err));
        return reply_refused(c, h, err, text), 0;
    }
    err = load_job_files(&js, &image, &size, text, sizeof(text));
    ident_leave();
    if (err)
        return reply_refused(c, h, err, text), 0;
    err = job_register(&js, c, nodes, text, sizeof(text));
    if (err) {
        free(image);
        return reply_refused(c, h, err, text), 0;
    }
    logmsg("job %" PRIu64 " from %s: %s (%zu bytes), uid %u, %u ranks, kernel %s%s", js.hdr->job, c->peer,
           js.exe, size, js.who.uid, js.hdr->nranks, js.hdr->flags & LAT_JOB_CNK ? "cnk" : "linux",
           js.hdr->flags & LAT_JOB_TRACE ? " (trace)" : "");

    /* Hold our write lock until the reply is out: no exit or output of this
     * job can reach the service node before it learns the job started. */
    pthread_mutex_lock(&c->wlock);
    for (uint32_t i = 0; i < cfg.pset_size; i++)
        if (nodes[i] && push_node(nodes[i], &js, js.rank[i], image, size) < 0)
            logmsg("job %" PRIu64 ": push to node %u failed: %s", js.hdr->job, i, strerror(errno));
    free(image);
    start.job = js.hdr->job;
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
}

static const ctl_fn handlers[] = {
    [LAT_CTL_STATUS - LAT_CTL_STATUS]   = on_status,
    [LAT_CTL_JOB - LAT_CTL_STATUS]      = on_job,
    [LAT_CTL_KILL - LAT_CTL_STATUS]     = on_kill,
    [LAT_CTL_SHUTDOWN - LAT_CTL_STATUS] = on_shutdown,
    [LAT_CTL_COUNTERS - LAT_CTL_STATUS] = on_counters,
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
