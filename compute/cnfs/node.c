/*
 * node.c - the inode table: every node id lattice-fs gave the kernel is one
 * file of the I/O node (its device and inode number), reached by absolute
 * paths there: the names it was looked up or made by, the latest first.
 * Paths, not remote descriptors: ciod gives a process at most LAT_MAX_FDS
 * descriptors, and the kernel may hold far more inodes than that; a path
 * costs nothing on the I/O node.
 *
 * The id of a node is its address (as libfuse's passthrough_ll does): the
 * kernel only ever passes back ids we gave it and forgets each exactly as
 * often as it looked it up.  A hash on (device, inode) finds a node again,
 * so hard links of one file are one inode to the kernel too (a link count
 * shows through every name); a hash on the path finds a name, so unlink
 * and rename move or drop exactly the names they touched.  A rename walks
 * the names (renames are rare next to lookups).
 *
 * Each node also keeps the stamp (size, mtime, ctime on the I/O node) of
 * the version of the file the node's page cache holds, for close-to-open
 * (README.md "Caching"): an open keeps the cache only if the file still
 * has it; and the size the kernel was last told, so an open that finds
 * another can drop the kernel's attributes too.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cnfs.h"

struct node;
struct name {
    struct name *hnext;         /* in its hash chain */
    struct name *nnext;         /* the node's next (older) name */
    struct node *node;
    char *path;
};

struct node {
    struct node *hnext;
    struct name *names;         /* the latest first; none: ESTALE for calls by path */
    uint64_t dev, ino;          /* on the I/O node */
    uint64_t nlookup;
    struct timespec mtime, ctime;       /* the stamp of what the page cache holds */
    off_t size;
    unsigned char stamped;      /* the stamp is the file's version the cache holds */
    unsigned char follows;      /* the cache followed every change since the last open or stamp */
    unsigned char told_known;   /* told: the size the kernel was last given */
    off_t told;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct node **ntab;      /* by (dev, ino) */
static struct name **ptab;      /* by path */
static size_t nb, pb, nodes, names;

static uint64_t hash_id(uint64_t dev, uint64_t ino)
{
    uint64_t h = (ino ^ dev * 0x9e3779b97f4a7c15ull) * 0xff51afd7ed558ccdull;
    return h ^ h >> 33;
}

static uint64_t hash_path(const char *s)
{
    uint64_t h = 1469598103934665603ull;        /* FNV-1a */
    while (*s)
        h = (h ^ (unsigned char)*s++) * 1099511628211ull;
    return h;
}

/* Both tables twice as big (out of memory: longer chains, still correct). */
static void grow_nodes(void)
{
    size_t n = nb ? nb * 2 : 1024;
    struct node **t = calloc(n, sizeof *t);
    if (!t)
        return;
    for (size_t b = 0; b < nb; b++)
        for (struct node *x = ntab[b], *nx; x; x = nx) {
            nx = x->hnext;
            size_t k = hash_id(x->dev, x->ino) & (n - 1);
            x->hnext = t[k];
            t[k] = x;
        }
    free(ntab);
    ntab = t;
    nb = n;
}

static void grow_names(void)
{
    size_t n = pb ? pb * 2 : 1024;
    struct name **t = calloc(n, sizeof *t);
    if (!t)
        return;
    for (size_t b = 0; b < pb; b++)
        for (struct name *x = ptab[b], *nx; x; x = nx) {
            nx = x->hnext;
            size_t k = hash_path(x->path) & (n - 1);
            x->hnext = t[k];
            t[k] = x;
        }
    free(ptab);
    ptab = t;
    pb = n;
}

void node_init(void)
{
    pthread_mutex_lock(&lock);
    if (!ntab)
        grow_nodes();
    if (!ptab)
        grow_names();
    pthread_mutex_unlock(&lock);
}

static struct node *find_node(uint64_t dev, uint64_t ino)
{
    for (struct node *x = nb ? ntab[hash_id(dev, ino) & (nb - 1)] : NULL; x; x = x->hnext)
        if (x->dev == dev && x->ino == ino)
            return x;
    return NULL;
}

static struct name *find_name(const char *path)
{
    for (struct name *x = pb ? ptab[hash_path(path) & (pb - 1)] : NULL; x; x = x->hnext)
        if (!strcmp(x->path, path))
            return x;
    return NULL;
}

static void hash_name(struct name *m)
{
    size_t k = hash_path(m->path) & (pb - 1);
    m->hnext = ptab[k];
    ptab[k] = m;
}

static void unhash_name(struct name *m)
{
    for (struct name **p = &ptab[hash_path(m->path) & (pb - 1)]; *p; p = &(*p)->hnext)
        if (*p == m) {
            *p = m->hnext;
            return;
        }
}

static void unlink_from_node(struct name *m)
{
    for (struct name **p = &m->node->names; *p; p = &(*p)->nnext)
        if (*p == m) {
            *p = m->nnext;
            return;
        }
}

static void drop_name(struct name *m)
{
    unhash_name(m);
    unlink_from_node(m);
    free(m->path);
    free(m);
    names--;
}

/* path names n now, its latest name (another file's name before: not any more). */
static void add_name(struct node *n, const char *path)
{
    struct name *m = find_name(path);
    if (m) {
        unlink_from_node(m);
        m->node = n;
    } else {
        if (!(m = calloc(1, sizeof *m)) || !(m->path = strdup(path))) {
            free(m);
            return;             /* out of memory: the node keeps its other names */
        }
        m->node = n;
        if (names + 1 > pb)
            grow_names();
        hash_name(m);
        names++;
    }
    m->nnext = n->names;
    n->names = m;
}

static int copy(const char *s, char *buf)
{
    size_t len = strlen(s);
    if (len >= PATH_MAX)
        return -ENAMETOOLONG;
    memcpy(buf, s, len + 1);
    return 0;
}

int node_path(fuse_ino_t id, char *buf)
{
    if (id == FUSE_ROOT_ID)
        return copy("/", buf);
    pthread_mutex_lock(&lock);
    struct node *n = (struct node *)(uintptr_t)id;
    int r = n->names ? copy(n->names->path, buf) : -ESTALE;
    pthread_mutex_unlock(&lock);
    return r;
}

int node_child(fuse_ino_t parent, const char *name, char *buf)
{
    size_t nl = strlen(name);
    if (!nl || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
        return -EINVAL;
    int r = node_path(parent, buf);
    if (r < 0)
        return r;
    size_t pl = strlen(buf);
    if (pl == 1)                /* the root: "/name" */
        pl = 0;
    if (pl + 1 + nl >= PATH_MAX)
        return -ENAMETOOLONG;
    buf[pl] = '/';
    memcpy(buf + pl + 1, name, nl + 1);
    return 0;
}

fuse_ino_t node_ref(const char *path, uint64_t dev, uint64_t ino)
{
    if (!strcmp(path, "/"))
        return FUSE_ROOT_ID;    /* never forgotten: no count */
    pthread_mutex_lock(&lock);
    struct node *n = find_node(dev, ino);
    if (!n && (n = calloc(1, sizeof *n))) {
        n->dev = dev;
        n->ino = ino;
        if (nodes + 1 > nb)
            grow_nodes();
        size_t k = hash_id(dev, ino) & (nb - 1);
        n->hnext = ntab[k];
        ntab[k] = n;
        nodes++;
    }
    if (n) {
        add_name(n, path);
        n->nlookup++;
    }
    pthread_mutex_unlock(&lock);
    return (fuse_ino_t)(uintptr_t)n;
}

void node_forget(fuse_ino_t id, uint64_t nl)
{
    if (id == FUSE_ROOT_ID)
        return;
    pthread_mutex_lock(&lock);
    struct node *n = (struct node *)(uintptr_t)id;
    n->nlookup = n->nlookup > nl ? n->nlookup - nl : 0;
    if (!n->nlookup) {
        while (n->names)
            drop_name(n->names);
        for (struct node **p = &ntab[hash_id(n->dev, n->ino) & (nb - 1)]; *p; p = &(*p)->hnext)
            if (*p == n) {
                *p = n->hnext;
                break;
            }
        free(n);
        nodes--;
    }
    pthread_mutex_unlock(&lock);
}

void node_unlinked(const char *path)
{
    pthread_mutex_lock(&lock);
    struct name *m = find_name(path);
    if (m)
        drop_name(m);
    pthread_mutex_unlock(&lock);
}

/* path is at or below dir (dir "/x", path "/x" or "/x/..."): 1, else 0 */
static int below(const char *path, const char *dir, size_t dl)
{
    return !strncmp(path, dir, dl) && (!path[dl] || path[dl] == '/');
}

void node_rename(const char *from, const char *to)
{
    size_t fl = strlen(from), tl = strlen(to);
    pthread_mutex_lock(&lock);
    struct name *moved = NULL;
    for (size_t b = 0; b < pb; b++)
        for (struct name **p = &ptab[b]; *p;) {
            struct name *m = *p;
            if (below(m->path, from, fl)) {         /* out of the hash while its path changes */
                *p = m->hnext;
                m->hnext = moved;
                moved = m;
            } else if (below(m->path, to, tl)) {    /* what the rename replaced: gone */
                *p = m->hnext;
                unlink_from_node(m);
                free(m->path);
                free(m);
                names--;
            } else {
                p = &m->hnext;
            }
        }
    for (struct name *m = moved, *nx; m; m = nx) {
        nx = m->hnext;
        size_t rest = strlen(m->path + fl);
        char *np = malloc(tl + rest + 1);
        if (!np) {                                  /* out of memory: the name is lost (ENOENT later) */
            unlink_from_node(m);
            free(m->path);
            free(m);
            names--;
            continue;
        }
        memcpy(np, to, tl);
        memcpy(np + tl, m->path + fl, rest + 1);
        free(m->path);
        m->path = np;
        hash_name(m);
    }
    pthread_mutex_unlock(&lock);
}

static struct node *cached_node(fuse_ino_t id)
{
    return id == FUSE_ROOT_ID || !id ? NULL : (struct node *)(uintptr_t)id;
}

static void set_stamp(struct node *n, const struct stat *st)
{
    n->size = st->st_size;
    n->mtime = st->st_mtim;
    n->ctime = st->st_ctim;
    n->stamped = 1;
}

/* The cache holds st's version of the file. */
static int same_version(const struct node *n, const struct stat *st)
{
    return n->stamped && n->size == st->st_size && n->mtime.tv_sec == st->st_mtim.tv_sec &&
           n->mtime.tv_nsec == st->st_mtim.tv_nsec && n->ctime.tv_sec == st->st_ctim.tv_sec &&
           n->ctime.tv_nsec == st->st_ctim.tv_nsec;
}

int node_cache_open(fuse_ino_t id, const struct stat *st, int *stale)
{
    pthread_mutex_lock(&lock);
    struct node *n = cached_node(id);
    int keep = 0;
    *stale = 0;
    if (n) {
        keep = same_version(n, st);
        *stale = (n->stamped && !keep) || !n->told_known || n->told != st->st_size;
        n->told_known = !*stale;    /* dropped: the kernel asks again (getattr tells) */
        set_stamp(n, st);       /* kept, or dropped now: the cache holds st's version */
        n->follows = 1;
    }
    pthread_mutex_unlock(&lock);
    return keep;
}

int node_cache_check(fuse_ino_t id, const struct stat *st)
{
    pthread_mutex_lock(&lock);
    struct node *n = cached_node(id);
    int changed = 0;
    if (n) {
        changed = !same_version(n, st);
        if (changed) {
            set_stamp(n, st);   /* the cache is about to be emptied: it holds st's version */
            n->follows = 1;
            n->told_known = 0;
        }
    }
    pthread_mutex_unlock(&lock);
    return changed;
}

void node_told(fuse_ino_t id, off_t size)
{
    pthread_mutex_lock(&lock);
    struct node *n = cached_node(id);
    if (n) {
        n->told = size;
        n->told_known = 1;
    }
    pthread_mutex_unlock(&lock);
}

void node_cache_wrote(fuse_ino_t id)
{
    pthread_mutex_lock(&lock);
    struct node *n = cached_node(id);
    if (n)
        n->stamped = 0;
    pthread_mutex_unlock(&lock);
}

void node_cache_drop(fuse_ino_t id)
{
    pthread_mutex_lock(&lock);
    struct node *n = cached_node(id);
    if (n)
        n->stamped = n->follows = 0;
    pthread_mutex_unlock(&lock);
}

void node_cache_stamp(fuse_ino_t id, const struct stat *st)
{
    pthread_mutex_lock(&lock);
    struct node *n = cached_node(id);
    if (n && n->follows)
        set_stamp(n, st);
    pthread_mutex_unlock(&lock);
}

size_t node_count(void)
{
    pthread_mutex_lock(&lock);
    size_t n = nodes;
    pthread_mutex_unlock(&lock);
    return n;
}
