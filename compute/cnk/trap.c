/*
 * trap.c - catching the program's system calls.
 *
 * A seccomp filter lets through the calls made from cnk's own text (and
 * rt_sigreturn, which every signal handler ends with) and turns every other
 * call into a SIGSYS.  The handler runs on the trapped thread, takes the
 * call from the ucontext, dispatches it through cnk_systab, and puts the
 * result in rax; rt_sigreturn then resumes the program after its syscall.
 *
 * The handler is SA_NODEFER with an empty sa_mask: it runs with exactly the
 * program's signal mask, as the kernel would run the call, so a blocking
 * call stays interruptible and a thread cloned from here inherits the
 * program's mask.  cnk code that must not be re-entered holds a klock:
 * the program's signal handlers wait until it lets go (signal.c).
 */
#include <asm/unistd.h>
#include <linux/audit.h>
#include <linux/errno.h>
#include <linux/filter.h>
#include <linux/prctl.h>
#include <linux/seccomp.h>

#include "cnk.h"

#define SIGSYS_         31
#define SA_SIGINFO_     0x00000004ul
#define SA_NODEFER_     0x40000000ul
#define SA_RESTORER_    0x04000000ul
#define SYS_SECCOMP_    1           /* si_code of a seccomp SIGSYS */
#define X32_BIT         0x40000000u

struct ksigaction {
    void *handler;
    unsigned long flags;
    void (*restorer)(void);
    uint64_t mask;
};

struct ksiginfo {               /* the head of the kernel's siginfo_t */
    int32_t signo, errno_, code;
};

extern const char __ehdr_start[], etext[];

long cnk_passthrough(struct cnk_call *c)
{
    return ksys6(c->nr, c->a[0], c->a[1], c->a[2], c->a[3], c->a[4], c->a[5]);
}

/* ---- --trace ---- */

static const char *const errnames[] = {
    [EPERM] = "EPERM", [ENOENT] = "ENOENT", [ESRCH] = "ESRCH", [EINTR] = "EINTR",
    [EIO] = "EIO", [ENXIO] = "ENXIO", [E2BIG] = "E2BIG", [ENOEXEC] = "ENOEXEC",
    [EBADF] = "EBADF", [ECHILD] = "ECHILD", [EAGAIN] = "EAGAIN", [ENOMEM] = "ENOMEM",
    [EACCES] = "EACCES", [EFAULT] = "EFAULT", [EBUSY] = "EBUSY", [EEXIST] = "EEXIST",
    [EXDEV] = "EXDEV", [ENODEV] = "ENODEV", [ENOTDIR] = "ENOTDIR", [EISDIR] = "EISDIR",
    [EINVAL] = "EINVAL", [ENFILE] = "ENFILE", [EMFILE] = "EMFILE", [ENOTTY] = "ENOTTY",
    [EFBIG] = "EFBIG", [ENOSPC] = "ENOSPC", [ESPIPE] = "ESPIPE", [EROFS] = "EROFS",
    [EPIPE] = "EPIPE", [ERANGE] = "ERANGE", [ENAMETOOLONG] = "ENAMETOOLONG",
    [ENOSYS] = "ENOSYS", [ENOTEMPTY] = "ENOTEMPTY", [ELOOP] = "ELOOP",
    [EOPNOTSUPP] = "EOPNOTSUPP", [ETIMEDOUT] = "ETIMEDOUT", [ENOTSOCK] = "ENOTSOCK",
    [ECONNREFUSED] = "ECONNREFUSED",
};

static const char *const classes[CNK_NCLASS] = { "local", "shipped", "unsupported" };

#define LINE 512

/* Append to a trace line, never past its end. */
__attribute__((format(printf, 3, 4))) static size_t cat(char *line, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t n = (size_t)kvfmt(line + len, LINE - len, fmt, ap);
    va_end(ap);
    return len + n < LINE ? len + n : LINE - 1;
}

/* A string argument, read without trusting the pointer. */
static size_t cat_string(char *line, size_t len, long p)
{
    char s[65];
    struct { void *base; size_t len; } local = { s, sizeof s - 1 }, remote = { (void *)p, sizeof s - 1 };
    long r = ksys6(__NR_process_vm_readv, ksys0(__NR_getpid), (long)&local, 1, (long)&remote, 1, 0);
    if (r <= 0)
        return cat(line, len, "%p", (void *)p);
    s[r] = 0;
    return cat(line, len, "\"%s\"%s", s, strlen(s) == sizeof s - 1 ? "..." : "");
}

static size_t cat_arg(char *line, size_t len, char kind, long v)
{
    switch (kind) {
    case 'd': return cat(line, len, "%d", (int)v);
    case 'l': return cat(line, len, "%ld", v);
    case 's': return cat_string(line, len, v);
    default: return cat(line, len, "0x%lx", (unsigned long)v);
    }
}

static size_t cat_result(char *line, size_t len, long r)
{
    if (r < 0 && r > -4096 && -r < (long)(sizeof errnames / sizeof *errnames) && errnames[-r])
        return cat(line, len, "-%s", errnames[-r]);
    if (r > 0xffff || r < -0xffff)
        return cat(line, len, "0x%lx", (unsigned long)r);
    return cat(line, len, "%ld", r);
}

/* `[cnk RANK] name(args) = result CLASS`, one write per line */
static void trace(const struct cnk_call *c, const struct cnk_sysent *e, long r, int returned)
{
    char line[LINE];
    const char *args = e && e->args ? e->args : "xxxxxx";
    size_t len = e ? cat(line, 0, "[cnk %d] %s(", cnk.rank, e->name)
                   : cat(line, 0, "[cnk %d] syscall_%ld(", cnk.rank, c->nr);
    for (int i = 0; i < 6 && args[i]; i++)
        len = cat_arg(line, i ? cat(line, len, ", ") : len, args[i], c->a[i]);
    len = cat(line, len, ") = ");
    len = returned ? cat_result(line, len, r) : cat(line, len, "?");
    len = cat(line, len, " %s\n", classes[c->cls]);
    kwrite_all(cnk.err_fd, line, len);
}

/* ---- dispatch ---- */

static void count(enum cnk_class cls)
{
    __atomic_fetch_add(&cnk.report->count[cls], 1, __ATOMIC_RELAXED);
}

static const struct cnk_sysent *entry(long nr)
{
    const struct cnk_sysent *e = nr >= 0 && nr < CNK_NSYS ? &cnk_systab[nr] : NULL;
    return e && e->name ? e : NULL;
}

void trap_account(struct cnk_call *c, long r)
{
    count(c->cls);
    if (cnk.trace)
        trace(c, entry(c->nr), r, 1);
}

static long dispatch(struct cnk_call *c)
{
    const struct cnk_sysent *e = entry(c->nr);
    c->cls = e ? (enum cnk_class)e->cls : CNK_UNSUPPORTED;
    if (c->nr == __NR_exit || c->nr == __NR_exit_group) {   /* they do not come back */
        count(c->cls);
        if (cnk.trace)
            trace(c, e, 0, 0);
    }
    long r = c->cls == CNK_UNSUPPORTED ? -ENOSYS : e->fn ? e->fn(c)
           : cputime_traps(c->nr) ? cputime_call(c) : cnk_passthrough(c);
    count(c->cls);
    if (cnk.trace)
        trace(c, e, r, 1);
    return r;
}

static void on_sigsys(int sig, struct ksiginfo *si, void *ucv)
{
    struct cnk_ucontext *uc = ucv;
    (void)sig;
    if (si->code != SYS_SECCOMP_) {     /* raised by the program itself */
        signal_sigsys(si, uc);
        return;
    }
    struct cnk_mcontext *m = &uc->mc;
    struct cnk_call c = {
        .nr = (long)m->rax,
        .a = { (long)m->rdi, (long)m->rsi, (long)m->rdx, (long)m->r10, (long)m->r8, (long)m->r9 },
        .uc = uc,
    };
    m->rax = (uint64_t)dispatch(&c);
}

/* ---- installation ---- */

/* Allow when instruction_pointer (64 bits, two 32-bit loads) lies in
 * [lo, hi], or when the call is one of pass[0..npass): the calls cnk would
 * run exactly as they are (systab.c's L entries), which then cost no trap;
 * the arch check keeps i386 and x32 calls from slipping past the
 * number-based rules. */
static int install_filter(uint64_t lo, uint64_t hi, const uint16_t *pass, int npass)
{
    enum { NR = offsetof(struct seccomp_data, nr), ARCH = offsetof(struct seccomp_data, arch),
           IP_LO = offsetof(struct seccomp_data, instruction_pointer),
           IP_HI = offsetof(struct seccomp_data, instruction_pointer) + 4 };
    uint32_t lo_hi = (uint32_t)(lo >> 32), lo_lo = (uint32_t)lo;
    uint32_t hi_hi = (uint32_t)(hi >> 32), hi_lo = (uint32_t)hi;
    struct sock_filter f[20 + CNK_NSYS];
    const int LIST = 17, TRAP = LIST + 1 + npass, ALLOW = TRAP + 1;
    int n = 0;
#define LD(off)       (f[n] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, off), n++)
#define RET(v)        (f[n] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, v), n++)
#define JMP(op, k, t, e) \
    (f[n] = (struct sock_filter)BPF_JUMP(BPF_JMP | op | BPF_K, k, (t) - (n + 1), (e) - (n + 1)), n++)
    /* 0 */  LD(ARCH);
    /* 1 */  JMP(BPF_JEQ, AUDIT_ARCH_X86_64, 3, 2);
    /* 2 */  RET(SECCOMP_RET_KILL_PROCESS);
    /* 3 */  LD(NR);
    /* 4 */  JMP(BPF_JSET, X32_BIT, 5, 6);
    /* 5 */  RET(SECCOMP_RET_KILL_PROCESS);
    /* 6 */  JMP(BPF_JEQ, __NR_rt_sigreturn, ALLOW, 7);
    /* ip >= lo ? */
    /* 7 */  LD(IP_HI);
    /* 8 */  JMP(BPF_JGT, lo_hi, 12, 9);
    /* 9 */  JMP(BPF_JEQ, lo_hi, 10, LIST);
    /* 10 */ LD(IP_LO);
    /* 11 */ JMP(BPF_JGE, lo_lo, 12, LIST);
    /* ip <= hi ? */
    /* 12 */ LD(IP_HI);
    /* 13 */ JMP(BPF_JGT, hi_hi, LIST, 14);
    /* 14 */ JMP(BPF_JEQ, hi_hi, 15, ALLOW);
    /* 15 */ LD(IP_LO);
    /* 16 */ JMP(BPF_JGT, hi_lo, LIST, ALLOW);
    /* 17 */ LD(NR);
    for (int i = 0; i < npass; i++)
        JMP(BPF_JEQ, pass[i], ALLOW, n + 1);
    RET(SECCOMP_RET_TRAP);
    RET(SECCOMP_RET_ALLOW);
#undef LD
#undef RET
#undef JMP
    struct sock_fprog prog = { .len = (unsigned short)n, .filter = f };
    long r = ksys3(__NR_prctl, PR_SET_NO_NEW_PRIVS, 1, 0);
    return (int)(r < 0 ? r : ksys3(__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog));
}

/* The calls the filter lets through: what cnk would run unchanged, unless
 * --trace must see (and count) every call.  The CPU-time clocks are not
 * unchanged: cnk takes its own start-up off them (cputime.c). */
static int passed_through(uint16_t *pass)
{
    int n = 0;
    for (int nr = 0; nr < CNK_NSYS && !cnk.trace; nr++) {
        const struct cnk_sysent *e = &cnk_systab[nr];
        if (e->name && e->cls == CNK_LOCAL && !e->fn && nr != __NR_rt_sigreturn && !cputime_traps(nr)
            && n < 200)     /* 8-bit jumps */
            pass[n++] = (uint16_t)nr;
    }
    return n;
}

int trap_install(void)
{
    struct ksigaction sa = {
        .handler = (void *)on_sigsys,
        .flags = SA_SIGINFO_ | SA_NODEFER_ | SA_RESTORER_,
        .restorer = cnk_restorer,
        .mask = 0,
    };
    uint64_t sys = 1ull << (SIGSYS_ - 1);
    long r = ksys4(__NR_rt_sigaction, SIGSYS_, &sa, NULL, sizeof sa.mask);
    if (r == 0)
        r = ksys4(__NR_rt_sigprocmask, 1 /* SIG_UNBLOCK */, &sys, NULL, sizeof sys);
    uint16_t pass[CNK_NSYS];
    int npass = passed_through(pass);
    return (int)(r < 0 ? r : install_filter((uintptr_t)__ehdr_start, (uintptr_t)etext, pass, npass));
}
