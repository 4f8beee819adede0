/*
 * node.c - the inode table: every node id lattice-fs gave the kernel stands
 * for an absolute path on the I/O node.  Paths, not remote descriptors:
 * ciod gives a process at most LAT_MAX_FDS descriptors, and the kernel may
 * hold far more inodes than that; a path costs nothing on the I/O node.
 *
 * The id of a node is its address (as libfuse's passthrough_ll does): the
 * kernel only ever passes back ids we gave it and forgets each exactly as
 * often as it looked it up.  A hash on the path finds a node again, so one
 * name keeps one id while the kernel remembers it.  A rename moves every
 * node at or below the old name (a walk of the table: renames of
 * directories are rare next to lookups).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cnfs.h"

struct node {
    struct node *next;          /* in its hash chain */
    char *path;
    uint64_t nlookup;
    int hashed;                 /* in the index (0 once another node took its name) */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct node **tab;
static size_t nbuckets, count;

static uint64_t hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;        /* FNV-1a */
    while (*s)
        h = (h ^ (unsigned char)*s++) * 1099511628211ull;
    return h;
}

static void grow(void)
{
    size_t n = nbuckets ? nbuckets * 2 : 1024;
    struct node **t = calloc(n, sizeof *t);
    if (!t)
        return;                 /* longer chains, still correct */
    for (size_t b = 0; b < nbuckets; b++)
        for (struct node *x = tab[b], *nx; x; x = nx) {
            nx = x->next;
            size_t k = hash(x->path) & (n - 1);
            x->next = t[k];
            t[k] = x;
        }
    free(tab);
    tab = t;
    nbuckets = n;
}

void node_init(void)
{
    pthread_mutex_lock(&lock);
    if (!tab)
        grow();
    pthread_mutex_unlock(&lock);
}

static struct node *find(const char *path)
{
    if (!nbuckets)
        return NULL;
    for (struct node *x = tab[hash(path) & (nbuckets - 1)]; x; x = x->next)
        if (!strcmp(x->path, path))
            return x;
    return NULL;
}

static void unhash(struct node *n)
{
    if (!n->hashed)
        return;
    for (struct node **p = &tab[hash(n->path) & (nbuckets - 1)]; *p; p = &(*p)->next)
        if (*p == n) {
            *p = n->next;
            break;
        }
    n->hashed = 0;
    n->next = NULL;
}

/* Its name now stands for another file: found no more, ESTALE until forgotten. */
static void stale(struct node *n)
{
    unhash(n);
    free(n->path);
    n->path = NULL;
}

static void insert(struct node *n)
{
    size_t k = hash(n->path) & (nbuckets - 1);
    n->next = tab[k];
    tab[k] = n;
    n->hashed = 1;
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
    int r = n->path ? copy(n->path, buf) : -ESTALE;
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

fuse_ino_t node_ref(const char *path)
{
    if (!strcmp(path, "/"))
        return FUSE_ROOT_ID;    /* never forgotten: no count */
    pthread_mutex_lock(&lock);
    struct node *n = find(path);
    if (!n) {
        n = calloc(1, sizeof *n);
        if (n && !(n->path = strdup(path))) {
            free(n);
            n = NULL;
        }
        if (n) {
            if (count + 1 > nbuckets)
                grow();
            insert(n);
            count++;
        }
    }
    if (n)
        n->nlookup++;
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
        unhash(n);
        free(n->path);
        free(n);
        count--;
    }
    pthread_mutex_unlock(&lock);
}

/* path is at or below dir (dir "/x", path "/x" or "/x/..."): the rest's length, else -1 */
static long below(const char *path, const char *dir, size_t dl)
{
    if (strncmp(path, dir, dl) || (path[dl] && path[dl] != '/'))
        return -1;
    return (long)strlen(path + dl);
}

void node_rename(const char *from, const char *to)
{
    size_t fl = strlen(from), tl = strlen(to);
    pthread_mutex_lock(&lock);
    struct node *old = find(to);        /* replaced: keeps its id until forgotten, ESTALE */
    if (old)
        stale(old);
    /* collect first: moving re-hashes */
    struct node *moved = NULL;
    for (size_t b = 0; b < nbuckets; b++)
        for (struct node **p = &tab[b]; *p;) {
            struct node *x = *p;
            if (below(x->path, from, fl) >= 0) {
                *p = x->next;
                x->next = moved;
                moved = x;
            } else {
                p = &x->next;
            }
        }
    for (struct node *x = moved, *nx; x; x = nx) {
        nx = x->next;
        size_t rest = strlen(x->path + fl);
        char *np = malloc(tl + rest + 1);
        if (np) {
            memcpy(np, to, tl);
            memcpy(np + tl, x->path + fl, rest + 1);
            free(x->path);
            x->path = np;
        }                       /* no memory: it keeps its old name (ENOENT later, not a wrong file) */
        struct node *dup = find(x->path);
        if (dup)
            stale(dup);
        insert(x);
    }
    pthread_mutex_unlock(&lock);
}

size_t node_count(void)
{
    pthread_mutex_lock(&lock);
    size_t n = count;
    pthread_mutex_unlock(&lock);
    return n;
}
