/*
 * fd.c - the descriptor table: program descriptors that stand for remote ones,
 * and cnk's own descriptors, which the program must not see.
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
#include <asm/unistd.h>
#include <linux/errno.h>
#include <linux/fcntl.h>

#include <lattice/wire.h>

#include "cnk.h"

#define FD_SLOTS   65536
#define SLOT_CLOEX 0x8000u
#define SLOT_FD    0x7fffu
#define MAX_HIDDEN 16

_Static_assert(LAT_MAX_FDS < SLOT_FD, "remote+1 fits a slot");

static uint16_t slot[FD_SLOTS];
static struct klock fdlock;
static int hidden[MAX_HIDDEN];      /* cnk's own descriptors, found by fd_setup */
static int nhidden;

static uint16_t load(int fd)
{
    return __atomic_load_n(&slot[fd], __ATOMIC_ACQUIRE);
}

static void store(int fd, uint16_t v)
{
    __atomic_store_n(&slot[fd], v, __ATOMIC_RELEASE);
}

int fd_is_hidden(int fd)
{
    if (fd < CNK_FD_FLOOR)
        return 0;
    if (fd == cnk.conn_fd || fd == cnk.image_fd)
        return 1;
    for (int i = 0; i < nhidden; i++)
        if (hidden[i] == fd)
            return 1;
    return 0;
}

int fd_is_shipped(int fd)
{
    return fd >= 0 && fd < FD_SLOTS && (load(fd) & SLOT_FD) != 0;
}

int fd_route(int fd, int *remote)
{
    if (fd_is_hidden(fd))
        return -EBADF;
    if (fd < 0 || fd >= FD_SLOTS)
        return ROUTE_LOCAL;     /* the kernel judges it */
    uint16_t v = load(fd) & SLOT_FD;
    if (!v)
        return ROUTE_LOCAL;
    *remote = v - 1;
    return ROUTE_SHIP;
}

/* cnk's own descriptors are moved above CNK_FD_FLOOR before shipping starts
 * (main.c); whatever is open there now is cnk's, report page included. */
void fd_setup(void)
{
    for (int fd = 0; fd < 3; fd++)
        store(fd, (uint16_t)(fd + 1));
    nhidden = 0;
    for (int fd = CNK_FD_FLOOR; fd < CNK_FD_FLOOR + 64 && nhidden < MAX_HIDDEN; fd++)
        if (ksys2(__NR_fcntl, fd, F_GETFD) >= 0)
            hidden[nhidden++] = fd;
}

/* A placeholder numbered >= minfd, lowest free (as open and F_DUPFD pick). */
static int placeholder(int minfd)
{
    int fd = (int)ksys4(__NR_openat, AT_FDCWD, "/dev/null", O_PATH | O_CLOEXEC, 0);

    if (fd < 0 || fd >= minfd)
        return fd;
    int moved = (int)ksys3(__NR_fcntl, fd, F_DUPFD_CLOEXEC, minfd);
    ksys1(__NR_close, fd);
    return moved;
}

int fd_install(int remote, int cloexec, int minfd)
{
    if (minfd < 0)
        return -EINVAL;
    int fd = placeholder(minfd);
    if (fd >= FD_SLOTS) {
        ksys1(__NR_close, fd);
        return -EMFILE;         /* beyond what the table can stand for */
    }
    if (fd < 0)
        return fd;
    klock(&fdlock);
    store(fd, (uint16_t)((remote + 1) | (cloexec ? SLOT_CLOEX : 0)));
    kunlock(&fdlock);
    return fd;
}

static void (*close_hook)(unsigned, unsigned);

void fd_on_close(void (*fn)(unsigned first, unsigned last))
{
    close_hook = fn;
}

void fd_closed(unsigned first, unsigned last)
{
    if (close_hook)
        close_hook(first, last);
}

static unsigned epoch;          /* shipped descriptors closed or replaced so far */

unsigned fd_epoch(void)
{
    return __atomic_load_n(&epoch, __ATOMIC_ACQUIRE);
}

int fd_install_at(int remote, int cloexec, int fd, int *old)
{
    *old = -1;
    if (fd < 0 || fd >= FD_SLOTS || fd_is_hidden(fd))
        return -EBADF;
    int ph = placeholder(0);
    if (ph < 0)
        return ph;
    klock(&fdlock);
    /* dup3 closes whatever was at fd, atomically, as dup2 would */
    long r = ksys3(__NR_dup3, ph, fd, O_CLOEXEC);
    if (r >= 0) {
        *old = (int)(slot[fd] & SLOT_FD) - 1;
        store(fd, (uint16_t)((remote + 1) | (cloexec ? SLOT_CLOEX : 0)));
        __atomic_fetch_add(&epoch, 1, __ATOMIC_RELEASE);
    }
    kunlock(&fdlock);
    ksys1(__NR_close, ph);
    if (r >= 0)
        fd_closed((unsigned)fd, (unsigned)fd);  /* what was at fd is gone */
    return r < 0 ? (int)r : fd;
}

int fd_forget(int fd, int close_placeholder)
{
    if (fd < 0 || fd >= FD_SLOTS)
        return -1;
    klock(&fdlock);
    int v = slot[fd] & SLOT_FD;
    store(fd, 0);
    __atomic_fetch_add(&epoch, 1, __ATOMIC_RELEASE);
    /* cleared first: the number may be handed out as soon as it is closed */
    if (v && close_placeholder)
        ksys1(__NR_close, fd);
    kunlock(&fdlock);
    if (v)
        fd_closed((unsigned)fd, (unsigned)fd);
    return v - 1;
}

int fd_cloexec(int fd)
{
    return fd >= 0 && fd < FD_SLOTS && (load(fd) & SLOT_CLOEX) != 0;
}

void fd_set_cloexec(int fd, int on)
{
    if (fd < 0 || fd >= FD_SLOTS)
        return;
    klock(&fdlock);
    uint16_t v = slot[fd];
    if (v & SLOT_FD)
        store(fd, (uint16_t)(on ? v | SLOT_CLOEX : v & ~SLOT_CLOEX));
    kunlock(&fdlock);
}

int fd_next_shipped(unsigned from, unsigned last)
{
    for (unsigned fd = from; fd <= last && fd < FD_SLOTS; fd++)
        if (load((int)fd) & SLOT_FD)
            return (int)fd;
    return -1;
}

int fd_next_hidden(unsigned from, unsigned last)
{
    int best = -1;
    int own[2 + MAX_HIDDEN] = { cnk.conn_fd, cnk.image_fd };
    int n = 2;

    for (int i = 0; i < nhidden; i++)
        own[n++] = hidden[i];
    for (int i = 0; i < n; i++) {
        if (own[i] < CNK_FD_FLOOR || (unsigned)own[i] < from || (unsigned)own[i] > last)
            continue;
        if (best < 0 || own[i] < best)
            best = own[i];
    }
    return best;
}
