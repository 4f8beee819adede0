/*
 * sock.c - sockets: which stay on the compute node and which are shipped to
 * the I/O node (compute/cnk/README.md "Sockets"), and the calls on shipped
 * ones, for both kernels.
 *
 * The rule is lattice/sock_rule.h's: every socket is created local; the
 * first destination an AF_INET/AF_INET6 socket connects or sends to decides
 * it -- a compute node's address keeps it local for good (MPI's TCP between
 * ranks), any other (loopback included) ships it: a socket of the same
 * domain, type and protocol is made on the I/O node, the options that
 * differ from the defaults and a bound address are replayed there, and the
 * local socket is replaced by a placeholder (fdtab.c).  Listening and
 * accepted sockets stay local for good.  read/write/close/dup/fcntl of a
 * shipped socket are file.c's (the file messages work on remote sockets).
 *
 * Blocking.  A shipped call that may block carries a wait: until done when
 * the program has a single thread, else slices of SHIPC_SLICE_MS after
 * which ciod answers LAT_ERR_WAIT and the call is asked again with the
 * connection released in between, so the other threads' calls go through.
 */
#include <asm/unistd.h>

#include "internal.h"

#define LAT_SOCK_SYSCALL(nr, a, b, c, d, e) ksys6((nr), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), 0)
#include <lattice/sock_rule.h>
#include <lattice/iov_slice.h>

#include "fwd_posix_stubs.h"      /* generated: the vectored stubs fwd_*_v */

#define MSG_PEEK_     0x2
#define MSG_WAITALL_  0x100
#define MSG_NOSIGNAL_ 0x4000
#define SIGPIPE_      13

struct kmmsghdr { struct kmsghdr hdr; unsigned len, pad; };

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

/* Route for a call with a destination: SHIPC_SHIP (*remote), SHIPC_LOCAL,
 * or -errno (the client's own descriptor; shipping failed).  A fork()ed
 * child has no connection to ship on. */
static int decide(int fd, const void *dest, long dlen, int *remote)
{
    int rt = shipc_fd_route(fd, remote);

    if (rt != SHIPC_LOCAL || shipc_conn.forked || !lat_sock_ships(&rule, fd, dest, (uint32_t)dlen))
        return rt;
    long r = ship_socket(fd);
    if (r < 0)
        return (int)r;
    return shipc_fd_route(fd, remote);
}

/* ---- shipped calls that may block ---- */

static void nap(void)
{
    struct { long sec, nsec; } t = { 0, 200000 };  /* lets a woken thread take the connection */
    ksys2(__NR_nanosleep, &t, NULL);
}

/* The first wait of a call whose bytes may go in part (a send, a
 * MSG_WAITALL receive): ciod returns the part that went when a wait runs
 * out, so a single thread waits until done, as Linux does. */
static int exact_wait(void)
{
    return shipc_ent_threads() > 1 ? SHIPC_SLICE_MS : -1;
}

/* The wait of the next try after ciod said LAT_ERR_WAIT (other threads
 * first take the connection). */
static int next_wait(void)
{
    int w = exact_wait();
    if (w > 0)
        nap();
    return w;
}

static long epipe(long r, int flags)
{
    if (r == -EPIPE && !(flags & MSG_NOSIGNAL_))
        ksys3(__NR_tgkill, ksys0(__NR_getpid), ksys0(__NR_gettid), SIGPIPE_);
    return r;
}

/* The segment table of a rendezvous and the slices of a message: too big
 * for the stack of a signal handler (cnk), so one of each, held from
 * building it to the end of the one request that carries it (this lock,
 * then the connection's). */
static struct shipc_lock buf_lock;
static struct lat_rdv_seg segs[UIO_MAXIOV];
static struct iovec part[UIO_MAXIOV];

/* A socket rendezvous (docs/protocol.md 6.1): the request names the
 * program's buffers and ciod sends from them or receives into them (on its
 * mapping of the memory when that is shared: one copy).  -EOPNOTSUPP or
 * -EFAULT with nothing done: the caller moves the bytes in messages. */
static long sock_rdv(int r, int send, const void *name, long nlen, const struct iovec *iov, long cnt, int flags,
                     struct lat_sockname *sn)
{
    long n;

    for (int w = exact_wait();; w = next_wait()) {     /* again while ciod says LAT_ERR_WAIT */
        shipc_lock_take(&buf_lock);
        for (long i = 0; i < cnt; i++)
            segs[i] = (struct lat_rdv_seg){ (uint64_t)(uintptr_t)iov[i].iov_base, iov[i].iov_len };
        n = send ? fwd_send_rdv(r, flags, name, name ? (uint32_t)nlen : 0, segs, (uint32_t)cnt, w)
                 : fwd_recv_rdv(r, flags, sn, segs, (uint32_t)cnt, w);
        shipc_lock_drop(&buf_lock);
        if (n != -LAT_ERR_WAIT)
            return n;
    }
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

/* One message of the bytes [done, done + at most LAT_MAX_IO): sent, or
 * received (*want: its size; *sn the sender). */
static long one_msg(int r, int send, const void *name, long nlen, const struct iovec *iov, long cnt, size_t total,
                    size_t done, int flags, int w, struct lat_sockname *sn, size_t *want)
{
    shipc_lock_take(&buf_lock);
    int np = lat_iov_slice(iov, (size_t)cnt, done, SHIPC_MIN(total - done, (size_t)LAT_MAX_IO), part, UIO_MAXIOV,
                           want);
    long n = send ? fwd_sendmsg_v(r, flags, name, name ? (uint32_t)nlen : 0, part, np, w)
                  : fwd_recvmsg_v(r, flags, sn, part, np, *want, w);
    shipc_lock_drop(&buf_lock);
    return n;
}

/* The bytes in messages of at most LAT_MAX_IO (streams continue with the rest). */
static long send_eager(int r, const void *name, long nlen, const struct iovec *iov, long cnt, size_t total,
                       int flags)
{
    size_t done = 0;

    do {
        size_t chunk;
        long s;
        for (int w = exact_wait();; w = next_wait())   /* again while ciod says LAT_ERR_WAIT */
            if ((s = one_msg(r, 1, name, nlen, iov, cnt, total, done, flags & ~MSG_NOSIGNAL_, w, NULL, &chunk))
                != -LAT_ERR_WAIT)
                break;
        if (s < 0)
            return done ? (long)done : epipe(s, flags);
        done += (size_t)s;
        if ((size_t)s < chunk)
            break;
    } while (done < total);
    return (long)done;
}

/* The vectors' total, or -EINVAL (too many, too much, none given). */
static long iov_sum(const struct iovec *iov, long cnt, size_t *total)
{
    *total = 0;
    if (cnt < 0 || cnt > UIO_MAXIOV || (cnt && !iov))
        return -EINVAL;
    for (long i = 0; i < cnt; i++) {
        if (iov[i].iov_len > (size_t)INT64_MAX - *total)
            return -EINVAL;
        *total += iov[i].iov_len;
    }
    return 0;
}

/* sendmsg on a shipped socket: a rendezvous from rdv_min bytes, else in messages. */
static long send_ship(int r, const void *name, long nlen, const struct iovec *iov, long cnt, int flags)
{
    size_t total;

    if (nlen < 0 || nlen > LAT_MAX_SOCKADDR || iov_sum(iov, cnt, &total) < 0)
        return -EINVAL;
    if (goes_rdv(total, cnt)) {
        long s = sock_rdv(r, 1, name, nlen, iov, cnt, flags & ~MSG_NOSIGNAL_, NULL);
        if (!eager_instead(s))
            return s < 0 ? epipe(s, flags) : s;
    }
    return send_eager(r, name, nlen, iov, cnt, total, flags);
}

/* Received in messages of at most LAT_MAX_IO: a stream's MSG_WAITALL asks
 * again for the rest after a full one.  Sender into *sn. */
static long recv_eager(int r, const struct iovec *iov, long cnt, size_t total, int flags, struct lat_sockname *sn)
{
    struct lat_sockname more;
    size_t done = 0;

    for (;;) {
        size_t want;
        long m;
        /* a plain receive takes what comes: its first try needs no thread count */
        for (int w = (flags & MSG_WAITALL_) ? exact_wait() : SHIPC_SLICE_MS;; w = next_wait())
            if ((m = one_msg(r, 0, NULL, 0, iov, cnt, total, done, flags, w, done ? &more : sn, &want))
                != -LAT_ERR_WAIT)
                break;
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
 * bytes, else in messages); the sender into name, as the kernel: *nlen is
 * left alone without a name. */
static long recv_ship(int r, void *name, int *nlen, const struct iovec *iov, long cnt, int flags, unsigned *mflags)
{
    struct lat_sockname sn;
    size_t total;
    long n = -EOPNOTSUPP;

    if (iov_sum(iov, cnt, &total) < 0)
        return -EINVAL;
    if (goes_rdv(total, cnt))
        n = sock_rdv(r, 0, NULL, 0, iov, cnt, flags, &sn);
    if (eager_instead(n))
        n = recv_eager(r, iov, cnt, total, flags, &sn);
    if (n < 0)
        return n;
    if (name && nlen) {
        int room = *nlen < 0 ? 0 : *nlen;
        memcpy(name, sn.addr, SHIPC_MIN(sn.len, (uint32_t)room));
        *nlen = (int)sn.len;
    }
    if (mflags)
        *mflags = sn.flags;
    return n;
}

/* ---- the socket calls ---- */

long shipc_sys_socket(struct shipc_call *c)
{
    long fd = local(c);
    lat_sock_pin(&rule, (int)fd, 0);    /* a new socket is undecided */
    return fd;
}

long shipc_sys_connect(struct shipc_call *c)
{
    int r, rt = decide((int)c->a[0], (void *)c->a[1], (int)c->a[2], &r);

    if (rt < 0)
        return answered(c, rt);
    if (rt == SHIPC_LOCAL)
        return local(c);
    if ((int)c->a[2] < 2 || (int)c->a[2] > (int)LAT_MAX_SOCKADDR)
        return shipped(c, -EINVAL);
    for (int w = SHIPC_SLICE_MS, resume = 0;; w = next_wait(), resume = 1) {  /* then: the connect in progress */
        long rc = fwd_connect(r, w, resume, (const void *)c->a[1], (uint32_t)c->a[2]);
        if (rc != -LAT_ERR_WAIT)
            return shipped(c, rc);
    }
}

long shipc_sys_bind(struct shipc_call *c)
{
    int r;
    long ret;

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    if ((int)c->a[2] < 2 || (int)c->a[2] > (int)LAT_MAX_SOCKADDR)
        return shipped(c, -EINVAL);
    return shipped(c, fwd_bind(r, (const void *)c->a[1], (uint32_t)c->a[2]));
}

/* Servers stay on the node: a listening socket is local for good. */
long shipc_sys_listen(struct shipc_call *c)
{
    int r;
    long ret;

    if (!by_fd(c, c->a[0], &r, &ret)) {
        if (ret == 0)
            lat_sock_pin(&rule, (int)c->a[0], 1);
        return ret;
    }
    return shipped(c, -EOPNOTSUPP);
}

/* accept and accept4: the new socket is connected, local for good. */
long shipc_sys_accept(struct shipc_call *c)
{
    int r;
    long ret;

    if (!by_fd(c, c->a[0], &r, &ret)) {
        lat_sock_pin(&rule, (int)ret, 1);
        return ret;
    }
    return shipped(c, -EINVAL);     /* a shipped socket never listens */
}

long shipc_sys_sendto(struct shipc_call *c)
{
    void *dest = (void *)c->a[4];
    int r, rt = decide((int)c->a[0], dest, (int)c->a[5], &r);

    if (rt < 0)
        return answered(c, rt);
    if (rt == SHIPC_LOCAL)
        return local(c);
    struct iovec v = { (void *)c->a[1], (size_t)c->a[2] };
    return shipped(c, send_ship(r, dest, dest ? (int)c->a[5] : 0, &v, 1, (int)c->a[3]));
}

long shipc_sys_recvfrom(struct shipc_call *c)
{
    int r;
    long ret;

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    struct iovec v = { (void *)c->a[1], (size_t)c->a[2] };
    return shipped(c, recv_ship(r, (void *)c->a[4], (int *)c->a[5], &v, 1, (int)c->a[3], NULL));
}

/* One sendmsg: local (the system call), or shipped (*sh). */
static long sendmsg1(int fd, struct kmsghdr *m, int flags, int *sh)
{
    int r, rt = decide(fd, m->name, m->namelen, &r);

    *sh = rt == SHIPC_SHIP;
    if (rt < 0)
        return rt;
    if (rt == SHIPC_LOCAL)
        return ksys3(__NR_sendmsg, fd, m, flags);
    if (m->controllen)
        return -EOPNOTSUPP;     /* no descriptors or credentials across the I/O node */
    return send_ship(r, m->name, m->name ? m->namelen : 0, m->iov, (long)m->iovlen, flags);
}

long shipc_sys_sendmsg(struct shipc_call *c)
{
    int sh;
    long ret = sendmsg1((int)c->a[0], (struct kmsghdr *)c->a[1], (int)c->a[2], &sh);
    return sh ? shipped(c, ret) : answered(c, ret);
}

long shipc_sys_recvmsg(struct shipc_call *c)
{
    struct kmsghdr *m = (struct kmsghdr *)c->a[1];
    int r;
    long ret;

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    m->controllen = 0;
    return shipped(c, recv_ship(r, m->name, &m->namelen, m->iov, (long)m->iovlen, (int)c->a[2], &m->flags));
}

/* glibc's resolver sends its A and AAAA queries with one sendmmsg. */
long shipc_sys_sendmmsg(struct shipc_call *c)
{
    struct kmmsghdr *v = (struct kmmsghdr *)c->a[1];
    unsigned n = (unsigned)c->a[2], i;
    int fd = (int)c->a[0], r, sh;
    int rt = n ? decide(fd, v[0].hdr.name, v[0].hdr.namelen, &r) : shipc_fd_route(fd, &r);

    if (rt < 0)
        return answered(c, rt);
    if (rt == SHIPC_LOCAL)
        return local(c);
    for (i = 0; i < n && i < UIO_MAXIOV; i++) {
        long s = sendmsg1(fd, &v[i].hdr, (int)c->a[3], &sh);
        if (s < 0)
            return shipped(c, i ? (long)i : s);
        v[i].len = (unsigned)s;
    }
    return shipped(c, (long)i);
}

long shipc_sys_recvmmsg(struct shipc_call *c)
{
    int r;
    long ret;

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    struct kmmsghdr *v = (struct kmmsghdr *)c->a[1];
    if ((unsigned)c->a[2] < 1)
        return shipped(c, -EINVAL);
    /* one message: the first waits as recvmsg would, more would need a timeout */
    long n = recv_ship(r, v[0].hdr.name, &v[0].hdr.namelen, v[0].hdr.iov, (long)v[0].hdr.iovlen, (int)c->a[3],
                       &v[0].hdr.flags);
    if (n < 0)
        return shipped(c, n);
    v[0].len = (unsigned)n;
    return shipped(c, 1);
}

long shipc_sys_shutdown(struct shipc_call *c)
{
    int r;
    long ret;

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    return shipped(c, fwd_shutdown(r, (int)c->a[1]));
}

long shipc_sys_setsockopt(struct shipc_call *c)
{
    int r;
    long ret;

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    if ((int)c->a[4] < 0 || (int)c->a[4] > (int)LAT_MAX_SOCKOPT)
        return shipped(c, -EINVAL);
    return shipped(c, fwd_setsockopt(r, (int)c->a[1], (int)c->a[2], (const void *)c->a[3], (uint32_t)c->a[4]));
}

long shipc_sys_getsockopt(struct shipc_call *c)
{
    int r, *len = (int *)c->a[4];
    long ret;

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    if (!len || *len < 0)
        return shipped(c, -EINVAL);
    ret = fwd_getsockopt(r, (int)c->a[1], (int)c->a[2], (void *)c->a[3], (uint32_t)SHIPC_MIN(*len, (int)LAT_MAX_SOCKOPT));
    if (ret >= 0) {
        *len = (int)ret;
        ret = 0;
    }
    return shipped(c, ret);
}

static long name_call(struct shipc_call *c, int64_t (*fn)(int, void *))
{
    int r, *len = (int *)c->a[2];
    uint8_t sa[LAT_MAX_SOCKADDR];
    long ret;

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    if (!len || *len < 0)
        return shipped(c, -EINVAL);
    ret = fn(r, sa);
    if (ret >= 0) {
        memcpy((void *)c->a[1], sa, SHIPC_MIN((size_t)ret, (size_t)*len));
        *len = (int)ret;
        ret = 0;
    }
    return shipped(c, ret);
}

long shipc_sys_getsockname(struct shipc_call *c) { return name_call(c, fwd_getsockname); }
long shipc_sys_getpeername(struct shipc_call *c) { return name_call(c, fwd_getpeername); }
