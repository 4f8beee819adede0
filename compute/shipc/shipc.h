/*
 * shipc.h - the shipping client core (compute/shipc/, README.md there): what
 * the two entry layers, cnk (compute/cnk/) and libcnclient.so
 * (compute/libcnclient/), call.  The core follows cnk's conventions: results
 * are -errno, never errno; no libc, no allocation, no thread-local storage.
 * It includes only freestanding headers, so it builds both ways.
 */
#ifndef SHIPC_H
#define SHIPC_H

#include <stddef.h>
#include <stdint.h>

/* Nothing of the core is exported from libcnclient.so. */
#pragma GCC visibility push(hidden)

/* How a call on a path or a descriptor goes: SHIPC_LOCAL (the node's own
 * kernel runs it), SHIPC_SHIP (with the remote descriptor; LAT_AT_FDCWD for
 * the I/O node's working directory), or -errno. */
enum { SHIPC_LOCAL = 0, SHIPC_SHIP = 1 };

/* ---- path.c: the one path rule (README.md "Node-local names") ---- */
int shipc_path_is_local(const char *path);      /* NULL: 0 */
/* (dirfd, path) -> SHIPC_LOCAL (NULL too: the kernel says EFAULT), SHIPC_SHIP
 * with *rdirfd, -ENAMETOOLONG, -EFAULT (the name runs into unmapped memory),
 * or -EBADF (dirfd is one of the client's own). */
int shipc_path_route(int dirfd, const char *path, int *rdirfd);

/* ---- fdtab.c: program descriptors that stand for remote ones ---- */
/* Descriptors 0, 1, 2 stand for remote 0, 1, 2; the client's own
 * descriptors are at or above floor (cnk: CNK_FD_FLOOR; Linux mode: 0). */
void shipc_fd_setup(int floor);
int shipc_fd_hide(int fd);                      /* one of the client's own: 0 or -EINVAL */
int shipc_fd_is_hidden(int fd);
int shipc_fd_is_shipped(int fd);
int shipc_fd_route(int fd, int *remote);        /* SHIPC_LOCAL, SHIPC_SHIP, -EBADF (hidden) */
unsigned shipc_fd_limit(void);                  /* RLIMIT_NOFILE, capped by the table */
int shipc_own_floor(void);                      /* where the client's own descriptors go (>= 1000) */
long shipc_own_dup(int fd, int cloexec);        /* fd copied there: the new number or -errno */
/* A program descriptor (>= minfd, lowest free) for remote, or -errno; the
 * caller still owns remote on failure. */
int shipc_fd_install(int remote, int cloexec, int minfd);
/* remote at program descriptor fd, as dup2 would: fd or -errno; *old: the
 * remote descriptor fd stood for (the caller closes it) or -1. */
int shipc_fd_install_at(int remote, int cloexec, int fd, int *old);
int shipc_fd_forget(int fd, int close_placeholder);     /* its remote descriptor or -1 */
/* fd, a placeholder the process already has (inherited across exec), for remote */
int shipc_fd_adopt(int fd, int remote, int cloexec);
/* Linux mode: placeholders that name their remote descriptor and tell
 * whether another process still holds it (libcnclient/holders.c); without
 * them (cnk, the only process on its connection) an O_PATH of /dev/null. */
struct shipc_fd_ops {
    /* a new placeholder standing for remote: a kernel descriptor or -errno */
    int (*make)(int remote, int cloexec);
    /* before placeholder fd is closed or replaced: a token for last() */
    int (*hold)(int fd);
    /* after: 1 when no process holds remote any more (it is closed on
     * the I/O node), else 0; token as hold() gave it */
    int (*last)(int token, int remote);
    /* the I/O node said EMFILE: close remote descriptors nobody holds any
     * more; 1 if it did (the call is tried again once) */
    int (*reap)(void);
};
void shipc_fd_set_ops(const struct shipc_fd_ops *ops);
/* fn(fd, remote, cloexec) for every shipped descriptor, with the table
 * locked (no descriptor comes or goes meanwhile) */
void shipc_fd_each(void (*fn)(int fd, int remote, int cloexec));
/* Forget fd (closing its placeholder) and close its remote descriptor
 * unless another process still holds it: 0, or -EBADF (fd stood for
 * nothing), or the remote close's error. */
long shipc_fd_release(int fd);
int shipc_fd_cloexec(int fd);
void shipc_fd_set_cloexec(int fd, int on);
unsigned shipc_fd_epoch(void);                  /* changes whenever a shipped descriptor goes or is replaced */
int shipc_fd_next_shipped(unsigned from, unsigned last);   /* lowest shipped fd in range, or -1 */
int shipc_fd_next_hidden(unsigned from, unsigned last);    /* lowest hidden fd in range, or -1 */
/* Told of numbers [first, last] closed or replaced (epoll registrations go). */
void shipc_fd_on_close(void (*fn)(unsigned first, unsigned last));
void shipc_fd_closed(unsigned first, unsigned last);
void shipc_epoll_closed(unsigned first, unsigned last);  /* poll.c: the hook for shipc_fd_on_close */

/* ---- conn.c, mbox.c, bulk.c, fwd.c: the PROC connection to ciod ---- */
struct iovec;
/* Linux mode: the page every program on one PROC connection maps
 * (LATTICE_IO_SEQ_FD): the seq of the last message, and the lock that
 * makes the processes sharing the connection (a shell and the programs it
 * runs, a fork()ed child) take turns from a request to its reply. */
struct shipc_shared {
    uint32_t seq;               /* the seq of the last message sent */
    uint32_t lock;              /* futex: 0 free, 1 held, 2 held with waiters */
    int32_t owner;              /* the holder's pid (0 between holders) */
    uint32_t dead;              /* the stream is out of step: every call EIO */
};
struct shipc_cfg {
    int conn;                   /* the PROC connection, hello done */
    const char *dp;             /* LATTICE_IO_DP: "eager_max,rdv_min,flags" ciod granted, or NULL */
    int mailbox;                /* share a mailbox if ciod grants LAT_DP_SHM */
    const char *mailbox_name;   /* its memfd's name */
    uint32_t *seq;              /* the seq word shared with other programs on conn, or NULL: own */
    struct shipc_shared *shared; /* the page shared by the processes on conn (seq too), or NULL */
    int async_out;              /* writes on remote 1 and 2 need not wait for their reply (cnk) */
};
/* After shipc_fd_setup: 0, or -errno (-ENOTSOCK: conn is no connection). */
int shipc_init(const struct shipc_cfg *cfg);
uint64_t shipc_rdv_min(void);   /* transfers of at least this go rendezvous; 0 never */
/* One request (type, a[], out) and its reply data into in: ret or -errno
 * (-EIO once the connection is broken).  The fwd_*() stubs of
 * lattice/fwd_posix.h are over it. */
long shipc_call_msg(uint16_t type, const int64_t a[4], const struct iovec *out, int nout,
                    const struct iovec *in, int nin, size_t *got);
/* A read (wr 0) or write of remote descriptor rfd, off < 0: at its file
 * position.  Bytes or -errno. */
long shipc_rw(int rfd, int wr, const struct iovec *iov, int cnt, int64_t off);
int shipc_share(uintptr_t base, size_t len, int memfd);  /* LAT_DP_SHARE: 0 or -errno; len 0 drops it */
void shipc_conn_lock(void);     /* Linux mode's fork: held across it (this process's threads only) */
void shipc_conn_unlock(void);
/* In a fork()ed child: it ships on the connection it shares with its
 * parent (taking turns through shipc_cfg.shared), but it is not the
 * process that said hello: no mailbox, no rendezvous (ciod would reach
 * the parent's memory). */
void shipc_forked(void);

/* ---- dispatch.c and the handlers: a file system call, as the kernel sees it ---- */
/* How a call was handled (the values of cnk's enum cnk_class). */
enum { SHIPC_CLS_LOCAL = 0, SHIPC_CLS_SHIPPED = 1, SHIPC_CLS_REFUSED = 2 };
struct shipc_call {
    long nr;                    /* x86-64 system call number */
    long a[6];                  /* its arguments */
    int cls;                    /* set by the handler: SHIPC_CLS_* */
};
/* The file calls the core handles, by x86-64 name: shipc_sys_NAME(c). */
#define SHIPC_FILE_CALLS(X) \
    X(openat) X(open) X(creat) X(close) X(close_range) X(read) X(write) X(pread64) X(pwrite64) \
    X(readv) X(writev) X(preadv) X(pwritev) X(preadv2) X(pwritev2) X(lseek) X(stat) X(lstat)     \
    X(fstat) X(newfstatat) X(statx) X(access) X(faccessat) X(faccessat2) X(unlink) X(unlinkat)   \
    X(rename) X(renameat) X(renameat2) X(mkdir) X(mkdirat) X(rmdir) X(getdents64) X(readlink)    \
    X(readlinkat) X(truncate) X(ftruncate) X(fsync) X(fdatasync) X(dup) X(dup2) X(dup3) X(fcntl) \
    X(chdir) X(fchdir) X(getcwd) X(umask) X(chmod) X(fchmod) X(fchmodat) X(utimensat) X(statfs)  \
    X(fstatfs) X(ioctl) X(flock) X(fadvise64) X(link) X(linkat) X(symlink) X(symlinkat)          \
    X(chown) X(fchown) X(lchown) X(fchownat) X(mknod) X(mknodat) X(fallocate) X(sendfile)         \
    X(copy_file_range)
/* The socket and poll calls (sock.c, poll.c), by the handler's name:
 * accept4 is accept's, epoll_pwait2 epoll_pwait's. */
#define SHIPC_SOCK_CALLS(X) \
    X(socket) X(connect) X(bind) X(listen) X(accept) X(sendto) X(recvfrom) X(sendmsg) X(recvmsg)      \
    X(sendmmsg) X(recvmmsg) X(shutdown) X(setsockopt) X(getsockopt) X(getsockname) X(getpeername)     \
    X(poll) X(ppoll) X(select) X(pselect6) X(epoll_ctl) X(epoll_wait) X(epoll_pwait)
/* Every call of SHIPC_FILE_CALLS and SHIPC_SOCK_CALLS, and the plug-in call LAT_NR_ZOID:
 * decided by path or descriptor; local ones run through shipc_ent_local.
 * The result or -errno; -ENOSYS for a number the core does not handle. */
long shipc_sys(struct shipc_call *c);

/* ---- exec.c: files for the kernel itself (fd: a program descriptor) ---- */
long shipc_open(const char *path, int flags);  /* -> program descriptor or -errno */
long shipc_pread(int fd, void *buf, size_t len, int64_t off);  /* local or shipped; bytes or -errno */
long shipc_close(int fd);
long shipc_fd_kind(int fd, long *flags, uint32_t *mode); /* F_GETFL and st_mode: 0 or -errno */
/* mmap's error for fd where the client cannot map it (err) or read it, in Linux's order */
long shipc_map_errno(int fd, int shared_write, long err);
/* execve: open the new image as the job's user (X_OK, regular file):
 * program descriptor or -errno; *owned says whether the caller closes it
 * (not for execveat(fd, "", AT_EMPTY_PATH)). */
long shipc_exec_open(int dirfd, const char *path, int flags, int *owned);
void shipc_exec_cloexec(void);  /* close shipped descriptors marked FD_CLOEXEC */

/* ---- plugin.c: a plug-in call (lattice/zoid.h): reply bytes or -errno ---- */
long shipc_plugin_call(uint32_t plugin, uint32_t fn, const struct iovec *req, long nreq,
                       const struct iovec *rep, long nrep);

#pragma GCC visibility pop

#endif
