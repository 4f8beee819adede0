/*
 * ksys.h - raw x86-64 system calls for code that must not go through libc:
 * cnk (which has none: the program owns errno and %fs) and the shipping core
 * (compute/shipc/), which libcnclient.so also links and whose own I/O must
 * never reach the interposed read/write.  Results are -errno on failure.
 */
#ifndef LATTICE_KSYS_H
#define LATTICE_KSYS_H

#include <asm/unistd.h>
#include <linux/futex.h>

static inline long ksys6(long n, long a, long b, long c, long d, long e, long f)
{
    long ret;
    register long r10 __asm__("r10") = d;
    register long r8 __asm__("r8") = e;
    register long r9 __asm__("r9") = f;
    __asm__ volatile("syscall"
                     : "=a"(ret)
                     : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
                     : "rcx", "r11", "memory");
    return ret;
}
#define ksys0(n)                ksys6((n), 0, 0, 0, 0, 0, 0)
#define ksys1(n, a)             ksys6((n), (long)(a), 0, 0, 0, 0, 0)
#define ksys2(n, a, b)          ksys6((n), (long)(a), (long)(b), 0, 0, 0, 0)
#define ksys3(n, a, b, c)       ksys6((n), (long)(a), (long)(b), (long)(c), 0, 0, 0)
#define ksys4(n, a, b, c, d)    ksys6((n), (long)(a), (long)(b), (long)(c), (long)(d), 0, 0)
#define ksys5(n, a, b, c, d, e) ksys6((n), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), 0)

/* A futex mutex: 0 free, 1 held, 2 held with waiters (Drepper, "Futexes
 * are tricky").  Taking a free one costs no system call. */
struct kmutex { int v; };

static inline void kmutex_lock(struct kmutex *m)
{
    int c = 0;
    if (__atomic_compare_exchange_n(&m->v, &c, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
        return;
    if (c != 2)
        c = __atomic_exchange_n(&m->v, 2, __ATOMIC_ACQUIRE);
    while (c) {
        ksys4(__NR_futex, &m->v, FUTEX_WAIT_PRIVATE, 2, 0);
        c = __atomic_exchange_n(&m->v, 2, __ATOMIC_ACQUIRE);
    }
}

static inline void kmutex_unlock(struct kmutex *m)
{
    if (__atomic_exchange_n(&m->v, 0, __ATOMIC_RELEASE) == 2)
        ksys3(__NR_futex, &m->v, FUTEX_WAKE_PRIVATE, 1);
}

/* The kernel's x86-64 struct msghdr (freestanding code has no libc
 * headers): the shipping core sends with it, cnk reads programs'
 * sendmsg/recvmsg arguments as it. */
struct iovec;
struct kmsghdr {
    void *name;
    int namelen, pad;
    struct iovec *iov;
    unsigned long iovlen;
    void *control;
    unsigned long controllen;
    unsigned flags, pad2;
};
_Static_assert(sizeof(struct kmsghdr) == 56, "x86-64 struct msghdr");

#endif
