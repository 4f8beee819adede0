/*
 * entry.c - libcnclient's side of the shipping core (compute/shipc/entry.h):
 * the hooks the core calls.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>

#include <lattice/ksys.h>

#include "client.h"
#include "entry.h"

/* The kernel's close_range over [first, last] minus the client's own. */
static long close_range_raw(unsigned first, unsigned last, unsigned flags)
{
    for (;;) {
        int h = shipc_fd_next_hidden(first, last);
        if (h < 0)
            return ksys3(SYS_close_range, first, last, flags);
        long r = (unsigned)h > first ? ksys3(SYS_close_range, first, (unsigned)h - 1, flags) : 0;
        if (r < 0 || (unsigned)h == last)
            return r;
        first = (unsigned)h + 1;
    }
}

/* In a vfork()ed child (posix_spawn, a shell's or Python's subprocess),
 * which runs in its parent's memory until it execs: the calls that would
 * change the descriptor table change only the kernel's, which is the
 * child's own.  The placeholders say what they stand for, so the program
 * it execs finds them (holders.c).  Other calls: 1, the core's way. */
static int vfork_table_call(const struct shipc_call *c, long *ret)
{
    long nr = c->nr;
    if (nr != SYS_close && nr != SYS_close_range && nr != SYS_dup2 && nr != SYS_dup3 &&
        !(nr == SYS_fcntl && (c->a[1] == F_DUPFD || c->a[1] == F_DUPFD_CLOEXEC || c->a[1] == F_SETFD)))
        return 1;
    if (!lat_vforked())
        return 1;
    if (nr == SYS_close_range)
        *ret = close_range_raw((unsigned)c->a[0], (unsigned)c->a[1], (unsigned)c->a[2]);
    else if (shipc_fd_is_hidden((int)c->a[0]) ||
             ((nr == SYS_dup2 || nr == SYS_dup3) && shipc_fd_is_hidden((int)c->a[1])))
        *ret = -EBADF;
    else
        *ret = ksys6(nr, c->a[0], c->a[1], c->a[2], c->a[3], c->a[4], c->a[5]);
    return 0;
}

/* A call as the kernel sees it, through the core (inert: the kernel's
 * own): its result, or -1 with errno. */
long lat_sys(long nr, long a0, long a1, long a2, long a3, long a4, long a5)
{
    struct shipc_call c = { nr, { a0, a1, a2, a3, a4, a5 }, SHIPC_CLS_LOCAL };
    long ret;

    if (!lat_active())
        return (long)lcn_ret(shipc_ent_local(&c));
    if (!vfork_table_call(&c, &ret))
        return (long)lcn_ret(ret);
    return (long)lcn_ret(shipc_sys(&c));
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
