/*
 * pmi.c - the pset's PMI proxy (docs/protocol.md section 10).
 *
 * Each compute process speaks PMI-1 ("simple", one line per command) or
 * PMI-2 (6-character length prefix, `cmd=X;k=v;`) on its PMI_FD; its cnode
 * relays the bytes here (LAT_NODE_PMI) and writes back what we answer
 * (LAT_NODE_PMI_REPLY).  ciod answers everything it knows by itself: init,
 * maxes, appnum, universe size, kvsname, puts (cached), gets (from the
 * cache), node attributes.  A fence (barrier_in / kvs-fence) is the only
 * thing that leaves the pset: when every process of the pset has entered,
 * ONE LAT_CTL_FENCE carries their puts to the service node, which answers
 * with LAT_CTL_FENCE_OUT once every pset of the job has entered; its keys
 * go into the cache and every process gets its barrier_out.
 *
 * A process's PMI bytes come one of two ways: relayed by its cnode
 * (LAT_NODE_PMI, answered with LAT_NODE_PMI_REPLY), or, when its cnode could
 * open one, over a PMI connection of its own to ciod (LAT_ROLE_PMI: the
 * descriptor the process got as PMI_FD), raw in both directions.  The
 * second saves two hops per request: under MPICH every rank is its own node,
 * so each fetches every other rank's business card, N^2 gets per job.
 *
 * State is under `P.lock`, never held while writing to a socket: replies
 * are collected in an outbox and sent after unlocking.  A process has one
 * request outstanding at a time, so its replies cannot overtake each other.
 */
#include "ciod.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define MAX_TOKENS 32

struct prank {
    uint32_t rank, node, app;
    int      version;               /* 0 before init, 1 or 2 */
    bool     in_fence;
    bool     done;                  /* finalized or aborted: may exit */
    bool     broken;                /* unframeable input: the rest is ignored */
    bool     skip_line;             /* v1: drop until the next newline (line too long) */
    bool     in_mcmd;               /* v1: inside an mcmd=...endcmd block */
    char     waitkey[LAT_PMI_KEY_MAX + 1];  /* v2 info-getnodeattr wait=TRUE */
    char     waitthr[32];
    char    *buf;                   /* partial input */
    size_t   len;
    struct conn *direct;            /* its own PMI connection (a reference), or NULL: relayed */
};

static struct {
    pthread_mutex_t lock;
    uint64_t      job;              /* 0: no job */
    uint32_t      nranks, nslots, epoch, entered;
    bool          fence_sent;       /* this pset's FENCE is upstream, waiting for FENCE_OUT */
    struct prank *r;
    char          kvsname[32];
    struct kvs   *kv;               /* published keys (after fences) and this pset's puts */
    struct kvs   *nodeattr;         /* "node/key" -> value */
    char         *pend;             /* this epoch's puts: key \0 value \0 ... */
    size_t        pendlen, pendcap;
    uint32_t      npend;
    pthread_cond_t gone;            /* a process's own PMI connection ended */
} P = { .lock = PTHREAD_MUTEX_INITIALIZER, .gone = PTHREAD_COND_INITIALIZER };

/* How long an exit waits for the rest of the process's own PMI connection
 * (its last bytes, e.g. an abort, then EOF): only a descriptor the process
 * handed on to a survivor keeps it open this long. */
#define DIRECT_DRAIN_MS 2000

/* ---- outbox: replies to send once the lock is dropped ---- */

struct out {
    struct out *next;
    struct conn *direct;            /* the process's PMI connection (a reference), or NULL */
    uint32_t    node, rank;
    size_t      len;
    char        data[];
};

struct outbox {
    struct out *head, **tail;
};

static void ob_init(struct outbox *o)
{
    o->head = NULL;
    o->tail = &o->head;
}

static void ob_add(struct outbox *o, const struct prank *r, const char *data, size_t len)
{
    struct out *e = malloc(sizeof(*e) + len);

    if (!e) {
        logmsg("pmi: out of memory for a reply to rank %u", r->rank);
        return;
    }
    e->next = NULL;
    e->direct = conn_get(r->direct);
    e->node = r->node;
    e->rank = r->rank;
    e->len = len;
    memcpy(e->data, data, len);
    *o->tail = e;
    o->tail = &e->next;
}

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

/* Whether some reply goes through a node connection (not a process's own). */
static bool ob_relayed(const struct outbox *o)
{
    for (const struct out *e = o->head; e; e = e->next)
        if (!e->direct)
            return true;
    return false;
}

/* Sends every reply: over the process's own PMI connection, else relayed
 * through nodes[its node]. */
static void ob_send(struct outbox *o, struct conn *nodes[LAT_MAX_PSET])
{
    for (struct out *e = o->head, *n; e; e = n) {
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
    ob_init(o);
}

/* ---- replies ---- */

struct reply {
    int    v;
    size_t len;
    char   buf[LAT_PMI_LINE_MAX + 64];
};

static void rp_raw(struct reply *r, const char *s)
{
    size_t n = strlen(s);

    if (r->len + n < sizeof(r->buf) - 2) {
        memcpy(r->buf + r->len, s, n);
        r->len += n;
    }
}

static void rp_begin(struct reply *r, int v, const char *cmd)
{
    r->v = v;
    r->len = v == 2 ? 6 : 0;
    rp_raw(r, "cmd=");
    rp_raw(r, cmd);
    if (v == 2)
        rp_raw(r, ";");
}

static void rp_add(struct reply *r, const char *key, const char *val)
{
    if (r->v == 1)
        rp_raw(r, " ");
    rp_raw(r, key);
    rp_raw(r, "=");
    rp_raw(r, val);
    if (r->v == 2)
        rp_raw(r, ";");
}

static void rp_addu(struct reply *r, const char *key, uint64_t val)
{
    char num[24];

    snprintf(num, sizeof(num), "%" PRIu64, val);
    rp_add(r, key, num);
}

static void rp_end(struct outbox *o, const struct prank *pr, struct reply *r)
{
    if (r->v == 2) {
        char len[8];
        snprintf(len, sizeof(len), "%6u", (unsigned)(r->len - 6));
        memcpy(r->buf, len, 6);
    } else {
        r->buf[r->len++] = '\n';
    }
    ob_add(o, pr, r->buf, r->len);
}

/* ---- parsing ---- */

struct cmd {
    char *name;
    int   n;
    char *key[MAX_TOKENS], *val[MAX_TOKENS];
};

static const char *find(const struct cmd *c, const char *key)
{
    for (int i = 0; i < c->n; i++)
        if (!strcmp(c->key[i], key))
            return c->val[i];
    return NULL;
}

static bool keychar(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'
           || c == '-' || c == '/';
}

/* One token key[=value] at *pp, ending at a separator; returns an error text or NULL. */
static const char *token(char **pp, char sep, struct cmd *c)
{
    char *p = *pp, *key = p, *val = NULL;

    while (keychar(*p))
        p++;
    if (p == key)
        return "expected a key";
    if (*p == '=') {
        *p++ = '\0';
        val = p;
        if (sep == ' ') {               /* v1: a value ends at a space; backslash escapes */
            while (*p && *p != ' ') {
                if (*p == '\\' && p[1])
                    p++;
                p++;
            }
        } else {                        /* v2: ends at ';', ";;" is a literal ';' */
            char *w = p;
            while (*p) {
                if (*p == ';' && p[1] == ';')
                    p++;
                else if (*p == ';')
                    break;
                *w++ = *p++;
            }
            if (*p)
                p++;                    /* past the separator, then terminate */
            *w = '\0';
            *pp = p;
            goto store;
        }
        if (p == val)
            return "empty value";
    } else if (*p && *p != sep) {
        return "bad character after a key";
    }
    if (*p)
        *p++ = '\0';
    *pp = p;
store:
    if (val && !*val)
        return "empty value";
    if (!strcmp(key, "cmd") && !c->name) {
        c->name = val;
        return val ? NULL : "cmd without a name";
    }
    if (c->n == MAX_TOKENS)
        return "too many fields";
    c->key[c->n] = key;
    c->val[c->n++] = val ? val : "";
    return NULL;
}

static const char *parse(char *s, int v, struct cmd *c)
{
    char sep = v == 2 ? ';' : ' ';
    const char *err;

    memset(c, 0, sizeof(*c));
    if (strncmp(s, "cmd=", 4))
        return "does not start with cmd=";
    while (*s) {
        if (*s == sep) {
            s++;
            continue;
        }
        if ((err = token(&s, sep, c)))
            return err;
    }
    return c->name ? NULL : "no command";
}

/* Length of a value without its escapes. */
static size_t vallen(const char *v)
{
    size_t n = 0;

    for (; *v; v++, n++)
        if (*v == '\\' && v[1])
            v++;
    return n;
}

/* ---- the commands ---- */

static struct prank *find_rank(uint32_t rank)
{
    for (uint32_t i = 0; i < P.nslots; i++)
        if (P.r[i].rank == rank)
            return &P.r[i];
    return NULL;
}

static void error_reply(struct outbox *o, struct prank *r, int v, const char *resp, const char *msg)
{
    struct reply rp;
    char text[160];

    snprintf(text, sizeof(text), "%s", msg);
    if (v == 1)
        for (char *c = text; *c; c++)
            if (*c == ' ' || *c == '=')
                *c = '_';                   /* a v1 value ends at a space */
    rp_begin(&rp, v, resp);
    rp_add(&rp, "rc", "-1");
    rp_add(&rp, v == 2 ? "errmsg" : "msg", text);
    rp_end(o, r, &rp);
}

static void bad(struct outbox *o, struct prank *r, int v, const char *resp, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void bad(struct outbox *o, struct prank *r, int v, const char *resp, const char *fmt, ...)
{
    char text[160], loc[128];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    node_location(r->node, loc, sizeof(loc));
    ras_event(RAS_WARNING, loc, "job %" PRIu64 " rank %u: bad PMI request: %s", P.job, r->rank, text);
    error_reply(o, r, v, resp, text);
}

static bool good_key(const char *k)
{
    return k && *k && strlen(k) <= LAT_PMI_KEY_MAX;
}

static bool good_val(const char *v)
{
    return v && vallen(v) <= LAT_PMI_VAL_MAX;
}

static int pend_add(const char *key, const char *val)
{
    size_t kl = strlen(key) + 1, vl = strlen(val) + 1;

    if (P.pendlen + kl + vl > P.pendcap) {
        size_t cap = P.pendcap ? P.pendcap * 2 : 65536;
        while (cap < P.pendlen + kl + vl)
            cap *= 2;
        char *n = realloc(P.pend, cap);
        if (!n)
            return -1;
        P.pend = n;
        P.pendcap = cap;
    }
    memcpy(P.pend + P.pendlen, key, kl);
    memcpy(P.pend + P.pendlen + kl, val, vl);
    P.pendlen += kl + vl;
    P.npend++;
    return 0;
}

/* A put of this pset: visible here at once, published upstream at the fence. */
static int put(const char *key, const char *val)
{
    return kvs_put(P.kv, key, val) < 0 || pend_add(key, val) < 0 ? -1 : 0;
}

/* The fence chunks for the service node, built under the lock. */
struct fence_up {
    char  *msg;                     /* lat_fence + strings, each chunk back to back */
    size_t len[64];
    int    n;
};

static void enter_fence(struct prank *r, struct fence_up *up)
{
    r->in_fence = true;
    if (++P.entered < P.nslots || P.fence_sent)
        return;
    /* the whole pset is in: one message (or a few if large) goes up */
    size_t room = LAT_MAX_PAYLOAD - sizeof(struct lat_fence), off = 0;
    up->msg = malloc(P.pendlen + 64 * sizeof(struct lat_fence) + 1);
    up->n = 0;
    size_t w = 0;
    if (!up->msg) {
        logmsg("pmi: out of memory for the fence of job %" PRIu64, P.job);
        return;
    }
    do {
        struct lat_fence f = { .job = P.job, .epoch = P.epoch };
        size_t start = off, body = 0;
        while (off < P.pendlen) {
            size_t kl = strlen(P.pend + off) + 1, vl = strlen(P.pend + off + kl) + 1;
            if (body + kl + vl > room)
                break;
            body += kl + vl;
            off += kl + vl;
            f.nkv++;
        }
        if (off < P.pendlen && up->n < 63)
            f.flags = LAT_FENCE_MORE;
        else
            off = P.pendlen;            /* 64 full chunks cannot happen: PMI keys are bounded per rank */
        memcpy(up->msg + w, &f, sizeof(f));
        memcpy(up->msg + w + sizeof(f), P.pend + start, off - start);
        up->len[up->n++] = sizeof(f) + off - start;
        w += sizeof(f) + off - start;
    } while (off < P.pendlen);
    P.fence_sent = true;
    P.pendlen = 0;
    P.npend = 0;
}

static void send_up(uint64_t job, struct fence_up *up)
{
    struct conn *ctl;
    size_t w = 0;

    if (!up->msg)
        return;
    ctl = job_owner(job);
    if (ctl) {                          /* the chunks of one fence stay together */
        pthread_mutex_lock(&ctl->wlock);
        for (int i = 0; i < up->n; i++) {
            struct iovec v = { up->msg + w, up->len[i] };
            conn_sendv_locked(ctl, LAT_CTL_FENCE, 0, &v, 1);
            w += up->len[i];
        }
        pthread_mutex_unlock(&ctl->wlock);
        conn_put(ctl);
    }
    free(up->msg);
    up->msg = NULL;
}

/* abort: no reply; the service node ends the job. */
static void do_abort(struct prank *r, int code, const char *msg)
{
    struct lat_abort a = { .job = P.job, .rank = r->rank, .code = code };
    char loc[128];
    struct conn *ctl = job_owner(P.job);

    node_location(r->node, loc, sizeof(loc));
    ras_event(RAS_ERROR, loc, "job %" PRIu64 " rank %u called PMI abort with code %d: %s", P.job, r->rank,
              code, msg && *msg ? msg : "(no message)");
    if (ctl) {
        struct iovec v[2] = { { &a, sizeof(a) }, { (void *)(msg ? msg : ""), msg ? strlen(msg) : 0 } };
        conn_sendv(ctl, LAT_CTL_ABORT, 0, v, 2);
        conn_put(ctl);
    }
}

static bool parse_int(const char *s, long lo, long hi, long *out)
{
    char *end;

    if (!s || !*s)
        return false;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static void v1_command(struct outbox *o, struct prank *r, struct cmd *c, struct fence_up *up,
                       bool *aborted, int *code, char *msg, size_t msglen)
{
    struct reply rp;
    const char *n = c->name, *kvs = find(c, "kvsname"), *key = find(c, "key"), *val = find(c, "value");

    if (!strcmp(n, "init")) {
        long ver = 0, sub = 0;
        if (!parse_int(find(c, "pmi_version"), 1, 2, &ver) || !parse_int(find(c, "pmi_subversion"), 0, 9, &sub))
            return bad(o, r, 1, "response_to_init", "init needs pmi_version 1 or 2 and pmi_subversion");
        rp_begin(&rp, 1, "response_to_init");
        rp_add(&rp, "rc", "0");
        rp_add(&rp, "pmi_version", ver == 2 ? "2" : "1");
        rp_add(&rp, "pmi_subversion", ver == 2 ? "0" : "1");
        r->version = (int)ver;
        return rp_end(o, r, &rp);
    }
    if (!r->version)
        return bad(o, r, 1, "error", "command before init");
    if (!strcmp(n, "get_maxes")) {
        rp_begin(&rp, 1, "maxes");
        rp_add(&rp, "rc", "0");
        rp_addu(&rp, "kvsname_max", LAT_PMI_KVSNAME_MAX);
        rp_addu(&rp, "keylen_max", LAT_PMI_KEY_MAX);
        rp_addu(&rp, "vallen_max", LAT_PMI_VAL_MAX);
    } else if (!strcmp(n, "get_appnum")) {
        rp_begin(&rp, 1, "appnum");
        rp_add(&rp, "rc", "0");
        rp_addu(&rp, "appnum", r->app);
    } else if (!strcmp(n, "get_universe_size")) {
        rp_begin(&rp, 1, "universe_size");
        rp_add(&rp, "rc", "0");
        rp_addu(&rp, "size", P.nranks);
    } else if (!strcmp(n, "get_my_kvsname")) {
        rp_begin(&rp, 1, "my_kvsname");
        rp_add(&rp, "rc", "0");
        rp_add(&rp, "kvsname", P.kvsname);
    } else if (!strcmp(n, "put")) {
        if (!kvs || strcmp(kvs, P.kvsname))
            return bad(o, r, 1, "put_result", "put to an unknown kvsname");
        if (!good_key(key) || !good_val(val))
            return bad(o, r, 1, "put_result", "put needs a key of 1..64 and a value of at most 1024 characters");
        if (put(key, val) < 0)
            return error_reply(o, r, 1, "put_result", "out of memory");
        rp_begin(&rp, 1, "put_result");
        rp_add(&rp, "rc", "0");
    } else if (!strcmp(n, "get")) {
        if (!kvs || strcmp(kvs, P.kvsname))
            return bad(o, r, 1, "get_result", "get from an unknown kvsname");
        if (!good_key(key))
            return bad(o, r, 1, "get_result", "get needs a key of 1..64 characters");
        const char *v = kvs_get(P.kv, key);
        rp_begin(&rp, 1, "get_result");
        if (v) {
            rp_add(&rp, "rc", "0");
            rp_add(&rp, "msg", "success");
            rp_add(&rp, "value", v);
        } else {
            rp_add(&rp, "rc", "1");
            rp_add(&rp, "msg", "key_not_found");
        }
    } else if (!strcmp(n, "barrier_in")) {
        if (r->in_fence)
            return bad(o, r, 1, "barrier_out", "barrier_in twice");
        return enter_fence(r, up);
    } else if (!strcmp(n, "finalize")) {
        r->done = true;
        rp_begin(&rp, 1, "finalize_ack");
        rp_add(&rp, "rc", "0");
    } else if (!strcmp(n, "abort")) {
        long ec = 1;
        const char *m = find(c, "message");
        if (find(c, "exitcode") && !parse_int(find(c, "exitcode"), -2147483647L - 1, 2147483647L, &ec))
            ec = 1;
        *aborted = true;
        *code = (int)ec;
        snprintf(msg, msglen, "%s", m ? m : "");
        return;
    } else if (!strcmp(n, "publish_name") || !strcmp(n, "unpublish_name") || !strcmp(n, "lookup_name")) {
        char resp[32];
        snprintf(resp, sizeof(resp), "%.*s_result", (int)(strchr(n, '_') - n), n);
        return error_reply(o, r, 1, resp, "name service not supported");
    } else {
        return bad(o, r, 1, "error", "unknown PMI-1 command");
    }
    rp_end(o, r, &rp);
}

static void v2_command(struct outbox *o, struct prank *r, struct cmd *c, struct fence_up *up,
                       bool *aborted, int *code, char *msg, size_t msglen)
{
    struct reply rp;
    char resp[64];
    const char *n = c->name, *key = find(c, "key"), *val = find(c, "value"), *thrid = find(c, "thrid");

    snprintf(resp, sizeof(resp), "%.40s-response", n);
    rp_begin(&rp, 2, resp);
    rp_add(&rp, "rc", "0");
    if (!strcmp(n, "fullinit")) {
        long want;
        if (find(c, "pmirank") && (!parse_int(find(c, "pmirank"), 0, 1L << 30, &want) || (uint32_t)want != r->rank))
            return bad(o, r, 2, resp, "fullinit for another rank");
        rp_add(&rp, "pmi-version", "2");
        rp_add(&rp, "pmi-subversion", "0");
        rp_addu(&rp, "rank", r->rank);
        rp_addu(&rp, "size", P.nranks);
        rp_addu(&rp, "appnum", r->app);
        rp_add(&rp, "debugged", "FALSE");
        rp_add(&rp, "pmiverbose", "FALSE");
    } else if (!strcmp(n, "job-getid")) {
        rp_add(&rp, "jobid", P.kvsname);
    } else if (!strcmp(n, "kvs-put")) {
        if (!good_key(key) || !good_val(val))
            return bad(o, r, 2, resp, "kvs-put needs a key of 1..64 and a value of at most 1024 characters");
        if (put(key, val) < 0)
            return error_reply(o, r, 2, resp, "out of memory");
    } else if (!strcmp(n, "kvs-get")) {
        if (!good_key(key))
            return bad(o, r, 2, resp, "kvs-get needs a key of 1..64 characters");
        const char *v = kvs_get(P.kv, key);
        rp_add(&rp, "found", v ? "TRUE" : "FALSE");
        if (v)
            rp_add(&rp, "value", v);
    } else if (!strcmp(n, "kvs-fence")) {
        if (r->in_fence)
            return bad(o, r, 2, resp, "kvs-fence twice");
        snprintf(r->waitthr, sizeof(r->waitthr), "%s", thrid ? thrid : "");
        return enter_fence(r, up);
    } else if (!strcmp(n, "info-getjobattr")) {
        if (!good_key(key))
            return bad(o, r, 2, resp, "info-getjobattr needs a key");
        const char *v = NULL;
        char num[16];
        if (!strcmp(key, "PMI_process_mapping"))
            v = kvs_get(P.kv, key);
        else if (!strcmp(key, "universeSize"))
            snprintf(num, sizeof(num), "%u", P.nranks), v = num;
        rp_add(&rp, "found", v ? "TRUE" : "FALSE");
        if (v)
            rp_add(&rp, "value", v);
    } else if (!strcmp(n, "info-putnodeattr") || !strcmp(n, "info-getnodeattr")) {
        char nk[LAT_PMI_KEY_MAX + 16];
        if (!good_key(key))
            return bad(o, r, 2, resp, "node attributes need a key of 1..64 characters");
        snprintf(nk, sizeof(nk), "%u/%s", r->node, key);
        if (n[5] == 'p') {
            if (!good_val(val))
                return bad(o, r, 2, resp, "info-putnodeattr needs a value of at most 1024 characters");
            if (kvs_put(P.nodeattr, nk, val) < 0)
                return error_reply(o, r, 2, resp, "out of memory");
            /* wake the processes of this node that wait for it */
            for (uint32_t i = 0; i < P.nslots; i++) {
                struct prank *w = &P.r[i];
                if (w->node == r->node && w->waitkey[0] && !strcmp(w->waitkey, key)) {
                    struct reply wr;
                    rp_begin(&wr, 2, "info-getnodeattr-response");
                    rp_add(&wr, "rc", "0");
                    rp_add(&wr, "found", "TRUE");
                    rp_add(&wr, "value", val);
                    if (w->waitthr[0])
                        rp_add(&wr, "thrid", w->waitthr);
                    rp_end(o, w, &wr);
                    w->waitkey[0] = '\0';
                }
            }
        } else {
            const char *v = kvs_get(P.nodeattr, nk), *wait = find(c, "wait");
            if (!v && wait && !strcmp(wait, "TRUE")) {
                snprintf(r->waitkey, sizeof(r->waitkey), "%s", key);
                snprintf(r->waitthr, sizeof(r->waitthr), "%s", thrid ? thrid : "");
                return;                 /* answered by the put */
            }
            rp_add(&rp, "found", v ? "TRUE" : "FALSE");
            if (v)
                rp_add(&rp, "value", v);
        }
    } else if (!strcmp(n, "finalize")) {
        r->done = true;
    } else if (!strcmp(n, "abort")) {
        long ec = 1;
        const char *m = find(c, "msg");
        if (find(c, "exitcode"))
            parse_int(find(c, "exitcode"), -2147483647L - 1, 2147483647L, &ec);
        *aborted = true;
        *code = (int)ec;
        snprintf(msg, msglen, "%s", m ? m : "");
        return;
    } else if (!strcmp(n, "spawn") || !strncmp(n, "name-", 5)) {
        return error_reply(o, r, 2, resp, "not supported by lattice");
    } else {
        return bad(o, r, 2, resp, "unknown PMI-2 command");
    }
    if (thrid)
        rp_add(&rp, "thrid", thrid);
    rp_end(o, r, &rp);
}

/* Takes the complete commands out of r->buf. */
static void drain(struct outbox *o, struct prank *r, struct fence_up *up, bool *aborted, int *code,
                  char *msg, size_t msglen)
{
    size_t off = 0;
    struct cmd c;
    const char *err;

    while (!r->broken && off < r->len && !*aborted) {
        char *s = r->buf + off;
        size_t avail = r->len - off;
        if (r->version == 2) {
            char lenbuf[7];
            unsigned long n;
            char *end;
            if (avail < 6)
                break;
            memcpy(lenbuf, s, 6);
            lenbuf[6] = '\0';
            n = strtoul(lenbuf, &end, 10);
            while (*end == ' ')
                end++;
            if (*end || n == 0 || n > LAT_PMI_LINE_MAX) {
                r->broken = true;
                bad(o, r, 2, "error-response", "bad PMI-2 length prefix; ignoring this rank's PMI from now on");
                break;
            }
            if (avail < 6 + n)
                break;
            char save = s[6 + n];
            s[6 + n] = '\0';
            if (memchr(s + 6, '\0', n))
                bad(o, r, 2, "error-response", "NUL byte in a PMI-2 command");
            else if ((err = parse(s + 6, 2, &c)))
                bad(o, r, 2, "error-response", "malformed PMI-2 command: %s", err);
            else
                v2_command(o, r, &c, up, aborted, code, msg, msglen);
            s[6 + n] = save;
            off += 6 + n;
            continue;
        }
        char *nl = memchr(s, '\n', avail);
        if (!nl) {
            if (avail > LAT_PMI_LINE_MAX) {     /* no end in sight: drop it */
                if (!r->skip_line)
                    bad(o, r, 1, "error", "PMI line longer than 4096 bytes");
                r->skip_line = true;
                off = r->len;
            }
            break;
        }
        *nl = '\0';
        off = (size_t)(nl - r->buf) + 1;
        if (r->skip_line) {
            r->skip_line = false;
            continue;
        }
        if ((size_t)(nl - s) > LAT_PMI_LINE_MAX) {
            bad(o, r, 1, "error", "PMI line longer than 4096 bytes");
            continue;
        }
        if (r->in_mcmd) {                       /* spawn: not supported, answered at its end */
            if (!strcmp(s, "endcmd")) {
                r->in_mcmd = false;
                error_reply(o, r, 1, "spawn_result", "spawn not supported by lattice");
            }
            continue;
        }
        if (!strncmp(s, "mcmd=", 5)) {
            r->in_mcmd = true;
            continue;
        }
        if (memchr(s, '\0', (size_t)(nl - s)))
            bad(o, r, 1, "error", "NUL byte in a PMI line");
        else if ((err = parse(s, 1, &c)))
            bad(o, r, 1, "error", "malformed PMI line: %s", err);
        else
            v1_command(o, r, &c, up, aborted, code, msg, msglen);
    }
    if (r->broken)
        off = r->len;
    memmove(r->buf, r->buf + off, r->len - off);
    r->len -= off;
}

void pmi_input(uint32_t node, struct conn *nc, uint32_t rank, const char *data, size_t len)
{
    struct outbox o;
    struct fence_up up = { 0 };
    struct conn *nodes[LAT_MAX_PSET] = { 0 };
    char loc[128], msg[LAT_PMI_VAL_MAX + 1] = "";
    bool aborted = false;
    int code = 0;
    uint64_t job;

    ob_init(&o);
    pthread_mutex_lock(&P.lock);
    job = P.job;
    struct prank *r = job ? find_rank(rank) : NULL;
    if (!r || r->node != node) {
        pthread_mutex_unlock(&P.lock);
        node_location(node, loc, sizeof(loc));
        ras_event(RAS_WARNING, loc, "PMI data for rank %u, which does not run on node %u: ignored", rank, node);
        return;
    }
    if (!r->broken) {
        size_t cap = r->len + len;
        char *b = realloc(r->buf, cap + 1);
        if (b) {
            r->buf = b;
            memcpy(r->buf + r->len, data, len);
            r->len += len;
            drain(&o, r, &up, &aborted, &code, msg, sizeof(msg));
        } else {
            logmsg("pmi: out of memory for rank %u's input", rank);
        }
    }
    if (aborted)
        r->done = true;
    struct prank me = *r;
    pthread_mutex_unlock(&P.lock);

    if (nc) {
        nodes[node] = nc;
        ob_send(&o, nodes);
    } else {                            /* from a process's own connection */
        bool relayed = ob_relayed(&o);
        if (relayed)
            job_nodes(nodes, false, NULL);
        ob_send(&o, nodes);
        for (uint32_t i = 0; relayed && i < cfg.pset_size; i++)
            conn_put(nodes[i]);
    }
    send_up(job, &up);
    if (aborted)
        do_abort(&me, code, msg);
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

    if (node < cfg.pset_size && job_proc_rank(node, t, hello->job, &rank) == 0) {
        pthread_mutex_lock(&P.lock);
        struct prank *r = P.job == hello->job ? find_rank((uint32_t)rank) : NULL;
        if ((ok = r && r->node == node && !r->direct))
            r->direct = conn_get(c);
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
    struct prank *r = P.job == hello->job ? find_rank((uint32_t)rank) : NULL;
    if (r && r->direct == c) {
        r->direct = NULL;
        drop = c;
    }
    pthread_cond_broadcast(&P.gone);
    pthread_mutex_unlock(&P.lock);
    conn_put(drop);
}

/* A rank ended.  One that used PMI but never finalized has left MPI: the
 * others would wait for it forever in their next collective or fence.  End
 * the job as if it had aborted (Hydra does the same when a PMI descriptor
 * closes before finalize). */
void pmi_rank_exit(uint32_t rank, int status)
{
    struct prank me;
    bool left = false;
    struct timespec until;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += DIRECT_DRAIN_MS / 1000;
    pthread_mutex_lock(&P.lock);
    uint64_t job = P.job;
    struct prank *r = job ? find_rank(rank) : NULL;
    /* Its own PMI connection is not ordered with the node's exit report: let
     * its last requests (a finalize, an abort) be served first.  The process
     * is gone, so the connection ends as soon as they are read. */
    while (r && r->direct && pthread_cond_timedwait(&P.gone, &P.lock, &until) == 0)
        r = P.job == job ? find_rank(rank) : NULL;
    if (r && r->version && !r->done) {
        r->done = true;
        left = true;
        me = *r;
    }
    pthread_mutex_unlock(&P.lock);
    if (left)
        do_abort(&me, status ? status : 1, "exited without PMI finalize (MPI_Finalize not called); "
                 "the other ranks cannot complete");
}

/* LAT_CTL_FENCE_OUT: publish, then release the pset. */
int pmi_fence_out(const char *p, size_t len, char *why, size_t whylen)
{
    struct lat_fence f;
    struct outbox o;
    struct conn *nodes[LAT_MAX_PSET];
    const char *s, *end = p + len;

    if (len < sizeof(f))
        return errprintf(why, whylen, "CTL_FENCE_OUT of %zu bytes", len);
    memcpy(&f, p, sizeof(f));
    if (f.flags & ~LAT_FENCE_MORE)
        return errprintf(why, whylen, "CTL_FENCE_OUT with unknown flags 0x%x", f.flags);
    /* every string checked before anything is stored */
    s = p + sizeof(f);
    for (uint32_t i = 0; i < 2 * f.nkv; i++) {
        const char *nul = s < end ? memchr(s, '\0', end - s) : NULL;
        if (!nul)
            return errprintf(why, whylen, "CTL_FENCE_OUT: string %u of %u missing or not NUL-terminated",
                             i, 2 * f.nkv);
        if ((i % 2 == 0 && (nul == s || nul - s > (long)LAT_PMI_KEY_MAX)) ||
            (i % 2 == 1 && vallen(s) > LAT_PMI_VAL_MAX))
            return errprintf(why, whylen, "CTL_FENCE_OUT: %s %u too long", i % 2 ? "value" : "key", i / 2);
        s = nul + 1;
    }
    if (s != end)
        return errprintf(why, whylen, "CTL_FENCE_OUT: %zu stray bytes", (size_t)(end - s));

    ob_init(&o);
    pthread_mutex_lock(&P.lock);
    if (!P.job || P.job != f.job || P.epoch != f.epoch || !P.fence_sent) {
        pthread_mutex_unlock(&P.lock);
        ras_event(RAS_WARNING, cfg.location, "fence %u of job %" PRIu64 " from the service node does not "
                  "match a fence waiting here: ignored", f.epoch, f.job);
        return 0;
    }
    s = p + sizeof(f);
    for (uint32_t i = 0; i < f.nkv; i++) {
        const char *k = s, *v = k + strlen(k) + 1;
        if (kvs_put(P.kv, k, v) < 0)
            logmsg("pmi: out of memory storing key %s", k);
        s = v + strlen(v) + 1;
    }
    if (!(f.flags & LAT_FENCE_MORE)) {
        for (uint32_t i = 0; i < P.nslots; i++) {
            struct prank *r = &P.r[i];
            struct reply rp;
            if (!r->in_fence)
                continue;
            r->in_fence = false;
            rp_begin(&rp, r->version == 2 ? 2 : 1, r->version == 2 ? "kvs-fence-response" : "barrier_out");
            rp_add(&rp, "rc", "0");
            if (r->version == 2 && r->waitthr[0])
                rp_add(&rp, "thrid", r->waitthr);
            rp_end(&o, r, &rp);
        }
        P.entered = 0;
        P.fence_sent = false;
        P.epoch++;
    }
    pthread_mutex_unlock(&P.lock);
    job_nodes(nodes, false, NULL);
    ob_send(&o, nodes);
    for (uint32_t i = 0; i < cfg.pset_size; i++)
        conn_put(nodes[i]);
    return 0;
}

static void clear_locked(void)
{
    for (uint32_t i = 0; i < P.nslots; i++) {
        free(P.r[i].buf);
        conn_put(P.r[i].direct);
    }
    free(P.r);
    free(P.pend);
    kvs_free(P.kv);
    kvs_free(P.nodeattr);
    P.r = NULL;
    P.pend = NULL;
    P.kv = P.nodeattr = NULL;
    P.job = 0;
    P.nslots = P.entered = P.epoch = P.npend = 0;
    P.pendlen = P.pendcap = 0;
    P.fence_sent = false;
}

int pmi_job_start(const struct job_spec *js, char *why, size_t whylen)
{
    int err = 0;

    pthread_mutex_lock(&P.lock);
    clear_locked();
    P.r = calloc(js->nslots ? js->nslots : 1, sizeof(*P.r));
    P.kv = kvs_new();
    P.nodeattr = kvs_new();
    if (!P.r || !P.kv || !P.nodeattr) {
        clear_locked();
        err = ENOMEM;
        errprintf(why, whylen, "out of memory for the job's PMI state");
        goto out;
    }
    P.job = js->hdr->job;
    P.nranks = js->hdr->nranks;
    P.nslots = js->nslots;
    snprintf(P.kvsname, sizeof(P.kvsname), "lattice-%" PRIu64, P.job);
    for (uint32_t i = 0; i < js->nslots; i++)
        P.r[i] = (struct prank){ .rank = js->slot[i].rank, .node = js->slot[i].node, .app = js->slot[i].app };
    /* the service node's answer to "which ranks share a node" */
    if (js->mapping[0] && kvs_put(P.kv, "PMI_process_mapping", js->mapping) < 0) {
        clear_locked();
        err = ENOMEM;
        errprintf(why, whylen, "out of memory for the job's PMI state");
    }
out:
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
