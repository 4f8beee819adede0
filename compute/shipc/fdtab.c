/*
 * fdtab.c - the descriptor table: program descriptors that stand for remote
 * ones, and the client's own descriptors, which the program must not see.
 *
 * Program descriptor numbers are real kernel numbers.  A shipped descriptor
 * sits on a local placeholder (O_PATH|O_CLOEXEC of /dev/null) of the same
 * number, so the kernel never hands the number out again and a call that
 * reaches the kernel with it (mmap, poll...) fails with EBADF.  Descriptors
 * 0, 1, 2 are the real local ones (cnode's /dev/null and pipes, which cnk
 * keeps for its own messages) standing for remote 0, 1, 2.
 *
 * slot[fd] holds remote+1 (0: not shipped) and the program's FD_CLOEXEC in
 * the top bit.  Lookups are lock-free; changes take fdlock.
 */
#include <linux/fcntl.h>
#include <linux/resource.h>

#include <lattice/wire.h>

#include "internal.h"

#define FD_SLOTS   65536
#define SLOT_CLOEX 0x8000u
#define SLOT_FD    0x7fffu
#define MAX_HIDDEN 16

_Static_assert(LAT_MAX_FDS < SLOT_FD, "remote+1 fits a slot");

static uint16_t slot[FD_SLOTS];
static struct shipc_lock fdlock;
static int floor_ = 0;              /* the client's own descriptors are at or above this */
static int hidden[MAX_HIDDEN];
static int nhidden;

static uint16_t load(int fd)
{
    return __atomic_load_n(&slot[fd], __ATOMIC_ACQUIRE);
}

static unsigned top;             /* no slot at or above it was ever shipped: scans stop there */

static void store(int fd, uint16_t v)
{
    if (v && (unsigned)fd >= __atomic_load_n(&top, __ATOMIC_RELAXED))
        __atomic_store_n(&top, (unsigned)fd + 1, __ATOMIC_RELEASE);
    __atomic_store_n(&slot[fd], v, __ATOMIC_RELEASE);
}

void shipc_fd_setup(int floor)
{
    for (int fd = 0; fd < 3; fd++)
        store(fd, (uint16_t)(fd + 1));
    floor_ = floor;
    nhidden = 0;
}

int shipc_fd_hide(int fd)
{
    if (fd < floor_ || nhidden >= MAX_HIDDEN)
        return -EINVAL;
    for (int i = 0; i < nhidden; i++)
        if (hidden[i] == fd)
            return 0;
    hidden[nhidden++] = fd;
    return 0;
}

int shipc_fd_is_hidden(int fd)
{
    if (fd < floor_)
        return 0;
    for (int i = 0; i < nhidden; i++)
        if (hidden[i] == fd)
            return 1;
    return 0;
}

int shipc_fd_is_shipped(int fd)
{
    return fd >= 0 && fd < FD_SLOTS && (load(fd) & SLOT_FD) != 0;
}

int shipc_fd_route(int fd, int *remote)
{
    if (shipc_fd_is_hidden(fd))
        return -EBADF;
    if (fd < 0 || fd >= FD_SLOTS)
        return SHIPC_LOCAL;     /* the kernel judges it */
    uint16_t v = load(fd) & SLOT_FD;
    if (!v)
        return SHIPC_LOCAL;
    *remote = v - 1;
    return SHIPC_SHIP;
}

/* RLIMIT_NOFILE, at most what the table can stand for. */
unsigned shipc_fd_limit(void)
{
    struct rlimit rl;

    if (ksys4(__NR_prlimit64, 0, RLIMIT_NOFILE, 0, &rl) < 0 || rl.rlim_cur > FD_SLOTS)
        return FD_SLOTS;
    return (unsigned)rl.rlim_cur;
}

/* Where the client's own descriptors go: 1000 and above, and at the
 * program's soft RLIMIT_NOFILE when it is above that and below the hard
 * limit, so that they take no number the program could have (Linux says
 * EMFILE only when every number below the soft limit is in use).  Up to
 * OWN_TOP only: a larger limit would grow the kernel's descriptor table of
 * every rank for them.  A program that later raises its soft limit past
 * them, or whose soft limit is its hard one, has them among its numbers. */
#define OWN_MIN 1000
#define OWN_TOP 4096
#define OWN_ROOM 64

static int own_floor;

int shipc_own_floor(void)
{
    if (!own_floor) {
        struct rlimit rl;
        int f = OWN_MIN;
        if (ksys4(__NR_prlimit64, 0, RLIMIT_NOFILE, 0, &rl) == 0 && rl.rlim_cur > OWN_MIN &&
            rl.rlim_cur <= OWN_TOP && rl.rlim_cur < rl.rlim_max)
            f = (int)rl.rlim_cur;
        own_floor = f;
    }
    return own_floor;
}

/* F_DUPFD at the floor needs a soft limit above it: widened for the
 * moment (at start, before the program runs), then put back. */
long shipc_own_dup(int fd, int cloexec)
{
    unsigned long floor = (unsigned long)shipc_own_floor();
    struct rlimit rl, wide;
    int widened = 0;
    if (ksys4(__NR_prlimit64, 0, RLIMIT_NOFILE, 0, &rl) == 0 && rl.rlim_cur < floor + OWN_ROOM &&
        rl.rlim_max > rl.rlim_cur) {
        wide = rl;
        wide.rlim_cur = rl.rlim_max < floor + OWN_ROOM ? rl.rlim_max : floor + OWN_ROOM;
        widened = ksys4(__NR_prlimit64, 0, RLIMIT_NOFILE, &wide, 0) == 0;
    }
    long r = ksys3(__NR_fcntl, fd, cloexec ? F_DUPFD_CLOEXEC : F_DUPFD, floor);
    if (widened)
        ksys4(__NR_prlimit64, 0, RLIMIT_NOFILE, &rl, 0);
    return r;
}

static const struct shipc_fd_ops *ops;      /* NULL: O_PATH placeholders, one process */

void shipc_fd_set_ops(const struct shipc_fd_ops *o)
{
    ops = o;
}

/* A placeholder for remote numbered >= minfd, lowest free (as open and
 * F_DUPFD pick), close-on-exec as the program asked (it must survive an
 * exec exactly when the program's descriptor would). */
static int placeholder(int remote, int cloexec, int minfd)
{
    int fd;

    if (ops) {
        fd = ops->make(remote, cloexec);
    } else {
        cloexec = 1;            /* cnk: the table is gone after exec anyway */
        fd = (int)ksys4(__NR_openat, AT_FDCWD, "/dev/null", O_PATH | O_CLOEXEC, 0);
        if (fd < 0)
            fd = (int)ksys4(__NR_openat, AT_FDCWD, "/", O_PATH | O_CLOEXEC, 0);
    }
    if (fd < 0 || fd >= minfd)
        return fd;
    int moved = (int)ksys3(__NR_fcntl, fd, cloexec ? F_DUPFD_CLOEXEC : F_DUPFD, minfd);
    ksys1(__NR_close, fd);
    return moved;
}

int shipc_fd_install(int remote, int cloexec, int minfd)
{
    if (minfd < 0)
        return -EINVAL;
    int fd = placeholder(remote, cloexec, minfd);
    if (fd >= FD_SLOTS) {
        ksys1(__NR_close, fd);
        return -EMFILE;         /* beyond what the table can stand for */
    }
    if (fd < 0)
        return fd;
    shipc_lock_take(&fdlock);
    store(fd, (uint16_t)((remote + 1) | (cloexec ? SLOT_CLOEX : 0)));
    shipc_lock_drop(&fdlock);
    return fd;
}

static void (*close_hook)(unsigned, unsigned);

void shipc_fd_on_close(void (*fn)(unsigned first, unsigned last))
{
    close_hook = fn;
}

void shipc_fd_closed(unsigned first, unsigned last)
{
    if (close_hook)
        close_hook(first, last);
}

static unsigned epoch;          /* shipped descriptors closed or replaced so far */

unsigned shipc_fd_epoch(void)
{
    return __atomic_load_n(&epoch, __ATOMIC_ACQUIRE);
}

int shipc_fd_install_at(int remote, int cloexec, int fd, int *old)
{
    *old = -1;
    if (fd < 0 || fd >= FD_SLOTS || shipc_fd_is_hidden(fd))
        return -EBADF;
    int ph = placeholder(remote, cloexec, 0);
    if (ph < 0)
        return ph;
    /* who else holds what fd stands for now is asked before it goes */
    int tok = ph != fd ? shipc_fd_hold(fd) : -1;
    shipc_lock_take(&fdlock);
    /* dup3 closes whatever was at fd, atomically, as dup2 would; when the
     * placeholder got fd itself, fd was free and it stays there */
    long r = ph == fd ? fd : ksys3(__NR_dup3, ph, fd, cloexec ? O_CLOEXEC : 0);
    if (r >= 0) {
        *old = (int)(slot[fd] & SLOT_FD) - 1;
        store(fd, (uint16_t)((remote + 1) | (cloexec ? SLOT_CLOEX : 0)));
        __atomic_fetch_add(&epoch, 1, __ATOMIC_RELEASE);
    }
    shipc_lock_drop(&fdlock);
    if (ph != fd)
        ksys1(__NR_close, ph);
    if (!shipc_fd_last(tok, *old))
        *old = -1;              /* another process still holds it (or it stood for nothing) */
    if (r >= 0)
        shipc_fd_closed((unsigned)fd, (unsigned)fd);    /* what was at fd is gone */
    return r < 0 ? (int)r : fd;
}

int shipc_fd_forget(int fd, int close_placeholder)
{
    if (fd < 0 || fd >= FD_SLOTS)
        return -1;
    shipc_lock_take(&fdlock);
    int v = slot[fd] & SLOT_FD;
    store(fd, 0);
    __atomic_fetch_add(&epoch, 1, __ATOMIC_RELEASE);
    /* cleared first: the number may be handed out as soon as it is closed */
    if (v && close_placeholder)
        ksys1(__NR_close, fd);
    shipc_lock_drop(&fdlock);
    if (v)
        shipc_fd_closed((unsigned)fd, (unsigned)fd);
    return v - 1;
}

int shipc_fd_adopt(int fd, int remote, int cloexec)
{
    if (fd < 0 || fd >= FD_SLOTS || remote < 0 || remote >= (int)LAT_MAX_FDS)
        return -EBADF;
    shipc_lock_take(&fdlock);
    store(fd, (uint16_t)((remote + 1) | (cloexec ? SLOT_CLOEX : 0)));
    __atomic_fetch_add(&epoch, 1, __ATOMIC_RELEASE);
    shipc_lock_drop(&fdlock);
    return fd;
}

void shipc_fd_each(void (*fn)(int fd, int remote, int cloexec))
{
    shipc_lock_take(&fdlock);
    for (int fd = shipc_fd_next_shipped(0, ~0u); fd >= 0; fd = shipc_fd_next_shipped((unsigned)fd + 1, ~0u)) {
        uint16_t v = load(fd);
        fn(fd, (int)(v & SLOT_FD) - 1, (v & SLOT_CLOEX) != 0);
    }
    shipc_lock_drop(&fdlock);
}

int shipc_fd_reap(void)
{
    return ops && ops->reap ? ops->reap() : 0;
}

int shipc_fd_hold(int fd)
{
    return ops && shipc_fd_is_shipped(fd) ? ops->hold(fd) : -1;
}

int shipc_fd_last(int tok, int remote)
{
    if (!ops)
        return remote >= 0;
    return ops->last(tok, remote) && remote >= 0;
}

long shipc_fd_release(int fd)
{
    int tok = shipc_fd_hold(fd);
    int r = shipc_fd_forget(fd, 1);

    if (r < 0) {
        shipc_fd_last(tok, -1);
        return -EBADF;          /* a second closer of the same number */
    }
    return shipc_fd_last(tok, r) ? shipc_rclose(r) : 0;     /* else another process holds it */
}

int shipc_fd_cloexec(int fd)
{
    return fd >= 0 && fd < FD_SLOTS && (load(fd) & SLOT_CLOEX) != 0;
}

void shipc_fd_set_cloexec(int fd, int on)
{
    if (fd < 0 || fd >= FD_SLOTS)
        return;
    shipc_lock_take(&fdlock);
    uint16_t v = slot[fd];
    if (v & SLOT_FD) {
        store(fd, (uint16_t)(on ? v | SLOT_CLOEX : v & ~SLOT_CLOEX));
        if (ops)            /* the placeholder goes at exec exactly when the program's would */
            ksys3(__NR_fcntl, fd, F_SETFD, on ? FD_CLOEXEC : 0);
    }
    shipc_lock_drop(&fdlock);
}

int shipc_fd_next_shipped(unsigned from, unsigned last)
{
    unsigned end = __atomic_load_n(&top, __ATOMIC_ACQUIRE);
    for (unsigned fd = from; fd <= last && fd < end; fd++)
        if (load((int)fd) & SLOT_FD)
            return (int)fd;
    return -1;
}

int shipc_fd_next_hidden(unsigned from, unsigned last)
{
    int best = -1;

    for (int i = 0; i < nhidden; i++) {
        if ((unsigned)hidden[i] < from || (unsigned)hidden[i] > last)
            continue;
        if (best < 0 || hidden[i] < best)
            best = hidden[i];
    }
    return best;
}
