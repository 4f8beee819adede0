/*
 * client.h - internals shared by the files of libcnclient.so, the LD_PRELOAD
 * library that ships a compute process's file calls to its I/O node (ciod).
 *
 *   conn.c     the PROC connection: start-up, one request/one reply RPC, and
 *              the same in parts for pipelined series
 *   fdtable.c  routes and installs over the core's descriptor table (compute/shipc/)
 *   path.c     the rule deciding which paths stay on the compute node
 *   file.c     open/close/read/write/lseek/dup/fcntl/truncate/sync
 *   stat.c     the stat family, statx, statfs/statvfs, access, chmod, utimes
 *   dir.c      DIR streams over shipped getdents64
 *   stdio.c    FILE streams over shipped descriptors; stdin/stdout/stderr
 *   misc.c     names (unlink, rename, mkdir...), cwd, umask, realpath, temp files
 *   fwd.c      the encoding stubs fwd_*() generated from lattice/fwd_posix.h
 *   mbox.c     the mailbox: small file calls through memory shared with ciod
 *   usercopy.c copying the program's buffers for it without a crash on EFAULT
 *
 * Every interposed function starts with lat_active(): when LATTICE_IO_FD is
 * not set, the library is inert and every call goes straight to libc.
 */
#ifndef LATTICE_CLIENT_H
#define LATTICE_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <lattice/fwd_posix.h>
#include <lattice/wire.h>

#include "fwd_posix_stubs.h"      /* generated: the vectored stubs fwd_*_v */
#include "shipc.h"                /* the shipping core (compute/shipc/) */

#define LAT_HIDDEN __attribute__((visibility("hidden")))

/* REAL(fn): the next definition of fn (libc's), for calls on local objects.
 * Looked up once per call site with dlsym(RTLD_NEXT). */
LAT_HIDDEN void *lat_real_cached(void **slot, const char *name);
#define REAL(fn) ({ static void *real_p_; (__typeof__(&fn))lat_real_cached(&real_p_, #fn); })

/* glibc's fortify failure (exported, public ABI) */
extern void __chk_fail(void) __attribute__((noreturn));

/* conn.c */
LAT_HIDDEN int lat_active(void);          /* initialises on first use */
LAT_HIDDEN int lat_conn_fd(void);         /* the shipping socket, or -1 */
LAT_HIDDEN int lat_seq_fd(void);          /* the page of its seq counter (LATTICE_IO_SEQ_FD), or -1 */
LAT_HIDDEN int lat_forked(void);          /* a fork()ed child: shipping is off */
/* One shipped call.  out: request data; in: where the reply data goes (its
 * total capacity bounds the reply).  Returns ret (>= 0) or -1 with errno set
 * to the remote errno (EIO if the connection is broken); *got = data bytes. */
LAT_HIDDEN int64_t lat_call(uint16_t type, int64_t a0, int64_t a1, int64_t a2, int64_t a3,
                            const struct iovec *out, int nout,
                            const struct iovec *in, int nin, size_t *got);
/* The same in parts, for requests sent without waiting for each reply (a
 * pipelined series) or with header flags (LAT_HF_*: a rendezvous, the
 * chunks of a series): with the connection locked, send requests (*sq: the
 * seq of each) and receive their replies in the same order.  0 / ret >= 0,
 * or -errno; -EIO with lat_conn_lost() once the connection is broken. */
LAT_HIDDEN void lat_conn_lock(void);
LAT_HIDDEN void lat_conn_unlock(void);
LAT_HIDDEN int lat_conn_lost(void);
LAT_HIDDEN int64_t lat_send_locked(uint16_t type, uint8_t flags, const int64_t a[4], const struct iovec *out,
                                   int nout, uint32_t *sq);
LAT_HIDDEN int64_t lat_recv_locked(uint16_t type, uint32_t sq, const struct iovec *in, int nin, size_t *got);
/* The stream is out of step or gone: every call fails from now on.  -EIO. */
LAT_HIDDEN int64_t lat_conn_broken(const char *why, int err);
/* Transfers of at least this many bytes go rendezvous; 0 = never. */
LAT_HIDDEN uint64_t lat_rdv_min(void);
/* Shorthands: no data / a path as the only data. */
LAT_HIDDEN int64_t lat_call0(uint16_t type, int64_t a0, int64_t a1, int64_t a2);
LAT_HIDDEN int64_t lat_call_path(uint16_t type, int64_t a0, int64_t a1, int64_t a2,
                                 const char *path, void *in, size_t inlen, size_t *got);

/* fdtable.c */
enum lat_route { LAT_LOCAL, LAT_SHIP, LAT_HIDE };
/* How a call on app descriptor fd goes; *remote is set for LAT_SHIP.
 * LAT_HIDE is the shipping socket itself: callers fail with EBADF. */
LAT_HIDDEN enum lat_route lat_fd_route(int fd, int *remote);
/* Give remote descriptor `remote` an app-visible number (>= minfd); on
 * failure closes `remote` on the I/O node and returns -1 with errno. */
LAT_HIDDEN int lat_fd_install(int remote, int cloexec, int minfd);
/* Put remote descriptor `remote` at app number `fd` (dup2 semantics). */
LAT_HIDDEN int lat_fd_install_at(int remote, int cloexec, int fd);
LAT_HIDDEN void lat_fd_init(int conn, int seq_fd);
/* sock.c: numbers [first, last] were closed or replaced: drop the epoll
 * registrations of shipped descriptors there, and those of epoll sets numbered so. */
LAT_HIDDEN void lat_epoll_closed(unsigned first, unsigned last);

/* path.c */
/* Route a (dirfd, path) pair: LAT_LOCAL, or LAT_SHIP with *rdirfd the remote
 * directory descriptor (LAT_AT_FDCWD for the cwd), or -1 with errno set
 * (ENAMETOOLONG, EBADF for the shipping socket). */
LAT_HIDDEN int lat_path_route(int dirfd, const char *path, int *rdirfd);
/* p == NULL, out of line: libc declares path arguments nonnull, so a
 * NULL test inside an interposed function would be optimised away. */
LAT_HIDDEN int lat_is_null(const void *p);

/* file.c: shipped I/O on a remote descriptor (rendezvous, one chunk, or a
 * pipelined series of chunks); off < 0: no offset */
LAT_HIDDEN ssize_t lat_ship_rw(int rfd, int write, const struct iovec *iov, int cnt, off_t off);
LAT_HIDDEN int lat_ship_close(int rfd);

/* mbox.c: the mailbox (docs/protocol.md section 6.4).  Set up at start
 * (conn is the shipping socket, dp_flags what ciod granted); forgotten in a
 * fork()ed child.  lat_mbox_takes: this call may go through it; then
 * lat_mbox_call_locked sends it with seq sq (the connection's lock held):
 * ret >= 0 or -errno, -EIO with lat_conn_broken. */
#define LAT_MBOX_MAXIOV 64
LAT_HIDDEN void lat_mbox_init(int conn, unsigned dp_flags);
LAT_HIDDEN void lat_mbox_forget(void);
LAT_HIDDEN int lat_mbox_takes(uint16_t type, const struct iovec *out, int nout, const struct iovec *in, int nin);
LAT_HIDDEN int64_t lat_mbox_call_locked(uint32_t sq, uint16_t type, const int64_t a[4], const struct iovec *out,
                                        int nout, const struct iovec *in, int nin, size_t *got);

/* usercopy.c: the program's buffers to (read) and from (write) the
 * mailbox; -EFAULT where the kernel would say so.  lat_user_copyable: the
 * buffers can be copied that way at all (wr: written). */
LAT_HIDDEN void lat_usercopy_init(void);
LAT_HIDDEN int lat_user_copyable(const struct iovec *v, int n, int wr);
LAT_HIDDEN int lat_user_read(void *dst, const struct iovec *v, int n, size_t total);
LAT_HIDDEN int lat_user_write(const struct iovec *v, int n, const void *src, size_t len);

/* stat.c */
struct stat;
LAT_HIDDEN int lat_fstatat_any(int dirfd, const char *path, struct stat *st, int flags);

/* stdio.c */
LAT_HIDDEN void lat_stdio_init(void);

/* set errno, return -1 */
static inline int lat_fail(int err)
{
    extern int *__errno_location(void);
    *__errno_location() = err;
    return -1;
}

#endif
