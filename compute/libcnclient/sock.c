/*
 * sock.c - sockets in Linux mode: which stay on the compute node and which
 * are shipped to the I/O node, and the calls on shipped ones.  The same rule
 * (lattice/sock_rule.h, shared with cnk) and the same messages as cnk
 * (compute/cnk/sock.c, compute/cnk/README.md "Sockets", docs/protocol.md
 * section 6.1): the first destination an AF_INET/AF_INET6 socket connects
 * or sends to decides it -- a compute node's address keeps it local for
 * good, any other (loopback included) ships it: a socket of the same
 * domain, type and protocol is made on the I/O node, the options that
 * differ from the defaults, O_NONBLOCK and a bound port are replayed there,
 * and the local socket is replaced by a placeholder (lat_fd_install_at).
 * AF_UNIX, netlink and socketpairs stay local.  read/write/close/dup/fcntl
 * of a shipped socket are file.c's (the file messages work on remote
 * sockets).
 *
 * Blocking.  A shipped call that may block carries a wait: until done while
 * the process has one thread, else slices of SLICE_MS after which ciod
 * answers LAT_ERR_WAIT and the call is asked again with the connection
 * released in between, so the other threads' calls go through.  poll,
 * select and epoll over shipped and local descriptors alternate a local
 * check with a shipped wait of at most SLICE_MS.
 *
 * Only the program's calls come here: glibc's own socket calls (the DNS
 * resolver, getaddrinfo's address sorting, nscd) use internal symbols that
 * an LD_PRELOAD library cannot interpose, so they stay on the compute node.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "client.h"

/* raw system calls for the rule: nothing there is shipped */
static long rule_syscall(long nr, long a, long b, long c, long d, long e)
{
    long r = syscall(nr, a, b, c, d, e);
    return r < 0 ? -errno : r;
}
#define LAT_SOCK_SYSCALL(nr, a, b, c, d, e) rule_syscall((nr), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e))
#include "../include/lattice/sock_rule.h"   /* shared with cnk: freestanding */
#include "../include/lattice/iov_slice.h"

#define SLICE_MS    10          /* longest a shipped wait holds the connection with other threads */
#define MAX_SHIPPED 128         /* shipped descriptors in one poll/select/epoll set */
#define MAX_EREG    256         /* shipped descriptors registered in epoll sets */

_Static_assert(sizeof(struct pollfd) == sizeof(struct lat_pollfd), "pollfd on the wire");

/* With _GNU_SOURCE glibc declares sockaddr arguments as transparent unions. */
#if defined(__USE_GNU) && !defined(__cplusplus)
#define SA(a) ((a).__sockaddr__)
#else
#define SA(a) (a)
#endif

/* fortified entry points (glibc headers declare them only with _FORTIFY_SOURCE) */
ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags);
ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
                       struct sockaddr *addr, socklen_t *alen);
int __poll_chk(struct pollfd *fds, nfds_t nfds, int timeout, size_t fdslen);
int __ppoll_chk(struct pollfd *fds, nfds_t nfds, const struct timespec *ts, const sigset_t *ss,
                size_t fdslen);

static long now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* More than one thread: /proc/self/task has 2 + threads links (node-local). */
static int multithreaded(void)
{
    struct stat st;
    if (syscall(SYS_newfstatat, AT_FDCWD, "/proc/self/task", &st, 0) != 0)
        return 1;
    return st.st_nlink > 3;
}

/* ---- deciding a local socket (lattice/sock_rule.h) ---- */

static struct lat_sock_rule rule;

/* Make local socket fd a shipped one (module comment).  0 or -1/errno. */
static int ship_socket(int fd)
{
    struct lat_sock_carry sc;

    lat_sock_carry(fd, &sc);
    int64_t r = lcn_ret(fwd_socket(sc.domain, sc.type, sc.protocol));
    if (r < 0)
        return -1;
    for (int i = 0; i < sc.nopt; i++)
        lcn_ret(fwd_setsockopt((int)r, sc.opt[i][0], sc.opt[i][1], &sc.opt[i][2], sizeof sc.opt[i][2]));
    /* replaces (closes) the local socket; on failure closes the remote one */
    if (lat_fd_install_at((int)r, sc.cloexec, fd) < 0)
        return -1;
    if (sc.blen && lcn_ret(fwd_bind((int)r, sc.bound, sc.blen)) < 0)  /* a bound port moves with the socket */
        return lat_fail(EADDRINUSE);
    return 0;
}

/* Route for a call with a destination: LAT_SHIP (*remote), LAT_LOCAL,
 * LAT_HIDE, or -1 with errno (shipping failed). */
static int decide(int fd, const void *dest, socklen_t dlen, int *remote)
{
    int rt = lat_fd_route(fd, remote);

    if (rt != LAT_LOCAL || !lat_active() || lat_forked() || !lat_sock_ships(&rule, fd, dest, dlen))
        return rt;              /* inert library or forked child: no connection to ship on */
    if (ship_socket(fd) < 0)
        return -1;
    return lat_fd_route(fd, remote);
}

/* ---- shipped calls that may block ---- */

static void nap(void)
{
    struct timespec t = { 0, 200000 };     /* lets a woken thread take the connection */
    nanosleep(&t, NULL);
}

/* The wait of the next try after ciod said LAT_ERR_WAIT: the first try
 * waits one slice (no thread count on the fast path); after that a process
 * with one thread waits until done. */
static int next_wait(void)
{
    int w = multithreaded() ? SLICE_MS : -1;
    if (w > 0)
        nap();
    return w;
}


/* The first wait of a call whose bytes may go in part (a large send, a
 * MSG_WAITALL receive): ciod returns the part that went when a wait runs
 * out, so a process with one thread waits until done, as Linux does. */
static int exact_wait(void)
{
    return multithreaded() ? SLICE_MS : -1;
}

static ssize_t epipe(ssize_t r, int flags)
{
    if (r < 0 && errno == EPIPE && !(flags & MSG_NOSIGNAL)) {
        int e = errno;
        syscall(SYS_tgkill, getpid(), syscall(SYS_gettid), SIGPIPE);
        errno = e;
    }
    return r;
}

/* A socket rendezvous (docs/protocol.md 6.1): the request names the
 * program's buffers and ciod sends from them or receives into them with
 * process_vm_readv/writev.  Its own frame keeps the segment table off the
 * callers'.  -1 with errno EOPNOTSUPP or EFAULT and nothing done: the
 * caller moves the bytes in messages instead. */
__attribute__((noinline)) static int64_t sock_rdv(int r, int send, const void *name, socklen_t nlen,
                                                  const struct iovec *iov, size_t cnt, int flags,
                                                  struct lat_sockname *sn)
{
    struct lat_rdv_seg segs[IOV_MAX];
    int64_t n;

    for (size_t i = 0; i < cnt; i++)
        segs[i] = (struct lat_rdv_seg){ (uint64_t)(uintptr_t)iov[i].iov_base, iov[i].iov_len };
    for (int w = exact_wait();; w = next_wait()) {     /* again while ciod says LAT_ERR_WAIT */
        n = send ? lcn_ret(fwd_send_rdv(r, flags, name, name ? nlen : 0, segs, (uint32_t)cnt, w))
                 : lcn_ret(fwd_recv_rdv(r, flags, sn, segs, (uint32_t)cnt, w));
        if (n >= 0 || errno != LAT_ERR_WAIT)
            return n;
    }
}

static int goes_rdv(size_t total, size_t cnt)
{
    uint64_t min = shipc_rdv_min();
    return min && total >= min && cnt > 0;
}

static int eager_instead(int64_t n)
{
    return n < 0 && (errno == EOPNOTSUPP || errno == EFAULT || errno == ENOSYS);    /* ENOSYS: an older ciod */
}

/* The bytes in messages of at most LAT_MAX_IO (streams continue with the
 * rest); its own frame, as sock_rdv's. */
__attribute__((noinline)) static ssize_t send_eager(int r, const void *name, socklen_t nlen, const struct iovec *iov,
                                                    size_t cnt, size_t total, int flags)
{
    struct iovec part[IOV_MAX - 1];     /* and the name: IOV_MAX to send */
    size_t done = 0;

    do {
        size_t chunk;
        int n = lat_iov_slice(iov, cnt, done, total - done < LAT_MAX_IO ? total - done : LAT_MAX_IO, part,
                              IOV_MAX - 1, &chunk);
        int64_t s;
        for (int w = exact_wait();; w = next_wait()) {  /* again while ciod says LAT_ERR_WAIT */
            s = lcn_ret(fwd_sendmsg_v(r, flags & ~MSG_NOSIGNAL, name, name ? nlen : 0, part, n, w));
            if (s >= 0 || errno != LAT_ERR_WAIT)
                break;
        }
        if (s < 0)
            return done ? (ssize_t)done : epipe(-1, flags);
        done += (size_t)s;
        if ((size_t)s < chunk)
            break;
    } while (done < total);
    return (ssize_t)done;
}

/* sendmsg on a shipped socket: a rendezvous from rdv_min bytes, else in
 * messages. */
static ssize_t send_ship(int r, const void *name, socklen_t nlen, const struct iovec *iov, size_t cnt,
                         int flags)
{
    size_t total = 0;

    if (cnt > IOV_MAX || nlen > LAT_MAX_SOCKADDR || (cnt && !iov))
        return lat_fail(EINVAL);
    for (size_t i = 0; i < cnt; i++) {
        if (iov[i].iov_len > (size_t)SSIZE_MAX - total)
            return lat_fail(EINVAL);
        total += iov[i].iov_len;
    }
    if (goes_rdv(total, cnt)) {
        int64_t s = sock_rdv(r, 1, name, nlen, iov, cnt, flags & ~MSG_NOSIGNAL, NULL);
        if (!eager_instead(s))
            return s < 0 ? epipe(-1, flags) : (ssize_t)s;
    }
    return send_eager(r, name, nlen, iov, cnt, total, flags);
}

/* Received in messages of at most LAT_MAX_IO: a stream's MSG_WAITALL asks
 * again for the rest after a full one.  Sender into *sn. */
__attribute__((noinline)) static int64_t recv_eager(int r, const struct iovec *iov, size_t cnt, size_t total,
                                                    int flags, struct lat_sockname *sn)
{
    struct iovec part[IOV_MAX - 1];
    struct lat_sockname more;
    size_t done = 0;

    for (;;) {
        size_t want;
        int np = lat_iov_slice(iov, cnt, done, total - done < LAT_MAX_IO ? total - done : LAT_MAX_IO, part,
                               IOV_MAX - 1, &want);
        int64_t m;
        for (int w = (flags & MSG_WAITALL) ? exact_wait() : SLICE_MS;; w = next_wait()) {
            m = lcn_ret(fwd_recvmsg_v(r, flags, done ? &more : sn, part, np, want, w));
            if (m >= 0 || errno != LAT_ERR_WAIT)
                break;
        }
        if (m < 0)
            return done ? (int64_t)done : -1;
        if ((size_t)m == want && done + want < total && (flags & MSG_WAITALL) && !(flags & MSG_PEEK)) {
            done += want;       /* only the message's size stopped it */
            continue;
        }
        return (int64_t)(done + (size_t)m);
    }
}

/* recvmsg on a shipped socket into the vectors (a rendezvous from rdv_min
 * bytes, else in messages); sender into name. */
static ssize_t recv_ship(int r, void *name, socklen_t *nlen, const struct iovec *iov, size_t cnt, int flags,
                         int *mflags)
{
    struct lat_sockname sn;
    size_t total = 0;

    if (cnt > IOV_MAX || (cnt && !iov))
        return lat_fail(EINVAL);
    for (size_t i = 0; i < cnt; i++)
        total += iov[i].iov_len;
    int64_t n = goes_rdv(total, cnt) ? sock_rdv(r, 0, NULL, 0, iov, cnt, flags, &sn) : lat_fail(EOPNOTSUPP);
    if (eager_instead(n))
        n = recv_eager(r, iov, cnt, total, flags, &sn);
    if (n < 0)
        return -1;
    if (name && nlen) {
        socklen_t room = *nlen;
        memcpy(name, sn.addr, sn.len < room ? sn.len : room);
        *nlen = sn.len;
    } else if (nlen) {
        *nlen = 0;
    }
    if (mflags)
        *mflags = (int)sn.flags;
    return (ssize_t)n;
}

/* ---- the socket calls ---- */

int socket(int domain, int type, int protocol)
{
    int fd = REAL(socket)(domain, type, protocol);
    lat_sock_pin(&rule, fd, 0);     /* a new socket is undecided */
    return fd;
}

int connect(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len)
{
    int r, rt = decide(fd, SA(addr), len, &r);

    if (rt < 0)
        return -1;
    if (rt == LAT_HIDE)
        return lat_fail(EBADF);
    if (rt == LAT_LOCAL)
        return REAL(connect)(fd, addr, len);
    if (len < 2 || len > LAT_MAX_SOCKADDR)
        return lat_fail(EINVAL);
    for (int w = SLICE_MS, resume = 0;; w = next_wait(), resume = 1) {   /* then: the connect in progress */
        int64_t rc = lcn_ret(fwd_connect(r, w, resume, SA(addr), len));
        if (rc >= 0 || errno != LAT_ERR_WAIT)
            return (int)rc;
    }
}

/* Calls on a descriptor that is shipped or local, never decided by them:
 * 1 = shipped (*r), 0 = local, -1 = the shipping socket (EBADF). */
static int route(int fd, int *r)
{
    switch (lat_fd_route(fd, r)) {
    case LAT_SHIP:
        return 1;
    case LAT_HIDE:
        return lat_fail(EBADF);
    default:
        return 0;
    }
}

int bind(int fd, __CONST_SOCKADDR_ARG addr, socklen_t len)
{
    int r, sh = route(fd, &r);

    if (sh <= 0)
        return sh < 0 ? -1 : REAL(bind)(fd, addr, len);
    if (len < 2 || len > LAT_MAX_SOCKADDR)
        return lat_fail(EINVAL);
    return (int)lcn_ret(fwd_bind(r, SA(addr), len));
}

/* Servers stay on the node: a listening socket is local for good. */
int listen(int fd, int backlog)
{
    int r, sh = route(fd, &r);

    if (sh > 0)
        return lat_fail(EOPNOTSUPP);
    if (sh < 0)
        return -1;
    int ret = REAL(listen)(fd, backlog);
    if (ret == 0)
        lat_sock_pin(&rule, fd, 1);
    return ret;
}

int accept(int fd, __SOCKADDR_ARG addr, socklen_t *len)
{
    int r, sh = route(fd, &r);

    if (sh)
        return sh < 0 ? -1 : lat_fail(EINVAL);     /* a shipped socket never listens */
    int s = REAL(accept)(fd, addr, len);
    lat_sock_pin(&rule, s, 1);
    return s;
}

int accept4(int fd, __SOCKADDR_ARG addr, socklen_t *len, int flags)
{
    int r, sh = route(fd, &r);

    if (sh)
        return sh < 0 ? -1 : lat_fail(EINVAL);
    int s = REAL(accept4)(fd, addr, len, flags);
    lat_sock_pin(&rule, s, 1);
    return s;
}

ssize_t sendto(int fd, const void *buf, size_t n, int flags, __CONST_SOCKADDR_ARG dest, socklen_t dlen)
{
    const void *d = SA(dest);
    int r, rt = decide(fd, d, dlen, &r);

    if (rt < 0)
        return -1;
    if (rt == LAT_HIDE)
        return lat_fail(EBADF);
    if (rt == LAT_LOCAL)
        return REAL(sendto)(fd, buf, n, flags, dest, dlen);
    struct iovec v = { (void *)buf, n };
    return send_ship(r, d, d ? dlen : 0, &v, 1, flags);
}

ssize_t send(int fd, const void *buf, size_t n, int flags)
{
    int r, sh = route(fd, &r);

    if (sh <= 0)
        return sh < 0 ? -1 : REAL(send)(fd, buf, n, flags);
    struct iovec v = { (void *)buf, n };
    return send_ship(r, NULL, 0, &v, 1, flags);
}

ssize_t sendmsg(int fd, const struct msghdr *m, int flags)
{
    int r, rt = decide(fd, m->msg_name, m->msg_namelen, &r);

    if (rt < 0)
        return -1;
    if (rt == LAT_HIDE)
        return lat_fail(EBADF);
    if (rt == LAT_LOCAL)
        return REAL(sendmsg)(fd, m, flags);
    if (m->msg_controllen)
        return lat_fail(EOPNOTSUPP);    /* no descriptors or credentials across the I/O node */
    return send_ship(r, m->msg_name, m->msg_name ? m->msg_namelen : 0, m->msg_iov, m->msg_iovlen, flags);
}

int sendmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags)
{
    int r, rt = n ? decide(fd, v[0].msg_hdr.msg_name, v[0].msg_hdr.msg_namelen, &r) : (int)lat_fd_route(fd, &r);

    if (rt < 0)
        return -1;
    if (rt == LAT_HIDE)
        return lat_fail(EBADF);
    if (rt == LAT_LOCAL)
        return REAL(sendmmsg)(fd, v, n, flags);
    unsigned i;
    for (i = 0; i < n && i < UIO_MAXIOV; i++) {
        ssize_t s = sendmsg(fd, &v[i].msg_hdr, flags);
        if (s < 0)
            return i ? (int)i : -1;
        v[i].msg_len = (unsigned)s;
    }
    return (int)i;
}

ssize_t recvfrom(int fd, void *buf, size_t n, int flags, __SOCKADDR_ARG addr, socklen_t *alen)
{
    int r, sh = route(fd, &r);

    if (sh <= 0)
        return sh < 0 ? -1 : REAL(recvfrom)(fd, buf, n, flags, addr, alen);
    struct iovec v = { buf, n };
    return recv_ship(r, SA(addr), SA(addr) ? alen : NULL, &v, 1, flags, NULL);
}

ssize_t recv(int fd, void *buf, size_t n, int flags)
{
    int r, sh = route(fd, &r);

    if (sh <= 0)
        return sh < 0 ? -1 : REAL(recv)(fd, buf, n, flags);
    struct iovec v = { buf, n };
    return recv_ship(r, NULL, NULL, &v, 1, flags, NULL);
}

ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags)
{
    if (n > buflen)
        __chk_fail();
    return recv(fd, buf, n, flags);
}

ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
                       struct sockaddr *addr, socklen_t *alen)
{
    if (n > buflen)
        __chk_fail();
    return recvfrom(fd, buf, n, flags, addr, alen);
}

ssize_t recvmsg(int fd, struct msghdr *m, int flags)
{
    int r, sh = route(fd, &r);

    if (sh <= 0)
        return sh < 0 ? -1 : REAL(recvmsg)(fd, m, flags);
    m->msg_controllen = 0;
    return recv_ship(r, m->msg_name, &m->msg_namelen, m->msg_iov, m->msg_iovlen, flags, &m->msg_flags);
}

int recvmmsg(int fd, struct mmsghdr *v, unsigned int n, int flags, struct timespec *tmo)
{
    int r, sh = route(fd, &r);

    if (sh <= 0)
        return sh < 0 ? -1 : REAL(recvmmsg)(fd, v, n, flags, tmo);
    if (n < 1)
        return lat_fail(EINVAL);
    /* one message: the first waits as recvmsg would */
    ssize_t got = recvmsg(fd, &v[0].msg_hdr, flags);
    if (got < 0)
        return -1;
    v[0].msg_len = (unsigned)got;
    return 1;
}

int shutdown(int fd, int how)
{
    int r, sh = route(fd, &r);

    if (sh <= 0)
        return sh < 0 ? -1 : REAL(shutdown)(fd, how);
    return (int)lcn_ret(fwd_shutdown(r, how));
}

int setsockopt(int fd, int level, int name, const void *val, socklen_t len)
{
    int r, sh = route(fd, &r);

    if (sh <= 0)
        return sh < 0 ? -1 : REAL(setsockopt)(fd, level, name, val, len);
    if (len > LAT_MAX_SOCKOPT)
        return lat_fail(EINVAL);
    return (int)lcn_ret(fwd_setsockopt(r, level, name, val ? val : "", val ? len : 0));
}

int getsockopt(int fd, int level, int name, void *val, socklen_t *len)
{
    int r, sh = route(fd, &r);

    if (sh <= 0)
        return sh < 0 ? -1 : REAL(getsockopt)(fd, level, name, val, len);
    if (lat_is_null(len) || (int)*len < 0)
        return lat_fail(EINVAL);
    socklen_t want = *len > LAT_MAX_SOCKOPT ? LAT_MAX_SOCKOPT : *len;
    int64_t ret = lcn_ret(fwd_getsockopt(r, level, name, val, want));
    if (ret < 0)
        return -1;
    *len = (socklen_t)ret;
    return 0;
}

static int name_call(int fd, int64_t (*fn)(int, void *), void *addr, socklen_t *len,
                     int (*real)(int, __SOCKADDR_ARG, socklen_t *))
{
    int r, sh = route(fd, &r);
    struct sockaddr_storage sa;

    if (sh <= 0)
        return sh < 0 ? -1 : real(fd, (struct sockaddr *)addr, len);
    if (lat_is_null(len) || (int)*len < 0)
        return lat_fail(EINVAL);
    _Static_assert(sizeof sa == LAT_MAX_SOCKADDR, "sockaddr on the wire");
    int64_t ret = fn(r, &sa);
    if (ret < 0)
        return -1;
    memcpy(addr, &sa, (socklen_t)ret < *len ? (size_t)ret : *len);
    *len = (socklen_t)ret;
    return 0;
}

int getsockname(int fd, __SOCKADDR_ARG addr, socklen_t *len)
{
    return name_call(fd, fwd_getsockname, SA(addr), len, REAL(getsockname));
}

int getpeername(int fd, __SOCKADDR_ARG addr, socklen_t *len)
{
    return name_call(fd, fwd_getpeername, SA(addr), len, REAL(getpeername));
}

/* ---- poll over shipped and local descriptors ---- */

/* Shipped entries are hidden from the kernel (fd made negative: poll skips
 * it) and asked of the I/O node.  ms < 0: no timeout.  Returns the ready
 * entries or -1/errno; *any_shipped = 0 when nothing was shipped (the
 * caller asks the kernel itself). */
static int mixed_poll(struct pollfd *p, nfds_t n, long ms, int *any_shipped)
{
    struct lat_pollfd rp[MAX_SHIPPED];
    uint32_t at[MAX_SHIPPED];
    int ns = 0, nlocal = 0;

    *any_shipped = 0;
    if (!lat_active() || !p)
        return 0;
    for (nfds_t i = 0; i < n; i++) {
        int r;
        if (p[i].fd < 0)
            continue;
        if (lat_fd_route(p[i].fd, &r) != LAT_SHIP) {
            nlocal++;
            continue;
        }
        if (ns == MAX_SHIPPED) {
            *any_shipped = 1;
            return lat_fail(EINVAL);
        }
        rp[ns] = (struct lat_pollfd){ r, p[i].events, 0 };
        at[ns++] = (uint32_t)i;
    }
    if (!ns)
        return 0;
    *any_shipped = 1;
    long end = ms < 0 ? -1 : now_ms() + ms;
    for (int j = 0; j < ns; j++)
        p[at[j]].fd = -p[at[j]].fd - 1;
    int ready, err = 0;
    for (;;) {
        int nl = nlocal ? (int)syscall(SYS_poll, p, n, 0) : 0;
        if (nl < 0) {
            ready = -1;
            err = errno;
            break;
        }
        long left = end < 0 ? -1 : end - now_ms();
        if (left < 0 && end >= 0)
            left = 0;
        long w = nl ? 0 : (nlocal || multithreaded()) ? (left < 0 || left > SLICE_MS ? SLICE_MS : left) : left;
        int64_t rs = lcn_ret(fwd_poll(rp, (uint32_t)ns, (int)w));
        if (rs < 0 && errno != EINTR) {
            ready = -1;
            err = errno;
            break;
        }
        ready = nl + (rs > 0 ? (int)rs : 0);
        if (ready || left == 0)
            break;
    }
    for (int j = 0; j < ns; j++) {
        p[at[j]].fd = -p[at[j]].fd - 1;
        p[at[j]].revents = ready >= 0 ? rp[j].revents : 0;
    }
    return ready < 0 ? lat_fail(err) : ready;
}

static long ts_ms(const struct timespec *t)
{
    return t ? t->tv_sec * 1000 + (t->tv_nsec + 999999) / 1000000 : -1;
}

int poll(struct pollfd *p, nfds_t n, int timeout)
{
    int sh, r = mixed_poll(p, n, timeout, &sh);
    return sh ? r : REAL(poll)(p, n, timeout);
}

int __poll_chk(struct pollfd *p, nfds_t n, int timeout, size_t fdslen)
{
    if (fdslen / sizeof *p < n)
        __chk_fail();
    return poll(p, n, timeout);
}

int ppoll(struct pollfd *p, nfds_t n, const struct timespec *ts, const sigset_t *ss)
{
    int sh, r = mixed_poll(p, n, ts_ms(ts), &sh);
    return sh ? r : REAL(ppoll)(p, n, ts, ss);
}

int __ppoll_chk(struct pollfd *p, nfds_t n, const struct timespec *ts, const sigset_t *ss, size_t fdslen)
{
    if (fdslen / sizeof *p < n)
        __chk_fail();
    return ppoll(p, n, ts, ss);
}

/* select as poll, when a set holds a shipped descriptor. */
static int mixed_select(int n, fd_set *rd, fd_set *wr, fd_set *ex, long ms, int *sh)
{
    fd_set *set[3] = { rd, wr, ex };
    static const short ev[3] = { POLLIN, POLLOUT, POLLPRI };
    struct pollfd p[FD_SETSIZE];
    nfds_t np = 0;
    int r;

    *sh = 0;
    if (!lat_active() || n < 0 || n > FD_SETSIZE)
        return 0;
    for (int fd = 0; fd < n; fd++) {
        short e = 0;
        for (int s = 0; s < 3; s++)
            if (set[s] && FD_ISSET(fd, set[s]))
                e |= ev[s];
        if (!e)
            continue;
        *sh |= lat_fd_route(fd, &r) == LAT_SHIP;
        p[np++] = (struct pollfd){ fd, e, 0 };
    }
    if (!*sh)
        return 0;
    int ready = mixed_poll(p, np, ms, sh);
    if (ready < 0)
        return -1;
    for (nfds_t i = 0; i < np; i++)
        if (p[i].revents & POLLNVAL)
            return lat_fail(EBADF);
    for (int s = 0; s < 3; s++)
        if (set[s])
            for (int fd = 0; fd < n; fd++)
                FD_CLR(fd, set[s]);
    int bits = 0;
    for (nfds_t i = 0; i < np; i++) {
        short re = p[i].revents;
        short got[3] = { re & (POLLIN | POLLHUP | POLLERR), re & (POLLOUT | POLLERR), re & POLLPRI };
        for (int s = 0; s < 3; s++)
            if (set[s] && (p[i].events & ev[s]) && got[s]) {
                FD_SET(p[i].fd, set[s]);
                bits++;
            }
    }
    return bits;
}

int select(int n, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *tv)
{
    int sh, r = mixed_select(n, rd, wr, ex, tv ? tv->tv_sec * 1000 + (tv->tv_usec + 999) / 1000 : -1, &sh);
    return sh ? r : REAL(select)(n, rd, wr, ex, tv);
}

int pselect(int n, fd_set *rd, fd_set *wr, fd_set *ex, const struct timespec *ts, const sigset_t *ss)
{
    int sh, r = mixed_select(n, rd, wr, ex, ts_ms(ts), &sh);
    return sh ? r : REAL(pselect)(n, rd, wr, ex, ts, ss);
}

/* ---- epoll: shipped descriptors are registered here, not in the kernel ---- */

static struct ereg { int epfd, fd; uint32_t events; uint64_t data; } ereg[MAX_EREG];
static int nereg;               /* registrations in use: 0 = every epoll call is the kernel's */
static pthread_mutex_t ereg_lock = PTHREAD_MUTEX_INITIALIZER;

void lat_epoll_closed(unsigned first, unsigned last)
{
    if (!__atomic_load_n(&nereg, __ATOMIC_ACQUIRE))
        return;
    pthread_mutex_lock(&ereg_lock);
    for (int i = 0; i < MAX_EREG; i++) {
        struct ereg *e = &ereg[i];
        if (e->epfd != e->fd && (((unsigned)e->fd >= first && (unsigned)e->fd <= last) ||
                                 ((unsigned)e->epfd >= first && (unsigned)e->epfd <= last))) {
            *e = (struct ereg){ 0, 0, 0, 0 };
            __atomic_sub_fetch(&nereg, 1, __ATOMIC_RELEASE);
        }
    }
    pthread_mutex_unlock(&ereg_lock);
}

int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev)
{
    int r;

    if (lat_fd_route(fd, &r) != LAT_SHIP)
        return REAL(epoll_ctl)(epfd, op, fd, ev);
    if (lat_fd_route(epfd, &r) != LAT_LOCAL || syscall(SYS_fcntl, epfd, F_GETFD) < 0)
        return lat_fail(EBADF);
    if ((op == EPOLL_CTL_ADD || op == EPOLL_CTL_MOD) && lat_is_null(ev))
        return lat_fail(EFAULT);
    struct stat st;     /* Linux refuses regular files and directories: always ready */
    if (op == EPOLL_CTL_ADD && lat_fstatat_any(fd, "", &st, AT_EMPTY_PATH) == 0 &&
        (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)))
        return lat_fail(EPERM);
    int err = ENOENT, slot = -1, freeslot = -1;
    pthread_mutex_lock(&ereg_lock);
    for (int i = 0; i < MAX_EREG; i++) {
        if (ereg[i].epfd == epfd && ereg[i].fd == fd && ereg[i].epfd != ereg[i].fd)
            slot = i;
        else if (freeslot < 0 && ereg[i].epfd == ereg[i].fd)
            freeslot = i;       /* epfd == fd (both 0) marks a free entry */
    }
    if (op == EPOLL_CTL_ADD) {
        err = slot >= 0 ? EEXIST : freeslot < 0 ? ENOSPC : 0;
        if (!err) {
            ereg[freeslot] = (struct ereg){ epfd, fd, ev->events, ev->data.u64 };
            __atomic_add_fetch(&nereg, 1, __ATOMIC_RELEASE);
        }
    } else if (op == EPOLL_CTL_MOD && slot >= 0) {
        ereg[slot].events = ev->events;
        ereg[slot].data = ev->data.u64;
        err = 0;
    } else if (op == EPOLL_CTL_DEL && slot >= 0) {
        ereg[slot] = (struct ereg){ 0, 0, 0, 0 };
        __atomic_sub_fetch(&nereg, 1, __ATOMIC_RELEASE);
        err = 0;
    } else if (op != EPOLL_CTL_ADD && op != EPOLL_CTL_DEL && op != EPOLL_CTL_MOD) {
        err = EINVAL;
    }
    pthread_mutex_unlock(&ereg_lock);
    return err ? lat_fail(err) : 0;
}

/* Local events first (kernel, no wait), then shipped ones by poll. */
static int mixed_epoll(int epfd, struct epoll_event *out, int max, long ms, int *sh)
{
    struct pollfd p[MAX_SHIPPED];
    int idx[MAX_SHIPPED], n = 0;

    *sh = 0;
    if (!__atomic_load_n(&nereg, __ATOMIC_ACQUIRE))
        return 0;
    pthread_mutex_lock(&ereg_lock);
    for (int i = 0; i < MAX_EREG && n < MAX_SHIPPED; i++)
        if (ereg[i].epfd == epfd && ereg[i].epfd != ereg[i].fd && ereg[i].events) {
            idx[n] = i;
            p[n++] = (struct pollfd){ ereg[i].fd, (short)(ereg[i].events & 0xffff), 0 };
        }
    pthread_mutex_unlock(&ereg_lock);
    *sh = n > 0;
    if (!n)
        return 0;
    if (max <= 0)
        return lat_fail(EINVAL);
    long end = ms < 0 ? -1 : now_ms() + ms;
    for (;;) {
        int nl = (int)syscall(SYS_epoll_wait, epfd, out, max, 0);
        if (nl < 0)
            return -1;
        long left = end < 0 ? SLICE_MS : end - now_ms();
        int dummy;
        int rs = mixed_poll(p, (nfds_t)n, nl ? 0 : left < 0 ? 0 : left < SLICE_MS ? left : SLICE_MS, &dummy);
        if (rs < 0)
            return -1;
        pthread_mutex_lock(&ereg_lock);
        for (int j = 0; j < n && nl < max; j++) {
            struct ereg *e = &ereg[idx[j]];
            if (!p[j].revents || e->epfd != epfd || e->fd != p[j].fd)
                continue;
            if (p[j].revents & POLLNVAL) {
                *e = (struct ereg){ 0, 0, 0, 0 };   /* closed: the kernel would drop it */
                __atomic_sub_fetch(&nereg, 1, __ATOMIC_RELEASE);
                continue;
            }
            out[nl].events = (uint32_t)(uint16_t)p[j].revents;
            out[nl++].data.u64 = e->data;
            if (e->events & EPOLLONESHOT)
                e->events = 0;
        }
        pthread_mutex_unlock(&ereg_lock);
        if (nl || (end >= 0 && now_ms() >= end))
            return nl;
    }
}

int epoll_wait(int epfd, struct epoll_event *out, int max, int timeout)
{
    int sh, r = mixed_epoll(epfd, out, max, timeout, &sh);
    return sh ? r : REAL(epoll_wait)(epfd, out, max, timeout);
}

int epoll_pwait(int epfd, struct epoll_event *out, int max, int timeout, const sigset_t *ss)
{
    int sh, r = mixed_epoll(epfd, out, max, timeout, &sh);
    return sh ? r : REAL(epoll_pwait)(epfd, out, max, timeout, ss);
}

int epoll_pwait2(int epfd, struct epoll_event *out, int max, const struct timespec *ts, const sigset_t *ss)
{
    int sh, r = mixed_epoll(epfd, out, max, ts_ms(ts), &sh);
    return sh ? r : REAL(epoll_pwait2)(epfd, out, max, ts, ss);
}
