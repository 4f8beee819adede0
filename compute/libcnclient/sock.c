/*
 * sock.c - the socket and poll functions of libc that are not the system
 * call of their name (lattice/syscalls.def's HAND lines and glibc's own
 * names): each becomes the system call it stands for, handed to the
 * shipping core (compute/shipc/sock.c, poll.c: the rule deciding which
 * sockets are shipped, the calls on shipped ones, and waits over mixed
 * descriptors, as under cnk).  The plain ones (socket, connect, sendto,
 * poll, select, epoll_wait...) are made from the list (interpose.c).
 *
 * Only the program's calls come here: glibc's own socket calls (the DNS
 * resolver, getaddrinfo's address sorting, nscd) use internal symbols that
 * an LD_PRELOAD library cannot interpose, so they stay on the compute node.
 */
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>

#include "client.h"

/* fortified entry points (glibc headers declare them only with _FORTIFY_SOURCE) */
ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags);
ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
                       struct sockaddr *addr, socklen_t *alen);
int __poll_chk(struct pollfd *fds, nfds_t nfds, int timeout, size_t fdslen);
int __ppoll_chk(struct pollfd *fds, nfds_t nfds, const struct timespec *ts, const sigset_t *ss,
                size_t fdslen);

#define SIGSET_BYTES 8          /* the kernel's sigset_t (_NSIG / 8) */

ssize_t send(int fd, const void *buf, size_t n, int flags)
{
    return lat_sys(SYS_sendto, fd, (long)buf, (long)n, flags, 0, 0);
}

ssize_t recv(int fd, void *buf, size_t n, int flags)
{
    return lat_sys(SYS_recvfrom, fd, (long)buf, (long)n, flags, 0, 0);
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
    return lat_sys(SYS_recvfrom, fd, (long)buf, (long)n, flags, (long)addr, (long)alen);
}

int __poll_chk(struct pollfd *p, nfds_t n, int timeout, size_t fdslen)
{
    if (fdslen / sizeof *p < n)
        __chk_fail();
    return poll(p, n, timeout);
}

/* The kernel writes the time left back: glibc's timeout is the caller's constant. */
int ppoll(struct pollfd *p, nfds_t n, const struct timespec *ts, const sigset_t *ss)
{
    struct timespec t, *tp = ts ? (t = *ts, &t) : NULL;
    return (int)lat_sys(SYS_ppoll, (long)p, (long)n, (long)tp, (long)ss, SIGSET_BYTES, 0);
}

int __ppoll_chk(struct pollfd *p, nfds_t n, const struct timespec *ts, const sigset_t *ss, size_t fdslen)
{
    if (fdslen / sizeof *p < n)
        __chk_fail();
    return ppoll(p, n, ts, ss);
}

int pselect(int n, fd_set *rd, fd_set *wr, fd_set *ex, const struct timespec *ts, const sigset_t *ss)
{
    struct timespec t, *tp = ts ? (t = *ts, &t) : NULL;
    struct { const sigset_t *ss; size_t len; } mask = { ss, SIGSET_BYTES };
    return (int)lat_sys(SYS_pselect6, n, (long)rd, (long)wr, (long)ex, (long)tp, (long)&mask);
}

int epoll_pwait(int epfd, struct epoll_event *out, int max, int timeout, const sigset_t *ss)
{
    return (int)lat_sys(SYS_epoll_pwait, epfd, (long)out, max, timeout, (long)ss, SIGSET_BYTES);
}

int epoll_pwait2(int epfd, struct epoll_event *out, int max, const struct timespec *ts, const sigset_t *ss)
{
    return (int)lat_sys(SYS_epoll_pwait2, epfd, (long)out, max, (long)ts, (long)ss, SIGSET_BYTES);
}
