/*
 * conformance_threads [N]: threads and scheduling, one line per check in
 * conformance.h's format (tests/e2e/test_t0800_conformance.py runs it
 * natively, under cnk and in Linux mode and compares the outputs; the
 * checks are those of the Open POSIX tests that failed under cnk, issue
 * 28): the sched_* calls and their errors, threads created with
 * PTHREAD_EXPLICIT_SCHED and each policy, pthread_setschedparam and
 * friends, the CPU affinity calls, and last N threads alive at once
 * (default 8; under cnk past the job's thread limit: EAGAIN).
 *
 * Natively it must run as an unprivileged process would (root without
 * CAP_SYS_NICE): a real-time policy is then EPERM.  Nothing printed
 * depends on the host: no pids, CPU numbers or counts, time slices.
 */
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "conformance.h"

#ifndef SCHED_DEADLINE
#define SCHED_DEADLINE 6
#endif

#define NO_SUCH_PID INT_MAX     /* above any pid_max: no such process anywhere */

static void *volatile never_mapped = (void *)8;

static const char *policy_name(int p)
{
    switch (p) {
    case SCHED_OTHER: return "SCHED_OTHER";
    case SCHED_FIFO: return "SCHED_FIFO";
    case SCHED_RR: return "SCHED_RR";
    case SCHED_BATCH: return "SCHED_BATCH";
    case SCHED_IDLE: return "SCHED_IDLE";
    case SCHED_DEADLINE: return "SCHED_DEADLINE";
    default: return "?";
    }
}

/* `what = NAME` for a policy, or `what = -1 ENAME` */
static void say_policy(int p, const char *what)
{
    if (p < 0)
        printf("%s = -1 %s\n", what, strerrorname_np(errno));
    else
        printf("%s = %s\n", what, policy_name(p));
}

/* a pthread_* result: 0 or the error number it returns */
static void say_err(int e, const char *what)
{
    if (e)
        printf("%s = %s\n", what, strerrorname_np(e));
    else
        printf("%s = 0\n", what);
}

static long setsched(pid_t pid, int policy, int prio)
{
    struct sched_param sp = { .sched_priority = prio };
    return syscall(SYS_sched_setscheduler, pid, policy, &sp);
}

static void sched_calls(void)
{
    struct sched_param sp = { .sched_priority = 7 };
    struct timespec ts;
    static const int policies[] = { SCHED_OTHER, SCHED_FIFO, SCHED_RR, SCHED_BATCH, SCHED_IDLE };

    printf("# scheduling\n");
    say_policy(sched_getscheduler(0), "sched_getscheduler(0)");
    SAY(sched_getparam(0, &sp), "sched_getparam(0)");
    printf("sched_getparam(0) priority = %d\n", sp.sched_priority);
    for (size_t i = 0; i < sizeof policies / sizeof *policies; i++)
        printf("sched_get_priority_min/max(%s) = %d %d\n", policy_name(policies[i]),
               sched_get_priority_min(policies[i]), sched_get_priority_max(policies[i]));
    SAY(sched_get_priority_max(12345), "sched_get_priority_max(12345)");
    SAY(setsched(0, SCHED_OTHER, 0), "sched_setscheduler(0, SCHED_OTHER, 0)");
    SAY(setsched(0, SCHED_OTHER, 1), "sched_setscheduler(0, SCHED_OTHER, 1)");
    SAY(setsched(0, SCHED_FIFO, 1), "sched_setscheduler(0, SCHED_FIFO, 1)");
    SAY(setsched(0, SCHED_RR, 99), "sched_setscheduler(0, SCHED_RR, 99)");
    SAY(setsched(0, SCHED_FIFO, 0), "sched_setscheduler(0, SCHED_FIFO, 0)");
    SAY(setsched(0, SCHED_FIFO, 100), "sched_setscheduler(0, SCHED_FIFO, 100)");
    SAY(setsched(0, SCHED_DEADLINE, 0), "sched_setscheduler(0, SCHED_DEADLINE, 0)");
    SAY(setsched(0, 12345, 0), "sched_setscheduler(0, 12345, 0)");
    SAY(setsched(0, -1, 0), "sched_setscheduler(0, -1, 0)");
    SAY(setsched(-1, SCHED_OTHER, 0), "sched_setscheduler(-1, SCHED_OTHER, 0)");
    SAY(setsched(NO_SUCH_PID, SCHED_OTHER, 0), "sched_setscheduler(no such pid, SCHED_OTHER, 0)");
    SAY(setsched(NO_SUCH_PID, SCHED_FIFO, 1), "sched_setscheduler(no such pid, SCHED_FIFO, 1)");
    SAY(syscall(SYS_sched_setscheduler, 0, SCHED_OTHER, NULL), "sched_setscheduler(0, SCHED_OTHER, NULL)");
    SAY(syscall(SYS_sched_setscheduler, 0, SCHED_OTHER, never_mapped), "sched_setscheduler(0, SCHED_OTHER, bad pointer)");
    SAY(setsched(getpid(), SCHED_BATCH, 0), "sched_setscheduler(getpid(), SCHED_BATCH, 0)");
    say_policy(sched_getscheduler(0), "sched_getscheduler(0) after");
    SAY(setsched(0, SCHED_OTHER, 0), "sched_setscheduler(0, SCHED_OTHER, 0) back");
    say_policy(sched_getscheduler(getpid()), "sched_getscheduler(getpid())");
    say_policy(sched_getscheduler(NO_SUCH_PID), "sched_getscheduler(no such pid)");
    say_policy(sched_getscheduler(-1), "sched_getscheduler(-1)");

    sp.sched_priority = 0;
    SAY(sched_setparam(0, &sp), "sched_setparam(0, 0)");
    sp.sched_priority = 1;
    SAY(sched_setparam(0, &sp), "sched_setparam(0, 1)");
    SAY(sched_setparam(NO_SUCH_PID, &sp), "sched_setparam(no such pid, 1)");
    SAY(syscall(SYS_sched_setparam, 0, NULL), "sched_setparam(0, NULL)");
    SAY(syscall(SYS_sched_setparam, -1, &sp), "sched_setparam(-1, 1)");
    SAY(syscall(SYS_sched_getparam, 0, NULL), "sched_getparam(0, NULL)");
    SAY(sched_getparam(NO_SUCH_PID, &sp), "sched_getparam(no such pid)");
    SAY(syscall(SYS_sched_getparam, 0, never_mapped), "sched_getparam(0, bad pointer)");
    SAY(sched_rr_get_interval(0, &ts), "sched_rr_get_interval(0)");
    SAY(sched_rr_get_interval(NO_SUCH_PID, &ts), "sched_rr_get_interval(no such pid)");
    SAY(sched_rr_get_interval(-1, &ts), "sched_rr_get_interval(-1)");
    SAY(sched_yield(), "sched_yield");

    /* sched_setattr/sched_getattr (no glibc wrapper): struct sched_attr as the kernel's uapi has it */
    struct attr {
        unsigned size, policy;
        unsigned long long flags;
        int nice;
        unsigned priority;
        unsigned long long runtime, deadline, period;
    } at = { .size = 48 };
    SAY(syscall(SYS_sched_getattr, 0, &at, sizeof at, 0), "sched_getattr(0)");
    printf("sched_getattr(0) = %s nice %d priority %u\n", policy_name((int)at.policy), at.nice, at.priority);
    SAY(syscall(SYS_sched_getattr, 0, &at, 8, 0), "sched_getattr(0, 8 bytes)");
    SAY(syscall(SYS_sched_getattr, NO_SUCH_PID, &at, sizeof at, 0), "sched_getattr(no such pid)");
    at = (struct attr){ .size = 48, .policy = SCHED_OTHER };
    SAY(syscall(SYS_sched_setattr, 0, &at, 0), "sched_setattr(0, SCHED_OTHER)");
    SAY(syscall(SYS_sched_setattr, 0, &at, 1), "sched_setattr(0, SCHED_OTHER, flags 1)");
    SAY(syscall(SYS_sched_setattr, NO_SUCH_PID, &at, 0), "sched_setattr(no such pid, SCHED_OTHER)");
    at = (struct attr){ .size = 48, .policy = SCHED_FIFO, .priority = 1 };
    SAY(syscall(SYS_sched_setattr, 0, &at, 0), "sched_setattr(0, SCHED_FIFO, 1)");
    at = (struct attr){ .size = 48, .policy = SCHED_DEADLINE, .runtime = 1000000, .deadline = 10000000,
                       .period = 10000000 };
    SAY(syscall(SYS_sched_setattr, 0, &at, 0), "sched_setattr(0, SCHED_DEADLINE, 1 ms in 10)");
    at = (struct attr){ .size = 8, .policy = SCHED_OTHER };
    SAY(syscall(SYS_sched_setattr, 0, &at, 0), "sched_setattr(0, size 8)");
    printf("sched_setattr(0, size 8) wants size = %u\n", at.size);
}

/* ---- nice values: raised in a thread of its own (lowering needs RLIMIT_NICE room) ---- */

static void *nicer(void *arg)
{
    (void)arg;
    int tid = (int)syscall(SYS_gettid);
    errno = 0;
    SAY(getpriority(PRIO_PROCESS, 0), "getpriority(PRIO_PROCESS, 0)");
    SAY(setpriority(PRIO_PROCESS, tid, 3), "setpriority(PRIO_PROCESS, own tid, 3)");
    SAY(getpriority(PRIO_PROCESS, tid), "getpriority(PRIO_PROCESS, own tid)");
    errno = 0;
    SAY(nice(2), "nice(2)");
    SAY(setpriority(PRIO_PROCESS, 0, 1), "setpriority(PRIO_PROCESS, 0, 1) (lower)");
    SAY(getpriority(PRIO_PROCESS, NO_SUCH_PID), "getpriority(PRIO_PROCESS, no such pid)");
    SAY(setpriority(PRIO_PROCESS, NO_SUCH_PID, 5), "setpriority(PRIO_PROCESS, no such pid, 5)");
    SAY(setpriority(PRIO_PGRP, NO_SUCH_PID, 5), "setpriority(PRIO_PGRP, no such group, 5)");
    SAY(getpriority(42, 0), "getpriority(42, 0)");
    SAY(setpriority(42, 0, 5), "setpriority(42, 0, 5)");
    return NULL;
}

static void nice_values(void)
{
    pthread_t t;
    printf("# nice values\n");
    if (pthread_create(&t, NULL, nicer, NULL) == 0)
        pthread_join(t, NULL);
}

/* ---- threads with scheduling attributes ---- */

struct seen {
    int policy, prio, err;
};

static void *report_sched(void *arg)
{
    struct seen *s = arg;
    struct sched_param sp;
    s->err = pthread_getschedparam(pthread_self(), &s->policy, &sp);
    s->prio = sp.sched_priority;
    s->policy = sched_getscheduler(0);      /* the kernel's word, not glibc's copy */
    return NULL;
}

/* a thread created with attr: pthread_create's result, then what the thread saw */
static void create_with(pthread_attr_t *attr, const char *what)
{
    pthread_t t;
    struct seen s = { -1, -1, -1 };
    int e = pthread_create(&t, attr, report_sched, &s);
    if (e) {
        say_err(e, what);
        return;
    }
    pthread_join(t, NULL);
    printf("%s = 0, the thread runs %s priority %d\n", what, policy_name(s.policy), s.prio);
}

static void explicit_sched(int policy, int prio, const char *what)
{
    pthread_attr_t a;
    struct sched_param sp = { .sched_priority = prio };
    pthread_attr_init(&a);
    pthread_attr_setinheritsched(&a, PTHREAD_EXPLICIT_SCHED);
    if (policy >= 0) {      /* glibc takes only SCHED_OTHER, SCHED_FIFO, SCHED_RR here */
        int e1 = pthread_attr_setschedpolicy(&a, policy), e2 = pthread_attr_setschedparam(&a, &sp);
        if (e1 || e2)
            printf("%s: pthread_attr_setschedpolicy, _setschedparam = %s, %s\n", what,
                   e1 ? strerrorname_np(e1) : "0", e2 ? strerrorname_np(e2) : "0");
    }
    create_with(&a, what);
    pthread_attr_destroy(&a);
}

static void *in_batch(void *arg)
{
    (void)arg;
    setsched(0, SCHED_BATCH, 0);
    create_with(NULL, "pthread_create(inherit) from a SCHED_BATCH thread");
    /* once set, SCHED_RESET_ON_FORK stays without CAP_SYS_NICE: here, in a thread that ends */
    SAY(setsched(0, SCHED_BATCH | SCHED_RESET_ON_FORK, 0), "sched_setscheduler(0, SCHED_BATCH|SCHED_RESET_ON_FORK, 0)");
    long r = sched_getscheduler(0);
    printf("sched_getscheduler(0) = %s|%s\n", policy_name((int)(r & ~SCHED_RESET_ON_FORK)),
           r & SCHED_RESET_ON_FORK ? "SCHED_RESET_ON_FORK" : "0");
    create_with(NULL, "pthread_create(inherit) from a SCHED_RESET_ON_FORK thread");
    SAY(setsched(0, SCHED_BATCH, 0), "sched_setscheduler(0, SCHED_BATCH, 0) after SCHED_RESET_ON_FORK");
    SAY(setsched(0, SCHED_IDLE | SCHED_RESET_ON_FORK, 0), "sched_setscheduler(0, SCHED_IDLE|SCHED_RESET_ON_FORK, 0)");
    r = sched_getscheduler(0);
    printf("sched_getscheduler(0) in that thread = %s\n", policy_name((int)(r & ~SCHED_RESET_ON_FORK)));
    /* leaving SCHED_IDLE needs RLIMIT_NICE room or CAP_SYS_NICE, as Linux says */
    errno = 0;
    r = setsched(0, SCHED_OTHER | SCHED_RESET_ON_FORK, 0);
    printf("sched_setscheduler(0, SCHED_OTHER, 0) from SCHED_IDLE = %s\n",
           r == 0 ? "0" : errno == EPERM ? "-1 EPERM" : strerrorname_np(errno));
    return NULL;
}

static void thread_sched(void)
{
    pthread_attr_t a;
    int inherit = -1, e, policy = -1;
    struct sched_param sp = { .sched_priority = 0 };
    pthread_t t;

    printf("# threads with scheduling attributes\n");
    pthread_attr_init(&a);
    pthread_attr_getinheritsched(&a, &inherit);
    printf("pthread_attr_getinheritsched(default) = %s\n",
           inherit == PTHREAD_INHERIT_SCHED ? "PTHREAD_INHERIT_SCHED" : "PTHREAD_EXPLICIT_SCHED");
    say_err(pthread_attr_setscope(&a, PTHREAD_SCOPE_PROCESS), "pthread_attr_setscope(PTHREAD_SCOPE_PROCESS)");
    say_err(pthread_attr_setscope(&a, PTHREAD_SCOPE_SYSTEM), "pthread_attr_setscope(PTHREAD_SCOPE_SYSTEM)");
    sp.sched_priority = 1;
    pthread_attr_setschedpolicy(&a, SCHED_OTHER);
    say_err(pthread_attr_setschedparam(&a, &sp), "pthread_attr_setschedparam(SCHED_OTHER, 1)");
    pthread_attr_destroy(&a);

    create_with(NULL, "pthread_create(default attributes)");
    explicit_sched(-1, 0, "pthread_create(PTHREAD_EXPLICIT_SCHED, default policy)");
    explicit_sched(SCHED_OTHER, 0, "pthread_create(PTHREAD_EXPLICIT_SCHED, SCHED_OTHER, 0)");
    explicit_sched(SCHED_BATCH, 0, "pthread_create(PTHREAD_EXPLICIT_SCHED, SCHED_BATCH, 0)");
    explicit_sched(SCHED_IDLE, 0, "pthread_create(PTHREAD_EXPLICIT_SCHED, SCHED_IDLE, 0)");
    explicit_sched(SCHED_OTHER, 1, "pthread_create(PTHREAD_EXPLICIT_SCHED, SCHED_OTHER, 1)");
    explicit_sched(SCHED_FIFO, sched_get_priority_min(SCHED_FIFO), "pthread_create(PTHREAD_EXPLICIT_SCHED, SCHED_FIFO, min)");
    explicit_sched(SCHED_RR, sched_get_priority_max(SCHED_RR), "pthread_create(PTHREAD_EXPLICIT_SCHED, SCHED_RR, max)");

    sp.sched_priority = 0;
    say_err(pthread_setschedparam(pthread_self(), SCHED_OTHER, &sp), "pthread_setschedparam(self, SCHED_OTHER, 0)");
    sp.sched_priority = 1;
    say_err(pthread_setschedparam(pthread_self(), SCHED_OTHER, &sp), "pthread_setschedparam(self, SCHED_OTHER, 1)");
    say_err(pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp), "pthread_setschedparam(self, SCHED_FIFO, 1)");
    say_err(pthread_setschedparam(pthread_self(), SCHED_RR, &sp), "pthread_setschedparam(self, SCHED_RR, 1)");
    say_err(pthread_setschedprio(pthread_self(), 0), "pthread_setschedprio(self, 0)");
    say_err(pthread_setschedprio(pthread_self(), 1), "pthread_setschedprio(self, 1)");
    e = pthread_getschedparam(pthread_self(), &policy, &sp);
    printf("pthread_getschedparam(self) = %d %s priority %d\n", e, policy_name(policy), sp.sched_priority);

        if ((e = pthread_create(&t, NULL, in_batch, NULL)) != 0)
        say_err(e, "pthread_create(a thread that takes SCHED_BATCH)");
    else
        pthread_join(t, NULL);
}

/* ---- other thread attributes the Open POSIX scenarios use ---- */

static void *give(void *arg)
{
    return arg;
}

static void attributes(void)
{
    pthread_attr_t a;
    pthread_t t;
    void *got = NULL;
    static char stack[256 << 10] __attribute__((aligned(64)));

    printf("# thread attributes\n");
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    int state = -1;
    pthread_attr_getdetachstate(&a, &state);
    printf("pthread_attr_getdetachstate = %s\n", state == PTHREAD_CREATE_DETACHED ? "PTHREAD_CREATE_DETACHED" : "?");
    pthread_attr_destroy(&a);

    pthread_attr_init(&a);
    say_err(pthread_attr_setstack(&a, stack, sizeof stack), "pthread_attr_setstack(256 KiB of its own)");
    int e = pthread_create(&t, &a, give, (void *)42);
    if (!e)
        e = pthread_join(t, &got);
    printf("pthread_create(its own stack), join = %d %ld\n", e, (long)got);
    pthread_attr_destroy(&a);

    /* the Open POSIX scenario's: PTHREAD_STACK_MIN bytes of the heap */
    void *small = malloc(PTHREAD_STACK_MIN + 4096);
    pthread_attr_init(&a);
    say_err(pthread_attr_setstack(&a, small, PTHREAD_STACK_MIN), "pthread_attr_setstack(PTHREAD_STACK_MIN of the heap)");
    e = pthread_create(&t, &a, give, (void *)44);
    if (!e)
        e = pthread_join(t, &got);
    printf("pthread_create(the smallest stack of its own), join = %d %ld\n", e, (long)got);
    pthread_attr_destroy(&a);
    free(small);

    pthread_attr_init(&a);
    say_err(pthread_attr_setstacksize(&a, PTHREAD_STACK_MIN), "pthread_attr_setstacksize(PTHREAD_STACK_MIN)");
    pthread_attr_setguardsize(&a, 0);
    e = pthread_create(&t, &a, give, (void *)43);
    if (!e)
        e = pthread_join(t, &got);
    printf("pthread_create(smallest stack, no guard), join = %d %ld\n", e, (long)got);
    pthread_attr_destroy(&a);

    say_err(pthread_join(pthread_self(), NULL), "pthread_join(self)");
}

/* ---- affinity ---- */

static void *wait_for(void *arg)
{
    pthread_barrier_wait(arg);
    pthread_barrier_wait(arg);
    return NULL;
}

static void affinity(void)
{
    cpu_set_t mine, empty, far, got;
    pthread_barrier_t b;
    pthread_t t;

    printf("# affinity\n");
    CPU_ZERO(&mine);
    SAY(sched_getaffinity(0, sizeof mine, &mine), "sched_getaffinity(0)");
    printf("sched_getaffinity(0) has a CPU = %d\n", CPU_COUNT(&mine) > 0);
    SAY(syscall(SYS_sched_getaffinity, 0, 4, &got), "sched_getaffinity(0, 4 bytes)");
    SAY(syscall(SYS_sched_getaffinity, 0, 12, &got), "sched_getaffinity(0, 12 bytes)");
    SAY(sched_getaffinity(NO_SUCH_PID, sizeof got, &got), "sched_getaffinity(no such pid)");
    SAY(sched_getaffinity(-1, sizeof got, &got), "sched_getaffinity(-1)");
    SAY(syscall(SYS_sched_getaffinity, 0, sizeof got, never_mapped), "sched_getaffinity(0, bad pointer)");
    SAY(sched_setaffinity(0, sizeof mine, &mine), "sched_setaffinity(0, the CPUs it has)");
    CPU_ZERO(&empty);
    SAY(sched_setaffinity(0, sizeof empty, &empty), "sched_setaffinity(0, no CPU)");
    CPU_ZERO(&far);
    CPU_SET(CPU_SETSIZE - 1, &far);
    SAY(sched_setaffinity(0, sizeof far, &far), "sched_setaffinity(0, CPU 1023 only)");
    SAY(sched_setaffinity(NO_SUCH_PID, sizeof mine, &mine), "sched_setaffinity(no such pid)");
    SAY(sched_setaffinity(-1, sizeof mine, &mine), "sched_setaffinity(-1)");
    SAY(syscall(SYS_sched_setaffinity, 0, sizeof mine, never_mapped), "sched_setaffinity(0, bad pointer)");

    pthread_barrier_init(&b, NULL, 2);
    if (pthread_create(&t, NULL, wait_for, &b) == 0) {
        pthread_barrier_wait(&b);
        say_err(pthread_setaffinity_np(t, sizeof mine, &mine), "pthread_setaffinity_np(another thread, the CPUs it has)");
        CPU_ZERO(&got);
        say_err(pthread_getaffinity_np(t, sizeof got, &got), "pthread_getaffinity_np(another thread)");
        printf("that thread's CPUs are the process's = %d\n", CPU_EQUAL(&got, &mine));
        pthread_barrier_wait(&b);
        pthread_join(t, NULL);
    }
    pthread_barrier_destroy(&b);
}

/* ---- many threads alive at once ---- */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static int go;

static void *hold(void *arg)
{
    pthread_mutex_lock(&lock);
    while (!go)
        pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    return arg;
}

static void many(int n)
{
    pthread_t t[n];
    int made = 0, e = 0;

    printf("# threads alive at once\n");
    for (; made < n; made++)
        if ((e = pthread_create(&t[made], NULL, hold, NULL)) != 0)
            break;
    if (e)
        printf("pthread_create x%d, all alive at once = %d created, then %s\n", n, made, strerrorname_np(e));
    else
        printf("pthread_create x%d, all alive at once = %d created\n", n, made);
    pthread_mutex_lock(&lock);
    go = 1;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
    for (int i = 0; i < made; i++)
        pthread_join(t[i], NULL);
}

/* CAP_SYS_NICE in the effective set (/proc/self/status): real-time
 * policies would be granted, and the program's threads would take them */
static int may_nice(void)
{
    char line[256];
    unsigned long long eff = 0;
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "CapEff: %llx", &eff) == 1)
            break;
    if (f)
        fclose(f);
    return (eff >> 23) & 1;
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 8;
    if (may_nice()) {
        fprintf(stderr, "conformance_threads: runs only without CAP_SYS_NICE, as a job does (as root: setpriv "
                "--bounding-set=-all --inh-caps=-all --securebits=+noroot,+noroot_locked conformance_threads)\n");
        return 2;
    }
    sched_calls();
    nice_values();
    thread_sched();
    attributes();
    affinity();
    many(n > 0 ? n : 8);
    printf("# done\n");
    return 0;
}
