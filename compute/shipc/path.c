/*
 * path.c - the path rule: which names stay on the compute node.
 *
 * Names under these entries belong to the node itself (its processes,
 * kernel, shared memory, devices) and are used locally, under cnk and in
 * Linux mode alike.  Every other name, relative names included, is shipped:
 * the working directory lives on the I/O node, as on Blue Gene/L.
 */
#include <linux/fcntl.h>

#include <lattice/wire.h>

#include "internal.h"

/* A rule names one or two leading components; subtree: and what is below. */
struct rule {
    const char *c0, *c1;
    int subtree;
};

static const struct rule local_names[] = {
    { "dev", "shm", 1 },        /* shared by the processes of one node; MPI maps it */
    { "proc", NULL, 1 },        /* /proc/self is this process */
    { "sys", NULL, 1 },         /* the node's topology (hwloc, MPI) */
    /* Devices: mmap of /dev/zero and writes to /dev/null stay on the node. */
    { "dev", "null", 0 },
    { "dev", "zero", 0 },
    { "dev", "urandom", 0 },
    { "dev", "random", 0 },
    /* This process's own descriptors: shipped, they would name ciod's.
     * Below them too: /dev/stdin/x is the local kernel's ENOTDIR. */
    { "dev", "fd", 1 },
    { "dev", "stdin", 1 },
    { "dev", "stdout", 1 },
    { "dev", "stderr", 1 },
};

/* An absolute path, lexically normalised ("//", ".", ".."), as the first
 * KEEP components and the depth: only the first two decide, so no copy of
 * the path is made (under cnk this runs on the program's stack, in a
 * signal handler). */
#define KEEP 2
struct comps {
    const char *s[KEEP];
    size_t len[KEEP];
    size_t depth;
};

static void split(const char *p, struct comps *c)
{
    c->depth = 0;
    while (*p) {
        while (*p == '/')
            p++;
        const char *s = p;
        while (*p && *p != '/')
            p++;
        size_t len = (size_t)(p - s);
        if (len == 0 || (len == 1 && s[0] == '.'))
            continue;
        if (len == 2 && s[0] == '.' && s[1] == '.') {
            if (c->depth > 0)
                c->depth--;
            continue;
        }
        if (c->depth < KEEP) {
            c->s[c->depth] = s;
            c->len[c->depth] = len;
        }
        c->depth++;
    }
}

static int is(const struct comps *c, size_t i, const char *name)
{
    size_t n = strlen(name);
    return c->len[i] == n && memcmp(c->s[i], name, n) == 0;
}

static int matches(const struct comps *c, const struct rule *r)
{
    size_t need = r->c1 ? 2 : 1;

    if (c->depth < need || (!r->subtree && c->depth != need))
        return 0;
    return is(c, 0, r->c0) && (!r->c1 || is(c, 1, r->c1));
}

int shipc_path_is_local(const char *path)
{
    struct comps c;

    if (!path || path[0] != '/')
        return 0;
    split(path, &c);
    for (size_t i = 0; i < sizeof local_names / sizeof local_names[0]; i++)
        if (matches(&c, &local_names[i]))
            return 1;
    return 0;
}

int shipc_path_route(int dirfd, const char *path, int *rdirfd)
{
    if (!path)
        return SHIPC_LOCAL;         /* the kernel answers EFAULT */
    long len = shipc_strnlen(path, LAT_MAX_PATH);
    if (len < 0)
        return (int)len;            /* EFAULT, as the kernel answers */
    if (len >= LAT_MAX_PATH)
        return -ENAMETOOLONG;
    if (path[0] == '/') {
        if (shipc_path_is_local(path))
            return SHIPC_LOCAL;
        *rdirfd = LAT_AT_FDCWD;     /* dirfd is ignored for absolute names */
        return SHIPC_SHIP;
    }
    if (dirfd == AT_FDCWD) {
        *rdirfd = LAT_AT_FDCWD;     /* the cwd is the I/O node's */
        return SHIPC_SHIP;
    }
    return shipc_fd_route(dirfd, rdirfd);
}
