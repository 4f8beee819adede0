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
 * ciod may run as root: this thread's file-system identity is the job
 * owner's but its network capabilities are not, so what needs privilege
 * is refused here for other users: raw and packet sockets, ports below
 * 1024, and the socket options that need CAP_NET_ADMIN/CAP_NET_RAW.
 */
#include "shipcall.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ---- helpers ---- */

/* The real socket behind remote descriptor a[i]. */
static bool arg_sock(struct proc *p, struct call *k, int i, int *fd)
{
    int64_t n = k->rq.a[i];

    if (n < 0 || n >= LAT_MAX_FDS || p->fds[n].kind == FD_FREE) {
        fail(k, EBADF);
        return false;
    }
    if (p->fds[n].kind != FD_REAL) {
        fail(k, ENOTSOCK);              /* the standard streams */
        return false;
    }
    *fd = p->fds[n].fd;
    return true;
}

static bool arg_wait(struct call *k, int i, int *ms)
{
    int64_t w = k->rq.a[i];

    if (w < -1 || w > INT32_MAX) {
        fail(k, EINVAL);
        return false;
    }
    *ms = (int)w;
    return true;
}

/* A sockaddr of len bytes at data + off. */
static bool arg_addr(struct call *k, size_t off, size_t len, struct sockaddr_storage *sa)
{
    if (len < sizeof(sa_family_t) || len > LAT_MAX_SOCKADDR || off + len > k->dlen) {
        fail(k, EINVAL);
        return false;
    }
    memset(sa, 0, sizeof(*sa));
    memcpy(sa, k->data + off, len);
    return true;
}

static bool privileged(const struct proc *p)
{
    return p->who.uid == 0;
}

/* Binding below 1024 needs root on a Linux node too. */
static bool port_allowed(const struct proc *p, const struct sockaddr_storage *sa)
{
    in_port_t port = 0;

    if (sa->ss_family == AF_INET)
        port = ntohs(((const struct sockaddr_in *)sa)->sin_port);
    else if (sa->ss_family == AF_INET6)
        port = ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
    return port == 0 || port >= 1024 || privileged(p);
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

int sock_socket(struct proc *p, struct call *k)
{
    int domain, type, proto, fd;

    if (!arg_int(k, 0, &domain) || !arg_int(k, 1, &type) || !arg_int(k, 2, &proto))
        return 0;
    /* AF_UNIX, netlink and packet sockets belong to the compute node */
    if (domain != AF_INET && domain != AF_INET6)
        return fail(k, EAFNOSUPPORT);
    int kind = type & ~(SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (kind != SOCK_STREAM && kind != SOCK_DGRAM && !privileged(p))
        return fail(k, EPERM);          /* raw sockets need CAP_NET_RAW */
    fd = socket(domain, type | SOCK_CLOEXEC, proto);
    if (fd < 0)
        return result(k, -1);
    for (unsigned i = 0; i < LAT_MAX_FDS; i++)
        if (p->fds[i].kind == FD_FREE) {
            p->fds[i] = (struct rfd){ .kind = FD_REAL, .fd = fd };
            return result(k, (int64_t)i);
        }
    close(fd);
    return fail(k, EMFILE);
}

int sock_connect(struct proc *p, struct call *k)
{
    struct sockaddr_storage sa;
    int fd, ms, fl, rc, e;

    if (!arg_sock(p, k, 0, &fd) || !arg_wait(k, 1, &ms) || !arg_addr(k, 0, k->dlen, &sa))
        return 0;
    if ((fl = fcntl(fd, F_GETFL)) < 0)
        return result(k, -1);
    if (fl & O_NONBLOCK)
        return result(k, connect(fd, (struct sockaddr *)&sa, (socklen_t)k->dlen));
    /* the program's connect blocks; ours must not, beyond the wait */
    fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    rc = connect(fd, (struct sockaddr *)&sa, (socklen_t)k->dlen);
    e = errno;
    fcntl(fd, F_SETFL, fl);
    if (rc == 0)
        return result(k, 0);
    if (k->rq.a[2] && e == EISCONN)
        return result(k, 0);              /* the waited connect has completed */
    if (e != EINPROGRESS && !(k->rq.a[2] && e == EALREADY))
        return fail(k, e);
    int w = wait_ready(p, fd, POLLOUT, ms);
    if (w <= 0)
        return waited(k, w);
    socklen_t len = sizeof(e);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len) < 0)
        return result(k, -1);
    return e ? fail(k, e) : result(k, 0);
}

int sock_bind(struct proc *p, struct call *k)
{
    struct sockaddr_storage sa;
    int fd;

    if (!arg_sock(p, k, 0, &fd) || !arg_addr(k, 0, k->dlen, &sa))
        return 0;
    if (!port_allowed(p, &sa))
        return fail(k, EACCES);
    return result(k, bind(fd, (struct sockaddr *)&sa, (socklen_t)k->dlen));
}

#define SEND_FLAGS (MSG_DONTWAIT | MSG_OOB | MSG_EOR | MSG_MORE | MSG_NOSIGNAL | MSG_CONFIRM)
#define RECV_FLAGS (MSG_DONTWAIT | MSG_OOB | MSG_PEEK | MSG_TRUNC | MSG_WAITALL)

/* A blocking send of a stream sends everything, as Linux does; a wait
 * that runs out after some bytes went returns their count. */
int sock_sendmsg(struct proc *p, struct call *k)
{
    struct sockaddr_storage sa;
    int fd, flags, ms;
    int64_t nl = k->rq.a[2];

    if (!arg_sock(p, k, 0, &fd) || !arg_int(k, 1, &flags) || !arg_wait(k, 3, &ms))
        return 0;
    if (nl < 0 || (uint64_t)nl > k->dlen || (nl && !arg_addr(k, 0, (size_t)nl, &sa)))
        return k->err ? 0 : fail(k, EINVAL);
    if (flags & ~SEND_FLAGS)
        return fail(k, EOPNOTSUPP);
    size_t len = k->dlen - (size_t)nl, sent = 0;
    if (len > LAT_MAX_IO)
        return fail(k, EINVAL);
    bool nb = nonblocking(fd, flags);
    for (;;) {
        struct iovec v = { k->data + nl + sent, len - sent };
        struct msghdr mh = { .msg_name = nl ? &sa : NULL, .msg_namelen = (socklen_t)nl,
                             .msg_iov = &v, .msg_iovlen = 1 };
        ssize_t n = sendmsg(fd, &mh, flags | MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n >= 0) {
            sent += (size_t)n;
            int type = 0;
            socklen_t tl = sizeof(type);
            getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl);
            if (sent == len || nb || type != SOCK_STREAM)
                return result(k, (int64_t)sent);
            continue;
        }
        if (errno != EAGAIN || nb)
            return sent ? result(k, (int64_t)sent) : result(k, -1);
        int w = wait_ready(p, fd, POLLOUT, ms);
        if (w <= 0)
            return sent ? result(k, (int64_t)sent) : waited(k, w);
    }
}

/* Reply: struct lat_sockname (sender, msg_flags), then the bytes. */
int sock_recvmsg(struct proc *p, struct call *k)
{
    struct lat_sockname *sn = (struct lat_sockname *)p->c->buf;
    char *data = p->c->buf + sizeof(*sn);
    int fd, flags, ms;
    int64_t count = k->rq.a[2];

    if (!arg_sock(p, k, 0, &fd) || !arg_int(k, 1, &flags) || !arg_wait(k, 3, &ms))
        return 0;
    if (count < 0 || (uint64_t)count > LAT_MAX_IO)
        return fail(k, EINVAL);
    if (flags & ~RECV_FLAGS)
        return fail(k, EOPNOTSUPP);
    bool nb = nonblocking(fd, flags);
    size_t got = 0;
    memset(sn, 0, sizeof(*sn));
    for (;;) {
        struct sockaddr_storage sa;
        struct iovec v = { data + got, (size_t)count - got };
        struct msghdr mh = { .msg_name = &sa, .msg_namelen = sizeof(sa), .msg_iov = &v,
                             .msg_iovlen = 1 };
        ssize_t n = recvmsg(fd, &mh, (flags & ~MSG_WAITALL) | MSG_DONTWAIT);
        if (n >= 0) {
            if (!got) {
                sn->len = mh.msg_namelen <= sizeof(sn->addr) ? mh.msg_namelen : 0;
                memcpy(sn->addr, &sa, sn->len);
            }
            sn->flags = (uint32_t)mh.msg_flags;
            got += (size_t)n;
            /* MSG_WAITALL: a blocking stream receive waits for count bytes */
            if (n == 0 || got >= (size_t)count || nb || !(flags & MSG_WAITALL) || (flags & MSG_PEEK))
                break;
            continue;
        }
        if (errno != EAGAIN || nb || got) {
            if (got)
                break;
            return result(k, -1);
        }
        int w = wait_ready(p, fd, (flags & MSG_OOB) ? POLLPRI : POLLIN, ms);
        if (w <= 0)
            return waited(k, w);
    }
    /* MSG_TRUNC may report more than fits: only count bytes travel */
    k->out = sn;
    k->outlen = sizeof(*sn) + (got < (size_t)count ? got : (size_t)count);
    return result(k, (int64_t)got);
}

int sock_shutdown(struct proc *p, struct call *k)
{
    int fd, how;

    if (!arg_sock(p, k, 0, &fd) || !arg_int(k, 1, &how))
        return 0;
    return result(k, shutdown(fd, how));
}

/* Options that need CAP_NET_ADMIN or CAP_NET_RAW, which a root ciod has. */
static bool option_privileged(int level, int name)
{
    if (level == SOL_SOCKET)
        return name == SO_BINDTODEVICE || name == SO_MARK || name == SO_PRIORITY ||
               name == SO_DEBUG || name == SO_RCVBUFFORCE || name == SO_SNDBUFFORCE;
    if (level == IPPROTO_IP)
        return name == IP_TRANSPARENT;
    if (level == IPPROTO_IPV6)
        return name == IPV6_TRANSPARENT;
    return false;
}

int sock_setsockopt(struct proc *p, struct call *k)
{
    int fd, level, name;

    if (!arg_sock(p, k, 0, &fd) || !arg_int(k, 1, &level) || !arg_int(k, 2, &name))
        return 0;
    if (k->dlen > LAT_MAX_SOCKOPT)
        return fail(k, EINVAL);
    if (option_privileged(level, name) && !privileged(p))
        return fail(k, EPERM);
    return result(k, setsockopt(fd, level, name, k->data, (socklen_t)k->dlen));
}

int sock_getsockopt(struct proc *p, struct call *k)
{
    int fd, level, name;
    int64_t want = k->rq.a[3];

    if (!arg_sock(p, k, 0, &fd) || !arg_int(k, 1, &level) || !arg_int(k, 2, &name))
        return 0;
    if (want < 0 || want > LAT_MAX_SOCKOPT)
        return fail(k, EINVAL);
    socklen_t len = (socklen_t)want;
    if (getsockopt(fd, level, name, p->c->buf, &len) < 0)
        return result(k, -1);
    k->out = p->c->buf;
    k->outlen = len < (socklen_t)want ? len : (size_t)want;
    return result(k, (int64_t)k->outlen);
}

static int name_call(struct proc *p, struct call *k, int (*fn)(int, struct sockaddr *, socklen_t *))
{
    int fd;
    socklen_t len = LAT_MAX_SOCKADDR;

    if (!arg_sock(p, k, 0, &fd))
        return 0;
    if (fn(fd, (struct sockaddr *)p->c->buf, &len) < 0)
        return result(k, -1);
    k->out = p->c->buf;
    k->outlen = len < LAT_MAX_SOCKADDR ? len : LAT_MAX_SOCKADDR;
    return result(k, (int64_t)k->outlen);
}

int sock_getsockname(struct proc *p, struct call *k) { return name_call(p, k, getsockname); }
int sock_getpeername(struct proc *p, struct call *k) { return name_call(p, k, getpeername); }

/* poll(2) on remote descriptors, waiting at most the request's wait.  A
 * bad descriptor is POLLNVAL as on Linux; the standard streams are
 * always ready (0 reads end of file, 1 and 2 take output). */
int sock_poll(struct proc *p, struct call *k)
{
    static _Thread_local struct pollfd pf[LAT_MAX_FDS + 1];
    struct lat_pollfd *lp = (struct lat_pollfd *)k->data;
    int64_t nfds = k->rq.a[0];
    int ms, n, ready = 0;

    if (!arg_wait(k, 1, &ms))
        return 0;
    if (nfds < 0 || nfds > LAT_MAX_FDS || k->dlen != (size_t)nfds * sizeof(*lp))
        return fail(k, EINVAL);
    for (int64_t i = 0; i < nfds; i++) {
        int32_t r = lp[i].fd;
        lp[i].revents = 0;
        pf[i] = (struct pollfd){ -1, 0, 0 };
        if (r < 0)
            continue;
        if (r >= (int32_t)LAT_MAX_FDS || p->fds[r].kind == FD_FREE)
            lp[i].revents = POLLNVAL;
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
    for (int64_t i = 0; i < nfds; i++)
        if (pf[i].fd >= 0 && pf[i].revents) {
            lp[i].revents = pf[i].revents;
            ready++;
        }
    /* the request's bytes are the reply's: the array is answered in place */
    k->out = lp;
    k->outlen = k->dlen;
    return result(k, ready);
}
