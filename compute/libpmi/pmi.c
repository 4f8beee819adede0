/* The PMI-1 API over the simple wire protocol.  One process, one PMI
 * connection (PMI_FD, given by the process manager: Lattice's cnode, or
 * Hydra); a mutex keeps request/reply pairs whole if a communication
 * library calls from more than one thread. */
#include "pmi.h"
#include "clique.h"
#include "wire.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static struct {
    int up, fd, rank, size, appnum, universe;
    int kvsname_max, key_max, val_max;
    char kvsname[256];
    int *clique, nclique;           /* computed on first use */
} S = { .fd = -1 };

static int env_int(const char *name, long lo, long hi, int *out)
{
    const char *s = getenv(name);
    char *end;
    if (!s || !*s) {
        pmiw_error("%s is not set: this process was not started by a PMI-1 process manager", name);
        return -1;
    }
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) {
        pmiw_error("%s=%s is not a number in %ld..%ld", name, s, lo, hi);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* An integer field of a reply, within lo..hi. */
static int reply_int(const struct pmiw_reply *rp, const char *key, long lo, long hi, int *out)
{
    const char *s = pmiw_get(rp, key);
    char *end;
    if (!s) {
        pmiw_error("reply cmd=%s has no %s", rp->val[0], key);
        return -1;
    }
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) {
        pmiw_error("reply cmd=%s has %s=%s, not a number in %ld..%ld", rp->val[0], key, s, lo, hi);
        return -1;
    }
    *out = (int)v;
    return 0;
}

/* A request whose reply must carry rc=0. */
static int call_ok(const char *req, const char *want, struct pmiw_reply *rp)
{
    if (pmiw_call(S.fd, req, want, rp) < 0)
        return -1;
    if (rp->rc != 0) {
        const char *msg = pmiw_get(rp, "msg");
        pmiw_error("'%.40s' failed: rc=%d msg=%s", req, rp->rc, msg ? msg : "none");
        return -1;
    }
    return 0;
}

/* The handshake and the job's constants, asked once at init. */
static int handshake(void)
{
    struct pmiw_reply rp;
    int ver = 0, sub = 0;

    if (call_ok("cmd=init pmi_version=1 pmi_subversion=1", "response_to_init", &rp) < 0
        || reply_int(&rp, "pmi_version", 1, 1, &ver) < 0 || reply_int(&rp, "pmi_subversion", 0, 1, &sub) < 0)
        return -1;
    if (call_ok("cmd=get_maxes", "maxes", &rp) < 0
        || reply_int(&rp, "kvsname_max", 2, (long)sizeof S.kvsname, &S.kvsname_max) < 0
        || reply_int(&rp, "keylen_max", 2, PMIW_LINE_MAX / 4, &S.key_max) < 0
        || reply_int(&rp, "vallen_max", 2, PMIW_LINE_MAX / 2, &S.val_max) < 0)
        return -1;
    if (call_ok("cmd=get_my_kvsname", "my_kvsname", &rp) < 0)
        return -1;
    const char *name = pmiw_get(&rp, "kvsname");
    if (!name || strlen(name) >= (size_t)S.kvsname_max) {
        pmiw_error("reply cmd=my_kvsname has %s", name ? "a name longer than kvsname_max" : "no kvsname");
        return -1;
    }
    snprintf(S.kvsname, sizeof S.kvsname, "%s", name);
    if (call_ok("cmd=get_appnum", "appnum", &rp) < 0 || reply_int(&rp, "appnum", 0, 1 << 30, &S.appnum) < 0)
        return -1;
    if (call_ok("cmd=get_universe_size", "universe_size", &rp) < 0
        || reply_int(&rp, "size", -1, 1 << 30, &S.universe) < 0)
        return -1;
    if (S.universe <= 0)            /* Hydra answers -1 (unknown): the job is the universe */
        S.universe = S.size;
    return 0;
}

int PMI_Init(int *spawned)
{
    int rc = PMI_SUCCESS, sp = 0;
    pthread_mutex_lock(&lock);
    if (S.up)
        goto out;
    if (env_int("PMI_FD", 0, 1 << 20, &S.fd) < 0 || env_int("PMI_SIZE", 1, 1 << 30, &S.size) < 0
        || env_int("PMI_RANK", 0, S.size - 1, &S.rank) < 0) {
        if (!getenv("PMI_FD") && getenv("PMI_PORT"))
            pmiw_error("PMI_PORT connections are not supported; the process manager must give PMI_FD");
        S.fd = -1;
        rc = PMI_FAIL;
        goto out;
    }
    if (getenv("PMI_SPAWNED") && env_int("PMI_SPAWNED", 0, 1, &sp) < 0)
        sp = 0;
    if (handshake() < 0) {
        S.fd = -1;
        rc = PMI_FAIL;
        goto out;
    }
    S.up = 1;
out:
    if (spawned)
        *spawned = sp ? PMI_TRUE : PMI_FALSE;
    pthread_mutex_unlock(&lock);
    return rc;
}

int PMI_Initialized(int *initialized)
{
    if (!initialized)
        return PMI_ERR_INVALID_ARG;
    pthread_mutex_lock(&lock);
    *initialized = S.up ? PMI_TRUE : PMI_FALSE;
    pthread_mutex_unlock(&lock);
    return PMI_SUCCESS;
}

int PMI_Finalize(void)
{
    struct pmiw_reply rp;
    int rc = PMI_SUCCESS;
    pthread_mutex_lock(&lock);
    if (S.up) {
        if (call_ok("cmd=finalize", "finalize_ack", &rp) < 0)
            rc = PMI_FAIL;
        close(S.fd);
        free(S.clique);
        S.clique = NULL;
        S.nclique = 0;
        S.fd = -1;
        S.up = 0;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Read one of the job's constants (no wire traffic). */
static int constant(const int *field, int *out)
{
    if (!out)
        return PMI_ERR_INVALID_ARG;
    pthread_mutex_lock(&lock);
    int up = S.up;
    if (up)
        *out = *field;
    pthread_mutex_unlock(&lock);
    return up ? PMI_SUCCESS : PMI_ERR_INIT;
}

int PMI_Get_size(int *size) { return constant(&S.size, size); }
int PMI_Get_rank(int *rank) { return constant(&S.rank, rank); }
int PMI_Get_universe_size(int *size) { return constant(&S.universe, size); }
int PMI_Get_appnum(int *appnum) { return constant(&S.appnum, appnum); }
int PMI_KVS_Get_name_length_max(int *length) { return constant(&S.kvsname_max, length); }
int PMI_KVS_Get_key_length_max(int *length) { return constant(&S.key_max, length); }
int PMI_KVS_Get_value_length_max(int *length) { return constant(&S.val_max, length); }

int PMI_KVS_Get_my_name(char kvsname[], int length)
{
    int rc = PMI_SUCCESS;
    if (!kvsname || length <= 0)
        return PMI_ERR_INVALID_ARG;
    pthread_mutex_lock(&lock);
    if (!S.up)
        rc = PMI_ERR_INIT;
    else if (strlen(S.kvsname) >= (size_t)length)
        rc = PMI_ERR_INVALID_LENGTH;
    else
        strcpy(kvsname, S.kvsname);
    pthread_mutex_unlock(&lock);
    return rc;
}

/* A key travels as one wire token: no spaces, backslashes or '='. */
static int key_ok(const char *s, int max)
{
    size_t n = strlen(s);
    return n > 0 && n <= (size_t)max && !strpbrk(s, " \n\\=");
}

/* Values may hold spaces (Open MPI pads its base64 with them), which end a
 * value on the wire.  Hydra splits at every space even after a backslash,
 * so a space travels as "\s" and a backslash as "\\": both survive Hydra
 * and Lattice's ciod unchanged, and only this library decodes them (a
 * backslash before anything else, from another writer, stays as it is). */
static int escape_value(char *out, size_t cap, const char *v)
{
    size_t n = 0;
    for (; *v; v++) {
        if (*v == '\n' || n + 3 > cap)
            return -1;
        if (*v == ' ' || *v == '\\') {
            out[n++] = '\\';
            out[n++] = *v == ' ' ? 's' : '\\';
        } else {
            out[n++] = *v;
        }
    }
    out[n] = '\0';
    return 0;
}

/* Decode into out (at most cap bytes with the NUL); -1 if it does not fit. */
static int unescape_value(char *out, size_t cap, const char *v)
{
    size_t n = 0;
    for (; *v; v++) {
        char c = *v;
        if (c == '\\' && (v[1] == 's' || v[1] == '\\'))
            c = *++v == 's' ? ' ' : '\\';
        if (n + 1 >= cap)
            return -1;
        out[n++] = c;
    }
    out[n] = '\0';
    return 0;
}

static int check_kvs(const char *kvsname)
{
    if (!S.up)
        return PMI_ERR_INIT;
    if (!kvsname || strcmp(kvsname, S.kvsname))
        return PMI_ERR_INVALID_ARG;
    return PMI_SUCCESS;
}

int PMI_KVS_Put(const char kvsname[], const char key[], const char value[])
{
    struct pmiw_reply rp;
    char req[PMIW_LINE_MAX];
    int rc;
    pthread_mutex_lock(&lock);
    if ((rc = check_kvs(kvsname)) != PMI_SUCCESS)
        goto out;
    if (!key || !key_ok(key, S.key_max)) {
        pmiw_error("put: key '%.80s' is empty, longer than keylen_max %d, or has a space, '=' or backslash",
                   key ? key : "(null)", S.key_max);
        rc = PMI_ERR_INVALID_KEY;
        goto out;
    }
    char esc[PMIW_LINE_MAX];
    if (!value || !*value || strlen(value) > (size_t)S.val_max || escape_value(esc, sizeof esc, value) < 0) {
        pmiw_error("put of key %s: the value (%zu characters) is %s", key, value ? strlen(value) : 0,
                   !value || !*value ? "empty (the wire protocol cannot carry it)"
                   : strlen(value) > (size_t)S.val_max ? "longer than vallen_max" : "not one line (a newline)");
        rc = PMI_ERR_INVALID_VAL;
        goto out;
    }
    if (snprintf(req, sizeof req, "cmd=put kvsname=%s key=%s value=%s", kvsname, key, esc) >= (int)sizeof req) {
        rc = PMI_ERR_INVALID_VAL_LENGTH;
        goto out;
    }
    if (call_ok(req, "put_result", &rp) < 0)
        rc = PMI_FAIL;
out:
    pthread_mutex_unlock(&lock);
    return rc;
}

/* Puts go to the server at once in the simple protocol; the barrier is
 * what makes them visible, so there is nothing to send here. */
int PMI_KVS_Commit(const char kvsname[])
{
    pthread_mutex_lock(&lock);
    int rc = check_kvs(kvsname);
    pthread_mutex_unlock(&lock);
    return rc;
}

int PMI_KVS_Get(const char kvsname[], const char key[], char value[], int length)
{
    struct pmiw_reply rp;
    char req[PMIW_LINE_MAX];
    int rc;
    pthread_mutex_lock(&lock);
    if ((rc = check_kvs(kvsname)) != PMI_SUCCESS)
        goto out;
    if (!key || !key_ok(key, S.key_max)) {
        rc = PMI_ERR_INVALID_KEY;
        goto out;
    }
    if (!value || length <= 0) {
        rc = PMI_ERR_INVALID_ARG;
        goto out;
    }
    snprintf(req, sizeof req, "cmd=get kvsname=%s key=%s", kvsname, key);
    if (pmiw_call(S.fd, req, "get_result", &rp) < 0) {
        rc = PMI_FAIL;
        goto out;
    }
    if (rp.rc != 0) {               /* not found: callers probe keys, so no message */
        rc = PMI_ERR_INVALID_KEY;
        goto out;
    }
    const char *v = pmiw_get(&rp, "value"), *found = pmiw_get(&rp, "found");
    if (!v || (found && strcmp(found, "TRUE"))) {
        pmiw_error("reply to get of %s has rc=0 but %s", key, v ? "found is not TRUE" : "no value");
        rc = PMI_FAIL;
        goto out;
    }
    if (unescape_value(value, (size_t)length, v) < 0)
        rc = PMI_ERR_INVALID_LENGTH;
out:
    pthread_mutex_unlock(&lock);
    return rc;
}

int PMI_Barrier(void)
{
    struct pmiw_reply rp;
    int rc = PMI_SUCCESS;
    pthread_mutex_lock(&lock);
    if (!S.up)
        rc = PMI_ERR_INIT;
    else if (call_ok("cmd=barrier_in", "barrier_out", &rp) < 0)
        rc = PMI_FAIL;
    pthread_mutex_unlock(&lock);
    return rc;
}

/* The clique is the ranks that share memory with this one.  Under Lattice
 * that is every rank on this host, whichever compute node runs it: the
 * service node says which ranks share a host in LATTICE_HOST_MAPPING (the
 * vector format of PMI_process_mapping, host ids for node ids), so Open
 * MPI's local ranks are unique per host and its shared-memory transport
 * spans the host.  Without it (Hydra), the ranks of this node from
 * PMI_process_mapping; this rank alone if neither is known.  Called with
 * the lock held. */
static int load_clique(void)
{
    struct pmiw_reply rp;
    char req[PMIW_LINE_MAX];
    const char *map, *host_map = getenv("LATTICE_HOST_MAPPING");

    if (S.clique)
        return PMI_SUCCESS;
    if (!(S.clique = malloc(sizeof *S.clique * (size_t)S.size)))
        return PMI_ERR_NOMEM;
    if (host_map && *host_map) {
        map = host_map;
    } else {
        snprintf(req, sizeof req, "cmd=get kvsname=%s key=PMI_process_mapping", S.kvsname);
        if (pmiw_call(S.fd, req, "get_result", &rp) < 0) {
            free(S.clique);
            S.clique = NULL;
            return PMI_FAIL;
        }
        map = rp.rc == 0 ? pmiw_get(&rp, "value") : NULL;
    }
    S.nclique = map ? clique_from_mapping(map, S.size, S.rank, S.clique) : -1;
    if (S.nclique < 0) {
        if (map)
            pmiw_error("%s '%.80s' is malformed; taking this rank as alone on its node",
                       map == host_map ? "LATTICE_HOST_MAPPING" : "PMI_process_mapping", map);
        S.clique[0] = S.rank;
        S.nclique = 1;
    }
    return PMI_SUCCESS;
}

int PMI_Get_clique_size(int *size)
{
    if (!size)
        return PMI_ERR_INVALID_ARG;
    pthread_mutex_lock(&lock);
    int rc = S.up ? load_clique() : PMI_ERR_INIT;
    if (rc == PMI_SUCCESS)
        *size = S.nclique;
    pthread_mutex_unlock(&lock);
    return rc;
}

int PMI_Get_clique_ranks(int ranks[], int length)
{
    if (!ranks)
        return PMI_ERR_INVALID_ARG;
    pthread_mutex_lock(&lock);
    int rc = S.up ? load_clique() : PMI_ERR_INIT;
    if (rc == PMI_SUCCESS && length < S.nclique)
        rc = PMI_ERR_INVALID_LENGTH;
    if (rc == PMI_SUCCESS)
        memcpy(ranks, S.clique, sizeof *ranks * (size_t)S.nclique);
    pthread_mutex_unlock(&lock);
    return rc;
}

/* abort has no reply: the process manager ends the job.  Give it a moment
 * to do so (it records the abort's code and message, not a plain exit),
 * then exit with the code ourselves. Spaces in the message are escaped
 * with a backslash, as the wire protocol allows. */
int PMI_Abort(int exit_code, const char error_msg[])
{
    char req[PMIW_LINE_MAX], *w;
    pthread_mutex_lock(&lock);
    if (S.up) {
        w = req + snprintf(req, sizeof req - 8, "cmd=abort exitcode=%d", exit_code);
        if (error_msg && *error_msg) {
            w += sprintf(w, " message=");
            for (const char *p = error_msg; *p && w < req + sizeof req - 3; p++) {
                if (*p == ' ' || *p == '\\')
                    *w++ = '\\';
                *w++ = *p == '\n' ? '_' : *p;   /* one line per message */
            }
            *w = '\0';
        }
        if (pmiw_send(S.fd, req) == 0) {
            struct pollfd p = { .fd = S.fd, .events = POLLIN };
            poll(&p, 1, 3000);
        }
    } else if (error_msg && *error_msg) {
        fprintf(stderr, "lattice libpmi: abort (%d): %s\n", exit_code, error_msg);
    }
    _exit(exit_code);
}
