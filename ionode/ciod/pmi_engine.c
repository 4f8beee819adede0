/*
 * pmi_engine.c - the PMI engine of one job in one pset (pmi_engine.h,
 * docs/protocol.md section 10).
 *
 * Each compute process speaks PMI-1 ("simple", one line per command) or
 * PMI-2 (6-character length prefix, `cmd=X;k=v;`).  The engine answers
 * everything it knows by itself: init, maxes, appnum, universe size,
 * kvsname, puts (cached), gets (from the cache), node attributes.  A fence
 * (barrier_in / kvs-fence) is the only thing that leaves the pset: when every
 * process of the pset has entered, the pset's puts since the last fence go
 * up in ONE fence (ops->fence); the FENCE_OUT, once every pset of the job
 * has entered, brings the merged keys, which go into the cache, and every
 * process gets its barrier_out.  In a job's PMI fence tree (LAT_JOB_TREE)
 * the fence also waits for the fences of the I/O nodes below this one
 * (pmi_engine_child_fence), whose keys go up with the pset's.
 *
 * No socket, descriptor or lock here: what to send, and to whom, goes to the
 * caller's callbacks.  A process has one request outstanding at a time, so
 * its answers cannot overtake each other.
 */
#include "pmi_engine.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    int      name_op;               /* LAT_NAME_* waiting for the service node, or 0 */
    char    *buf;                   /* partial input */
    size_t   len;
    uint32_t nput;                  /* puts since it last entered a fence (its bound: lim.proc_*) */
    size_t   putbytes;
};

struct pmi_engine {
    const struct pmi_ops *ops;
    void         *ctx;              /* the current entry point's, for the callbacks */
    bool          aborted;          /* in this input: a process aborted, stop */
    uint64_t      job;
    uint32_t      nranks, nslots, epoch, entered;
    bool          fence_sent;       /* this pset's fence is upstream, waiting for FENCE_OUT */
    bool          tree_wait;        /* LAT_JOB_TREE: the fence goes up once the tree is known */
    bool          broken;           /* a fence cannot complete: said once (ops->broken) */
    uint32_t      nchildren, children_in;
    struct child {
        bool in;                    /* its last chunk of this epoch arrived */
        bool gone;                  /* its connection ended */
    }            *child;
    size_t        mapping_len;      /* of PMI_process_mapping; longer than a value: not served */
    struct prank *r;
    char          kvsname[32];
    struct kvs   *kv;               /* published keys (after fences) and this pset's puts */
    struct kvs   *nodeattr;         /* "node/key" -> value */
    char         *pend;             /* this epoch's puts: key \0 value \0 ... */
    size_t        pendlen, pendcap;
    uint32_t      npend;
    struct pmi_limits lim;          /* what the job may hold here (pmi_engine.h) */
    bool          fence_over;       /* a FENCE_OUT brought more than lim allows: its fence fails */
};

static struct pmi_dest dest(const struct pmi_engine *e, const struct prank *r)
{
    return (struct pmi_dest){ .slot = (uint32_t)(r - e->r), .rank = r->rank, .node = r->node };
}

static void note(struct pmi_engine *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(struct pmi_engine *e, const char *fmt, ...)
{
    char text[160];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    e->ops->note(e->ctx, text);
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

static void rp_end(struct pmi_engine *e, const struct prank *pr, struct reply *r)
{
    struct pmi_dest to = dest(e, pr);

    if (r->v == 2) {
        char len[8];
        snprintf(len, sizeof(len), "%6u", (unsigned)(r->len - 6));
        memcpy(r->buf, len, 6);
    } else {
        r->buf[r->len++] = '\n';
    }
    e->ops->answer(e->ctx, &to, r->buf, r->len);
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

static void error_reply(struct pmi_engine *e, struct prank *r, int v, const char *resp, const char *msg)
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
    rp_end(e, r, &rp);
}

static void bad(struct pmi_engine *e, struct prank *r, int v, const char *resp, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void bad(struct pmi_engine *e, struct prank *r, int v, const char *resp, const char *fmt, ...)
{
    char text[160];
    struct pmi_dest who = dest(e, r);
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    e->ops->bad_request(e->ctx, &who, text);
    error_reply(e, r, v, resp, text);
}

static bool good_key(const char *k)
{
    return k && *k && strlen(k) <= LAT_PMI_KEY_MAX;
}

static bool good_val(const char *v)
{
    return v && vallen(v) <= LAT_PMI_VAL_MAX;
}

static int pend_add(struct pmi_engine *e, const char *key, const char *val)
{
    size_t kl = strlen(key) + 1, vl = strlen(val) + 1;

    if (e->pendlen + kl + vl > e->pendcap) {
        size_t cap = e->pendcap ? e->pendcap * 2 : 65536;
        while (cap < e->pendlen + kl + vl)
            cap *= 2;
        char *n = realloc(e->pend, cap);
        if (!n)
            return -1;
        e->pend = n;
        e->pendcap = cap;
    }
    memcpy(e->pend + e->pendlen, key, kl);
    memcpy(e->pend + e->pendlen + kl, val, vl);
    e->pendlen += kl + vl;
    e->npend++;
    return 0;
}

/* What the job holds here: its keys, and their bytes with those waiting for the fence. */
static uint32_t held_keys(const struct pmi_engine *e)
{
    return kvs_count(e->kv) + kvs_count(e->nodeattr);
}

static size_t held_bytes(const struct pmi_engine *e)
{
    return kvs_bytes(e->kv) + kvs_bytes(e->nodeattr) + e->pendlen;
}

/* Whether storing key=val in t (and, pend, in this epoch's puts) keeps the
 * job within its bounds here; NULL, or why not in text. */
static const char *over_job(const struct pmi_engine *e, const struct kvs *t, const char *key, const char *val,
                            bool pend, char *text, size_t len)
{
    bool isnew;
    size_t cost = kvs_cost(t, key, val, &isnew) + (pend ? strlen(key) + strlen(val) + 2 : 0);

    if (isnew && held_keys(e) >= e->lim.job_keys)
        return snprintf(text, len, "the job holds %u PMI keys on this I/O node, its bound", held_keys(e)), text;
    if (held_bytes(e) + cost > e->lim.job_bytes)
        return snprintf(text, len, "the job's PMI keys on this I/O node would pass their bound of %zu bytes",
                        e->lim.job_bytes), text;
    return NULL;
}

/* A process's put: within its own bound (puts since its last fence) and the
 * job's; NULL, or why not in text. */
static const char *over(const struct pmi_engine *e, const struct prank *r, const struct kvs *t, const char *key,
                        const char *val, bool pend, char *text, size_t len)
{
    size_t n = strlen(key) + strlen(val) + 2;

    if (r->nput >= e->lim.proc_keys)
        return snprintf(text, len, "PMI key space bound: rank %u put %u keys since its last fence, the most a "
                        "process may", r->rank, r->nput), text;
    if (r->putbytes + n > e->lim.proc_bytes)
        return snprintf(text, len, "PMI key space bound: rank %u's puts since its last fence would pass %zu "
                        "bytes, the most a process may", r->rank, e->lim.proc_bytes), text;
    if (over_job(e, t, key, val, pend, text, len)) {
        char why[128];
        snprintf(why, sizeof(why), "%s", text);
        return snprintf(text, len, "PMI key space bound: %s", why), text;
    }
    return NULL;
}

static void count_put(struct prank *r, const char *key, const char *val)
{
    r->nput++;
    r->putbytes += strlen(key) + strlen(val) + 2;
}

/* A put of this pset: visible here at once, published upstream at the fence. */
static int put(struct pmi_engine *e, struct prank *r, const char *key, const char *val)
{
    if (kvs_put(e->kv, key, val) < 0 || pend_add(e, key, val) < 0)
        return -1;
    count_put(r, key, val);
    return 0;
}

/* The whole pset is in the fence: its puts go up in one message, or in
 * chunks of LAT_MAX_PAYLOAD with LAT_FENCE_MORE on all but the last.  A
 * pair is at most LAT_PMI_KEY_MAX + 2 * LAT_PMI_VAL_MAX (escapes) + 2 bytes,
 * so a chunk holds at least room - that: the count has no fixed cap. */
static void fence_up(struct pmi_engine *e)
{
    size_t room = LAT_MAX_PAYLOAD - sizeof(struct lat_fence), off = 0, w = 0;
    size_t most = e->pendlen / (room - LAT_PMI_KEY_MAX - 2 * LAT_PMI_VAL_MAX - 2) + 1;
    char *msg = malloc(e->pendlen + most * sizeof(struct lat_fence) + 1);
    size_t *len = malloc(most * sizeof(*len));
    int n = 0;

    if (!msg || !len) {
        note(e, "pmi: out of memory for the fence of job %" PRIu64, e->job);
        free(msg);
        free(len);
        return;
    }
    do {
        struct lat_fence f = { .job = e->job, .epoch = e->epoch };
        size_t start = off, body = 0;
        while (off < e->pendlen) {
            size_t kl = strlen(e->pend + off) + 1, vl = strlen(e->pend + off + kl) + 1;
            if (body + kl + vl > room)
                break;
            body += kl + vl;
            off += kl + vl;
            f.nkv++;
        }
        if (off < e->pendlen)
            f.flags = LAT_FENCE_MORE;
        memcpy(msg + w, &f, sizeof(f));
        memcpy(msg + w + sizeof(f), e->pend + start, off - start);
        len[n++] = sizeof(f) + off - start;
        w += sizeof(f) + off - start;
    } while (off < e->pendlen);
    e->fence_sent = true;
    e->pendlen = 0;
    e->npend = 0;
    e->ops->fence(e->ctx, msg, len, n);
    free(msg);
    free(len);
}

/* A fence in progress that a lost child can never join: said once. */
static void check_children(struct pmi_engine *e)
{
    if (e->broken || e->fence_sent || (e->entered == 0 && e->children_in == 0))
        return;
    for (uint32_t i = 0; i < e->nchildren; i++)
        if (e->child[i].gone && !e->child[i].in) {
            char text[160];
            e->broken = true;
            snprintf(text, sizeof(text), "fence %u of job %" PRIu64 " cannot complete: the connection of "
                     "I/O node %u below this one ended before it joined", e->epoch, e->job, i);
            e->ops->broken(e->ctx, text);
            return;
        }
}

/* Up once every process of the pset and every child is in. */
static void maybe_up(struct pmi_engine *e)
{
    check_children(e);
    if (!e->fence_sent && !e->tree_wait && !e->broken && e->entered >= e->nslots
        && e->children_in >= e->nchildren)
        fence_up(e);
}

static void enter_fence(struct pmi_engine *e, struct prank *r)
{
    r->in_fence = true;
    r->nput = 0;                        /* its bound counts the puts of one epoch */
    r->putbytes = 0;
    e->entered++;
    maybe_up(e);
}

/* abort: no answer; the job ends. */
static void do_abort(struct pmi_engine *e, struct prank *r, int code, const char *msg)
{
    struct pmi_dest who = dest(e, r);

    r->done = true;
    e->aborted = true;
    e->ops->abort(e->ctx, &who, code, msg);
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

/* ---- the name service (MPI_Publish_name ...): kept by the service node ---- */

static const char *name_response(int v, int op)
{
    static const char *const v1[] = { "", "publish_result", "unpublish_result", "lookup_result" };
    static const char *const v2[] = { "", "name-publish-response", "name-unpublish-response",
                                      "name-lookup-response" };
    return (v == 2 ? v2 : v1)[op];
}

static void name_request(struct pmi_engine *e, struct prank *r, int v, int op, const char *service,
                         const char *port)
{
    struct pmi_dest who = dest(e, r);

    if (!service || !*service || vallen(service) > LAT_PMI_VAL_MAX)
        return bad(e, r, v, name_response(v, op), "a name request needs a service name of 1..1024 characters");
    if (op == LAT_NAME_PUBLISH && (!port || !*port || vallen(port) > LAT_PMI_VAL_MAX))
        return bad(e, r, v, name_response(v, op), "publishing needs a port of 1..1024 characters");
    r->name_op = op;
    e->ops->name(e->ctx, &who, op, service, op == LAT_NAME_PUBLISH ? port : "");
}

bool pmi_engine_name_out(struct pmi_engine *e, uint32_t rank, int op, int rc, const char *port, void *ctx)
{
    uint32_t node;
    int slot = pmi_engine_slot(e, rank, &node);
    struct prank *r = slot >= 0 ? &e->r[slot] : NULL;
    struct reply rp;

    if (!r || !r->name_op || r->name_op != op)
        return false;
    e->ctx = ctx;
    r->name_op = 0;
    rp_begin(&rp, r->version, name_response(r->version, op));
    rp_add(&rp, "rc", rc == 0 ? "0" : "1");
    if (r->version == 1)
        rp_add(&rp, "info", rc == 0 ? "ok" : op == LAT_NAME_PUBLISH ? "service_already_published"
                                                                      : "service_not_found");
    else if (op == LAT_NAME_LOOKUP)
        rp_add(&rp, "found", rc == 0 ? "TRUE" : "FALSE");
    if (rc != 0 && r->version == 2)
        rp_add(&rp, "errmsg", op == LAT_NAME_PUBLISH ? "service already published" : "service not found");
    if (rc == 0 && op == LAT_NAME_LOOKUP) {
        rp_add(&rp, "port", port);
        if (r->version == 2)
            rp_add(&rp, "value", port);         /* what older clients read */
    }
    if (r->version == 2 && r->waitthr[0])
        rp_add(&rp, "thrid", r->waitthr);
    rp_end(e, r, &rp);
    return true;
}

static void v1_command(struct pmi_engine *e, struct prank *r, struct cmd *c)
{
    struct reply rp;
    const char *n = c->name, *kvs = find(c, "kvsname"), *key = find(c, "key"), *val = find(c, "value");

    if (!strcmp(n, "init")) {
        long ver = 0, sub = 0;
        if (!parse_int(find(c, "pmi_version"), 1, 2, &ver) || !parse_int(find(c, "pmi_subversion"), 0, 9, &sub))
            return bad(e, r, 1, "response_to_init", "init needs pmi_version 1 or 2 and pmi_subversion");
        rp_begin(&rp, 1, "response_to_init");
        rp_add(&rp, "rc", "0");
        rp_add(&rp, "pmi_version", ver == 2 ? "2" : "1");
        rp_add(&rp, "pmi_subversion", ver == 2 ? "0" : "1");
        r->version = (int)ver;
        return rp_end(e, r, &rp);
    }
    if (!r->version)
        return bad(e, r, 1, "error", "command before init");
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
        rp_addu(&rp, "size", e->nranks);
    } else if (!strcmp(n, "get_my_kvsname")) {
        rp_begin(&rp, 1, "my_kvsname");
        rp_add(&rp, "rc", "0");
        rp_add(&rp, "kvsname", e->kvsname);
    } else if (!strcmp(n, "put")) {
        if (!kvs || strcmp(kvs, e->kvsname))
            return bad(e, r, 1, "put_result", "put to an unknown kvsname");
        if (!good_key(key) || !good_val(val))
            return bad(e, r, 1, "put_result", "put needs a key of 1..64 and a value of at most 1024 characters");
        char why[160];
        if (over(e, r, e->kv, key, val, true, why, sizeof(why)))
            return bad(e, r, 1, "put_result", "%s", why);
        if (put(e, r, key, val) < 0)
            return error_reply(e, r, 1, "put_result", "out of memory");
        rp_begin(&rp, 1, "put_result");
        rp_add(&rp, "rc", "0");
    } else if (!strcmp(n, "get")) {
        if (!kvs || strcmp(kvs, e->kvsname))
            return bad(e, r, 1, "get_result", "get from an unknown kvsname");
        if (!good_key(key))
            return bad(e, r, 1, "get_result", "get needs a key of 1..64 characters");
        const char *v = kvs_get(e->kv, key);
        rp_begin(&rp, 1, "get_result");
        if (!v && e->mapping_len && !strcmp(key, "PMI_process_mapping")) {
            /* longer than MPICH takes: it then finds the ranks that share a node by itself */
            char msg[96];
            snprintf(msg, sizeof(msg), "PMI_process_mapping_has_%zu_characters,_more_than_the_%u_served",
                     e->mapping_len, PMI_MAPPING_MAX);
            rp_add(&rp, "rc", "1");
            rp_add(&rp, "msg", msg);
        } else if (v) {
            rp_add(&rp, "rc", "0");
            rp_add(&rp, "msg", "success");
            rp_add(&rp, "value", v);
        } else {
            rp_add(&rp, "rc", "1");
            rp_add(&rp, "msg", "key_not_found");
        }
    } else if (!strcmp(n, "barrier_in")) {
        if (r->in_fence)
            return bad(e, r, 1, "barrier_out", "barrier_in twice");
        return enter_fence(e, r);
    } else if (!strcmp(n, "finalize")) {
        r->done = true;
        rp_begin(&rp, 1, "finalize_ack");
        rp_add(&rp, "rc", "0");
    } else if (!strcmp(n, "abort")) {
        long ec = 1;
        const char *m = find(c, "message");
        if (find(c, "exitcode") && !parse_int(find(c, "exitcode"), -2147483647L - 1, 2147483647L, &ec))
            ec = 1;
        return do_abort(e, r, (int)ec, m ? m : "");
    } else if (!strcmp(n, "publish_name") || !strcmp(n, "unpublish_name") || !strcmp(n, "lookup_name")) {
        return name_request(e, r, 1, n[0] == 'p' ? LAT_NAME_PUBLISH : n[0] == 'u' ? LAT_NAME_UNPUBLISH
                                                                                 : LAT_NAME_LOOKUP,
                            find(c, "service"), find(c, "port"));
    } else {
        return bad(e, r, 1, "error", "unknown PMI-1 command");
    }
    rp_end(e, r, &rp);
}

static void v2_command(struct pmi_engine *e, struct prank *r, struct cmd *c)
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
            return bad(e, r, 2, resp, "fullinit for another rank");
        rp_add(&rp, "pmi-version", "2");
        rp_add(&rp, "pmi-subversion", "0");
        rp_addu(&rp, "rank", r->rank);
        rp_addu(&rp, "size", e->nranks);
        rp_addu(&rp, "appnum", r->app);
        rp_add(&rp, "debugged", "FALSE");
        rp_add(&rp, "pmiverbose", "FALSE");
    } else if (!strcmp(n, "job-getid")) {
        rp_add(&rp, "jobid", e->kvsname);
    } else if (!strcmp(n, "kvs-put")) {
        if (!good_key(key) || !good_val(val))
            return bad(e, r, 2, resp, "kvs-put needs a key of 1..64 and a value of at most 1024 characters");
        char why[160];
        if (over(e, r, e->kv, key, val, true, why, sizeof(why)))
            return bad(e, r, 2, resp, "%s", why);
        if (put(e, r, key, val) < 0)
            return error_reply(e, r, 2, resp, "out of memory");
    } else if (!strcmp(n, "kvs-get")) {
        if (!good_key(key))
            return bad(e, r, 2, resp, "kvs-get needs a key of 1..64 characters");
        const char *v = kvs_get(e->kv, key);
        rp_add(&rp, "found", v ? "TRUE" : "FALSE");
        if (v)
            rp_add(&rp, "value", v);
    } else if (!strcmp(n, "kvs-fence")) {
        if (r->in_fence)
            return bad(e, r, 2, resp, "kvs-fence twice");
        snprintf(r->waitthr, sizeof(r->waitthr), "%s", thrid ? thrid : "");
        return enter_fence(e, r);
    } else if (!strcmp(n, "info-getjobattr")) {
        if (!good_key(key))
            return bad(e, r, 2, resp, "info-getjobattr needs a key");
        const char *v = NULL;
        char num[16];
        if (e->mapping_len && !strcmp(key, "PMI_process_mapping")) {
            /* a PMI-2 client needs it and cannot take it: a clear error, not a cut value */
            char text[128];
            snprintf(text, sizeof(text), "PMI_process_mapping has %zu characters, more than the %u served",
                     e->mapping_len, PMI_MAPPING_MAX);
            return error_reply(e, r, 2, resp, text);
        }
        if (!strcmp(key, "PMI_process_mapping"))
            v = kvs_get(e->kv, key);
        else if (!strcmp(key, "universeSize"))
            snprintf(num, sizeof(num), "%u", e->nranks), v = num;
        rp_add(&rp, "found", v ? "TRUE" : "FALSE");
        if (v)
            rp_add(&rp, "value", v);
    } else if (!strcmp(n, "info-putnodeattr") || !strcmp(n, "info-getnodeattr")) {
        char nk[LAT_PMI_KEY_MAX + 16];
        if (!good_key(key))
            return bad(e, r, 2, resp, "node attributes need a key of 1..64 characters");
        snprintf(nk, sizeof(nk), "%u/%s", r->node, key);
        if (n[5] == 'p') {
            if (!good_val(val))
                return bad(e, r, 2, resp, "info-putnodeattr needs a value of at most 1024 characters");
            char why[160];
            if (over(e, r, e->nodeattr, nk, val, false, why, sizeof(why)))
                return bad(e, r, 2, resp, "%s", why);
            if (kvs_put(e->nodeattr, nk, val) < 0)
                return error_reply(e, r, 2, resp, "out of memory");
            count_put(r, nk, val);
            /* wake the processes of this node that wait for it */
            for (uint32_t i = 0; i < e->nslots; i++) {
                struct prank *w = &e->r[i];
                if (w->node == r->node && w->waitkey[0] && !strcmp(w->waitkey, key)) {
                    struct reply wr;
                    rp_begin(&wr, 2, "info-getnodeattr-response");
                    rp_add(&wr, "rc", "0");
                    rp_add(&wr, "found", "TRUE");
                    rp_add(&wr, "value", val);
                    if (w->waitthr[0])
                        rp_add(&wr, "thrid", w->waitthr);
                    rp_end(e, w, &wr);
                    w->waitkey[0] = '\0';
                }
            }
        } else {
            const char *v = kvs_get(e->nodeattr, nk), *wait = find(c, "wait");
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
        return do_abort(e, r, (int)ec, m ? m : "");
    } else if (!strcmp(n, "name-publish") || !strcmp(n, "name-unpublish") || !strcmp(n, "name-lookup")) {
        snprintf(r->waitthr, sizeof(r->waitthr), "%s", thrid ? thrid : "");
        return name_request(e, r, 2, n[5] == 'p' ? LAT_NAME_PUBLISH : n[5] == 'u' ? LAT_NAME_UNPUBLISH
                                                                                 : LAT_NAME_LOOKUP,
                            find(c, "name"), find(c, "port"));
    } else if (!strcmp(n, "spawn")) {
        return error_reply(e, r, 2, resp, "not supported by lattice");
    } else {
        return bad(e, r, 2, resp, "unknown PMI-2 command");
    }
    if (thrid)
        rp_add(&rp, "thrid", thrid);
    rp_end(e, r, &rp);
}

/* Takes the complete commands out of r->buf. */
static void drain(struct pmi_engine *e, struct prank *r)
{
    size_t off = 0;
    struct cmd c;
    const char *err;

    while (!r->broken && off < r->len && !e->aborted) {
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
                bad(e, r, 2, "error-response", "bad PMI-2 length prefix; ignoring this rank's PMI from now on");
                break;
            }
            if (avail < 6 + n)
                break;
            char save = s[6 + n];
            s[6 + n] = '\0';
            if (memchr(s + 6, '\0', n))
                bad(e, r, 2, "error-response", "NUL byte in a PMI-2 command");
            else if ((err = parse(s + 6, 2, &c)))
                bad(e, r, 2, "error-response", "malformed PMI-2 command: %s", err);
            else
                v2_command(e, r, &c);
            s[6 + n] = save;
            off += 6 + n;
            continue;
        }
        char *nl = memchr(s, '\n', avail);
        if (!nl) {
            if (avail > LAT_PMI_LINE_MAX) {     /* no end in sight: drop it */
                if (!r->skip_line)
                    bad(e, r, 1, "error", "PMI line longer than 4096 bytes");
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
            bad(e, r, 1, "error", "PMI line longer than 4096 bytes");
            continue;
        }
        if (r->in_mcmd) {                       /* spawn: not supported, answered at its end */
            if (!strcmp(s, "endcmd")) {
                r->in_mcmd = false;
                error_reply(e, r, 1, "spawn_result", "spawn not supported by lattice");
            }
            continue;
        }
        if (!strncmp(s, "mcmd=", 5)) {
            r->in_mcmd = true;
            continue;
        }
        if (memchr(s, '\0', (size_t)(nl - s)))
            bad(e, r, 1, "error", "NUL byte in a PMI line");
        else if ((err = parse(s, 1, &c)))
            bad(e, r, 1, "error", "malformed PMI line: %s", err);
        else
            v1_command(e, r, &c);
    }
    if (r->broken)
        off = r->len;
    memmove(r->buf, r->buf + off, r->len - off);
    r->len -= off;
}

/* ---- the entry points ---- */

/* why: the reason a fence message is refused; -1 */
static int fail(char *why, size_t whylen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *why, size_t whylen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
    return -1;
}

struct pmi_engine *pmi_engine_new(const struct pmi_job *job, const struct pmi_ops *ops)
{
    struct pmi_engine *e = calloc(1, sizeof(*e));

    if (!e)
        return NULL;
    e->ops = ops;
    e->r = calloc(job->nslots ? job->nslots : 1, sizeof(*e->r));
    e->kv = kvs_new();
    e->nodeattr = kvs_new();
    if (!e->r || !e->kv || !e->nodeattr)
        goto error;
    e->job = job->id;
    e->lim = job->lim;
    if (!e->lim.job_keys)
        e->lim.job_keys = PMI_JOB_KEYS;
    if (!e->lim.job_bytes)
        e->lim.job_bytes = PMI_JOB_BYTES;
    if (!e->lim.proc_keys)
        e->lim.proc_keys = PMI_PROC_KEYS;
    if (!e->lim.proc_bytes)
        e->lim.proc_bytes = PMI_PROC_BYTES;
    e->nranks = job->nranks;
    e->nslots = job->nslots;
    snprintf(e->kvsname, sizeof(e->kvsname), "lattice-%" PRIu64, e->job);
    for (uint32_t i = 0; i < job->nslots; i++)
        e->r[i] = (struct prank){ .rank = job->slot[i].rank, .node = job->slot[i].node, .app = job->slot[i].app };
    e->tree_wait = job->tree;
    /* the service node's answer to "which ranks share a node", whole; one
     * longer than MPICH can read (an irregular mapping of many nodes) is
     * not served, and said so: PMI_MAPPING_MAX */
    e->mapping_len = strlen(job->mapping);
    if (e->mapping_len > PMI_MAPPING_MAX)
        note(e, "job %" PRIu64 ": PMI_process_mapping has %zu characters, more than the %u served: "
             "MPI finds the ranks that share a node by itself", e->job, e->mapping_len, PMI_MAPPING_MAX);
    else if (e->mapping_len && kvs_put(e->kv, "PMI_process_mapping", job->mapping) < 0)
        goto error;
    else
        e->mapping_len = 0;
    return e;
error:
    pmi_engine_free(e);
    return NULL;
}

void pmi_engine_free(struct pmi_engine *e)
{
    if (!e)
        return;
    for (uint32_t i = 0; e->r && i < e->nslots; i++)
        free(e->r[i].buf);
    free(e->r);
    free(e->child);
    free(e->pend);
    kvs_free(e->kv);
    kvs_free(e->nodeattr);
    free(e);
}

int pmi_engine_slot(const struct pmi_engine *e, uint32_t rank, uint32_t *node)
{
    for (uint32_t i = 0; i < e->nslots; i++)
        if (e->r[i].rank == rank) {
            *node = e->r[i].node;
            return (int)i;
        }
    return -1;
}

void pmi_engine_input(struct pmi_engine *e, uint32_t slot, const char *data, size_t len, void *ctx)
{
    struct prank *r = slot < e->nslots ? &e->r[slot] : NULL;

    if (!r || r->broken)
        return;
    e->ctx = ctx;
    e->aborted = false;
    char *b = realloc(r->buf, r->len + len + 1);
    if (!b) {
        note(e, "pmi: out of memory for rank %u's input", r->rank);
        return;
    }
    r->buf = b;
    memcpy(r->buf + r->len, data, len);
    r->len += len;
    drain(e, r);
}

void pmi_engine_exit(struct pmi_engine *e, uint32_t slot, int status, void *ctx)
{
    struct prank *r = slot < e->nslots ? &e->r[slot] : NULL;

    if (!r || !r->version || r->done)
        return;
    e->ctx = ctx;
    do_abort(e, r, status ? status : 1, "exited without PMI finalize (MPI_Finalize not called); "
             "the other ranks cannot complete");
}

int pmi_fence_check(const char *p, size_t len, char *why, size_t whylen)
{
    struct lat_fence f;
    const char *s, *end = p + len;

    if (len < sizeof(f))
        return fail(why, whylen, "fence of %zu bytes", len);
    memcpy(&f, p, sizeof(f));
    if (f.flags & ~LAT_FENCE_MORE)
        return fail(why, whylen, "fence with unknown flags 0x%x", f.flags);
    /* every string checked before anything is stored */
    s = p + sizeof(f);
    for (uint32_t i = 0; i < 2 * f.nkv; i++) {
        const char *nul = s < end ? memchr(s, '\0', end - s) : NULL;
        if (!nul)
            return fail(why, whylen, "fence: string %u of %u missing or not NUL-terminated",
                        i, 2 * f.nkv);
        if ((i % 2 == 0 && (nul == s || nul - s > (long)LAT_PMI_KEY_MAX)) ||
            (i % 2 == 1 && vallen(s) > LAT_PMI_VAL_MAX))
            return fail(why, whylen, "fence: %s %u too long", i % 2 ? "value" : "key", i / 2);
        s = nul + 1;
    }
    if (s != end)
        return fail(why, whylen, "fence: %zu stray bytes", (size_t)(end - s));
    return 0;
}

bool pmi_engine_fence_out(struct pmi_engine *e, const char *p, void *ctx)
{
    struct lat_fence f;
    const char *s = p + sizeof(f);

    memcpy(&f, p, sizeof(f));
    if (e->job != f.job || e->epoch != f.epoch || !e->fence_sent)
        return false;
    e->ctx = ctx;
    for (uint32_t i = 0; i < f.nkv && !e->fence_over; i++) {
        const char *k = s, *v = k + strlen(k) + 1;
        char why[160];
        /* the job's keys from every pset: what does not fit here fails the fence, never grows ciod */
        if (over_job(e, e->kv, k, v, false, why, sizeof(why))) {
            e->fence_over = true;
            note(e, "pmi: job %" PRIu64 " fence %u: %s", e->job, e->epoch, why);
        } else if (kvs_put(e->kv, k, v) < 0) {
            note(e, "pmi: out of memory storing key %s", k);
        }
        s = v + strlen(v) + 1;
    }
    if (f.flags & LAT_FENCE_MORE)
        return true;
    bool told = false;
    for (uint32_t i = 0; i < e->nslots; i++) {
        struct prank *r = &e->r[i];
        struct reply rp;
        if (!r->in_fence)
            continue;
        r->in_fence = false;
        if (e->fence_over) {
            char text[160];
            snprintf(text, sizeof(text), "PMI key space bound: the job's keys from every pset would pass %u "
                     "keys or %zu bytes on this I/O node", e->lim.job_keys, e->lim.job_bytes);
            if (!told) {
                struct pmi_dest who = dest(e, r);
                e->ops->bad_request(e->ctx, &who, text);
                told = true;
            }
            error_reply(e, r, r->version == 2 ? 2 : 1, r->version == 2 ? "kvs-fence-response" : "barrier_out",
                        text);
            continue;
        }
        rp_begin(&rp, r->version == 2 ? 2 : 1, r->version == 2 ? "kvs-fence-response" : "barrier_out");
        rp_add(&rp, "rc", "0");
        if (r->version == 2 && r->waitthr[0])
            rp_add(&rp, "thrid", r->waitthr);
        rp_end(e, r, &rp);
    }
    e->fence_over = false;
    e->entered = 0;
    e->fence_sent = false;
    e->epoch++;
    e->children_in = 0;
    for (uint32_t i = 0; i < e->nchildren; i++)
        e->child[i].in = false;
    return true;
}

int pmi_engine_tree(struct pmi_engine *e, uint32_t nchildren)
{
    if (!e->tree_wait || e->child || e->nchildren)
        return -1;                      /* not a tree job, or told twice */
    if (nchildren && !(e->child = calloc(nchildren, sizeof(*e->child))))
        return -1;
    e->nchildren = nchildren;
    return 0;
}

void pmi_engine_tree_up(struct pmi_engine *e, void *ctx)
{
    if (!e->tree_wait)
        return;
    e->ctx = ctx;
    e->tree_wait = false;
    maybe_up(e);                        /* the pset may be in its fence already */
}

bool pmi_engine_fence_waits(const struct pmi_engine *e)
{
    return e->fence_sent;
}

int pmi_engine_child_fence(struct pmi_engine *e, uint32_t child, const char *p, char *why, size_t whylen,
                           void *ctx)
{
    struct lat_fence f;
    const char *s = p + sizeof(f);

    memcpy(&f, p, sizeof(f));
    if (child >= e->nchildren)
        return fail(why, whylen, "fence from I/O node %u, which is not below this one", child);
    if (f.job != e->job || f.epoch != e->epoch || e->fence_sent || e->child[child].in)
        return fail(why, whylen, "fence %u of job %" PRIu64 " not expected here (job %" PRIu64 " is at fence %u%s)",
                    f.epoch, f.job, e->job, e->epoch, e->fence_sent || e->child[child].in ? ", which it joined" : "");
    e->ctx = ctx;
    for (uint32_t i = 0; i < f.nkv; i++) {
        const char *k = s, *v = k + strlen(k) + 1;
        if (held_bytes(e) + strlen(k) + strlen(v) + 2 > e->lim.job_bytes)
            return fail(why, whylen, "the fence of job %" PRIu64 " from below would pass the %zu bytes of PMI "
                        "keys the job may hold on this I/O node", e->job, e->lim.job_bytes);
        if (pend_add(e, k, v) < 0)
            return fail(why, whylen, "out of memory for the fence of job %" PRIu64, e->job);
        s = v + strlen(v) + 1;
    }
    if (!(f.flags & LAT_FENCE_MORE)) {
        e->child[child].in = true;
        e->children_in++;
        maybe_up(e);
    }
    return 0;
}

void pmi_engine_child_gone(struct pmi_engine *e, uint32_t child, void *ctx)
{
    if (child >= e->nchildren)
        return;
    e->ctx = ctx;
    e->child[child].gone = true;
    check_children(e);
}
