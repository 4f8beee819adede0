/*
 * sched.c - the scheduling calls (sched_setscheduler, sched_setparam,
 * sched_getscheduler, sched_getparam, sched_rr_get_interval,
 * sched_setattr, sched_getattr): glibc makes them for a thread created
 * with PTHREAD_EXPLICIT_SCHED and for pthread_setschedparam.
 *
 * The node has no scheduler for the program to choose, as CNK had none:
 * the time-sharing policies (SCHED_OTHER, SCHED_BATCH, SCHED_IDLE, priority
 * 0) are the kernel's to give, as to any unprivileged process; a real-time
 * one (SCHED_FIFO, SCHED_RR, SCHED_DEADLINE) is refused with EPERM, what
 * Linux says to a process without CAP_SYS_NICE and RLIMIT_RTPRIO: a
 * compute node's thread never takes a host CPU away from the other nodes,
 * even in a job of root.  The node runs one process, so a pid other than
 * 0 or one of its threads is ESRCH (as kill, signal.c); bad arguments get
 * Linux's EINVAL, in Linux's order.
 */
#include <asm/unistd.h>
#include <linux/errno.h>
#include <linux/sched.h>

#include "cnk.h"

#define MAX_RT_PRIO 99
#define SCHED_ATTR_SIZE_VER0 48

/* 0 for the caller, a thread of this process, else -ESRCH. */
int sched_own_thread(int tid)
{
    if (tid == 0)
        return 0;
    if (tid < 0 || ksys3(__NR_tgkill, ksys0(__NR_getpid), tid, 0) < 0)
        return -ESRCH;
    return 0;
}

static int realtime(unsigned long policy)
{
    return policy == SCHED_FIFO || policy == SCHED_RR || policy == SCHED_DEADLINE;
}

/* n bytes of the program's memory, copied by the kernel: a bad pointer is
 * EFAULT, as Linux answers, not a fault in cnk. */
int sched_copy_in(void *dst, const void *src, size_t n)
{
    struct { const void *base; size_t len; } local = { dst, n }, remote = { src, n };
    long r = ksys6(__NR_process_vm_readv, ksys0(__NR_getpid), (long)&local, 1, (long)&remote, 1, 0);
    return r == (long)n ? 0 : -EFAULT;
}

/* The priority a struct sched_param holds: 0, or -EFAULT. */
static long get_prio(const void *param, int *prio)
{
    return sched_copy_in(prio, param, sizeof *prio);
}

/* In Linux's order: arguments, the param's memory, the thread, the policy
 * and its priority, then the permission a real-time policy needs. */
long sys_sched_setscheduler(struct cnk_call *c)
{
    long policy = (int)c->a[1] & ~SCHED_RESET_ON_FORK;
    int prio;
    if ((int)c->a[1] < 0 || !c->a[2] || (int)c->a[0] < 0)
        return -EINVAL;
    long r = get_prio((const void *)c->a[2], &prio);
    if (r == 0)
        r = sched_own_thread((int)c->a[0]);
    if (r < 0)
        return r;
    if (policy != SCHED_NORMAL && policy != SCHED_BATCH && policy != SCHED_IDLE && !realtime((unsigned long)policy))
        return -EINVAL;
    if (!realtime((unsigned long)policy))
        return cnk_passthrough(c);      /* the kernel checks priority 0 itself */
    if (policy == SCHED_DEADLINE || prio < 1 || prio > MAX_RT_PRIO)
        return -EINVAL;                 /* SCHED_DEADLINE: sched_setattr's only */
    return -EPERM;
}

/* The thread's own policy stays (never a real-time one under cnk), so the
 * kernel checks the priority against it. */
long sys_sched_setparam(struct cnk_call *c)
{
    int prio;
    if (!c->a[1] || (int)c->a[0] < 0)
        return -EINVAL;
    long r = get_prio((const void *)c->a[1], &prio);
    if (r == 0)
        r = sched_own_thread((int)c->a[0]);
    return r < 0 ? r : cnk_passthrough(c);
}

/* sched_getscheduler, sched_getparam, sched_rr_get_interval, sched_getattr:
 * the kernel's answer for a thread of the program's. */
long sys_sched_query(struct cnk_call *c)
{
    int bad = (int)c->a[0] < 0;
    if (c->nr == __NR_sched_getparam)
        bad |= !c->a[1];
    if (c->nr == __NR_sched_getattr)
        bad |= !c->a[1] || c->a[2] < SCHED_ATTR_SIZE_VER0 || c->a[2] > 4096 || c->a[3];
    if (bad)
        return -EINVAL;
    long r = sched_own_thread((int)c->a[0]);
    return r < 0 ? r : cnk_passthrough(c);
}

/* struct sched_attr: its size, the policy and the flags (SCHED_FLAG_KEEP_POLICY:
 * the thread's own, never real-time under cnk); the kernel checks the rest. */
#define SCHED_FLAG_KEEP_POLICY_ 0x08

long sys_sched_setattr(struct cnk_call *c)
{
    struct { uint32_t size, policy; uint64_t flags; } a;
    if (!c->a[1] || (int)c->a[0] < 0 || c->a[2])
        return -EINVAL;
    if (sched_copy_in(&a, (const void *)c->a[1], sizeof a) < 0)
        return -EFAULT;
    if (a.size && a.size < SCHED_ATTR_SIZE_VER0)
        return cnk_passthrough(c);      /* the kernel's E2BIG, with the size it wants written back */
    long r = sched_own_thread((int)c->a[0]);
    if (r < 0)
        return r;
    return realtime(a.policy) && !(a.flags & SCHED_FLAG_KEEP_POLICY_) ? -EPERM : cnk_passthrough(c);
}

/* getpriority/setpriority (nice): PRIO_PROCESS of a thread of the
 * program's is the kernel's; the node runs one process, so the caller's
 * process group and user (0, or its own pgid or uid) are the calling
 * thread, and any other is ESRCH: no process of theirs is on the node. */
#define PRIO_PROCESS_ 0
#define PRIO_PGRP_    1
#define PRIO_USER_    2

long sys_priority(struct cnk_call *c)
{
    long which = (int)c->a[0], who = (int)c->a[1];
    switch (which) {
    case PRIO_PROCESS_:
        return sched_own_thread((int)who) < 0 ? -ESRCH : cnk_passthrough(c);
    case PRIO_PGRP_:
        if (who && who != ksys1(__NR_getpgid, 0))
            return -ESRCH;
        break;
    case PRIO_USER_:
        if (who && who != ksys0(__NR_getuid))
            return -ESRCH;
        break;
    default:
        return -EINVAL;
    }
    return ksys3(c->nr, PRIO_PROCESS_, 0, c->a[2]);
}
