/*
 * poll.c - poll, ppoll, select, pselect6 and epoll over shipped and local
 * descriptors, for both kernels.  Shipped descriptors are asked of the I/O
 * node (LAT_SYS_POLL); the local ones of the node's kernel, without a wait;
 * the two alternate, a shipped wait lasting at most SHIPC_SLICE_MS while
 * local descriptors or other threads need a look in.  Without a shipped
 * descriptor in the set, the call is the node's own (the entry's local
 * case: under cnk, ppoll, pselect6 and epoll_pwait keep SIGSYS open).
 *
 * While shipped entries are waited on, the signal mask of ppoll, pselect6
 * and epoll_pwait is not applied.  A set with more than MAX_SHIPPED shipped
 * descriptors is EINVAL.
 */
#include <asm/unistd.h>

#include "internal.h"

#define POLLIN_   0x1
#define POLLPRI_  0x2
#define POLLOUT_  0x4
#define POLLERR_  0x8
#define POLLHUP_  0x10
#define POLLNVAL_ 0x20
#define EPOLLONESHOT_ (1u << 30)
#define FD_SETSIZE_ 1024

#define MAX_SHIPPED 128         /* shipped descriptors in one poll/select/epoll set */
#define MAX_EREG    256         /* shipped descriptors registered in epoll sets */

struct kpollfd { int fd; short events, revents; };
struct kepoll_event { uint32_t events; uint64_t data; } __attribute__((packed));
struct ktimespec { long sec, nsec; };
_Static_assert(sizeof(struct kpollfd) == sizeof(struct lat_pollfd), "pollfd on the wire");

static long now_ms(void)
{
    return (long)(shipc_ent_now_ns() / 1000000u);
}

static long ts_ms(const struct ktimespec *t)
{
    return t ? t->sec * 1000 + (t->nsec + 999999) / 1000000 : -1;
}

/* The shipped half of a set: rp[j] stands for entry at[j] of the program's. */
struct shipped_set {
    struct lat_pollfd rp[MAX_SHIPPED];
    uint32_t at[MAX_SHIPPED];
    int n;
};

static int add_shipped(struct shipped_set *s, int fd, short events, uint32_t at)
{
    int r;

    if (fd < 0 || shipc_fd_route(fd, &r) != SHIPC_SHIP)
        return 0;
    if (s->n == MAX_SHIPPED)
        return -EINVAL;
    s->rp[s->n] = (struct lat_pollfd){ r, events, 0 };
    s->at[s->n++] = at;
    return 1;
}

/* Alternate check(arg) (the local half, no wait: ready count or -errno)
 * with the I/O node's poll of s until something is ready or ms (< 0: no
 * limit) ran out.  The ready count (local + shipped) or -errno. */
static long mixed_wait(struct shipped_set *s, int nlocal, long ms, long (*check)(void *), void *arg)
{
    long end = ms < 0 ? -1 : now_ms() + ms;

    for (;;) {
        long nl = nlocal ? check(arg) : 0;
        if (nl < 0)
            return nl;
        long left = end < 0 ? -1 : end - now_ms();
        if (left < 0 && end >= 0)
            left = 0;
        long w = nl ? 0 : (nlocal || shipc_ent_threads() > 1) ? (left < 0 || left > SHIPC_SLICE_MS ? SHIPC_SLICE_MS : left)
                                                               : left;
        long rs = fwd_poll(s->rp, (uint32_t)s->n, (int)w);
        if (rs < 0 && rs != -EINTR)
            return rs;
        long ready = nl + (rs > 0 ? rs : 0);
        if (ready || left == 0)
            return ready;
    }
}

/* ---- poll, ppoll ---- */

struct poll_arg { struct kpollfd *p; unsigned long n; };

static long poll_local(void *arg)
{
    struct poll_arg *a = arg;
    return ksys3(__NR_poll, a->p, a->n, 0);
}

/* p[0..n): the program's array.  Shipped entries are hidden from the
 * kernel (fd made negative: poll skips it) and asked of the I/O node.
 * Ready entries or -errno; 0 in *sh: nothing shipped, nothing done. */
static long mixed_poll(struct kpollfd *p, unsigned long n, long ms, int *sh)
{
    struct shipped_set s;
    int nlocal = 0;

    s.n = 0;
    *sh = 0;
    if (!p)
        return 0;               /* the kernel's EFAULT */
    for (unsigned long i = 0; i < n; i++) {
        int k = add_shipped(&s, p[i].fd, p[i].events, (uint32_t)i);
        if (k < 0) {
            *sh = 1;
            return k;
        }
        nlocal += !k && p[i].fd >= 0;
    }
    if (!s.n)
        return 0;
    *sh = 1;
    for (int j = 0; j < s.n; j++)
        p[s.at[j]].fd = -p[s.at[j]].fd - 1;
    struct poll_arg a = { p, n };
    long ready = mixed_wait(&s, nlocal, ms, poll_local, &a);
    for (int j = 0; j < s.n; j++) {
        p[s.at[j]].fd = -p[s.at[j]].fd - 1;
        p[s.at[j]].revents = ready >= 0 ? s.rp[j].revents : 0;
    }
    return ready;
}

long shipc_sys_poll(struct shipc_call *c)
{
    int sh;
    long r = mixed_poll((struct kpollfd *)c->a[0], (unsigned long)c->a[1], (int)c->a[2], &sh);
    return sh ? shipped(c, r) : local(c);
}

long shipc_sys_ppoll(struct shipc_call *c)
{
    int sh;
    long r = mixed_poll((struct kpollfd *)c->a[0], (unsigned long)c->a[1], ts_ms((const struct ktimespec *)c->a[2]),
                        &sh);
    return sh ? shipped(c, r) : local(c);
}

/* ---- select, pselect6: the local half is select on the sets less the shipped bits ---- */

#define SET_WORDS (FD_SETSIZE_ / 64)
struct select_arg {
    int n;
    uint64_t *set[3];           /* the program's sets (NULL: none) */
    uint64_t local[3][SET_WORDS];   /* their local bits */
    uint64_t got[3][SET_WORDS];     /* what the local select said */
};

static long select_local(void *arg)
{
    struct select_arg *a = arg;
    struct { long sec, usec; } zero = { 0, 0 };

    memcpy(a->got, a->local, sizeof a->got);
    return ksys5(__NR_select, a->n, a->set[0] ? a->got[0] : NULL, a->set[1] ? a->got[1] : NULL,
                 a->set[2] ? a->got[2] : NULL, &zero);
}

static int bit(const uint64_t *set, int fd)
{
    return set && (set[fd / 64] >> (fd % 64) & 1);
}

/* select when a set holds a shipped descriptor (0 in *sh: none does). */
static long mixed_select(struct shipc_call *c, long ms, int *sh)
{
    static const short ev[3] = { POLLIN_, POLLOUT_, POLLPRI_ };
    struct shipped_set s;
    struct select_arg a = { .n = (int)c->a[0], .set = { (uint64_t *)c->a[1], (uint64_t *)c->a[2], (uint64_t *)c->a[3] } };
    int nlocal = 0;

    s.n = 0;
    *sh = 0;
    if (a.n < 0 || a.n > FD_SETSIZE_)
        return 0;               /* the kernel's EINVAL */
    for (int fd = 0; fd < a.n; fd++) {
        short e = 0;
        for (int k = 0; k < 3; k++)
            e |= bit(a.set[k], fd) ? ev[k] : 0;
        if (!e)
            continue;
        int k = add_shipped(&s, fd, e, (uint32_t)fd);
        if (k < 0) {
            *sh = 1;
            return k;
        }
        if (k)
            continue;
        nlocal++;
        for (int j = 0; j < 3; j++)
            if (bit(a.set[j], fd))
                a.local[j][fd / 64] |= 1ull << (fd % 64);
    }
    if (!s.n)
        return 0;
    *sh = 1;
    long ready = mixed_wait(&s, nlocal, ms, select_local, &a);
    if (ready < 0)
        return ready;
    for (int j = 0; j < s.n; j++)
        if (s.rp[j].revents & POLLNVAL_)
            return -EBADF;
    long bits = 0;
    for (int k = 0; k < 3; k++)
        if (a.set[k]) {
            memcpy(a.set[k], a.got[k], (size_t)(a.n + 63) / 64 * 8);
            for (int fd = 0; fd < a.n; fd++)
                bits += bit(a.got[k], fd);
        }
    for (int j = 0; j < s.n; j++) {
        short re = s.rp[j].revents;
        int fd = (int)s.at[j];
        short got[3] = { re & (POLLIN_ | POLLHUP_ | POLLERR_), re & (POLLOUT_ | POLLERR_), re & POLLPRI_ };
        for (int k = 0; k < 3; k++)
            if (a.set[k] && (s.rp[j].events & ev[k]) && got[k]) {
                a.set[k][fd / 64] |= 1ull << (fd % 64);
                bits++;
            }
    }
    return bits;
}

long shipc_sys_select(struct shipc_call *c)
{
    const struct { long sec, usec; } *tv = (const void *)c->a[4];
    int sh;
    long r = mixed_select(c, tv ? tv->sec * 1000 + (tv->usec + 999) / 1000 : -1, &sh);
    return sh ? shipped(c, r) : local(c);
}

long shipc_sys_pselect6(struct shipc_call *c)
{
    int sh;
    long r = mixed_select(c, ts_ms((const struct ktimespec *)c->a[4]), &sh);
    return sh ? shipped(c, r) : local(c);
}

/* ---- epoll: shipped descriptors are registered here, not in the kernel ---- */

static struct ereg { int epfd, fd; uint32_t events; uint64_t data; } ereg[MAX_EREG];
static struct shipc_lock ereg_lock;     /* never held while calling the I/O node */
static int nereg;               /* entries in use: 0 = every epoll call is the kernel's */

static void ereg_drop(struct ereg *e)
{
    *e = (struct ereg){ 0, 0, 0, 0 };   /* epfd == fd (both 0) marks a free entry */
    __atomic_sub_fetch(&nereg, 1, __ATOMIC_RELEASE);
}

/* Numbers [first, last] were closed or replaced: the kernel would drop
 * their registrations, and every registration in an epoll set numbered so
 * (fdtab.c calls it). */
void shipc_epoll_closed(unsigned first, unsigned last)
{
    if (!__atomic_load_n(&nereg, __ATOMIC_ACQUIRE))
        return;
    shipc_lock_take(&ereg_lock);
    for (int i = 0; i < MAX_EREG; i++) {
        struct ereg *e = &ereg[i];
        if (e->epfd != e->fd && (((unsigned)e->fd >= first && (unsigned)e->fd <= last) ||
                                 ((unsigned)e->epfd >= first && (unsigned)e->epfd <= last)))
            ereg_drop(e);
    }
    shipc_lock_drop(&ereg_lock);
}

/* Linux refuses regular files and directories in an epoll set (they are always ready). */
static long pollable(int fd)
{
    long fl;
    uint32_t mode;
    long r = shipc_fd_kind(fd, &fl, &mode);
    if (r < 0)
        return r;
    return (mode & 0170000) == 0100000 || (mode & 0170000) == 0040000 ? -EPERM : 0;
}

static long ereg_ctl(int epfd, int op, int fd, const struct kepoll_event *ev)
{
    long ret = -ENOENT;
    int slot = -1, freeslot = -1;

    shipc_lock_take(&ereg_lock);
    for (int i = 0; i < MAX_EREG; i++) {
        if (ereg[i].epfd == epfd && ereg[i].fd == fd && ereg[i].epfd != ereg[i].fd)
            slot = i;
        else if (freeslot < 0 && ereg[i].epfd == ereg[i].fd)
            freeslot = i;       /* epfd == fd (both 0) marks a free entry */
    }
    if (op == 1) {              /* EPOLL_CTL_ADD */
        ret = slot >= 0 ? -EEXIST : freeslot < 0 ? -ENOSPC : 0;
        if (!ret) {
            ereg[freeslot] = (struct ereg){ epfd, fd, ev->events, ev->data };
            __atomic_add_fetch(&nereg, 1, __ATOMIC_RELEASE);
        }
    } else if (op == 3 && slot >= 0) {      /* MOD */
        ereg[slot].events = ev->events;
        ereg[slot].data = ev->data;
        ret = 0;
    } else if (op == 2 && slot >= 0) {      /* DEL */
        ereg_drop(&ereg[slot]);
        ret = 0;
    } else if (op != 1 && op != 2 && op != 3) {
        ret = -EINVAL;
    }
    shipc_lock_drop(&ereg_lock);
    return ret;
}

long shipc_sys_epoll_ctl(struct shipc_call *c)
{
    int epfd = (int)c->a[0], op = (int)c->a[1], fd = (int)c->a[2], r;
    const struct kepoll_event *ev = (const void *)c->a[3];

    if (shipc_fd_route(fd, &r) != SHIPC_SHIP)
        return local(c);
    if (shipc_fd_route(epfd, &r) != SHIPC_LOCAL || ksys2(__NR_fcntl, epfd, 1 /* F_GETFD */) < 0)
        return shipped(c, -EBADF);
    if ((op == 1 || op == 3) && !ev)
        return shipped(c, -EFAULT);
    long ret = op == 1 ? pollable(fd) : 0;
    return shipped(c, ret < 0 ? ret : ereg_ctl(epfd, op, fd, ev));
}

/* The local half of an epoll set: its kernel events, no wait. */
struct epoll_arg { int epfd, max; struct kepoll_event *out; long nl; };

static long epoll_local(void *arg)
{
    struct epoll_arg *a = arg;
    return a->nl = ksys4(__NR_epoll_wait, a->epfd, a->out, a->max, 0);
}

/* One wait of mixed_epoll: the events written, or -errno. */
static long epoll_round(struct shipped_set *s, struct epoll_arg *a, long ms)
{
    long ready = mixed_wait(s, 1, ms, epoll_local, a);
    if (ready < 0)
        return ready;
    long nl = a->nl;
    shipc_lock_take(&ereg_lock);
    for (int j = 0; j < s->n && nl < a->max; j++) {
        struct ereg *e = &ereg[s->at[j]];
        int remote;
        if (!s->rp[j].revents || e->epfd != a->epfd || shipc_fd_route(e->fd, &remote) != SHIPC_SHIP ||
            remote != s->rp[j].fd)
            continue;           /* changed meanwhile */
        if (s->rp[j].revents & POLLNVAL_) {
            ereg_drop(e);       /* closed: the kernel would drop it */
            continue;
        }
        a->out[nl++] = (struct kepoll_event){ (uint32_t)(uint16_t)s->rp[j].revents, e->data };
        if (e->events & EPOLLONESHOT_)
            e->events = 0;
    }
    shipc_lock_drop(&ereg_lock);
    return nl;
}

/* Local events first (kernel, no wait), then shipped ones by poll.  0 in
 * *sh: no shipped descriptor registered in the set, nothing done. */
static long mixed_epoll(struct shipc_call *c, long ms, int *sh)
{
    struct epoll_arg a = { (int)c->a[0], (int)c->a[2], (struct kepoll_event *)c->a[1], 0 };
    struct shipped_set s;

    s.n = 0;
    *sh = 0;
    if (!__atomic_load_n(&nereg, __ATOMIC_ACQUIRE))
        return 0;
    shipc_lock_take(&ereg_lock);        /* routes are lock-free: no other lock is taken */
    for (int i = 0; i < MAX_EREG && s.n < MAX_SHIPPED; i++)
        if (ereg[i].epfd == a.epfd && ereg[i].epfd != ereg[i].fd && ereg[i].events)
            add_shipped(&s, ereg[i].fd, (short)(ereg[i].events & 0xffff), (uint32_t)i);
    shipc_lock_drop(&ereg_lock);
    *sh = s.n > 0;
    if (!s.n)
        return 0;
    if (a.max <= 0)
        return -EINVAL;
    long end = ms < 0 ? -1 : now_ms() + ms;
    for (;;) {
        long left = end < 0 ? -1 : end - now_ms();
        long nl = epoll_round(&s, &a, left < 0 && end >= 0 ? 0 : left);
        if (nl || (end >= 0 && now_ms() >= end))
            return nl;          /* else only dropped or changed entries were ready */
    }
}

long shipc_sys_epoll_wait(struct shipc_call *c)
{
    int sh;
    long r = mixed_epoll(c, (int)c->a[3], &sh);
    return sh ? shipped(c, r) : local(c);
}

/* epoll_pwait and epoll_pwait2 (a timespec) */
long shipc_sys_epoll_pwait(struct shipc_call *c)
{
    int sh;
    long ms = c->nr == __NR_epoll_pwait2 ? ts_ms((const struct ktimespec *)c->a[3]) : (int)c->a[3];
    long r = mixed_epoll(c, ms, &sh);
    return sh ? shipped(c, r) : local(c);
}
