/*
 * usercopy.c - which of the program's buffers the shipping core's mailbox
 * (compute/shipc/mbox.c) may copy with memcpy without turning a bad pointer
 * into a crash.
 *
 * On the socket a bad buffer is the kernel's EFAULT; a memcpy would be
 * SIGSEGV.  So a buffer is copied with memcpy only where it lies in memory
 * known to stay mapped with the access needed: the calling thread's live
 * stack, the brk heap (glibc's main arena) and the main program's own
 * segments (not its RELRO part when written).  Anything else (mmap'd
 * arrays, thread arenas, libraries' data) the core has the kernel copy with
 * process_vm_readv/writev on ourselves (about 1.2 us here, still far less
 * than the socket), where a bad buffer is EFAULT.
 */
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "client.h"

extern void *__libc_stack_end;          /* ld.so: near the top of the main thread's stack */

struct range {
    uintptr_t lo, hi;
};

static struct range heap;               /* [start_brk, ...): the end is sbrk(0) at each check */
static struct range seg_r[8], seg_w[8], relro;
static int nseg_r, nseg_w;
static uintptr_t main_stack_max;        /* RLIMIT_STACK, capped */

/* this thread's stack, found on its first check; hi 1: unknown */
static __thread __attribute__((tls_model("initial-exec"))) struct range stack;

static int inside(const struct range *r, uintptr_t a, size_t len)
{
    return a >= r->lo && a <= r->hi && len <= r->hi - a;
}

static void find_stack(void)
{
    stack = (struct range){ 1, 1 };
    if (syscall(SYS_gettid) == getpid()) {
        uintptr_t hi = (uintptr_t)__libc_stack_end;
        stack = (struct range){ hi - main_stack_max, hi };
        return;
    }
    pthread_attr_t at;
    void *addr;
    size_t size;
    if (pthread_getattr_np(pthread_self(), &at) != 0)
        return;
    if (pthread_attr_getstack(&at, &addr, &size) == 0)
        stack = (struct range){ (uintptr_t)addr, (uintptr_t)addr + size };
    pthread_attr_destroy(&at);
}

/* Memory known to be mapped: readable, or writable with wr.  The live part
 * of our stack is [our frame, top): a signal handler on an alternate stack
 * is outside [lo, hi) and finds nothing known there. */
static int known(uintptr_t a, size_t len, int wr)
{
    uintptr_t here = (uintptr_t)__builtin_frame_address(0);

    if (!stack.hi)
        find_stack();
    if (here >= stack.lo && here < stack.hi && a >= here && a <= stack.hi && len <= stack.hi - a)
        return 1;
    if (heap.lo) {
        struct range h = { heap.lo, (uintptr_t)sbrk(0) };
        if (inside(&h, a, len))
            return 1;
    }
    if (wr) {
        if (relro.hi && a < relro.hi && a + len > relro.lo)
            return 0;
        for (int i = 0; i < nseg_w; i++)
            if (inside(&seg_w[i], a, len))
                return 1;
        return 0;
    }
    for (int i = 0; i < nseg_r; i++)
        if (inside(&seg_r[i], a, len))
            return 1;
    return 0;
}

int lat_user_known(const void *p, size_t len, int wr)
{
    return known((uintptr_t)p, len, wr);
}

/* The main program's segments (the first object dl_iterate_phdr reports). */
static int main_segments(struct dl_phdr_info *info, size_t size, void *arg)
{
    uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);

    (void)size;
    (void)arg;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        struct range r = { info->dlpi_addr + ph->p_vaddr, info->dlpi_addr + ph->p_vaddr + ph->p_memsz };
        if (ph->p_type == PT_GNU_RELRO)         /* made read-only after relocation: whole pages */
            relro = (struct range){ r.lo & ~(pg - 1), (r.hi + pg - 1) & ~(pg - 1) };
        if (ph->p_type != PT_LOAD)
            continue;
        if ((ph->p_flags & PF_R) && nseg_r < 8)
            seg_r[nseg_r++] = r;
        if ((ph->p_flags & PF_W) && (ph->p_flags & PF_R) && nseg_w < 8)
            seg_w[nseg_w++] = r;
    }
    return 1;                                   /* only the first object */
}

/* start_brk: field 47 of /proc/self/stat (after the parenthesised name). */
static uintptr_t start_brk(void)
{
    char buf[2048];
    int fd = (int)syscall(SYS_openat, AT_FDCWD, "/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    long n = syscall(SYS_read, fd, buf, sizeof buf - 1);
    syscall(SYS_close, fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    unsigned long long v = 0;
    for (int field = 2; p && *p; p++) {         /* p at the ')' ending field 2 */
        if (*p != ' ')
            continue;
        if (++field == 47) {
            v = strtoull(p + 1, NULL, 10);
            break;
        }
    }
    return (uintptr_t)v;
}

void lat_usercopy_init(void)
{
    struct rlimit rl;

    main_stack_max = 1u << 30;                  /* unlimited: a bound all the same */
    if (getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur < main_stack_max)
        main_stack_max = rl.rlim_cur;
    uintptr_t b = start_brk();
    if (b && b <= (uintptr_t)sbrk(0))
        heap.lo = b;
    dl_iterate_phdr(main_segments, NULL);
}
