/*
 * entry.c - lattice-fs's side of the shipping core (compute/shipc/entry.h).
 * lattice-fs ships only through the core's connection, stubs and bulk
 * path (shipc_call_msg, fwd_*, shipc_rw), never through shipc_sys: no
 * program's descriptors or memory to guard, so the hooks are short.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cnfs.h"
#include "entry.h"
#include "shipc.h"

void shipc_ent_crit_enter(void) {}
void shipc_ent_crit_leave(void) {}

void shipc_ent_broken(const char *why, int err)
{
    char b[160];
    snprintf(b, sizeof b, "%s: %s", why, strerror(err));
    cnfs_lost(b);
}

/* Every buffer the core sees is lattice-fs's own. */
int shipc_ent_user_ok(const void *p, size_t n, int wr)
{
    (void)p, (void)n, (void)wr;
    return 1;
}

uint64_t shipc_ent_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Only sockets and poll ask: lattice-fs ships neither. */
unsigned shipc_ent_threads(void)
{
    return 1;
}

long shipc_ent_local(struct shipc_call *c)
{
    (void)c;
    return -ENOSYS;
}
