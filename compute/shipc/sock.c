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
 * shipped socket are file.c's (the file messages work on remote sockets);
 * the bytes of its sends and receives are moved by sockio.c.
 */
#include <asm/unistd.h>

#include "internal.h"

#define LAT_SOCK_SYSCALL(nr, a, b, c, d, e) ksys6((nr), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), 0)
#include <lattice/sock_rule.h>

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
 * or -errno (the client's own descriptor; shipping failed). */
static int decide(int fd, const void *dest, long dlen, int *remote)
{
    int rt = shipc_fd_route(fd, remote);

    if (rt != SHIPC_LOCAL || !lat_sock_ships(&rule, fd, dest, (uint32_t)dlen))
        return rt;
    long r = ship_socket(fd);
    if (r < 0)
        return (int)r;
    return shipc_fd_route(fd, remote);
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
    for (int w = SHIPC_SLICE_MS, resume = 0;; w = shipc_sock_next_wait(), resume = 1) {  /* then: the connect in progress */
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
    return shipped(c, shipc_sock_send(r, dest, dest ? (int)c->a[5] : 0, &v, 1, (int)c->a[3]));
}

long shipc_sys_recvfrom(struct shipc_call *c)
{
    int r;
    long ret;

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    struct iovec v = { (void *)c->a[1], (size_t)c->a[2] };
    return shipped(c, shipc_sock_recv(r, (void *)c->a[4], (int *)c->a[5], &v, 1, (int)c->a[3], NULL));
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
    return shipc_sock_send(r, m->name, m->name ? m->namelen : 0, m->iov, (long)m->iovlen, flags);
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
    return shipped(c, shipc_sock_recv(r, m->name, &m->namelen, m->iov, (long)m->iovlen, (int)c->a[2], &m->flags));
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
    long n = shipc_sock_recv(r, v[0].hdr.name, &v[0].hdr.namelen, v[0].hdr.iov, (long)v[0].hdr.iovlen, (int)c->a[3],
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
