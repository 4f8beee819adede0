/*
 * shipcall.h - one compute process's shipped calls on the I/O node: the
 * state its serving thread keeps and the decoded call, shared by the
 * handlers of ship.c (files) and sock.c (sockets).
 */
#ifndef CIOD_SHIPCALL_H
#define CIOD_SHIPCALL_H

#include "ciod.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statfs.h>

enum fd_kind { FD_FREE = 0, FD_REAL, FD_STDIN, FD_STDOUT, FD_STDERR, FD_COLL };

struct rfd {
    enum fd_kind kind;
    int          fd;                    /* FD_REAL: our descriptor */
    struct coll_ofd *co;                /* FD_COLL: a shared read-only open (collective.c) */
};

struct proc {
    struct conn *c;
    uint64_t     job;
    int32_t      rank;
    uint32_t     node;
    struct ident who;
    pid_t        pid;                   /* for rendezvous (datapath.c), if granted */
    struct lat_datapath dp;
    struct rfd   fds[LAT_MAX_FDS];
};

/* One call: arguments in, result out.  `out` points at reply data. */
struct call {
    struct lat_sysreq rq;
    char       *data;                   /* bytes after the lat_sysreq */
    size_t      dlen;
    int64_t     ret;
    int         err;
    const void *out;
    size_t      outlen;
    union {
        struct lat_stat   st;
        struct statx      stx;
        struct lat_statfs sfs;
    } small;
};

typedef int (*sys_fn)(struct proc *p, struct call *k);

/* sock.c: the socket calls (docs/protocol.md section 6.1), table lines for ship.c */
#define SOCK_HANDLERS(X) \
    X(SOCKET, socket) X(CONNECT, connect) X(BIND, bind) X(SENDMSG, sendmsg) X(RECVMSG, recvmsg) \
    X(SHUTDOWN, shutdown) X(SETSOCKOPT, setsockopt) X(GETSOCKOPT, getsockopt)                   \
    X(GETSOCKNAME, getsockname) X(GETPEERNAME, getpeername) X(POLL, poll)
#define SOCK_PROTO(T, n) int sock_##n(struct proc *p, struct call *k);
SOCK_HANDLERS(SOCK_PROTO)
#define SOCK_ENTRY(T, n) [LAT_SYS_##T - LAT_SYS__BASE] = sock_##n,
#define SOCK_CALLS SOCK_HANDLERS(SOCK_ENTRY)

/* Results and arguments of a call, for every handler (ship.c, sock.c). */

/* The call's result: rv, or -1 with errno. */
static inline int result(struct call *k, int64_t rv)
{
    k->ret = rv < 0 ? -1 : rv;
    k->err = rv < 0 ? errno : 0;
    return 0;
}

static inline int fail(struct call *k, int err)
{
    k->ret = -1;
    k->err = err;
    return 0;
}

/* A 32-bit int argument, given sign- or zero-extended. */
static inline bool arg_int(struct call *k, int i, int *out)
{
    int64_t a = k->rq.a[i];

    if (a < INT32_MIN || a > (int64_t)UINT32_MAX) {
        fail(k, EINVAL);
        return false;
    }
    *out = (int)(uint32_t)a;
    return true;
}

#endif
