/*
 * cputime.c - the program's CPU-time clocks start when the program does.
 *
 * cnk and the program are one process, and cnk's start-up before the
 * program's first instruction can cost seconds of CPU time: the kernel
 * zeroes each 1 GiB page of big memory whole at its first touch, which
 * loading the program does.  On Linux that work is not the program's, and
 * a program that compares its CPU time with its wall time must not find
 * more CPU than wall.  So cnk notes its own CPU time when it enters the
 * program (cputime_start) and takes it off what the program reads:
 * clock_gettime and clock_getcpuclockid clocks of the process and of the
 * main thread, times() and getrusage(RUSAGE_SELF, RUSAGE_THREAD).  Threads
 * the program starts begin at zero by themselves; children are not
 * touched (their time is their own).
 *
 * The trap sends these calls here (trap.c: cputime_traps); they stay local.
 */
#include <asm/unistd.h>

#include "cnk.h"

#define CLOCK_PROCESS_CPUTIME_ID_ 2
#define CLOCK_THREAD_CPUTIME_ID_  3
#define RUSAGE_SELF_              0
#define RUSAGE_THREAD_            1
#define CPUCLOCK_PERTHREAD_       4     /* the kernel's encoding of clock_getcpuclockid clocks */

struct ktimespec { long sec, nsec; };
struct ktimeval { long sec, usec; };
struct krusage { struct ktimeval utime, stime; long rest[14]; };
struct ktms { long utime, stime, cutime, cstime; };

static struct {
    long pid, tid;                      /* the main thread */
    long process_ns, thread_ns;         /* cnk's CPU time when the program started */
    struct krusage self, thread;
    struct ktms tms;
    int set;
} base;

static long ns_of(long id)
{
    struct ktimespec t = { 0, 0 };
    ksys2(__NR_clock_gettime, id, &t);
    return t.sec * 1000000000L + t.nsec;
}

void cputime_start(void)
{
    base.pid = ksys0(__NR_getpid);
    base.tid = ksys0(__NR_gettid);
    base.process_ns = ns_of(CLOCK_PROCESS_CPUTIME_ID_);
    base.thread_ns = ns_of(CLOCK_THREAD_CPUTIME_ID_);
    ksys2(__NR_getrusage, RUSAGE_SELF_, &base.self);
    ksys2(__NR_getrusage, RUSAGE_THREAD_, &base.thread);
    ksys1(__NR_times, &base.tms);
    base.set = 1;
}

int cputime_traps(long nr)
{
    return nr == __NR_clock_gettime || nr == __NR_times || nr == __NR_getrusage;
}

/* What to take off clock `id` read by the calling thread, in ns. */
static long clock_base(long id)
{
    int main_thread = ksys0(__NR_gettid) == base.tid;
    if (id == CLOCK_PROCESS_CPUTIME_ID_)
        return base.process_ns;
    if (id == CLOCK_THREAD_CPUTIME_ID_)
        return main_thread ? base.thread_ns : 0;
    if (id < 0) {                       /* a clock_getcpuclockid / pthread_getcpuclockid clock */
        long who = ~(id >> 3);          /* pid (process clock) or tid (thread clock) */
        int thread = (id & CPUCLOCK_PERTHREAD_) != 0;
        if ((id & 3) != 2)              /* not CPUCLOCK_SCHED: left alone */
            return 0;
        if (!thread && (who == 0 || who == base.pid))
            return base.process_ns;
        if (thread && (who == 0 ? main_thread : who == base.tid))
            return base.thread_ns;
    }
    return 0;
}

static void sub_tv(struct ktimeval *t, const struct ktimeval *b)
{
    long us = (t->sec - b->sec) * 1000000L + (t->usec - b->usec);
    if (us < 0)
        us = 0;
    t->sec = us / 1000000L;
    t->usec = us % 1000000L;
}

long cputime_call(struct cnk_call *c)
{
    long r = cnk_passthrough(c);
    if (r < 0 || !base.set)
        return r;
    if (c->nr == __NR_clock_gettime) {
        long off = clock_base(c->a[0]);
        struct ktimespec *t = (struct ktimespec *)c->a[1];
        if (off && t) {
            long ns = t->sec * 1000000000L + t->nsec - off;
            if (ns < 0)
                ns = 0;
            t->sec = ns / 1000000000L;
            t->nsec = ns % 1000000000L;
        }
    } else if (c->nr == __NR_times) {
        struct ktms *t = (struct ktms *)c->a[0];
        if (t) {
            t->utime = t->utime > base.tms.utime ? t->utime - base.tms.utime : 0;
            t->stime = t->stime > base.tms.stime ? t->stime - base.tms.stime : 0;
        }
    } else if (c->nr == __NR_getrusage) {
        struct krusage *u = (struct krusage *)c->a[1];
        const struct krusage *b = c->a[0] == RUSAGE_SELF_ ? &base.self
                                : c->a[0] == RUSAGE_THREAD_ && ksys0(__NR_gettid) == base.tid ? &base.thread
                                : NULL;
        if (u && b) {
            sub_tv(&u->utime, &b->utime);
            sub_tv(&u->stime, &b->stime);
        }
    }
    return r;
}
