/*
 * entry.c - cnk's side of the shipping core (compute/shipc/): the file
 * calls' handlers of the dispatch table, the hooks the core calls
 * (entry.h), the start of shipping, and the descriptors cnk keeps from the
 * program.
 */
#include <asm/unistd.h>
#include <linux/fcntl.h>

#include "cnk.h"
#include "entry.h"

_Static_assert((int)SHIPC_CLS_LOCAL == (int)CNK_LOCAL && (int)SHIPC_CLS_SHIPPED == (int)CNK_SHIPPED &&
               (int)SHIPC_CLS_REFUSED == (int)CNK_UNSUPPORTED, "one set of classes");

/* A trapped file call, decided and done by the core. */
long cnk_shipped(struct cnk_call *c)
{
    struct shipc_call s = { c->nr, { c->a[0], c->a[1], c->a[2], c->a[3], c->a[4], c->a[5] }, SHIPC_CLS_SHIPPED };
    long r = shipc_sys(&s);

    c->cls = (enum cnk_class)s.cls;
    return r;
}

#define SHIP_ENTRY(name) long sys_##name(struct cnk_call *c) { return cnk_shipped(c); }
SHIP_HANDLERS(SHIP_ENTRY)
SHIP_ENTRY(lattice_zoid)
#define SOCK_ENTRY(name) long sock_##name(struct cnk_call *c) { return cnk_shipped(c); }
SOCK_HANDLERS(SOCK_ENTRY)

/* The node-local case: the call itself; the waits with a signal mask keep
 * SIGSYS open (signal.c). */
long shipc_ent_local(struct shipc_call *c)
{
    struct cnk_call k = { c->nr, { c->a[0], c->a[1], c->a[2], c->a[3], c->a[4], c->a[5] }, NULL, CNK_LOCAL };

    switch (c->nr) {
    case __NR_ppoll:
        return sys_ppoll(&k);
    case __NR_pselect6:
        return sys_pselect6(&k);
    case __NR_epoll_pwait:
    case __NR_epoll_pwait2:
        return sys_epoll_pwait(&k);
    default:
        return ksys6(c->nr, c->a[0], c->a[1], c->a[2], c->a[3], c->a[4], c->a[5]);
    }
}

unsigned shipc_ent_threads(void)
{
    return thread_alive();
}

void shipc_ent_crit_enter(void)
{
    kcrit_enter();
}

void shipc_ent_crit_leave(void)
{
    kcrit_leave();
}

void shipc_ent_broken(const char *why, int err)
{
    kprint(2, "cnk: rank %d: connection to the I/O node lost (%s, error %d); "
              "file calls on it now fail with EIO\n", cnk.rank, why, err);
}

uint64_t shipc_ent_now_ns(void)
{
    struct { long sec, nsec; } t;

    ksys2(__NR_clock_gettime, 1 /* CLOCK_MONOTONIC */, &t);
    return (uint64_t)t.sec * 1000000000u + (uint64_t)t.nsec;
}

/* Only big memory is known mapped: the program's other buffers are copied
 * by the kernel (process_vm_readv/writev), where a bad one is EFAULT. */
static uintptr_t mem_lo;
static size_t mem_len;

void ship_bigmem(uintptr_t base, size_t len)
{
    mem_lo = base;
    mem_len = len;
}

int shipc_ent_user_ok(const void *p, size_t n, int wr)
{
    uintptr_t a = (uintptr_t)p;

    (void)wr;
    return a >= mem_lo && n <= mem_len && a - mem_lo <= mem_len - n;
}

/* cnk's own descriptors are moved to shipc_own_floor() (>= CNK_FD_FLOOR)
 * before shipping starts (main.c); whatever is open there now is cnk's,
 * report page included. */
static void fd_setup(void)
{
    int floor = shipc_own_floor();
    shipc_fd_setup(CNK_FD_FLOOR);
    for (int fd = floor; fd < floor + 64; fd++)
        if (ksys2(__NR_fcntl, fd, F_GETFD) >= 0 && shipc_fd_hide(fd) < 0)
            break;
}

int ship_init(int conn_fd)
{
    const char *off = kgetenv(cnk.envp, "LATTICE_MAILBOX");
    struct shipc_cfg cfg = {
        .conn = conn_fd,
        .dp = kgetenv(cnk.envp, "LATTICE_IO_DP"),
        .mailbox = !(off && off[0] == '0' && !off[1]),
        .mailbox_name = "cnk-mailbox",
        .async_out = 1,                 /* the only process on its connection: no fork shares it */
    };

    fd_setup();
    return shipc_init(&cfg);
}
