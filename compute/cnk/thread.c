/*
 * thread.c - the program's threads: clone with thread flags only, at most
 * --cores of them alive (the main thread included), as CNK ran one thread
 * per core, or the job's own limit (LATTICE_THREADS, from `lattice run
 * --threads N`: 1 to MAX_APP_THREADS; each thread's stack comes out of big
 * memory, the service node checks that the rank's memory holds them).  No
 * processes: fork-like clones are unsupported.
 *
 * An MPI process (started with a PMI or PMIx endpoint in its environment)
 * may have COMM_THREADS more, for its communication library, as BG/Q's CNK
 * did not count the messaging layer's "commthreads" against the
 * application: UCX cannot start without its event thread, MPICH's
 * asynchronous progress thread needs one more, Open MPI's PMIx client has
 * its own.  cnk cannot tell them from compute threads; the count is what
 * it enforces.
 *
 * A clone refused at the limit is said once per process, on its stderr
 * ("cnk: thread limit ..." naming the limit and how to change it), and
 * counted on the report page, from which the service node records a RAS
 * WARNING (a runtime's own message, libgomp's "Thread creation failed",
 * says neither).
 */
#include <asm/unistd.h>
#include <linux/errno.h>
#include <linux/prctl.h>
#include <linux/sched.h>

#include "cnk.h"

#define SIG_SETMASK_ 2
#define ARCH_SET_GS_ 0x1001
#define THREAD_FLAGS (CLONE_VM | CLONE_THREAD | CLONE_SIGHAND | CLONE_FILES)
#define ALLOWED_FLAGS (THREAD_FLAGS | CLONE_FS | CLONE_SYSVSEM | CLONE_SETTLS | CLONE_PARENT_SETTID | \
                       CLONE_CHILD_CLEARTID | CLONE_CHILD_SETTID | CLONE_DETACHED)

/* What the child pops in cnk_clone (start.S), in this order: its block
 * (lib.h, for %gs) and the signal mask it starts with, then the trapped
 * registers; rip last, right below the program's child stack pointer. */
struct clone_frame {
    struct kthread *kthread;
    uint64_t sigmask;
    uint64_t r8, r9, r10, r11, r12, r13, r14, r15, rdi, rsi, rbp, rbx, rdx, rcx, rflags, rip;
};

static unsigned alive = 1;      /* threads of the program */

/* The blocks of threads other than the main one (lib.c has that one):
 * --cores and LATTICE_THREADS are at most 4096, plus the communication
 * threads. */
#define MAX_THREADS (4096 + 8)
static struct kthread blocks[MAX_THREADS];

static struct kthread *block_get(void)
{
    for (unsigned i = 0; i < MAX_THREADS; i++) {
        int free_ = 0;
        if (__atomic_compare_exchange_n(&blocks[i].used, &free_, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
            blocks[i].crit = 0;
            blocks[i].deferred = 0;
            return &blocks[i];
        }
    }
    return NULL;
}

#define COMM_THREADS 2
#define MAX_APP_THREADS 4096    /* what blocks[] holds besides the communication threads */

static unsigned app_threads;    /* the program's own, main included: --cores or LATTICE_THREADS */
static int app_threads_given;   /* LATTICE_THREADS set them */

static void affinity_init(void);

/* LATTICE_THREADS=N, the job's thread limit: decimal, 1 to MAX_APP_THREADS. */
static void limit_init(void)
{
    const char *v = kgetenv(cnk.envp, "LATTICE_THREADS");
    uint64_t n = 0;
    app_threads = cnk.cores;
    if (!v)
        return;
    for (const char *s = v; *s && n <= MAX_APP_THREADS; s++)
        n = *s >= '0' && *s <= '9' ? n * 10 + (uint64_t)(*s - '0') : MAX_APP_THREADS + 1;
    if (!n || n > MAX_APP_THREADS)
        cnk_fail(EINVAL, "LATTICE_THREADS=%s: a thread limit is a number of threads from 1 to %u "
                 "(lattice run --threads N)", v, MAX_APP_THREADS);
    app_threads = (unsigned)n;
    app_threads_given = 1;
}

void thread_exec(void)
{
    static const char *const pmi[] = { "PMI_FD", "PMI_PORT", "PMI_RANK", "PMIX_NAMESPACE", "PMIX_RANK" };
    cnk.comm_threads = 0;
    for (size_t i = 0; i < sizeof pmi / sizeof pmi[0]; i++)
        if (kgetenv(cnk.envp, pmi[i]))
            cnk.comm_threads = COMM_THREADS;
}

void thread_init(void)
{
    thread_exec();
    limit_init();
    affinity_init();
    cnk.report->thread_limit = app_threads + cnk.comm_threads;
}

/* A clone refused at the limit: counted, and said on the first. */
static void limit_reached(void)
{
    unsigned limit = app_threads + cnk.comm_threads;
    const char *mpi = cnk.comm_threads ? " and 2 for its MPI library" : "";
    cnk.report->thread_limit = limit;
    if (__atomic_fetch_add(&cnk.report->threads_refused, 1, __ATOMIC_RELAXED) != 0)
        return;
    if (app_threads_given)
        kprint(cnk.err_fd, "cnk: thread limit: rank %d may run %u threads (the job's --threads %u%s), a thread "
               "more was refused; ask for at most %u (OMP_NUM_THREADS=%u) or raise the limit (lattice run "
               "--threads N, at most %u)\n", cnk.rank, limit, app_threads, mpi, app_threads, app_threads,
               MAX_APP_THREADS);
    else
        kprint(cnk.err_fd, "cnk: thread limit: rank %d may run %u threads (its %u cores%s), a thread more was "
               "refused; ask for at most %u (OMP_NUM_THREADS=%u), let it run more (lattice run --threads N) "
               "or give each rank more cores: co mode (--mode co), fewer ranks per node, or a machine with "
               "more (lattice init --cores)\n", cnk.rank, limit, cnk.cores, mpi, cnk.cores, cnk.cores);
}

unsigned thread_alive(void)
{
    return __atomic_load_n(&alive, __ATOMIC_RELAXED);
}

long sys_clone(struct cnk_call *c)
{
    unsigned long flags = (unsigned long)c->a[0], stack = (unsigned long)c->a[1];
    if ((flags & THREAD_FLAGS) != THREAD_FLAGS) {
        c->cls = CNK_UNSUPPORTED;   /* a new process */
        return -ENOSYS;
    }
    if ((flags & ~(ALLOWED_FLAGS | 0xfful)) || !stack)
        return -EINVAL;
    if (__atomic_add_fetch(&alive, 1, __ATOMIC_RELAXED) > app_threads + cnk.comm_threads) {
        __atomic_sub_fetch(&alive, 1, __ATOMIC_RELAXED);
        limit_reached();
        return -EAGAIN;
    }
    struct kthread *kt = block_get();
    if (!kt) {
        __atomic_sub_fetch(&alive, 1, __ATOMIC_RELAXED);
        return -EAGAIN;
    }
    const struct cnk_ucontext *uc = c->uc;
    const struct cnk_mcontext *m = &uc->mc;
    struct clone_frame *f = (struct clone_frame *)stack - 1;
    *f = (struct clone_frame){ kt, uc->sigmask, m->r8, m->r9, m->r10, m->r11, m->r12, m->r13, m->r14,
                               m->r15, m->rdi, m->rsi, m->rbp, m->rbx, m->rdx, m->rcx, m->eflags, m->rip };
    /* the child starts with every signal blocked, so none finds it before
     * its %gs is its own; it then takes the program's mask (start.S) */
    uint64_t all = ~0ull, old;
    ksys4(__NR_rt_sigprocmask, SIG_SETMASK_, &all, &old, sizeof all);
    long r = cnk_clone(flags, f, (int *)c->a[2], (int *)c->a[3], (unsigned long)c->a[4]);
    ksys4(__NR_rt_sigprocmask, SIG_SETMASK_, &old, NULL, sizeof old);
    if (r < 0) {
        __atomic_store_n(&kt->used, 0, __ATOMIC_RELEASE);
        __atomic_sub_fetch(&alive, 1, __ATOMIC_RELAXED);
    }
    return r;
}

/* One thread ends (exit_group ends them all and needs no count).  No
 * signal reaches it once its block may go to a new thread. */
long sys_exit(struct cnk_call *c)
{
    uint64_t all = ~0ull;
    ksys4(__NR_rt_sigprocmask, SIG_SETMASK_, &all, NULL, sizeof all);
    __atomic_store_n(&kthread_self()->used, 0, __ATOMIC_RELEASE);
    __atomic_sub_fetch(&alive, 1, __ATOMIC_RELAXED);
    for (;;)
        ksys1(__NR_exit, c->a[0]);
}

/* %gs holds the thread's block (lib.h): the program may not move it. */
long sys_arch_prctl(struct cnk_call *c)
{
    return c->a[0] == ARCH_SET_GS_ ? -EPERM : cnk_passthrough(c);
}

long sys_rseq(struct cnk_call *c)
{
    (void)c;    /* glibc runs without it: one kernel feature less acting on the program */
    return -ENOSYS;
}

long sys_prctl(struct cnk_call *c)
{
    switch (c->a[0]) {
    case PR_SET_NAME:
    case PR_GET_NAME:
    case PR_SET_PDEATHSIG:
    case PR_GET_PDEATHSIG:
    case PR_GET_DUMPABLE:
    case PR_SET_DUMPABLE:
    case PR_GET_SECCOMP:
    case PR_CAPBSET_READ:
    case PR_GET_TIMERSLACK:
    case PR_SET_TIMERSLACK:
    case PR_GET_NO_NEW_PRIVS:
    case PR_GET_THP_DISABLE:
        return cnk_passthrough(c);
    default:
        return -EINVAL;     /* what the kernel says about an option it does not know */
    }
}

/* The CPUs the program may use (what sched_getaffinity shows): --cores of
 * those cnk started on, from the --first-core'th on, wrapping around when
 * there are fewer CPUs than cores.  cnode binds each process to its node's
 * real CPUs before exec (docs/architecture.md, "Nodes on cores"; then
 * --first-core is 0), so these are always within that set.  Filled at
 * start-up.  cnk pins nothing itself; runtimes that bind their threads
 * (hwloc, UCX) bind them to these. */
#define MASK_BYTES 128      /* 1024 CPUs */
static unsigned char allowed[MASK_BYTES];

static int has(const unsigned char *m, long i) { return m[i / 8] & (1u << (i % 8)); }

static void affinity_init(void)
{
    unsigned char start[MASK_BYTES] = { 0 };
    long r = ksys3(__NR_sched_getaffinity, 0, MASK_BYTES, start);
    unsigned n = 0;
    for (long i = 0; i < r * 8; i++)
        n += has(start, i) != 0;
    if (r <= 0 || !n)
        return;
    unsigned first = cnk.first_core % n, take = cnk.cores < n ? cnk.cores : n, k = 0;
    for (long i = 0; i < r * 8; i++)
        if (has(start, i)) {
            unsigned pos = (k++ + n - first) % n;       /* this CPU's place counting from first */
            if (pos < take)
                allowed[i / 8] |= (unsigned char)(1u << (i % 8));
        }
}

/* MPI runtimes and hwloc bind their threads (MPICH's progress thread to the
 * node's second core): allowed for the program's own threads, within the
 * CPUs it was given. */
long sys_sched_setaffinity(struct cnk_call *c)
{
    int tid = (int)c->a[0];
    size_t len = (size_t)c->a[1];
    const unsigned char *want = (const unsigned char *)c->a[2];
    unsigned char mask[MASK_BYTES] = { 0 };
    int any = 0;
    /* Linux's order: the mask's memory (EFAULT), then the thread: tid 0 is
     * the caller, any other must be a thread of this process (ESRCH) */
    if (len && sched_copy_in(mask, want, len < MASK_BYTES ? len : MASK_BYTES) < 0)
        return -EFAULT;
    if (sched_own_thread(tid) < 0)
        return -ESRCH;
    for (size_t i = 0; i < len && i < MASK_BYTES; i++)
        any |= mask[i] &= allowed[i];
    if (!any)
        return -EINVAL;     /* as the kernel says for a mask with no usable CPU */
    return ksys3(__NR_sched_setaffinity, tid, MASK_BYTES, mask);
}

/* The node's CPUs (the --cores given to this process): runtimes size their
 * thread pools by it. */
long sys_sched_getaffinity(struct cnk_call *c)
{
    /* another process's is ESRCH, after the kernel's check of the length */
    if (sched_own_thread((int)c->a[0]) < 0) {
        unsigned char probe[MASK_BYTES];
        size_t len = (size_t)c->a[1];
        long r = len & 7 ? -EINVAL : ksys3(__NR_sched_getaffinity, 0, len < MASK_BYTES ? len : MASK_BYTES, probe);
        return r < 0 ? r : -ESRCH;
    }
    long r = cnk_passthrough(c);
    unsigned char *mask = (unsigned char *)c->a[2];
    for (long i = 0; i < r && i < MASK_BYTES; i++)
        mask[i] = allowed[i];
    return r;
}
