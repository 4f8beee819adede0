/*
 * shipcall.h - one compute process's shipped calls on the I/O node: the
 * state its serving thread keeps and the decoded call, shared by the
 * generated decoder (fwd_posix_ciod.c, from lattice/fwd_posix.h) and the
 * implementations in ship.c (files) and sock.c (sockets).
 */
#ifndef CIOD_SHIPCALL_H
#define CIOD_SHIPCALL_H

#include "ciod.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>

enum fd_kind { FD_FREE = 0, FD_REAL, FD_STDIN, FD_STDOUT, FD_STDERR, FD_COLL };

struct rfd {
    enum fd_kind kind;
    int          fd;                    /* FD_REAL: our descriptor */
    struct coll_ofd *co;                /* FD_COLL: a shared read-only open (collective.c) */
    bool         sock;                  /* FD_REAL: a socket (sock.c); READ/WRITE must not block on it */
};

struct proc {
    struct conn *c;
    uint64_t     job;
    int32_t      rank;
    uint32_t     node;
    struct ident who;
    pid_t        pid;                   /* for rendezvous (datapath.c), if granted */
    int          pidfd;                 /* the process, taken at its first request */
    int          mem;                   /* /proc/pid/mem: the address space the connection is
                                           bound to (-1: not yet, -2: none) */
    struct conn *plug;                  /* the line to the monitor's plug-ins, or NULL */
    bool         exec_gone;             /* proc_same_image said no: close after this reply */
    struct lat_datapath dp;
    struct dp_shm shm;                  /* memory the process shares, if any */
    struct dp_shm mbox;                 /* its mailbox (struct lat_mbox), if any */
    uint32_t     mbox_done;             /* the last seq served from it */
    bool         pipe_broken;           /* a chunk of the current series was short or failed */
    struct rfd   fds[LAT_MAX_FDS];
    struct lockfile *locks;             /* its POSIX locks, one open per file (lock.c) */
    timer_t      lock_timer;            /* wakes a blocking lock request (lock.c) */
    bool         lock_timer_ok;
};

/* One call: arguments in, result out.  `out` points at reply data (the
 * generated decoder sets it from the call's out arguments). */
struct call {
    struct lat_sysreq rq;
    uint8_t     flags;                  /* the request header's LAT_HF_* (checked: lat_hdr_flags_ok) */
    char       *data;                   /* bytes after the lat_sysreq */
    size_t      dlen;
    int64_t     ret;
    int         err;
    const void *out;
    size_t      outlen;
};

typedef int (*sys_fn)(struct proc *p, struct call *k);

/* Before its memory is touched: is the process that said hello still there
 * and still running the program it ran at its first request?  false: it
 * exec'd or ended, and the connection is to be closed (ship.c). */
bool proc_same_image(struct proc *p);

/* A remote descriptor's own descriptor, or the error for the standard
 * streams (special_err); a dirfd for a *at call (absolute paths ignore it,
 * as on Linux).  false: the call failed, k says why (ship.c). */
bool real_fd(struct call *k, const struct rfd *r, int special_err, int *fd);
bool at_dir(struct proc *p, struct call *k, int dirfd, const char *path, int *fd);

/* Locks (lock.c): r is about to be closed, which releases the process's
 * locks on its file; the process is gone, release them all. */
void lock_closing(struct proc *p, const struct rfd *r);
void lock_end(struct proc *p);

/* The result of a call, for every implementation (ship.c, sock.c). */

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

#endif
