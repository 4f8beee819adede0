/*
 * entry.c - libcnclient's side of the shipping core (compute/shipc/entry.h):
 * the hooks the core calls.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "client.h"
#include "entry.h"

/* No signal handler of ours to hold back: the program's run as they would. */
void shipc_ent_crit_enter(void) {}
void shipc_ent_crit_leave(void) {}

void shipc_ent_broken(const char *why, int err)
{
    char msg[256];

    snprintf(msg, sizeof msg, "libcnclient: connection to the I/O node lost (%s: %s)\n", why, strerror(err));
    lat_say(msg);
}

int shipc_ent_user_ok(const void *p, size_t n, int wr)
{
    return lat_user_known(p, n, wr);
}

uint64_t shipc_ent_now_ns(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);     /* the vDSO: no system call */
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}
