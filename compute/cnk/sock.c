/*
 * sock.c - sockets: which stay on the compute node and which are shipped to
 * the I/O node (README "Sockets"), and the calls on shipped ones.
 *
 * The rule is lattice/sock_rule.h's, shared with the Linux-mode client:
 * every socket is created local; the first destination an AF_INET/AF_INET6
 * socket connects or sends to decides it -- a compute node's address keeps
 * it local for good, any other (loopback included) ships it: a socket of
 * the same domain, type and protocol is made on the I/O node, the options
 * that differ from the defaults and a bound address are replayed there, and
 * the local socket is replaced by a placeholder (fd.c).
 *
 * Blocking.  A shipped call that may block carries a wait: until done when
 * the program has a single thread, else slices of SLICE_MS after which ciod
 * answers LAT_ERR_WAIT and the call is asked again with the connection
 * released in between, so the other threads' calls go through.  poll,
 * select and epoll over shipped and local descriptors alternate a local
 * check with a shipped wait of at most SLICE_MS.
 */
#include <asm/unistd.h>
#include <linux/errno.h>
#include <linux/fcntl.h>
#include <linux/uio.h>

#include <lattice/fwd_posix.h>
#include <lattice/wire.h>

#include "cnk.h"

#define LAT_SOCK_SYSCALL(nr, a, b, c, d, e) ksys6((nr), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), 0)
#include <lattice/sock_rule.h>
#include <lattice/iov_slice.h>

#include "fwd_posix_stubs.h"      /* generated: the vectored stubs fwd_*_v */

#define MSG_PEEK_     0x2
#define MSG_WAITALL_  0x100
#define MSG_NOSIGNAL_ 0x4000
#define POLLIN_   0x1
#define POLLOUT_  0x4
#define POLLERR_  0x8
#define POLLHUP_  0x10
#define POLLNVAL_ 0x20
#define EPOLLONESHOT_ (1u << 30)
#define SIGPIPE_  13

#define SLICE_MS    10          /* longest a shipped wait holds the connection with other threads */
#define MAX_SHIPPED 128         /* shipped descriptors in one poll/select/epoll set */
#define MAX_EREG    256         /* shipped descriptors registered in epoll sets */

struct kmmsghdr { struct kmsghdr hdr; unsigned len, pad; };
struct kpollfd { int fd; short events, revents; };
struct kepoll_event { uint32_t events; uint64_t data; } __attribute__((packed));
struct ktimespec { long sec, nsec; };
_Static_assert(sizeof(struct kpollfd) == sizeof(struct lat_pollfd), "pollfd on the wire");

static long local(struct cnk_call *c)
{
    c->cls = CNK_LOCAL;
    return ksys6(c->nr, c->a[0], c->a[1], c->a[2], c->a[3], c->a[4], c->a[5]);
}

static long shipped(struct cnk_call *c, long r)
{
    c->cls = CNK_SHIPPED;
    return r;
}

static long now_ms(void)
{
    struct ktimespec t;
    ksys2(__NR_clock_gettime, 1 /* CLOCK_MONOTONIC */, &t);
    return t.sec * 1000 + t.nsec / 1000000;
}

/* ---- deciding a local socket (lattice/sock_rule.h) ---- */

static struct lat_sock_rule rule;

/* Make local socket fd a shipped one (module comment).  0 or -errno. */
static long ship_socket(int fd)
{
    struct lat_sock_carry sc;

    lat_sock_carry(fd, &sc);
    long r = fwd_socket(sc.domain, sc.type, sc.protocol);
    if (r < 0)
        return r;
    for (int i = 0; i < sc.nopt; i++)
        fwd_setsockopt((int)r, sc.opt[i][0], sc.opt[i][1], &sc.opt[i][2], sizeof sc.opt[i][2]);
    int old;
    long f = shipc_fd_install_at((int)r, sc.cloexec, fd, &old);  /* closes ours */
    if (f < 0) {
        fwd_close((int)r);
        return f;
    }
    if (sc.blen)                /* a bound port moves with the socket */
        return fwd_bind((int)r, sc.bound, sc.blen) < 0 ? -EADDRINUSE : 0;
    return 0;
}

/* Route for a call with a destination: 1 shipped (*remote), 0 local, -errno. */
static int decide(int fd, const void *dest, long dlen, int *remote)
{
    int rt = shipc_fd_route(fd, remote);

    if (rt != SHIPC_LOCAL || !lat_sock_ships(&rule, fd, dest, dlen))
        return rt;
    long r = ship_socket(fd);
    if (r < 0)
        return (int)r;
    return shipc_fd_route(fd, remote);
}

/* ---- shipped calls that may block ---- */

static void nap(void)
{
    struct ktimespec t = { 0, 200000 };     /* lets a woken thread take the connection */
    ksys2(__NR_nanosleep, &t, NULL);
}

/* How long ciod may wait on the program's behalf: a slice if other
 * threads may need the connection, else until done. */
static int wait_ms(void)
{
    return thread_alive() > 1 ? SLICE_MS : -1;
}


static long epipe(long r, int flags)
{
    if (r == -EPIPE && !(flags & MSG_NOSIGNAL_))
        ksys3(__NR_tgkill, ksys0(__NR_getpid), ksys0(__NR_gettid), SIGPIPE_);
    return r;
}

/* A socket rendezvous (docs/protocol.md 6.1): the request names the
 * program's buffers and ciod sends from them or receives into them, on its
 * mapping of big memory when that is shared (one copy).  Its own frame
 * keeps the segment table off send_ship's.  -EOPNOTSUPP or -EFAULT with
 * nothing done: the caller moves the bytes in messages instead. */
__attribute__((noinline)) static long sock_rdv(int r, int send, const void *name, long nlen, const struct iovec *iov,
                                               long cnt, int flags, struct lat_sockname *sn)
{
    struct lat_rdv_seg segs[UIO_MAXIOV];
    long n;

    for (long i = 0; i < cnt; i++)
        segs[i] = (struct lat_rdv_seg){ (uint64_t)(uintptr_t)iov[i].iov_base, iov[i].iov_len };
    while ((n = send ? fwd_send_rdv(r, flags, name, name ? (uint32_t)nlen : 0, segs, (uint32_t)cnt, wait_ms())
                     : fwd_recv_rdv(r, flags, sn, segs, (uint32_t)cnt, wait_ms())) == -LAT_ERR_WAIT)
        nap();                  /* asked again while ciod says LAT_ERR_WAIT */
    return n;
}

/* ciod said: not this way (not granted; a bad buffer, which the messages
 * report exactly; an older ciod without the socket rendezvous). */
static int eager_instead(long n)
{
    return n == -EOPNOTSUPP || n == -EFAULT || n == -ENOSYS;
}

static int goes_rdv(size_t total, long cnt)
{
    uint64_t min = shipc_rdv_min();
    return min && total >= min && cnt > 0;
}

/* The bytes in messages of at most LAT_MAX_IO (streams continue with the
 * rest); its own frame, as sock_rdv's. */
__attribute__((noinline)) static long send_eager(int r, const void *name, long nlen, const struct iovec *iov,
                                                 long cnt, size_t total, int flags)
{
    struct iovec part[UIO_MAXIOV];
    size_t done = 0;

    do {
        size_t chunk;
        int n = lat_iov_slice(iov, (size_t)cnt, done, total - done < LAT_MAX_IO ? total - done : LAT_MAX_IO, part,
                              UIO_MAXIOV, &chunk);
        long s;
        while ((s = fwd_sendmsg_v(r, flags & ~MSG_NOSIGNAL_, name, name ? (uint32_t)nlen : 0, part, n,
                                  wait_ms())) == -LAT_ERR_WAIT)
            nap();              /* asked again while ciod says LAT_ERR_WAIT */
        if (s < 0)
            return done ? (long)done : epipe(s, flags);
        done += (size_t)s;
        if ((size_t)s < chunk)
            break;
    } while (done < total);
    return (long)done;
}

/* sendmsg on a shipped socket: a rendezvous from rdv_min bytes, else in
 * messages. */
static long send_ship(int r, const void *name, long nlen, const struct iovec *iov, long cnt, int flags)
{
    size_t total = 0;

    if (cnt < 0 || cnt > UIO_MAXIOV || nlen < 0 || nlen > LAT_MAX_SOCKADDR)
        return -EINVAL;
    for (long i = 0; i < cnt; i++)
        total += iov[i].iov_len;
    if (goes_rdv(total, cnt)) {
        long s = sock_rdv(r, 1, name, nlen, iov, cnt, flags & ~MSG_NOSIGNAL_, NULL);
        if (!eager_instead(s))
            return s < 0 ? epipe(s, flags) : s;
    }
    return send_eager(r, name, nlen, iov, cnt, total, flags);
}

/* Received in messages of at most LAT_MAX_IO: a stream's MSG_WAITALL asks
 * again for the rest after a full one.  Sender into *sn. */
__attribute__((noinline)) static long recv_eager(int r, const struct iovec *iov, long cnt, size_t total, int flags,
                                                 struct lat_sockname *sn)
{
    struct iovec part[UIO_MAXIOV];
    struct lat_sockname more;
    size_t done = 0;

    for (;;) {
        size_t want;
        int np = lat_iov_slice(iov, (size_t)cnt, done, total - done < LAT_MAX_IO ? total - done : LAT_MAX_IO, part,
                               UIO_MAXIOV, &want);
        long m;
        while ((m = fwd_recvmsg_v(r, flags, done ? &more : sn, part, np, want, wait_ms())) == -LAT_ERR_WAIT)
            nap();              /* asked again while ciod says LAT_ERR_WAIT */
        if (m < 0)
            return done ? (long)done : m;
        if ((size_t)m == want && done + want < total && (flags & MSG_WAITALL_) && !(flags & MSG_PEEK_)) {
            done += want;       /* only the message's size stopped it */
            continue;
        }
        return (long)(done + (size_t)m);
    }
}

/* recvmsg on a shipped socket into the vectors (a rendezvous from rdv_min
 * bytes, else in messages); sender into name. */
static long recv_ship(int r, void *name, int *nlen, const struct iovec *iov, long cnt, int flags,
                      unsigned *mflags)
{
    struct lat_sockname sn;
    size_t total = 0;
    long n = -EOPNOTSUPP;

    if (cnt < 0 || cnt > UIO_MAXIOV)
        return -EINVAL;
    for (long i = 0; i < cnt; i++)
        total += iov[i].iov_len;
    if (goes_rdv(total, cnt))
        n = sock_rdv(r, 0, NULL, 0, iov, cnt, flags, &sn);
    if (eager_instead(n))
        n = recv_eager(r, iov, cnt, total, flags, &sn);
    if (n < 0)
        return n;
    if (name && nlen) {
        int room = *nlen < 0 ? 0 : *nlen;
        memcpy(name, sn.addr, sn.len < (uint32_t)room ? sn.len : (uint32_t)room);
        *nlen = (int)sn.len;
    }
    if (mflags)
        *mflags = sn.flags;
    return n;
}

/* ---- the socket calls ---- */

long sock_socket(struct cnk_call *c)
{
    long fd = local(c);
    lat_sock_pin(&rule, (int)fd, 0);    /* a new socket is undecided */
    return fd;
}

long sock_connect(struct cnk_call *c)
{
    int r, rt = decide((int)c->a[0], (void *)c->a[1], c->a[2], &r);

    if (rt < 0)
        return rt;
    if (rt == SHIPC_LOCAL)
        return local(c);
    if (c->a[2] < 2 || c->a[2] > LAT_MAX_SOCKADDR)
        return shipped(c, -EINVAL);
    for (int resume = 0;; resume = 1) {     /* the second time: the connect in progress */
        long rc = fwd_connect(r, wait_ms(), resume, (const void *)c->a[1], (uint32_t)c->a[2]);
        if (rc != -LAT_ERR_WAIT)
            return shipped(c, rc);
        nap();
    }
}

/* Calls on a descriptor that is either shipped or local, never decided by them. */
static int route(struct cnk_call *c, int *r, long *ret)
{
    int rt = shipc_fd_route((int)c->a[0], r);

    if (rt == SHIPC_SHIP)
        return 1;
    *ret = rt < 0 ? rt : local(c);
    return 0;
}

long sock_bind(struct cnk_call *c)
{
    int r;
    long ret;

    if (!route(c, &r, &ret))
        return ret;
    if (c->a[2] < 2 || c->a[2] > LAT_MAX_SOCKADDR)
        return shipped(c, -EINVAL);
    return shipped(c, fwd_bind(r, (const void *)c->a[1], (uint32_t)c->a[2]));
}

/* Servers stay on the node: a listening socket is local for good. */
long sock_listen(struct cnk_call *c)
{
    int r;
    long ret;

    if (!route(c, &r, &ret)) {
        if (ret == 0)
            lat_sock_pin(&rule, (int)c->a[0], 1);
        return ret;
    }
    return shipped(c, -EOPNOTSUPP);
}

long sock_accept(struct cnk_call *c)
{
    int r;
    long ret;

    if (!route(c, &r, &ret))
        return ret;
    return shipped(c, -EINVAL);     /* a shipped socket never listens */
}

long sock_sendto(struct cnk_call *c)
{
    void *dest = (void *)c->a[4];
    int r, rt = decide((int)c->a[0], dest, c->a[5], &r);

    if (rt < 0)
        return rt;
    if (rt == SHIPC_LOCAL)
        return local(c);
    struct iovec v = { (void *)c->a[1], (size_t)c->a[2] };
    return shipped(c, send_ship(r, dest, dest ? c->a[5] : 0, &v, 1, (int)c->a[3]));
}

long sock_recvfrom(struct cnk_call *c)
{
    int r;
    long ret;

    if (!route(c, &r, &ret))
        return ret;
    struct iovec v = { (void *)c->a[1], (size_t)c->a[2] };
    return shipped(c, recv_ship(r, (void *)c->a[4], (int *)c->a[5], &v, 1, (int)c->a[3], NULL));
}

static long sendmsg1(struct cnk_call *c, int fd, struct kmsghdr *m, int flags, int *shipped_out)
{
    int r, rt = decide(fd, m->name, m->namelen, &r);

    *shipped_out = rt == SHIPC_SHIP;
    if (rt < 0)
        return rt;
    if (rt == SHIPC_LOCAL)
        return ksys3(__NR_sendmsg, fd, m, flags);
    if (m->controllen)
        return -EOPNOTSUPP;     /* no descriptors or credentials across the I/O node */
    (void)c;
    return send_ship(r, m->name, m->namelen, m->iov, (long)m->iovlen, flags);
}

long sock_sendmsg(struct cnk_call *c)
{
    int sh;
    long ret = sendmsg1(c, (int)c->a[0], (struct kmsghdr *)c->a[1], (int)c->a[2], &sh);
    c->cls = sh ? CNK_SHIPPED : CNK_LOCAL;
    return ret;
}

long sock_recvmsg(struct cnk_call *c)
{
    struct kmsghdr *m = (struct kmsghdr *)c->a[1];
    int r;
    long ret;

    if (!route(c, &r, &ret))
        return ret;
    m->controllen = 0;
    return shipped(c, recv_ship(r, m->name, &m->namelen, m->iov, (long)m->iovlen, (int)c->a[2], &m->flags));
}

/* glibc's resolver sends its A and AAAA queries with one sendmmsg. */
long sock_sendmmsg(struct cnk_call *c)
{
    struct kmmsghdr *v = (struct kmmsghdr *)c->a[1];
    unsigned n = (unsigned)c->a[2];
    int sh = 0, fd = (int)c->a[0], r;

    if (shipc_fd_route(fd, &r) == SHIPC_LOCAL && (n == 0 || decide(fd, v[0].hdr.name, v[0].hdr.namelen, &r) == SHIPC_LOCAL))
        return local(c);
    unsigned i;
    for (i = 0; i < n && i < UIO_MAXIOV; i++) {
        long s = sendmsg1(c, fd, &v[i].hdr, (int)c->a[3], &sh);
        if (s < 0)
            return shipped(c, i ? (long)i : s);
        v[i].len = (unsigned)s;
    }
    return shipped(c, (long)i);
}

long sock_recvmmsg(struct cnk_call *c)
{
    int r;
    long ret;

    if (!route(c, &r, &ret))
        return ret;
    struct kmmsghdr *v = (struct kmmsghdr *)c->a[1];
    if (c->a[2] < 1)
        return shipped(c, -EINVAL);
    /* one message: the first waits as recvmsg would, more would need a timeout */
    long n = recv_ship(r, v[0].hdr.name, &v[0].hdr.namelen, v[0].hdr.iov, (long)v[0].hdr.iovlen,
                       (int)c->a[3], &v[0].hdr.flags);
    if (n < 0)
        return shipped(c, n);
    v[0].len = (unsigned)n;
    return shipped(c, 1);
}

long sock_shutdown(struct cnk_call *c)
{
    int r;
    long ret;

    if (!route(c, &r, &ret))
        return ret;
    return shipped(c, fwd_shutdown(r, (int)c->a[1]));
}

long sock_setsockopt(struct cnk_call *c)
{
    int r;
    long ret;

    if (!route(c, &r, &ret))
        return ret;
    if (c->a[4] < 0 || c->a[4] > LAT_MAX_SOCKOPT)
        return shipped(c, -EINVAL);
    return shipped(c, fwd_setsockopt(r, (int)c->a[1], (int)c->a[2], (const void *)c->a[3], (uint32_t)c->a[4]));
}

long sock_getsockopt(struct cnk_call *c)
{
    int r, *len = (int *)c->a[4];
    long ret;

    if (!route(c, &r, &ret))
        return ret;
    if (!len || *len < 0)
        return shipped(c, -EINVAL);
    int want = *len > (int)LAT_MAX_SOCKOPT ? (int)LAT_MAX_SOCKOPT : *len;
    ret = fwd_getsockopt(r, (int)c->a[1], (int)c->a[2], (void *)c->a[3], (uint32_t)want);
    if (ret >= 0) {
        *len = (int)ret;
        ret = 0;
    }
    return shipped(c, ret);
}

static long name_call(struct cnk_call *c, int64_t (*fn)(int, void *))
{
    int r, *len = (int *)c->a[2];
    uint8_t sa[LAT_MAX_SOCKADDR];
    long ret;

    if (!route(c, &r, &ret))
        return ret;
    if (!len || *len < 0)
        return shipped(c, -EINVAL);
    ret = fn(r, sa);
    if (ret >= 0) {
        memcpy((void *)c->a[1], sa, ret < *len ? (size_t)ret : (size_t)*len);
        *len = (int)ret;
        ret = 0;
    }
    return shipped(c, ret);
}

long sock_getsockname(struct cnk_call *c) { return name_call(c, fwd_getsockname); }
long sock_getpeername(struct cnk_call *c) { return name_call(c, fwd_getpeername); }

/* ---- poll over shipped and local descriptors ---- */

/* p[0..n): the program's array.  Shipped entries are hidden from the
 * kernel (fd made negative: poll skips it) and asked of the I/O node.
 * ms < 0: no timeout.  Returns ready entries, or -errno; 1 in *any_shipped. */
static long mixed_poll(struct kpollfd *p, unsigned long n, long ms, int *any_shipped)
{
    struct lat_pollfd rp[MAX_SHIPPED];
    uint32_t at[MAX_SHIPPED];
    int ns = 0, nlocal = 0;

    *any_shipped = 0;
    for (unsigned long i = 0; i < n; i++) {
        int r;
        if (p[i].fd < 0)
            continue;
        int rt = shipc_fd_route(p[i].fd, &r);
        if (rt != SHIPC_SHIP) {
            nlocal++;
            continue;
        }
        if (ns == MAX_SHIPPED)
            return -EINVAL;
        rp[ns] = (struct lat_pollfd){ r, p[i].events, 0 };
        at[ns++] = (uint32_t)i;
    }
    if (!ns)
        return 0;
    *any_shipped = 1;
    long end = ms < 0 ? -1 : now_ms() + ms;
    for (int j = 0; j < ns; j++)
        p[at[j]].fd = -p[at[j]].fd - 1;
    long ready;
    for (;;) {
        long nl = nlocal ? ksys3(__NR_poll, p, n, 0) : 0;
        if (nl < 0) {
            ready = nl;
            break;
        }
        long left = end < 0 ? -1 : end - now_ms();
        if (left < 0 && end >= 0)
            left = 0;
        long w = nl ? 0 : (nlocal || thread_alive() > 1) ? (left < 0 || left > SLICE_MS ? SLICE_MS : left) : left;
        long rs = fwd_poll(rp, (uint32_t)ns, (int)w);
        if (rs < 0 && rs != -EINTR) {
            ready = rs;
            break;
        }
        ready = nl + (rs > 0 ? rs : 0);
        if (ready || left == 0)
            break;
        if (rs > 0 || rs == -EINTR)
            continue;
    }
    for (int j = 0; j < ns; j++) {
        p[at[j]].fd = -p[at[j]].fd - 1;
        p[at[j]].revents = ready >= 0 ? rp[j].revents : 0;
    }
    return ready;
}

static long ts_ms(const struct ktimespec *t)
{
    return t ? t->sec * 1000 + (t->nsec + 999999) / 1000000 : -1;
}

long sock_poll(struct cnk_call *c)
{
    int sh;
    long r = mixed_poll((struct kpollfd *)c->a[0], (unsigned long)c->a[1], (int)c->a[2], &sh);
    return sh ? shipped(c, r) : local(c);
}

long sock_ppoll(struct cnk_call *c)
{
    int sh;
    long r = mixed_poll((struct kpollfd *)c->a[0], (unsigned long)c->a[1],
                        ts_ms((const struct ktimespec *)c->a[2]), &sh);
    return sh ? shipped(c, r) : sys_ppoll(c);
}

/* select as poll, when a set holds a shipped descriptor. */
static long mixed_select(struct cnk_call *c, long ms, int *sh)
{
    int n = (int)c->a[0];
    uint64_t *set[3] = { (uint64_t *)c->a[1], (uint64_t *)c->a[2], (uint64_t *)c->a[3] };
    static const short ev[3] = { POLLIN_, POLLOUT_, 0x2 /* POLLPRI */ };
    struct kpollfd p[1024];
    unsigned long np = 0;
    int r;

    *sh = 0;
    if (n < 0 || n > 1024)
        return 0;
    for (int fd = 0; fd < n; fd++) {
        short e = 0;
        for (int s = 0; s < 3; s++)
            if (set[s] && (set[s][fd / 64] >> (fd % 64) & 1))
                e |= ev[s];
        if (!e)
            continue;
        *sh |= shipc_fd_route(fd, &r) == SHIPC_SHIP;
        p[np++] = (struct kpollfd){ fd, e, 0 };
    }
    if (!*sh)
        return 0;
    long ready = mixed_poll(p, np, ms, sh);
    if (ready < 0)
        return ready;
    for (int s = 0; s < 3; s++)
        if (set[s])
            memset(set[s], 0, (size_t)(n + 63) / 64 * 8);
    long bits = 0;
    for (unsigned long i = 0; i < np; i++) {
        short re = p[i].revents;
        int fd = p[i].fd;
        if (re & POLLNVAL_)
            return -EBADF;
        short got[3] = { re & (POLLIN_ | POLLHUP_ | POLLERR_), re & (POLLOUT_ | POLLERR_), re & 0x2 };
        for (int s = 0; s < 3; s++)
            if (set[s] && (p[i].events & ev[s]) && got[s]) {
                set[s][fd / 64] |= 1ull << (fd % 64);
                bits++;
            }
    }
    return bits;
}

long sock_select(struct cnk_call *c)
{
    const struct { long sec, usec; } *tv = (const void *)c->a[4];
    int sh;
    long r = mixed_select(c, tv ? tv->sec * 1000 + (tv->usec + 999) / 1000 : -1, &sh);
    return sh ? shipped(c, r) : local(c);
}

long sock_pselect6(struct cnk_call *c)
{
    int sh;
    long r = mixed_select(c, ts_ms((const struct ktimespec *)c->a[4]), &sh);
    return sh ? shipped(c, r) : sys_pselect6(c);
}

/* ---- epoll: shipped descriptors are registered here, not in the kernel ---- */

static struct ereg { int epfd, fd; uint32_t events; uint64_t data; } ereg[MAX_EREG];
static struct klock ereg_lock;
static int nereg;               /* entries in use: 0 = nothing to drop when descriptors close */

static void ereg_drop(struct ereg *e)
{
    *e = (struct ereg){ 0, 0, 0, 0 };   /* epfd == fd (both 0) marks a free entry */
    __atomic_sub_fetch(&nereg, 1, __ATOMIC_RELEASE);
}

void sock_epoll_closed(unsigned first, unsigned last)
{
    if (!__atomic_load_n(&nereg, __ATOMIC_ACQUIRE))
        return;
    klock(&ereg_lock);
    for (int i = 0; i < MAX_EREG; i++) {
        struct ereg *e = &ereg[i];
        if (e->epfd != e->fd && (((unsigned)e->fd >= first && (unsigned)e->fd <= last) ||
                                 ((unsigned)e->epfd >= first && (unsigned)e->epfd <= last)))
            ereg_drop(e);
    }
    kunlock(&ereg_lock);
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

long sock_epoll_ctl(struct cnk_call *c)
{
    int epfd = (int)c->a[0], op = (int)c->a[1], fd = (int)c->a[2], r;
    const struct kepoll_event *ev = (const void *)c->a[3];

    if (shipc_fd_route(fd, &r) != SHIPC_SHIP)
        return local(c);
    if (ksys2(__NR_fcntl, epfd, F_GETFD) < 0 || shipc_fd_is_hidden(epfd))
        return shipped(c, -EBADF);
    if ((op == 1 || op == 3) && !ev)
        return shipped(c, -EFAULT);
    long ret = op == 1 ? pollable(fd) : 0;
    if (ret < 0)
        return shipped(c, ret);
    ret = -ENOENT;
    int slot = -1, freeslot = -1;
    klock(&ereg_lock);
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
    kunlock(&ereg_lock);
    return shipped(c, ret);
}

/* Local events first (kernel, no wait), then shipped ones by poll. */
static long mixed_epoll(struct cnk_call *c, long ms, int *sh)
{
    int epfd = (int)c->a[0], max = (int)c->a[2], n = 0;
    struct kepoll_event *out = (struct kepoll_event *)c->a[1];
    struct kpollfd p[MAX_SHIPPED];
    int idx[MAX_SHIPPED];

    klock(&ereg_lock);
    for (int i = 0; i < MAX_EREG && n < MAX_SHIPPED; i++)
        if (ereg[i].epfd == epfd && ereg[i].epfd != ereg[i].fd && ereg[i].events) {
            idx[n] = i;
            p[n++] = (struct kpollfd){ ereg[i].fd, (short)(ereg[i].events & 0xffff), 0 };
        }
    kunlock(&ereg_lock);
    *sh = n > 0;
    if (!n || max <= 0)
        return max <= 0 ? -EINVAL : 0;
    long end = ms < 0 ? -1 : now_ms() + ms;
    for (;;) {
        long nl = ksys4(__NR_epoll_wait, epfd, out, max, 0);
        if (nl < 0)
            return nl;
        long left = end < 0 ? SLICE_MS : end - now_ms();
        int dummy;
        long rs = mixed_poll(p, (unsigned long)n, nl ? 0 : left < 0 ? 0 : left < SLICE_MS ? left : SLICE_MS, &dummy);
        if (rs < 0)
            return rs;
        klock(&ereg_lock);
        for (int j = 0; j < n && nl < max; j++) {
            struct ereg *e = &ereg[idx[j]];
            if (!p[j].revents || e->epfd != epfd || e->fd != p[j].fd)
                continue;
            if (p[j].revents & POLLNVAL_) {
                ereg_drop(e);   /* closed: the kernel would drop it */
                continue;
            }
            out[nl++] = (struct kepoll_event){ (uint32_t)(uint16_t)p[j].revents, e->data };
            if (e->events & EPOLLONESHOT_)
                e->events = 0;
        }
        kunlock(&ereg_lock);
        if (nl || (end >= 0 && now_ms() >= end))
            return nl;
    }
}

long sock_epoll_wait(struct cnk_call *c)
{
    int sh;
    long r = mixed_epoll(c, (int)c->a[3], &sh);
    return sh ? shipped(c, r) : local(c);
}

long sock_epoll_pwait(struct cnk_call *c)
{
    int sh;
    long ms = c->nr == __NR_epoll_pwait2 ? ts_ms((const struct ktimespec *)c->a[3]) : (int)c->a[3];
    long r = mixed_epoll(c, ms, &sh);
    return sh ? shipped(c, r) : sys_epoll_pwait(c);
}
