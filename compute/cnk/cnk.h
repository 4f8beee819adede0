/*
 * cnk.h - interfaces between cnk's modules (see README.md for the design).
 *
 * A trapped system call becomes a struct cnk_call; systab.c gives its
 * handler and default class; the handler returns the result (-errno on
 * failure) and, when the class depends on a path or a descriptor, sets
 * c->cls to what it actually did.  trap.c counts and traces.
 */
#ifndef CNK_H
#define CNK_H

#include <stdint.h>
#include <stddef.h>

#include <lattice/cnk_report.h>
#include "lib.h"
#include "shipc.h"
#include "syscalls.h"

#define CNK_FD_FLOOR 1000           /* cnk's own descriptors live at or above this */
#define CNK_NSYS     512            /* x86-64 system call numbers covered by the table */

struct cnk_config {
    uint64_t memory;                /* big memory bytes (--memory) */
    unsigned cores;                 /* thread limit (--cores), default 2 */
    unsigned first_core;            /* --first-core: the node's CPUs start here (vn mode: t * cores) */
    unsigned comm_threads;          /* more threads for an MPI process's library (thread.c) */
    int trace;                      /* --trace */
    int rank;                       /* LATTICE_RANK, for trace lines */
    int conn_fd;                    /* PROC connection to ciod (moved >= CNK_FD_FLOOR) */
    int image_fd;                   /* the pushed executable (moved >= CNK_FD_FLOOR) */
    int err_fd;                     /* cnk's own stderr (cnode's pipe, >= CNK_FD_FLOOR): cnk: messages, --trace */
    struct cnk_report *report;      /* shared page, never NULL after main() starts */
    int argc;                       /* the program's arguments and environment */
    char **argv;
    char **envp;
    const unsigned long *auxv;      /* cnk's own auxiliary vector (vDSO, hwcap, random) */
    const char *execfn;             /* AT_EXECFN: the path execve was given (NULL: argv[0]) */
};
extern struct cnk_config cnk;

/* ---- main.c ---- */
/* The program cannot be loaded: fill the report, say `cnk: ...` on fd 2,
 * exit 127.  err is a positive errno value. */
__attribute__((noreturn, format(printf, 2, 3))) void cnk_fail(int err, const char *fmt, ...);

/* ---- a trapped call ---- */
struct cnk_call {
    long nr;                        /* system call number */
    long a[6];                      /* arguments */
    void *uc;                       /* the trapped thread's ucontext_t (clone, sigreturn need it) */
    enum cnk_class cls;             /* the table's class; handlers correct it */
};
typedef long (*cnk_handler)(struct cnk_call *c);
struct cnk_sysent {
    const char *name;               /* NULL: not in the table, unsupported */
    uint8_t cls;                    /* enum cnk_class */
    cnk_handler fn;                 /* NULL with CNK_LOCAL: executed as is */
    const char *args;               /* --trace: one letter per argument, d int, l long, x hex, s string */
};
extern const struct cnk_sysent cnk_systab[CNK_NSYS];

/* The kernel's ucontext_t on x86-64, as the SIGSYS handler receives it. */
struct cnk_mcontext {
    uint64_t r8, r9, r10, r11, r12, r13, r14, r15, rdi, rsi, rbp, rbx, rdx, rax, rcx, rsp, rip, eflags;
    uint16_t cs, gs, fs, ss;
    uint64_t err, trapno, oldmask, cr2, fpstate, reserved[8];
};
struct cnk_stack_t {
    uint64_t sp;
    int32_t flags;
    uint64_t size;
};
struct cnk_ucontext {
    uint64_t flags;
    uint64_t link;
    struct cnk_stack_t stack;       /* restored by rt_sigreturn: sigaltstack writes it */
    struct cnk_mcontext mc;         /* rax carries the result back */
    uint64_t sigmask;               /* restored by rt_sigreturn: rt_sigprocmask writes it */
};
_Static_assert(offsetof(struct cnk_ucontext, mc) == 40 && offsetof(struct cnk_ucontext, sigmask) == 296,
               "kernel ucontext layout");

/* trap.c */
int trap_install(void);                         /* SIGSYS handler + seccomp filter; 0 or -errno */
long cnk_passthrough(struct cnk_call *c);       /* the call itself, from cnk's exempt text */
/* Count and trace a call now (one that will not return: a successful execve). */
void trap_account(struct cnk_call *c, long r);

/* cputime.c: the program's CPU-time clocks without cnk's start-up */
void cputime_start(void);                       /* just before the program's first instruction */
int cputime_traps(long nr);                     /* clock_gettime, times, getrusage: trapped, local */
long cputime_call(struct cnk_call *c);

/* start.S: a minimal setjmp/longjmp, and a one-way switch of stacks */
struct kjmp { uint64_t rbx, rbp, r12, r13, r14, r15, rsp, rip; };
__attribute__((returns_twice)) int cnk_setjmp(struct kjmp *j);
__attribute__((noreturn)) void cnk_longjmp(struct kjmp *j, int val);
__attribute__((noreturn)) void cnk_on_stack(void *top, void (*fn)(void *), void *arg);

/* ---- bigmem.c ---- */
struct bigmem {
    uintptr_t base;
    size_t size;
    uint64_t page_size;
    int shared;             /* a memfd the I/O node maps too (shipc_share) */
};
extern struct bigmem bigmem;
/* Map the region (fixed_lo..fixed_hi: a fixed-address program's span that
 * must lie inside it, or 0, 0).  Fills report page_size/pages_why. */
int bigmem_init(uint64_t size, uintptr_t fixed_lo, uintptr_t fixed_hi);
int bigmem_contains(uintptr_t addr, size_t len);
int bigmem_alloc(size_t len, size_t align, uintptr_t *addr);   /* 0 or -ENOMEM */
int bigmem_take(uintptr_t addr, size_t len);                   /* mark a fixed range used */
void bigmem_reset(void);                                       /* execve: unmap the region */
void bigmem_brk_init(uintptr_t start);                         /* heap starts here */
void bigmem_collapse(uintptr_t addr, size_t len);              /* THP: make loaded pages huge */
long sys_brk(struct cnk_call *c);
long sys_mmap(struct cnk_call *c);
long sys_munmap(struct cnk_call *c);
long sys_mremap(struct cnk_call *c);
long sys_mprotect(struct cnk_call *c);
long sys_madvise(struct cnk_call *c);
long sys_mem_range(struct cnk_call *c);         /* mlock, munlock, mlock2: nothing to do in big memory */
long sys_mlockall(struct cnk_call *c);          /* mlockall, munlockall: same */
long sys_shmat(struct cnk_call *c);             /* SysV segments: outside big memory */
long sys_shmdt(struct cnk_call *c);

/* ---- libcache.c: the host's read-only cache of shipped files (README "Library cache") ---- */
void libcache_init(void);                       /* find and check the job's cache directory */
/* A local read-only descriptor of the cached copy of the file behind
 * shipped descriptor fd (fetched through the I/O node if this host has no
 * copy of this version yet, unless a map of len bytes is a small window
 * onto a big file), or -errno: then copy as before. */
long libcache_open(int fd, size_t len);

/* ---- loader.c ---- */
/* Load the image (and its interpreter, through the I/O node), build the
 * stack, and return the entry point and initial stack pointer.  Calls
 * cnk_fail on a program that cannot run. */
void load_program(uintptr_t *entry, uintptr_t *sp);
__attribute__((noreturn)) void enter_program(uintptr_t entry, uintptr_t sp);  /* start.S */
/* execve, in two steps.  Prepare: read the image on program descriptor fd
 * (and its interpreter) completely into buffers outside big memory and
 * check them, with the old program intact: 0 or -errno (ENOEXEC, ENOENT,
 * ENOMEM...).  Load: after big memory is gone, map it again and load the
 * prepared image with cnk.argv/envp (cnk_fail on failure). */
long loader_prepare(int fd, const char *name);
void loader_load_prepared(uintptr_t *entry, uintptr_t *sp);
#define CNK_ARG_MAX ((8ul << 20) / 4 - (32ul << 10))   /* argv+envp bytes: a quarter of the stack, less auxv room */

/* ---- exec.c ---- */
long sys_execve(struct cnk_call *c);
long sys_execveat(struct cnk_call *c);

/* ---- entry.c: shipped calls (the shipping core, compute/shipc/) ---- */
/* The handlers lattice/syscalls.def names (syscalls.h): sys_NAME of the
 * file calls and sys_lattice_zoid (entry.c: each the shipping core's
 * shipc_sys, which decides by path or descriptor and sets c->cls), and
 * sock_NAME of the socket and poll calls (the same). */
#define SYS(name, cls, op, wire, trace, lx) CNK_DECL_##cls(op)
#include <lattice/syscalls.def>
#undef SYS
#define SHIP_HANDLERS(X) SHIPC_FILE_CALLS(X)      /* the core's lists (compute/shipc/shipc.h) */
#define SOCK_HANDLERS(X) SHIPC_SOCK_CALLS(X)
long cnk_shipped(struct cnk_call *c);           /* every file call: the core's shipc_sys */
int ship_init(int conn_fd);                     /* 0 or -errno; descriptors 0,1,2 become remote 0,1,2 */
void ship_bigmem(uintptr_t base, size_t len);   /* where big memory is now (the mailbox copies there itself) */

/* ---- thread.c, signal.c ---- */
/* start.S: clone(2) whose child pops a struct clone_frame (thread.c) from
 * its new stack `frame` and returns into the program; parent gets the tid. */
long cnk_clone(unsigned long flags, void *frame, int *ptid, int *ctid, unsigned long tls);
void cnk_restorer(void);                        /* start.S: rt_sigreturn, in exempt text */
long sys_clone(struct cnk_call *c);
long sys_exit(struct cnk_call *c);
long sys_rseq(struct cnk_call *c);              /* ENOSYS: glibc runs without it */
long sys_prctl(struct cnk_call *c);
long sys_arch_prctl(struct cnk_call *c);        /* ARCH_SET_GS refused: %gs is cnk's (lib.h) */
void thread_init(void);                         /* thread limit and usable CPUs, before the trap */
unsigned thread_alive(void);                    /* the program's threads, main included */
void thread_exec(void);                         /* execve: communication threads by the new environment */
void signal_exec(void);                         /* execve: caught signals back to default, no altstack */
long sys_sched_getaffinity(struct cnk_call *c); /* shows --cores CPUs */
long sys_sched_setaffinity(struct cnk_call *c); /* own threads, within those CPUs */
/* sched.c: the scheduling calls (time-sharing policies the kernel's, real-time EPERM) */
int sched_own_thread(int tid);                  /* 0: the caller or a thread of the program; else -ESRCH */
int sched_copy_in(void *dst, const void *src, size_t n);   /* the program's memory; -EFAULT */
long sys_sched_setscheduler(struct cnk_call *c);
long sys_sched_setparam(struct cnk_call *c);
long sys_sched_setattr(struct cnk_call *c);
long sys_sched_query(struct cnk_call *c);       /* getscheduler, getparam, rr_get_interval, getattr */
long sys_priority(struct cnk_call *c);          /* getpriority, setpriority: the caller's */
long sys_rt_sigaction(struct cnk_call *c);
long sys_rt_sigprocmask(struct cnk_call *c);
long sys_sigaltstack(struct cnk_call *c);
long sys_rt_sigsuspend(struct cnk_call *c);
long sys_ppoll(struct cnk_call *c);
long sys_pselect6(struct cnk_call *c);
long sys_epoll_pwait(struct cnk_call *c);       /* and epoll_pwait2 */
long sys_kill(struct cnk_call *c);
long sys_tgkill(struct cnk_call *c);
long sys_tkill(struct cnk_call *c);
long sys_rt_sigqueueinfo(struct cnk_call *c);
long sys_rt_tgsigqueueinfo(struct cnk_call *c);
/* A SIGSYS that is not a trapped call (kill, raise): the program's virtual action. */
void signal_sigsys(void *info, struct cnk_ucontext *uc);

#endif
