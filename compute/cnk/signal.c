/*
 * signal.c - signals stay the program's, except SIGSYS, which carries its
 * system calls to cnk.  The program's SIGSYS action is kept virtually, no
 * mask it sets ever blocks SIGSYS (a blocked SIGSYS kills the process at
 * the next trapped call), and signals go only to its own threads.
 *
 * The program's handlers are not the kernel's: a caught signal runs
 * cnk_sigtramp, which jumps to the program's handler with the frame the
 * kernel built (the program's own restorer returns from it), unless the
 * thread holds a klock (kthread.crit, lib.h).  Then the handler could
 * re-enter cnk and deadlock on that lock or scribble on a call in flight,
 * so the signal is held back: queued again to the thread with its siginfo,
 * blocked in the interrupted context, and unblocked by the last kunlock,
 * which delivers it there.  So taking a lock costs no system call, and a
 * blocking call cnk makes for the program without a lock (a local read, a
 * futex wait, nanosleep) stays interruptible as the kernel would run it.
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
#define SA_RESTORER_    0x04000000ul
#define SA_RESETHAND_   0x80000000ul
#define SIG_BLOCK_      0
#define SIG_SETMASK_    2
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

/* The program's action of every signal whose kernel action is
 * cnk_sigtramp, and of SIGSYS (only ever virtual). */
static struct ksigaction vact[65];
static struct klock act_lock;   /* the kernel's action and vact change together */

void cnk_sigtramp(void);

/* cnk_sigtramp(sig, info, uc), entered as the kernel enters a handler: asks
 * signal_decide, then either tail-jumps to the program's handler with its
 * restorer as the return address, or returns to cnk_restorer (held back). */
__asm__(".text\n"
        ".globl cnk_sigtramp\n"
        ".hidden cnk_sigtramp\n"
        ".type cnk_sigtramp, @function\n"
        "cnk_sigtramp:\n"
        "    push %rdi\n"
        "    push %rsi\n"
        "    push %rdx\n"
        "    call signal_decide\n"
        "    mov %rax, %r11\n"
        "    mov %rdx, %r10\n"
        "    pop %rdx\n"
        "    pop %rsi\n"
        "    pop %rdi\n"
        "    test %r11, %r11\n"
        "    jz 1f\n"
        "    mov %r10, (%rsp)\n"
        "    xor %eax, %eax\n"
        "    jmp *%r11\n"
        "1:  ret\n"
        ".size cnk_sigtramp, . - cnk_sigtramp\n");

/* What the kernel runs for the program's action a. */
static struct ksigaction tramp_of(const struct ksigaction *a)
{
    return (struct ksigaction){ (void *)cnk_sigtramp, a->flags | SA_SIGINFO_ | SA_RESTORER_,
                                (void *)cnk_restorer, a->mask & ~SIGBIT(SIGSYS_) };
}

/* The thread holds a klock: queue sig again to this thread, blocked until
 * the last kunlock (lib.c) unblocks it. */
static void hold_back(int sig, void *info, struct cnk_ucontext *uc, const struct ksigaction *a)
{
    uint64_t bit = SIGBIT(sig);

    ksys4(__NR_rt_sigprocmask, SIG_BLOCK_, &bit, NULL, sizeof bit);    /* the copy waits */
    if (a && (a->flags & SA_RESETHAND_)) {      /* the kernel reset it for this delivery */
        struct ksigaction k = tramp_of(a);
        ksys4(__NR_rt_sigaction, sig, &k, NULL, sizeof k.mask);
    }
    ksys4(__NR_rt_tgsigqueueinfo, ksys0(__NR_getpid), ksys0(__NR_gettid), sig, info);
    uc->sigmask |= bit;
    __atomic_or_fetch(&kthread_self()->deferred, bit, __ATOMIC_RELAXED);
}

static int holding_lock(void)
{
    return __atomic_load_n(&kthread_self()->crit, __ATOMIC_RELAXED) != 0;
}

struct tramp { void *handler, *restorer; };
struct tramp signal_decide(int sig, void *info, struct cnk_ucontext *uc);

struct tramp signal_decide(int sig, void *info, struct cnk_ucontext *uc)
{
    struct ksigaction a = vact[sig];

    if (holding_lock()) {
        hold_back(sig, info, uc, &a);
        return (struct tramp){ NULL, NULL };
    }
    return (struct tramp){ a.handler, (a.flags & SA_RESTORER_) ? a.restorer : (void *)cnk_restorer };
}

long sys_rt_sigaction(struct cnk_call *c)
{
    int sig = (int)c->a[0];
    const struct ksigaction *act = (const struct ksigaction *)c->a[1];
    struct ksigaction *oact = (struct ksigaction *)c->a[2], k = { 0 }, old;
    if (c->a[3] != sizeof(uint64_t))
        return -EINVAL;
    if (act)
        k = *act;                       /* act and oact may be the same */
    if (sig == SIGSYS_) {
        old = vact[SIGSYS_];
        if (act)
            vact[SIGSYS_] = k;
        if (oact)
            *oact = old;
        return 0;
    }
    if (sig < 1 || sig > 64)
        return cnk_passthrough(c);
    k.mask &= ~SIGBIT(SIGSYS_);         /* the handler must be able to make calls */
    klock(&act_lock);
    long r = ksys4(__NR_rt_sigaction, sig, NULL, &old, sizeof old.mask);
    if (r == 0 && old.handler == (void *)cnk_sigtramp)
        old = vact[sig];
    if (r == 0 && act) {
        struct ksigaction kk = k;
        if (k.handler != SIG_DFL_ && k.handler != SIG_IGN_) {
            vact[sig] = k;
            kk = tramp_of(&k);
        }
        r = ksys4(__NR_rt_sigaction, sig, &kk, NULL, sizeof kk.mask);
    }
    kunlock(&act_lock);
    if (r == 0 && oact)
        *oact = old;
    return r;
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

/* The node runs one process, the program (cnode made it its own process
 * group's leader): a signal reaches it and nothing else, never cnode or
 * the host.  Any other pid is a process the node does not have: ESRCH,
 * as Linux answers for one that does not exist (kill(-1): none to signal). */
static int is_self(long pid)
{
    return pid == ksys0(__NR_getpid);
}

long sys_kill(struct cnk_call *c)
{
    int pid = (int)c->a[0];
    long self = ksys0(__NR_getpid);
    if (pid == 0 || pid == self || (pid < -1 && -pid == ksys1(__NR_getpgid, 0)))
        return ksys2(__NR_kill, self, c->a[1]);
    return -ESRCH;
}

/* tgkill and rt_tgsigqueueinfo: a thread of the program, or none */
static long to_own_thread(struct cnk_call *c)
{
    if ((int)c->a[0] <= 0 || (int)c->a[1] <= 0)
        return -EINVAL;
    return is_self((int)c->a[0]) ? cnk_passthrough(c) : -ESRCH;
}

long sys_tgkill(struct cnk_call *c) { return to_own_thread(c); }
long sys_rt_tgsigqueueinfo(struct cnk_call *c) { return to_own_thread(c); }

long sys_rt_sigqueueinfo(struct cnk_call *c)
{
    return is_self((int)c->a[0]) ? cnk_passthrough(c) : -ESRCH;
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
    if (vact[SIGSYS_].handler != SIG_IGN_)
        vact[SIGSYS_] = dfl;
    struct { void *sp; int flags; size_t size; } off = { NULL, 2 /* SS_DISABLE */, 0 };
    ksys2(__NR_sigaltstack, &off, NULL);
}

/* A SIGSYS that is not a trapped call: the program's virtual action, held
 * back like any other while the thread holds a klock. */
void signal_sigsys(void *info, struct cnk_ucontext *uc)
{
    void *h = vact[SIGSYS_].handler;
    if (h == SIG_IGN_)
        return;
    if (holding_lock()) {
        hold_back(SIGSYS_, info, uc, NULL);
        return;
    }
    if (h == SIG_DFL_) {    /* die of it, as the program asked */
        struct ksigaction dfl = { 0 };
        ksys4(__NR_rt_sigaction, SIGSYS_, &dfl, NULL, sizeof dfl.mask);
        ksys3(__NR_tgkill, ksys0(__NR_getpid), ksys0(__NR_gettid), SIGSYS_);
        return;
    }
    /* the kernel would block the handler's sa_mask (never SIGSYS itself:
     * blocked, it would kill at the next trapped call) while it runs */
    struct ksigaction a = vact[SIGSYS_];
    uint64_t mask = a.mask & ~UNBLOCKABLE, old;
    if (a.flags & SA_RESETHAND_)
        vact[SIGSYS_] = (struct ksigaction){ 0 };
    ksys4(__NR_rt_sigprocmask, SIG_BLOCK_, &mask, &old, sizeof mask);
    if (a.flags & SA_SIGINFO_)
        ((void (*)(int, void *, void *))h)(SIGSYS_, info, uc);
    else
        ((void (*)(int))h)(SIGSYS_);
    ksys4(__NR_rt_sigprocmask, SIG_SETMASK_, &old, NULL, sizeof old);
}
