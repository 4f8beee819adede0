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
#include "fwd_posix_srv.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
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

int srv_socket(struct proc *p, struct call *k, int domain, int type, int proto)
{
    int fd;

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
    get_addr(addr, addrlen, &sa);
    if (!port_allowed(p, &sa))
        return fail(k, EACCES);
    return result(k, bind(fd, (struct sockaddr *)&sa, addrlen));
}

#define SEND_FLAGS (MSG_DONTWAIT | MSG_OOB | MSG_EOR | MSG_MORE | MSG_NOSIGNAL | MSG_CONFIRM)
#define RECV_FLAGS (MSG_DONTWAIT | MSG_OOB | MSG_PEEK | MSG_TRUNC | MSG_WAITALL)

/* A blocking send of a stream sends everything, as Linux does; a wait
 * that runs out after some bytes went returns their count. */
int srv_sendmsg(struct proc *p, struct call *k, struct rfd *r, int flags, const void *name,
                uint32_t nl, const void *buf, uint64_t len, int ms)
{
    struct sockaddr_storage sa;
    size_t sent = 0;
    int fd;

    if (!sock_fd(k, r, &fd))
        return 0;
    if (nl && nl < sizeof(sa_family_t))
        return fail(k, EINVAL);
    if (nl)
        get_addr(name, nl, &sa);
    if (flags & ~SEND_FLAGS)
        return fail(k, EOPNOTSUPP);
    bool nb = nonblocking(fd, flags);
    for (;;) {
        struct iovec v = { (char *)buf + sent, len - sent };
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
int srv_recvmsg(struct proc *p, struct call *k, struct rfd *r, int flags, struct lat_sockname *sn,
                void *buf, uint64_t count, int ms)
{
    char *data = buf;
    int fd;

    if (!sock_fd(k, r, &fd))
        return 0;
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
    /* MSG_TRUNC may report more than fits: only count bytes travel (the decoder) */
    return result(k, (int64_t)got);
}

int srv_shutdown(struct proc *p, struct call *k, struct rfd *r, int how)
{
    int fd;

    (void)p;
    return sock_fd(k, r, &fd) ? result(k, shutdown(fd, how)) : 0;
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

int srv_setsockopt(struct proc *p, struct call *k, struct rfd *r, int level, int name, const void *val,
                   uint32_t len)
{
    int fd;

    if (!sock_fd(k, r, &fd))
        return 0;
    if (option_privileged(level, name) && !privileged(p))
        return fail(k, EPERM);
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
 * bad descriptor is POLLNVAL as on Linux; the standard streams are
 * always ready (0 reads end of file, 1 and 2 take output). */
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
