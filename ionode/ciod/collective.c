/*
 * collective.c - identical read-only opens, stats and reads of the same
 * file by many processes of the pset, served by one file-system call each
 * and fanned out (the ZOID paper's closing idea; Spindle does this for
 * library loading).
 *
 * Opens: an O_RDONLY open of an absolute path is keyed by (path, O_NOFOLLOW,
 * the caller's identity: uid, gid, groups).  The first one opens the file for
 * real, as that user, so the kernel checks the path and the file for that
 * user; the others of the same identity get their own position on the one
 * shared descriptor.  Another identity never hits an entry it did not
 * create: its open is real and so is its EACCES.
 *
 * Reads of a shared file come from blocks of 64 KiB, each read from the
 * file once: small enough that a small read (ld.so reading each library's
 * ELF header, at every job's start: the cache lives in the job's worker)
 * costs little more than the read itself.  Before every read request the shared descriptor is
 * fstat'ed: a changed inode, size, mtime or ctime drops the entry, and the
 * processes holding it then read the file directly (never stale data).
 * Stats (fstatat of an absolute path, negative results too) are shared by
 * key (path, flags, identity).
 *
 * Everything is dropped on any change made through ciod that could alter a
 * cached answer (create, write, truncate, rename, unlink, mkdir, chmod,
 * utimes), and a path's entry is trusted for at most the TTL (default 2 s):
 * a file replaced by rename outside ciod is noticed within the TTL, one
 * changed in place at once.
 *
 * Memory: blocks are cached up to LATTICE_COLLECTIVE_MB (default 256 MiB)
 * per ciod in all; beyond it reads go to the file directly.  Entries: at
 * most MAX_ENTRIES.
 *
 * Settings (ciod's environment): LATTICE_COLLECTIVE=0 turns it off,
 * LATTICE_COLLECTIVE_MB, LATTICE_COLLECTIVE_TTL_MS.
 */
#include "ciod.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NBUCKET     1024u
#define MAX_ENTRIES 4096u
#define BLOCK       ((size_t)64 << 10)

struct who_key {
    uint32_t uid, gid, ngroups;
    gid_t    groups[CIOD_MAX_GROUPS];
};

struct centry {                         /* a shared read-only open */
    struct centry  *next;
    char           *path;
    int             nofollow;
    struct who_key  who;
    int             fd;
    struct stat     st;
    uint64_t        born;
    int             refs;               /* table + ofds, under g.lock */
    bool            stale;              /* out of the table: reads go to fd directly */
    bool            pending;            /* being opened: others wait on g.done */
    int             err;                /* the open's errno, once not pending */
    pthread_mutex_t load;               /* one loader per block */
    size_t          nblocks;
    char          **block;
};

struct coll_ofd {                       /* one process's open of a shared file */
    struct centry *e;
    int64_t        pos;
    int            refs;                /* dup()s, all in the same process */
};

struct sentry {                         /* a shared stat */
    struct sentry  *next;
    char           *path;
    int             flags;
    struct who_key  who;
    int             err;
    struct stat     st;
    uint64_t        born;
};

static struct {
    pthread_mutex_t lock;
    pthread_cond_t  done;               /* a pending open finished */
    bool            on;
    uint64_t        ttl_ns;
    uint64_t        budget, bytes;
    unsigned        nentries;
    struct centry  *file[NBUCKET];
    struct sentry  *stat[NBUCKET];
} g = { .lock = PTHREAD_MUTEX_INITIALIZER, .done = PTHREAD_COND_INITIALIZER };

static atomic_uint nonempty;            /* entries of either kind: writes skip the lock when 0 */

void collective_init(void)
{
    const char *on = getenv("LATTICE_COLLECTIVE"), *mb = getenv("LATTICE_COLLECTIVE_MB");
    const char *ttl = getenv("LATTICE_COLLECTIVE_TTL_MS");

    g.on = !(on && strcmp(on, "0") == 0);
    g.budget = (mb && *mb ? strtoull(mb, NULL, 10) : 256) << 20;
    g.ttl_ns = (ttl && *ttl ? strtoull(ttl, NULL, 10) : 2000) * 1000000ull;
    if (!g.on)
        logmsg("collective I/O off (LATTICE_COLLECTIVE=0)");
}

bool coll_on(void)
{
    return g.on;
}

static unsigned hash(const char *s, int extra, const struct who_key *w)
{
    uint32_t h = 2166136261u ^ (uint32_t)extra ^ (w->uid * 31u);
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 16777619u;
    return h % NBUCKET;
}

static void key_of(const struct ident *who, struct who_key *k)
{
    k->uid = who->uid;
    k->gid = who->gid;
    k->ngroups = who->ngroups;
    memcpy(k->groups, who->groups, who->ngroups * sizeof(gid_t));
}

static bool same_who(const struct who_key *a, const struct who_key *b)
{
    return a->uid == b->uid && a->gid == b->gid && a->ngroups == b->ngroups &&
           !memcmp(a->groups, b->groups, a->ngroups * sizeof(gid_t));
}

static bool same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
           a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/* g.lock held: the last reference frees the entry and its blocks. */
static void centry_put(struct centry *e)
{
    if (--e->refs > 0)
        return;
    for (size_t i = 0; i < e->nblocks; i++)
        if (e->block[i]) {
            size_t len = i + 1 < e->nblocks ? BLOCK : (size_t)e->st.st_size - i * BLOCK;
            g.bytes -= len;
            free(e->block[i]);
        }
    atomic_store(&dp_ctr[LAT_CTR_COLL_BYTES], g.bytes);
    close(e->fd);
    pthread_mutex_destroy(&e->load);
    free(e->block);
    free(e->path);
    free(e);
    g.nentries--;
}

/* g.lock held: out of the table; holders read the file directly from now on. */
static void centry_drop(struct centry **pp)
{
    struct centry *e = *pp;

    *pp = e->next;
    e->stale = true;
    atomic_fetch_add(&dp_ctr[LAT_CTR_COLL_INVALIDATE], 1);
    atomic_fetch_sub(&nonempty, 1);
    centry_put(e);
}

static void sentry_drop(struct sentry **pp)
{
    struct sentry *s = *pp;

    *pp = s->next;
    free(s->path);
    free(s);
    g.nentries--;
    atomic_fetch_sub(&nonempty, 1);
}

/* Something changed through ciod: forget every answer that may depend on it. */
void coll_changed(void)
{
    if (!atomic_load(&nonempty))
        return;
    pthread_mutex_lock(&g.lock);
    for (unsigned b = 0; b < NBUCKET; b++) {
        while (g.file[b])
            centry_drop(&g.file[b]);
        while (g.stat[b])
            sentry_drop(&g.stat[b]);
    }
    pthread_mutex_unlock(&g.lock);
}

/* ---- opens ---- */

static int open_eligible(const char *path, int flags)
{
    int other = flags & ~(O_NOFOLLOW | O_CLOEXEC | O_LARGEFILE | O_NOCTTY);
    return g.on && path[0] == '/' && other == O_RDONLY;
}

/* g.lock held: a fresh entry for (path, who) or NULL. */
static struct centry **find_file(const char *path, int nofollow, const struct who_key *w, uint64_t now)
{
    struct centry **pp = &g.file[hash(path, nofollow, w)];

    while (*pp) {
        struct centry *e = *pp;
        if (now - e->born > g.ttl_ns && e->refs == 1 && !e->pending) {
            centry_drop(pp);            /* expired and unused */
            continue;
        }
        if (e->nofollow == nofollow && !strcmp(e->path, path) && same_who(&e->who, w))
            return now - e->born > g.ttl_ns && !e->pending ? (centry_drop(pp), NULL) : pp;
        pp = &e->next;
    }
    return NULL;
}

static bool revalidate(struct centry *e)
{
    struct stat now;

    atomic_fetch_add(&dp_ctr[LAT_CTR_COLL_REVALIDATE], 1);
    return fstat(e->fd, &now) == 0 && same_file(&now, &e->st);
}

static struct coll_ofd *new_ofd(struct centry *e)
{
    struct coll_ofd *o = malloc(sizeof(*o));

    if (o)
        *o = (struct coll_ofd){ e, 0, 1 };
    return o;
}

/*
 * An O_RDONLY open.  -1: not for the cache, open it yourself.  0: *o is a
 * shared open, or *plain a descriptor of an object the cache does not keep
 * (a directory, a device).  > 0: the open's errno.
 */
int coll_open(const struct ident *who, const char *path, int flags, struct coll_ofd **o, int *plain)
{
    static _Thread_local struct who_key w;
    int nofollow = flags & O_NOFOLLOW, fd, err;
    struct centry **pp, *e;
    struct stat st;

    *o = NULL;
    *plain = -1;
    if (!open_eligible(path, flags))
        return -1;
    key_of(who, &w);
    atomic_fetch_add(&dp_ctr[LAT_CTR_COLL_OPEN_REQ], 1);
    pthread_mutex_lock(&g.lock);
    while ((pp = find_file(path, nofollow, &w, dp_now_ns()))) {
        e = *pp;
        e->refs++;
        if (e->pending) {
            /* another process of the pset is opening it: its answer is ours */
            while (e->pending)
                pthread_cond_wait(&g.done, &g.lock);
            err = e->err;
            centry_put(e);
            if (err) {
                pthread_mutex_unlock(&g.lock);
                return err;
            }
            continue;                   /* shared, or not for the cache (then a miss) */
        }
        pthread_mutex_unlock(&g.lock);
        if (revalidate(e) && (*o = new_ofd(e)))
            return 0;
        pthread_mutex_lock(&g.lock);
        for (pp = &g.file[hash(path, nofollow, &w)]; *pp && *pp != e; pp = &(*pp)->next)
            ;
        if (*pp)
            centry_drop(pp);            /* changed: open it again */
        centry_put(e);
    }
    /* a miss: the entry goes in first, pending, so that the others wait for this open */
    e = calloc(1, sizeof(*e));
    if (e && !(e->path = strdup(path))) {
        free(e);
        e = NULL;
    }
    if (e) {
        unsigned b = hash(path, nofollow, &w);
        e->nofollow = nofollow;
        e->who = w;
        e->fd = -1;
        e->born = dp_now_ns();
        e->pending = true;
        e->refs = 2;                    /* the table and us */
        pthread_mutex_init(&e->load, NULL);
        e->next = g.file[b];
        g.file[b] = e;
        g.nentries++;
        atomic_fetch_add(&nonempty, 1);
    }
    pthread_mutex_unlock(&g.lock);

    atomic_fetch_add(&dp_ctr[LAT_CTR_COLL_OPEN_FS], 1);
    fd = open(path, O_RDONLY | O_CLOEXEC | nofollow);
    err = fd < 0 ? errno : 0;
    bool shared = fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && e;
    size_t nb = shared ? ((size_t)st.st_size + BLOCK - 1) / BLOCK : 0;
    char **blocks = shared ? calloc(nb ? nb : 1, sizeof(char *)) : NULL;
    struct coll_ofd *ofd = blocks ? new_ofd(e) : NULL;
    if (!ofd) {
        free(blocks);
        shared = false;
    }
    if (!e) {
        *plain = fd;
        return err;
    }
    pthread_mutex_lock(&g.lock);
    e->pending = false;
    pthread_cond_broadcast(&g.done);
    if (shared) {
        e->fd = fd;
        e->st = st;
        e->nblocks = nb;
        e->block = blocks;
        e->born = dp_now_ns();
        *o = ofd;                       /* our reference is the ofd's */
    } else {
        /* failed (the waiters get the same errno), or not a regular file */
        e->err = err;
        for (pp = &g.file[hash(path, nofollow, &w)]; *pp && *pp != e; pp = &(*pp)->next)
            ;
        if (*pp)
            centry_drop(pp);
        centry_put(e);
        *plain = fd;
    }
    pthread_mutex_unlock(&g.lock);
    return err;
}

struct coll_ofd *coll_dup(struct coll_ofd *o)
{
    o->refs++;
    return o;
}

void coll_close(struct coll_ofd *o)
{
    if (--o->refs > 0)
        return;
    pthread_mutex_lock(&g.lock);
    centry_put(o->e);
    pthread_mutex_unlock(&g.lock);
    free(o);
}

int coll_fd(const struct coll_ofd *o)
{
    return o->e->fd;
}

int64_t *coll_pos(struct coll_ofd *o)
{
    return &o->pos;
}

/* Block i of e, read from the file on first use; NULL: read directly. */
static const char *block(struct centry *e, size_t i, size_t *len)
{
    char *b;

    *len = i + 1 < e->nblocks ? BLOCK : (size_t)e->st.st_size - i * BLOCK;
    pthread_mutex_lock(&e->load);
    if (!(b = e->block[i])) {
        pthread_mutex_lock(&g.lock);
        bool room = g.bytes + *len <= g.budget;
        if (room)
            g.bytes += *len;
        pthread_mutex_unlock(&g.lock);
        if (room && (b = malloc(*len))) {
            size_t got = 0;
            while (got < *len) {
                ssize_t r = pread(e->fd, b + got, *len - got, (off_t)(i * BLOCK + got));
                atomic_fetch_add(&dp_ctr[LAT_CTR_COLL_READ_FS], 1);
                if (r <= 0)
                    break;
                got += (size_t)r;
            }
            if (got < *len) {           /* shrank under us: not a block to keep */
                free(b);
                b = NULL;
            }
        }
        if (room && !b) {
            pthread_mutex_lock(&g.lock);
            g.bytes -= *len;
            pthread_mutex_unlock(&g.lock);
        }
        e->block[i] = b;
        atomic_store(&dp_ctr[LAT_CTR_COLL_BYTES], g.bytes);
    }
    pthread_mutex_unlock(&e->load);
    return b;
}

/* Up to n bytes at off into dst, from the blocks if the file is unchanged. */
ssize_t coll_pread(struct coll_ofd *o, char *dst, size_t n, int64_t off)
{
    struct centry *e = o->e;
    size_t done = 0;

    if (off < 0) {
        errno = EINVAL;
        return -1;
    }
    atomic_fetch_add(&dp_ctr[LAT_CTR_COLL_READ_REQ], 1);
    if (!e->stale && !revalidate(e)) {
        pthread_mutex_lock(&g.lock);
        struct centry **pp = &g.file[hash(e->path, e->nofollow, &e->who)];
        while (*pp && *pp != e)
            pp = &(*pp)->next;
        if (*pp)
            centry_drop(pp);
        else
            e->stale = true;
        pthread_mutex_unlock(&g.lock);
    }
    if (e->stale) {
        atomic_fetch_add(&dp_ctr[LAT_CTR_COLL_READ_FS], 1);
        return pread(e->fd, dst, n, (off_t)off);
    }
    while (done < n && (uint64_t)off + done < (uint64_t)e->st.st_size) {
        uint64_t at = (uint64_t)off + done;
        size_t len, i = (size_t)(at / BLOCK), in = (size_t)(at % BLOCK);
        const char *b = block(e, i, &len);
        size_t take = len - in < n - done ? len - in : n - done;
        if (!b) {
            atomic_fetch_add(&dp_ctr[LAT_CTR_COLL_READ_FS], 1);
            ssize_t r = pread(e->fd, dst + done, take, (off_t)at);
            if (r < 0)
                return done ? (ssize_t)done : -1;
            done += (size_t)r;
            if ((size_t)r < take)
                break;
            continue;
        }
        memcpy(dst + done, b + in, take);
        done += take;
    }
    return (ssize_t)done;
}

/* ---- stats ---- */

/*
 * fstatat of an absolute path.  -1: not for the cache.  Else 0 or the errno,
 * *st filled on 0.
 */
int coll_stat(const struct ident *who, const char *path, int flags, struct stat *st)
{
    static _Thread_local struct who_key w;
    uint64_t now = dp_now_ns();
    struct sentry **pp, *s;
    int err;

    if (!g.on || path[0] != '/' || (flags & ~AT_SYMLINK_NOFOLLOW))
        return -1;
    key_of(who, &w);
    atomic_fetch_add(&dp_ctr[LAT_CTR_COLL_STAT_REQ], 1);
    pthread_mutex_lock(&g.lock);
    for (pp = &g.stat[hash(path, flags, &w)]; (s = *pp);) {
        if (now - s->born > g.ttl_ns) {
            sentry_drop(pp);
            continue;
        }
        if (s->flags == flags && !strcmp(s->path, path) && same_who(&s->who, &w)) {
            err = s->err;
            *st = s->st;
            pthread_mutex_unlock(&g.lock);
            return err;
        }
        pp = &s->next;
    }
    pthread_mutex_unlock(&g.lock);

    atomic_fetch_add(&dp_ctr[LAT_CTR_COLL_STAT_FS], 1);
    err = fstatat(AT_FDCWD, path, st, flags) < 0 ? errno : 0;
    if (err && err != ENOENT && err != ENOTDIR)
        return err;                     /* EACCES, EIO...: not worth keeping */
    s = malloc(sizeof(*s));
    if (!s || !(s->path = strdup(path))) {
        free(s);
        return err;
    }
    s->flags = flags;
    s->who = w;
    s->err = err;
    s->st = *st;
    s->born = now;
    pthread_mutex_lock(&g.lock);
    if (g.nentries < MAX_ENTRIES) {
        unsigned b = hash(path, flags, &w);
        s->next = g.stat[b];
        g.stat[b] = s;
        g.nentries++;
        atomic_fetch_add(&nonempty, 1);
        s = NULL;
    }
    pthread_mutex_unlock(&g.lock);
    if (s) {
        free(s->path);
        free(s);
    }
    return err;
}
