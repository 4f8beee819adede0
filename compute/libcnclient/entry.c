/*
 * entry.c - libcnclient's side of the shipping core (compute/shipc/entry.h):
 * the hooks the core calls.
 */
#include <stdio.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>

#include <lattice/ksys.h>

#include "client.h"
#include "entry.h"

/* A call as the kernel sees it, through the core (inert: the kernel's
 * own): its result, or -1 with errno. */
long lat_sys(long nr, long a0, long a1, long a2, long a3, long a4, long a5)
{
    struct shipc_call c = { nr, { a0, a1, a2, a3, a4, a5 }, SHIPC_CLS_LOCAL };

    return (long)lcn_ret(lat_active() ? shipc_sys(&c) : shipc_ent_local(&c));
}

/* The node-local case of a call the core routed: the system call itself,
 * as cnk runs it (never our own interposed functions). */
long shipc_ent_local(struct shipc_call *c)
{
    return ksys6(c->nr, c->a[0], c->a[1], c->a[2], c->a[3], c->a[4], c->a[5]);
}

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

/* /proc/self/task has 2 + threads links (node-local; the raw call). */
unsigned shipc_ent_threads(void)
{
    struct stat st;

    if (ksys4(SYS_newfstatat, AT_FDCWD, (long)"/proc/self/task", (long)&st, 0) != 0)
        return 2;
    return st.st_nlink > 3 ? (unsigned)st.st_nlink - 2 : 1;
}

uint64_t shipc_ent_now_ns(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);     /* the vDSO: no system call */
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}
