/*
 * client.h - internals shared by the files of libcnclient.so, the LD_PRELOAD
 * library that ships a compute process's file calls to its I/O node (ciod).
 *
 *   conn.c     start-up: the PROC connection handed to the shipping core
 *              (compute/shipc/: RPC, mailbox, rendezvous, pipelined series)
 *   entry.c    the hooks the shipping core calls; lat_sys, a call through it
 *   fdtable.c  routes and installs over the core's descriptor table (compute/shipc/)
 *   path.c     the rule deciding which paths stay on the compute node
 *   interpose.c the plain system calls, made from lattice/syscalls.def's GEN lines
 *   file.c     open family, fcntl, ioctl, isatty, fadvise; LFS and _chk names
 *   stat.c     the stat family's other spellings, statvfs, faccessat, chmod, utimes
 *   dir.c      DIR streams over shipped getdents64
 *   stdio.c    FILE streams over shipped descriptors; stdin/stdout/stderr
 *   sock.c     send, recv, ppoll, pselect, epoll_pwait: as their system calls
 *   misc.c     remove, getcwd, realpath, temp files, ttyname
 *   usercopy.c which of the program's buffers the mailbox may memcpy
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

/* The page cnode gives the rank's processes (LATTICE_IO_SEQ_FD): the
 * core's part (seq, lock), then what the client keeps there: cnode's 0, 1,
 * 2 (the rank's own stdio, startfds.c), then holders.c's registry. */
struct lat_page {
    struct shipc_shared core;
    uint32_t stdio_set;                 /* the rank's first program recorded them */
    uint32_t pad;
    uint64_t stdio[3][2];               /* st_dev, st_ino of cnode's 0, 1, 2 */
};

/* conn.c */
LAT_HIDDEN int lat_active(void);          /* initialises on first use */
/* libc's getenv and setenv, never the program's: a shell (bash) defines
 * its own, which before its start would lose what we set */
LAT_HIDDEN const char *lat_getenv(const char *name);
LAT_HIDDEN int lat_setenv(const char *name, const char *value);
LAT_HIDDEN int lat_conn_fd(void);         /* the shipping socket, or -1 */
LAT_HIDDEN int lat_seq_fd(void);          /* the page of its seq counter (LATTICE_IO_SEQ_FD), or -1 */
LAT_HIDDEN int lat_forked(void);          /* a fork()ed child: not the process that said hello */
/* A vfork()ed child (or a raw clone) running in its parent's memory: it
 * must not change the parent's descriptor table (conn.c) */
LAT_HIDDEN int lat_vforked(void);
/* One shipped call.  out: request data; in: where the reply data goes (its
 * total capacity bounds the reply).  Returns ret (>= 0) or -1 with errno set
 * to the remote errno (EIO if the connection is broken); *got = data bytes. */
LAT_HIDDEN int64_t lat_call(uint16_t type, int64_t a0, int64_t a1, int64_t a2, int64_t a3,
                            const struct iovec *out, int nout,
                            const struct iovec *in, int nin, size_t *got);
LAT_HIDDEN void lat_say(const char *msg);      /* to fd 2, raw */
/* entry.c: a call as the kernel sees it, decided and done by the shipping
 * core (compute/shipc/dispatch.c, as under cnk): ret, or -1 with errno. */
LAT_HIDDEN long lat_sys(long nr, long a0, long a1, long a2, long a3, long a4, long a5);

/* fdtable.c */
enum lat_route { LAT_LOCAL, LAT_SHIP, LAT_HIDE };
/* How a call on app descriptor fd goes; *remote is set for LAT_SHIP.
 * LAT_HIDE is the shipping socket itself: callers fail with EBADF. */
LAT_HIDDEN enum lat_route lat_fd_route(int fd, int *remote);
LAT_HIDDEN void lat_fd_init(int conn, int seq_fd);

/* startfds.c: the descriptors the process starts with (plan D10) */
/* Move one of the client's own to 1000 or above and name it in var: the new number. */
LAT_HIDDEN int lat_move_own(int fd, const char *var);
LAT_HIDDEN void lat_close_image(void);      /* cnode's memfd of our own executable */
/* After lat_fd_init: 0, 1, 2 the program put there itself are local.  1:
 * this is the rank's first program (nothing else on the connection yet).
 * page: where the rank's record is (NULL: LATTICE_IO_STDIO) */
LAT_HIDDEN int lat_stdio_identify(struct lat_page *page);

/* path.c */
/* Route a (dirfd, path) pair: LAT_LOCAL, or LAT_SHIP with *rdirfd the remote
 * directory descriptor (LAT_AT_FDCWD for the cwd), or -1 with errno set
 * (ENAMETOOLONG, EBADF for the shipping socket). */
LAT_HIDDEN int lat_path_route(int dirfd, const char *path, int *rdirfd);
/* p == NULL, out of line: libc declares path arguments nonnull, so a
 * NULL test inside an interposed function would be optimised away. */
LAT_HIDDEN int lat_is_null(const void *p);

/* usercopy.c: memory known to be mapped (this thread's stack, the brk
 * heap, the main program's segments), readable or writable with wr: the
 * shipping core's mailbox copies there with memcpy (shipc_ent_user_ok). */
LAT_HIDDEN void lat_usercopy_init(void);
LAT_HIDDEN int lat_user_known(const void *p, size_t len, int wr);

/* holders.c: placeholders that name their remote descriptor; remote
 * descriptors closed when no process on the connection holds them */
/* first: the rank's first program (nobody else on the connection yet) */
LAT_HIDDEN void lat_holders_init(int conn, int seq_fd, int first);
LAT_HIDDEN void lat_holders_forked(void);
/* before fork, vfork, posix_spawn, system, popen, clone or exec (spawn.c) */
LAT_HIDDEN void lat_holders_share(void);
LAT_HIDDEN void lat_holders_exit(void);

/* stdio.c */
LAT_HIDDEN void lat_stdio_init(void);

/* set errno, return -1 */
static inline int lat_fail(int err)
{
    extern int *__errno_location(void);
    *__errno_location() = err;
    return -1;
}

/* The shipping core's answer (ret or -errno) as libc gives it: ret, or -1
 * with errno. */
static inline int64_t lcn_ret(int64_t r)
{
    return r < 0 ? lat_fail((int)-r) : r;
}

#endif
