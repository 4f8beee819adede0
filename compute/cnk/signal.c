/*
 * signal.c - signals stay the program's, except SIGSYS, which carries its
 * system calls to cnk.  The program's SIGSYS action is kept virtually, no
 * mask it sets ever blocks SIGSYS (a blocked SIGSYS kills the process at
 * the next trapped call), and signals go only to its own threads.
 *
 * The signal mask and the alternate stack are restored by rt_sigreturn
 * when cnk's handler returns, so changing them means changing the saved
 * ucontext, not the kernel's current value.
 */
#include <asm/unistd.h>
#include <linux/errno.h>

#include "cnk.h"

#define SIGSYS_         31
#define SA_SIGINFO_     0x00000004ul
#define SIG_DFL_        ((void *)0)
#define SIG_IGN_        ((void *)1)
#define SIGBIT(s)       (1ull << ((s) - 1))
#define UNBLOCKABLE     (SIGBIT(SIGSYS_) | SIGBIT(9) | SIGBIT(19))     /* SIGSYS, SIGKILL, SIGSTOP */

struct ksigaction {
    void *handler;
    unsigned long flags;
    void *restorer;
    uint64_t mask;
};

static struct ksigaction vsys;  /* the program's SIGSYS action */

long sys_rt_sigaction(struct cnk_call *c)
{
    const struct ksigaction *act = (const struct ksigaction *)c->a[1];
    struct ksigaction *oact = (struct ksigaction *)c->a[2], k;
    if (c->a[3] != sizeof(uint64_t))
        return -EINVAL;
    if (c->a[0] != SIGSYS_) {
        if (!act)
            return cnk_passthrough(c);
        k = *act;
        k.mask &= ~SIGBIT(SIGSYS_);     /* the handler must be able to make calls */
        return ksys4(__NR_rt_sigaction, c->a[0], &k, oact, sizeof k.mask);
    }
    k = vsys;
    if (act)
        vsys = *act;
    if (oact)
        *oact = k;
    return 0;
}

long sys_rt_sigprocmask(struct cnk_call *c)
{
    struct cnk_ucontext *uc = c->uc;
    const uint64_t *set = (const uint64_t *)c->a[1];
    uint64_t *oset = (uint64_t *)c->a[2], old = uc->sigmask, mask = old;
    if (c->a[3] != sizeof(uint64_t))
        return -EINVAL;
    if (set) {
        switch (c->a[0]) {
        case 0: mask = old | *set; break;       /* SIG_BLOCK */
        case 1: mask = old & ~*set; break;      /* SIG_UNBLOCK */
        case 2: mask = *set; break;             /* SIG_SETMASK */
        default: return -EINVAL;
        }
    }
    if (oset)
        *oset = old;
    if (set)
        uc->sigmask = mask & ~UNBLOCKABLE;
    return 0;
}

long sys_sigaltstack(struct cnk_call *c)
{
    struct cnk_ucontext *uc = c->uc;
    long r = cnk_passthrough(c);
    if (r == 0 && c->a[0])
        ksys2(__NR_sigaltstack, NULL, &uc->stack);
    return r;
}

/* The call with argument i, a signal set, no longer blocking SIGSYS. */
static long strip_mask_arg(struct cnk_call *c, int i)
{
    if (!c->a[i])
        return cnk_passthrough(c);
    uint64_t m = *(const uint64_t *)c->a[i] & ~SIGBIT(SIGSYS_);
    struct cnk_call k = *c;
    k.a[i] = (long)&m;
    return cnk_passthrough(&k);
}

long sys_rt_sigsuspend(struct cnk_call *c) { return strip_mask_arg(c, 0); }
long sys_ppoll(struct cnk_call *c) { return strip_mask_arg(c, 3); }
long sys_epoll_pwait(struct cnk_call *c) { return strip_mask_arg(c, 4); }

long sys_pselect6(struct cnk_call *c)
{
    const struct { const uint64_t *ss; size_t len; } *d = (const void *)c->a[5];
    if (!d || !d->ss)
        return cnk_passthrough(c);
    uint64_t m = *d->ss & ~SIGBIT(SIGSYS_);
    struct { const uint64_t *ss; size_t len; } k = { &m, d->len };
    struct cnk_call kc = *c;
    kc.a[5] = (long)&k;
    return cnk_passthrough(&kc);
}

long sys_kill(struct cnk_call *c)
{
    return c->a[0] == ksys0(__NR_getpid) ? cnk_passthrough(c) : -EPERM;
}

long sys_tgkill(struct cnk_call *c)
{
    return c->a[0] == ksys0(__NR_getpid) ? cnk_passthrough(c) : -EPERM;
}

/* tkill names a thread only: make it one of ours. */
long sys_tkill(struct cnk_call *c)
{
    return ksys3(__NR_tgkill, ksys0(__NR_getpid), c->a[0], c->a[1]);
}

/* execve: caught signals go back to their default action (ignored ones
 * stay ignored, the mask and pending signals stay, as Linux does); the
 * alternate stack was the old program's memory. */
void signal_exec(void)
{
    struct ksigaction dfl = { 0 }, old;
    for (int sig = 1; sig <= 64; sig++) {
        if (sig == 9 || sig == 19 || sig == SIGSYS_)
            continue;
        if (ksys4(__NR_rt_sigaction, sig, NULL, &old, sizeof old.mask) == 0 &&
            old.handler != SIG_DFL_ && old.handler != SIG_IGN_)
            ksys4(__NR_rt_sigaction, sig, &dfl, NULL, sizeof dfl.mask);
    }
    if (vsys.handler != SIG_IGN_)
        vsys = dfl;
    struct { void *sp; int flags; size_t size; } off = { NULL, 2 /* SS_DISABLE */, 0 };
    ksys2(__NR_sigaltstack, &off, NULL);
}

void signal_sigsys(void *info, struct cnk_ucontext *uc)
{
    void *h = vsys.handler;
    if (h == SIG_IGN_)
        return;
    if (h == SIG_DFL_) {    /* die of it, as the program asked */
        struct ksigaction dfl = { 0 };
        ksys4(__NR_rt_sigaction, SIGSYS_, &dfl, NULL, sizeof dfl.mask);
        ksys3(__NR_tgkill, ksys0(__NR_getpid), ksys0(__NR_gettid), SIGSYS_);
        return;
    }
    if (vsys.flags & SA_SIGINFO_)
        ((void (*)(int, void *, void *))h)(SIGSYS_, info, uc);
    else
        ((void (*)(int))h)(SIGSYS_);
}
