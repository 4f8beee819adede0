/*
 * sock.c - a compute process's client sockets, reissued on the I/O node
 * (docs/protocol.md section 6.1).  Sockets are remote descriptors in the
 * same table as files, so close, dup, fcntl, read and write of ship.c work
 * on them unchanged.
 *
 * Blocking without stalling: the process's calls arrive one at a time on
 * one connection, so a call that would block is tried non-blocking
 * (MSG_DONTWAIT, or O_NONBLOCK for the moment of a connect) and then waits
 * in poll for at most the request's wait (ms, -1 = until done).  If that
 * runs out, the reply is LAT_ERR_WAIT and nothing was done: the client asks
 * again after letting its other threads' calls through.  Every wait also
 * watches the PROC connection, so a process that dies never leaves this
 * thread stuck on a socket.  The program's own O_NONBLOCK (set by FCNTL)
 * and MSG_DONTWAIT keep their meaning: one attempt, EAGAIN as Linux says.
 *
 * This runs in the job's I/O worker, as the owner with no capabilities:
 * raw sockets, ports below 1024 and the options that need CAP_NET_ADMIN
 * or CAP_NET_RAW are the kernel's to refuse, as on any Linux node.
 */
#include "shipcall.h"
#include "fwd_posix_srv.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <limits.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

/* ---- helpers (requests are decoded by the generated fwd_posix_ciod.c) ---- */

/* The real socket behind an open remote descriptor. */
static bool sock_fd(struct call *k, const struct rfd *r, int *fd)
{
    if (r->kind != FD_REAL) {
        fail(k, ENOTSOCK);              /* the standard streams */
        return false;
    }
    *fd = r->fd;
    return true;
}

/* A sockaddr of len bytes (the decoder checked 2..LAT_MAX_SOCKADDR). */
static void get_addr(const void *addr, size_t len, struct sockaddr_storage *sa)
{
    memset(sa, 0, sizeof(*sa));
    memcpy(sa, addr, len);
}

static bool nonblocking(int fd, int flags)
{
    int fl = fcntl(fd, F_GETFL);
    return (flags & MSG_DONTWAIT) || (fl >= 0 && (fl & O_NONBLOCK));
}

/* Wait until fd is ready for ev: 1 ready, 0 the wait ran out, -1 the
 * process's connection spoke (it is gone, or out of step). */
static int wait_ready(struct proc *p, int fd, short ev, int ms)
{
    struct pollfd pf[2] = { { fd, ev, 0 }, { p->c->fd, POLLIN, 0 } };
    int n;

    while ((n = poll(pf, 2, ms)) < 0 && errno == EINTR)
        ;
    if (n <= 0)
        return 0;
    if (pf[1].revents)
        return -1;
    return 1;
}

/* After a wait: ready, gone, or not yet (nothing was done). */
static int waited(struct call *k, int w)
{
    return w == 0 ? fail(k, LAT_ERR_WAIT) : fail(k, EINTR);
}

/* ---- the calls ---- */

int srv_socket(struct proc *p, struct call *k, int domain, int type, int proto)
{
    int fd;

    /* AF_UNIX, netlink and packet sockets belong to the compute node */
    if (domain != AF_INET && domain != AF_INET6)
        return fail(k, EAFNOSUPPORT);
    fd = socket(domain, type | SOCK_CLOEXEC, proto);
    if (fd < 0)
        return result(k, -1);
    for (unsigned i = 0; i < LAT_MAX_FDS; i++)
        if (p->fds[i].kind == FD_FREE) {
            p->fds[i] = (struct rfd){ .kind = FD_REAL, .fd = fd, .sock = true };
            return result(k, (int64_t)i);
        }
    close(fd);
    return fail(k, EMFILE);
}

int srv_connect(struct proc *p, struct call *k, struct rfd *r, int ms, int resume, const void *addr,
                uint32_t addrlen)
{
    struct sockaddr_storage sa;
    int fd, fl, rc, e;

    if (!sock_fd(k, r, &fd))
        return 0;
    get_addr(addr, addrlen, &sa);
    if ((fl = fcntl(fd, F_GETFL)) < 0)
        return result(k, -1);
    if (fl & O_NONBLOCK)
        return result(k, connect(fd, (struct sockaddr *)&sa, addrlen));
    /* the program's connect blocks; ours must not, beyond the wait */
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    rc = connect(fd, (struct sockaddr *)&sa, addrlen);
    e = errno;
    fcntl(fd, F_SETFL, fl);
    if (rc == 0)
        return result(k, 0);
    if (resume && e == EISCONN)
        return result(k, 0);              /* the waited connect has completed */
    if (e != EINPROGRESS && !(resume && e == EALREADY))
        return fail(k, e);
    int w = wait_ready(p, fd, POLLOUT, ms);
    if (w <= 0)
        return waited(k, w);
    socklen_t len = sizeof(e);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) < 0)
        return result(k, -1);
    return e ? fail(k, e) : result(k, 0);
}

int srv_bind(struct proc *p, struct call *k, struct rfd *r, const void *addr, uint32_t addrlen)
{
    struct sockaddr_storage sa;
    int fd;

    if (!sock_fd(k, r, &fd))
        return 0;
    (void)p;
    get_addr(addr, addrlen, &sa);
    return result(k, bind(fd, (struct sockaddr *)&sa, addrlen));    /* low ports: the kernel says */
}

#define SEND_FLAGS (MSG_DONTWAIT | MSG_OOB | MSG_EOR | MSG_MORE | MSG_NOSIGNAL | MSG_CONFIRM)
#define RECV_FLAGS (MSG_DONTWAIT | MSG_OOB | MSG_PEEK | MSG_TRUNC | MSG_WAITALL)

static bool is_stream(int fd)
{
    int type = 0;
    socklen_t tl = sizeof(type);
    getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl);
    return type == SOCK_STREAM;
}

/* Drops the first n bytes of v[0..*cnt) (a partial send or receive). */
static void iov_advance(struct iovec **v, size_t *cnt, size_t n)
{
    while (*cnt && n >= (*v)->iov_len) {
        n -= (*v)->iov_len;
        (*v)++;
        (*cnt)--;
    }
    if (*cnt) {
        (*v)->iov_base = (char *)(*v)->iov_base + n;
        (*v)->iov_len -= n;
    }
}

/* A send, as Linux does it: a blocking stream sends all len bytes of
 * v[0..cnt) (v is consumed), waiting up to ms each time the socket is
 * full; a wait that runs out after some bytes went returns their count.
 * Returns bytes sent, or -1 with *err when nothing went (LAT_ERR_WAIT: the
 * wait ran out; EINTR: the process's connection spoke). */
static int64_t send_iov(struct proc *p, int fd, struct msghdr *mh, struct iovec *v, size_t cnt, uint64_t len,
                        int flags, int ms, int *err)
{
    bool nb = nonblocking(fd, flags), stream = is_stream(fd);
    uint64_t sent = 0;

    for (;;) {
        mh->msg_iov = v;
        mh->msg_iovlen = cnt;
        ssize_t n = sendmsg(fd, mh, flags | MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n >= 0) {
            sent += (uint64_t)n;
            if (sent >= len || nb || !stream)
                return (int64_t)sent;
            iov_advance(&v, &cnt, (size_t)n);
            continue;
        }
        if (errno != EAGAIN || nb)
            return sent ? (int64_t)sent : (*err = errno, -1);
        int w = wait_ready(p, fd, POLLOUT, ms);
        if (w <= 0)
            return sent ? (int64_t)sent : (*err = w == 0 ? LAT_ERR_WAIT : EINTR, -1);
    }
}

/* A receive into v[0..cnt) of count bytes (v is consumed); sender and
 * msg_flags into sn.  MSG_WAITALL on a blocking stream waits for count
 * bytes, each wait up to ms (one that runs out returns what came).
 * Returns bytes received, or -1 with *err as send_iov. */
static int64_t recv_iov(struct proc *p, int fd, struct lat_sockname *sn, struct iovec *v, size_t cnt,
                        uint64_t count, int flags, int ms, int *err)
{
    bool nb = nonblocking(fd, flags);
    short ev = (flags & MSG_OOB) ? POLLPRI : POLLIN;
    uint64_t got = 0;

    memset(sn, 0, sizeof(*sn));
    for (;;) {
        struct sockaddr_storage sa;
        struct msghdr mh = { .msg_name = &sa, .msg_namelen = sizeof(sa), .msg_iov = v, .msg_iovlen = cnt };
        ssize_t n = recvmsg(fd, &mh, (flags & ~MSG_WAITALL) | MSG_DONTWAIT);
        if (n >= 0) {
            if (!got) {
                sn->len = mh.msg_namelen <= sizeof(sn->addr) ? mh.msg_namelen : 0;
                memcpy(sn->addr, &sa, sn->len);
            }
            sn->flags = (uint32_t)mh.msg_flags;
            got += (uint64_t)n;
            if (n == 0 || got >= count || nb || !(flags & MSG_WAITALL) || (flags & MSG_PEEK))
                return (int64_t)got;
            iov_advance(&v, &cnt, (size_t)n);
            continue;
        }
        if (errno != EAGAIN || nb)
            return got ? (int64_t)got : (*err = errno, -1);
        int w = wait_ready(p, fd, ev, ms);
        if (w <= 0)
            return got ? (int64_t)got : (*err = w == 0 ? LAT_ERR_WAIT : EINTR, -1);
    }
}

/* A blocking send of a stream sends everything, as Linux does; a wait
 * that runs out after some bytes went returns their count. */
int srv_sendmsg(struct proc *p, struct call *k, struct rfd *r, int flags, const void *name,
                uint32_t nl, const void *buf, uint64_t len, int ms)
{
    struct sockaddr_storage sa;
    int fd, err;

    if (!sock_fd(k, r, &fd))
        return 0;
    if (nl && nl < sizeof(sa_family_t))
        return fail(k, EINVAL);
    if (nl)
        get_addr(name, nl, &sa);
    if (flags & ~SEND_FLAGS)
        return fail(k, EOPNOTSUPP);
    struct iovec v = { (void *)buf, len };
    struct msghdr mh = { .msg_name = nl ? &sa : NULL, .msg_namelen = (socklen_t)nl };
    int64_t n = send_iov(p, fd, &mh, &v, 1, len, flags, ms, &err);
    return n < 0 ? fail(k, err) : result(k, n);
}

/* Reply: struct lat_sockname (sender, msg_flags), then the bytes. */
int srv_recvmsg(struct proc *p, struct call *k, struct rfd *r, int flags, struct lat_sockname *sn,
                void *buf, uint64_t count, int ms)
{
    int fd, err;

    if (!sock_fd(k, r, &fd))
        return 0;
    if (flags & ~RECV_FLAGS)
        return fail(k, EOPNOTSUPP);
    /* A stream's MSG_TRUNC drops bytes without copying them, but the reply
     * carries min(result, count) bytes of buf: receive them for real instead
     * (consumed all the same), so the program never gets stale buffer bytes. */
    if ((flags & MSG_TRUNC) && is_stream(fd))
        flags &= ~MSG_TRUNC;
    struct iovec v = { buf, count };
    int64_t n = recv_iov(p, fd, sn, &v, 1, count, flags, ms, &err);
    /* a datagram's MSG_TRUNC may report more than fits: only count bytes travel (the decoder) */
    return n < 0 ? fail(k, err) : result(k, n);
}

/* ---- rendezvous: the bytes stay in the process's memory (section 6.1) ----
 *
 * With its big memory shared (LAT_DP_SHARE) the socket call runs on our
 * mapping of it: one copy, as the program's own call would do.  Otherwise
 * the bytes go through the connection's buffer, a window at a time, with
 * process_vm_readv/writev.  A receive through the window peeks, writes the
 * process's memory, and only then drops what it wrote from the socket, so
 * memory the process cannot have written (EFAULT) loses no data. */

/* What SEND_RDV and RECV_RDV check first (bad: flags they do not pass
 * on); false when the call already has its error. */
static bool rdv_begin(struct proc *p, struct call *k, struct rfd *r, int bad, const struct lat_rdv_seg *segs,
                      uint32_t nseg, struct iovec *rv, uint64_t *total, int *fd)
{
    int err;

    if (!sock_fd(k, r, fd))
        return false;
    if (!(p->dp.flags & LAT_DP_VM))
        return fail(k, EOPNOTSUPP), false;      /* not granted in the hello: send the bytes */
    if (!proc_same_image(p))
        return fail(k, EFAULT), false;          /* it exec'd or ended: the connection closes */
    if (bad)
        return fail(k, EOPNOTSUPP), false;
    if ((err = dp_seg_iovecs(segs, nseg, rv, total)) != 0)
        return fail(k, err), false;
    return true;
}

static void rdv_count(bool shm, int64_t n)
{
    uint64_t b = n > 0 ? (uint64_t)n : 0;

    atomic_fetch_add_explicit(&dp_ctr[LAT_CTR_SOCK_RDV], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&dp_ctr[LAT_CTR_SOCK_RDV_BYTES], b, memory_order_relaxed);
    if (shm) {
        atomic_fetch_add_explicit(&dp_ctr[LAT_CTR_SOCK_SHM], 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&dp_ctr[LAT_CTR_SOCK_SHM_BYTES], b, memory_order_relaxed);
    }
}

static int rdv_fault(void)
{
    atomic_fetch_add_explicit(&dp_ctr[LAT_CTR_RDV_FAULT], 1, memory_order_relaxed);
    return EFAULT;
}

/* Through the window: read a window of the process's memory, send it all
 * (as send_iov), the next; a short send ends it. */
static int64_t send_window(struct proc *p, int fd, struct msghdr *mh, const struct iovec *rv, unsigned n,
                           uint64_t total, int flags, int ms, int *err)
{
    char *win = p->c->buf;
    struct iovec part[LAT_RDV_MAXSEG];
    uint64_t done = 0;

    if (!is_stream(fd) && total > LAT_MAX_IO)
        return *err = EMSGSIZE, -1;     /* a datagram is one send; none is that large */
    do {
        size_t want = total - done < LAT_MAX_IO ? (size_t)(total - done) : LAT_MAX_IO;
        int k = dp_seg_slice(rv, n, done, want, part);
        struct iovec lv = { win, want };
        ssize_t m = want ? process_vm_readv(p->pid, &lv, 1, part, (unsigned long)k, 0) : 0;
        if (m < 0 || (size_t)m < want)
            return done ? (int64_t)done : (*err = rdv_fault(), -1);
        int64_t s = send_iov(p, fd, mh, &lv, 1, want, flags, ms, err);
        if (s < 0)
            return done ? (int64_t)done : -1;
        done += (uint64_t)s;
        if ((size_t)s < want)
            break;
    } while (done < total);
    return (int64_t)done;
}

/* Through the window: peek, write the process's memory, drop what was
 * written; then (a blocking stream with MSG_WAITALL: until total) more if
 * it is there at once.  A datagram is one window (no datagram is larger). */
static int64_t recv_window(struct proc *p, int fd, struct lat_sockname *sn, const struct iovec *rv,
                           unsigned n, uint64_t total, int flags, int ms, int *err)
{
    char *win = p->c->buf;
    struct iovec part[LAT_RDV_MAXSEG];
    bool stream = is_stream(fd);
    uint64_t got = 0;

    for (;;) {
        size_t want = total - got < LAT_MAX_IO ? (size_t)(total - got) : LAT_MAX_IO;
        struct iovec lv = { win, want };
        struct lat_sockname more;
        int f = (flags & ~MSG_WAITALL) | MSG_PEEK | (got && !(flags & MSG_WAITALL) ? MSG_DONTWAIT : 0);
        int64_t r = recv_iov(p, fd, got ? &more : sn, &lv, 1, want, f, ms, err);
        if (r < 0)
            return got ? (int64_t)got : -1;
        size_t m = (uint64_t)r < want ? (size_t)r : want;   /* MSG_TRUNC: r may be the datagram's length */
        int k = dp_seg_slice(rv, n, got, m, part);
        bool copied = !(stream && (flags & MSG_TRUNC));     /* TCP's MSG_TRUNC drops without copying */
        if (m && copied && process_vm_writev(p->pid, &lv, 1, part, (unsigned long)k, 0) != (ssize_t)m)
            return got ? (int64_t)got : (*err = rdv_fault(), -1);
        if (!(flags & MSG_PEEK))        /* now it may go: MSG_TRUNC drops without copying */
            recv(fd, NULL, stream ? m : 0, MSG_TRUNC | MSG_DONTWAIT);
        if (!stream || (flags & MSG_PEEK))
            return r;
        got += m;
        if (r == 0 || got >= total)
            return (int64_t)got;
    }
}

int srv_send_rdv(struct proc *p, struct call *k, struct rfd *r, int flags, const void *name, uint32_t nl,
                 const struct lat_rdv_seg *segs, uint32_t nseg, int ms)
{
    struct iovec rv[LAT_RDV_MAXSEG], lv[LAT_RDV_MAXSEG];
    struct sockaddr_storage sa;
    uint64_t total;
    int fd, err;

    if (!rdv_begin(p, k, r, flags & ~SEND_FLAGS, segs, nseg, rv, &total, &fd))
        return 0;
    if (nl && nl < sizeof(sa_family_t))
        return fail(k, EINVAL);
    if (nl)
        get_addr(name, nl, &sa);
    struct msghdr mh = { .msg_name = nl ? &sa : NULL, .msg_namelen = (socklen_t)nl };
    bool shm = dp_shm_translate(&p->shm, rv, nseg, lv);
    int64_t n = shm ? send_iov(p, fd, &mh, lv, nseg, total, flags, ms, &err)
                    : send_window(p, fd, &mh, rv, nseg, total, flags, ms, &err);
    if (n < 0)
        return fail(k, err);
    rdv_count(shm, n);
    return result(k, n);
}

int srv_recv_rdv(struct proc *p, struct call *k, struct rfd *r, int flags, struct lat_sockname *from,
                 const struct lat_rdv_seg *segs, uint32_t nseg, int ms)
{
    struct iovec rv[LAT_RDV_MAXSEG], lv[LAT_RDV_MAXSEG];
    struct lat_sockname sn;
    uint64_t total;
    int fd, err;

    if (!rdv_begin(p, k, r, flags & ~RECV_FLAGS, segs, nseg, rv, &total, &fd))
        return 0;
    bool shm = dp_shm_translate(&p->shm, rv, nseg, lv);
    int64_t n = shm ? recv_iov(p, fd, &sn, lv, nseg, total, flags, ms, &err)
                    : recv_window(p, fd, &sn, rv, nseg, total, flags, ms, &err);
    if (n < 0)
        return fail(k, err);
    rdv_count(shm, n < (int64_t)total ? n : (int64_t)total);
    *from = sn;     /* last: the window may have covered the reply's place in the buffer */
    return result(k, n);
}

int srv_shutdown(struct proc *p, struct call *k, struct rfd *r, int how)
{
    int fd;

    (void)p;
    return sock_fd(k, r, &fd) ? result(k, shutdown(fd, how)) : 0;
}

int srv_setsockopt(struct proc *p, struct call *k, struct rfd *r, int level, int name, const void *val,
                   uint32_t len)
{
    int fd;

    (void)p;
    if (!sock_fd(k, r, &fd))
        return 0;
    return result(k, setsockopt(fd, level, name, val, len));
}

int srv_getsockopt(struct proc *p, struct call *k, struct rfd *r, int level, int name, void *val,
                   uint32_t want)
{
    socklen_t len = want;
    int fd;

    (void)p;
    if (!sock_fd(k, r, &fd))
        return 0;
    if (getsockopt(fd, level, name, val, &len) < 0)
        return result(k, -1);
    return result(k, len < want ? len : want);
}

static int name_call(struct call *k, struct rfd *r, void *addr,
                     int (*fn)(int, struct sockaddr *, socklen_t *))
{
    socklen_t len = LAT_MAX_SOCKADDR;
    int fd;

    if (!sock_fd(k, r, &fd))
        return 0;
    if (fn(fd, addr, &len) < 0)
        return result(k, -1);
    return result(k, len < LAT_MAX_SOCKADDR ? len : LAT_MAX_SOCKADDR);
}

int srv_getsockname(struct proc *p, struct call *k, struct rfd *r, void *addr)
{
    (void)p;
    return name_call(k, r, addr, getsockname);
}

int srv_getpeername(struct proc *p, struct call *k, struct rfd *r, void *addr)
{
    (void)p;
    return name_call(k, r, addr, getpeername);
}

/* poll(2) on remote descriptors, waiting at most the request's wait.  A
 * bad descriptor is POLLNVAL as on Linux; 0 is ready when the rank's
 * standard input has data or ended (stdin.c; always, without input), 1 and
 * 2 always take output. */
int srv_poll(struct proc *p, struct call *k, struct lat_pollfd *lp, uint32_t nfds, int ms)
{
    static _Thread_local struct pollfd pf[LAT_MAX_FDS + 1];
    int n, ready = 0;

    for (uint32_t i = 0; i < nfds; i++) {
        int32_t r = lp[i].fd;
        lp[i].revents = 0;
        pf[i] = (struct pollfd){ -1, 0, 0 };
        if (r < 0)
            continue;
        if (r >= (int32_t)LAT_MAX_FDS || p->fds[r].kind == FD_FREE)
            lp[i].revents = POLLNVAL;
        else if (p->fds[r].kind == FD_STDIN && stdin_fd(p->rank) >= 0)
            pf[i] = (struct pollfd){ stdin_fd(p->rank), (short)(lp[i].events & POLLIN), 0 };
        else if (p->fds[r].kind == FD_STDIN)
            lp[i].revents = lp[i].events & POLLIN;
        else if (p->fds[r].kind != FD_REAL)
            lp[i].revents = lp[i].events & POLLOUT;
        else
            pf[i] = (struct pollfd){ p->fds[r].fd, lp[i].events, 0 };
        ready += lp[i].revents != 0;
    }
    pf[nfds] = (struct pollfd){ p->c->fd, POLLIN, 0 };
    while ((n = poll(pf, (nfds_t)nfds + 1, ready ? 0 : ms)) < 0 && errno == EINTR)
        ;
    if (n < 0)
        return result(k, -1);
    if (pf[nfds].revents)
        return fail(k, EINTR);          /* the process is gone */
    for (uint32_t i = 0; i < nfds; i++)
        if (pf[i].fd >= 0 && pf[i].revents) {
            lp[i].revents = pf[i].revents;
            ready++;
        }
    /* the request's bytes are the reply's: the array is answered in place (inout) */
    return result(k, ready);
}
