/*
 * internal.h - shared by the files of the shipping core only.
 */
#ifndef SHIPC_INTERNAL_H
#define SHIPC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <linux/errno.h>
#include <linux/fcntl.h>
#include <linux/stat.h>
#include <linux/uio.h>

#include <lattice/fwd_posix.h>
#include <lattice/ksys.h>
#include <lattice/wire.h>

#include "entry.h"
#include "shipc.h"

#define SHIPC_MIN(a, b) ((a) < (b) ? (a) : (b))
/* Longest a shipped wait (socket, poll) holds the connection while other
 * threads, or local descriptors of a poll set, may need it. */
#define SHIPC_SLICE_MS 10
#define LAT_MBOX_MAXIOV 64          /* vectors a mailbox call may gather or scatter */

/* A lock between the program's threads (futex; no signal handler of the
 * program runs on the holder's thread under cnk). */
struct shipc_lock { struct kmutex m; };

static inline void shipc_lock_take(struct shipc_lock *l)
{
    shipc_ent_crit_enter();
    kmutex_lock(&l->m);
}

static inline void shipc_lock_drop(struct shipc_lock *l)
{
    kmutex_unlock(&l->m);
    shipc_ent_crit_leave();
}

/* The string functions the core uses: cnk's lib.c in cnk, libc's in
 * libcnclient.so (neither does I/O, so nothing interposed is reached). */
void *memcpy(void *restrict d, const void *restrict s, size_t n);
/* usercopy.c: a small struct to or from the program's memory; 0 or -EFAULT */
int shipc_put(void *dst, const void *src, size_t n);
int shipc_get(void *dst, const void *src, size_t n);
long shipc_strnlen(const char *s, size_t max);      /* -EFAULT for a string in unmapped memory */
void *memset(void *d, int c, size_t n);
int memcmp(const void *a, const void *b, size_t n);
size_t strlen(const char *s);
size_t strnlen(const char *s, size_t max);

/* ---- conn.c: the PROC connection ---- */
struct shipc_conn {
    int fd;                     /* -1: none */
    int dead;                   /* broken: every call is EIO */
    int forked;                 /* a fork()ed child: not the hello process (no mailbox, no rendezvous) */
    uint32_t *seq;              /* the seq of the last message sent (shared: shipc_cfg.seq) */
    uint64_t rdv_min;           /* transfers of at least this go rendezvous; 0 never */
    uint64_t dp_flags;          /* LAT_DP_* ciod granted */
    int async_out;              /* 1 << r: writes on remote r (1, 2: the job's output) go unawaited */
};
extern struct shipc_conn shipc_conn;
extern struct shipc_lock shipc_conn_lock_;     /* from a request to its reply */
/* The connection from a request to its reply: conn_lock, then (Linux
 * mode) the lock of the page shared with the other processes on it. */
void shipc_conn_take(void);
void shipc_conn_drop(void);
uint32_t shipc_next_seq(void);                  /* never 0 */
long shipc_broken(const char *why, long err);  /* -EIO; err is -errno */
long shipc_send_all(struct iovec *v, int cnt, size_t *sent);
int shipc_reply_ok(const struct lat_hdr *rh, uint16_t type, uint32_t want_seq, int is_error);
/* conn_lock held: one request (LAT_HF_* flags) -> *sq; its reply (spin: poll first) */
long shipc_send_req(uint16_t type, uint8_t flags, const int64_t a[4], const struct iovec *out, int nout,
                    uint32_t *sq);
long shipc_recv_reply(uint16_t type, uint32_t sq, const struct iovec *in, int nin, size_t *got, int spin);
/* conn_lock held: the replies of unawaited writes taken, in order (before any other request) */
void shipc_async_drain(void);
/* conn_lock held: a write of remote 1 or 2 sent without waiting for its reply: bytes or -errno */
long shipc_async_write(int rfd, const struct iovec *out, int nout, size_t total);

/* ---- mbox.c: the mailbox, and one call either way ---- */
void shipc_mbox_init(const struct shipc_cfg *cfg);
void shipc_mbox_forget(void);
long shipc_call_locked(uint16_t type, const int64_t a[4], const struct iovec *out, int nout,
                       const struct iovec *in, int nin, size_t *got);

/* ---- bulk.c ---- */
void shipc_rdv_wait_init(void);                 /* the timer of rendezvous waits (hidden) */

/* ---- sockio.c: the bytes of a shipped socket (remote descriptor r) ---- */
int shipc_sock_next_wait(void);     /* after LAT_ERR_WAIT: the next try's wait (other threads go first) */
long shipc_sock_send(int r, const void *name, long nlen, const struct iovec *iov, long cnt, int flags);
/* the sender into name (*nlen: its room, then its length; left alone without a name) */
long shipc_sock_recv(int r, void *name, int *nlen, const struct iovec *iov, long cnt, int flags, unsigned *mflags);

/* ---- the handlers (dispatch.c, file.c, stat.c, name.c, copy.c) ---- */
#define SHIPC_HANDLER(name) long shipc_sys_##name(struct shipc_call *c);
SHIPC_FILE_CALLS(SHIPC_HANDLER)
SHIPC_SOCK_CALLS(SHIPC_HANDLER)
SHIPC_HANDLER(lattice_zoid)                 /* plugin.c: LAT_NR_ZOID */

#define NEEDS_MODE(f) (((f) & O_CREAT) || ((f) & O_TMPFILE) == O_TMPFILE)
#define PATH(i) ((const char *)c->a[i])

/* How a call was handled: run on the node (local), answered by the client
 * itself, shipped, or refused (ENOSYS/ENOLCK: no message for it). */
static inline long local(struct shipc_call *c)
{
    c->cls = SHIPC_CLS_LOCAL;
    return shipc_ent_local(c);
}

static inline long answered(struct shipc_call *c, long r)
{
    c->cls = SHIPC_CLS_LOCAL;
    return r;
}

static inline long shipped(struct shipc_call *c, long r)
{
    c->cls = SHIPC_CLS_SHIPPED;
    return r;
}

static inline long refused(struct shipc_call *c, long r)
{
    c->cls = SHIPC_CLS_REFUSED;
    return r;
}

/* 1: the descriptor is shipped (*r); 0: done, *ret is the answer. */
static inline int by_fd(struct shipc_call *c, long fd, int *r, long *ret)
{
    int rt = shipc_fd_route((int)fd, r);

    if (rt == SHIPC_SHIP)
        return 1;
    *ret = rt < 0 ? answered(c, rt) : local(c);
    return 0;
}

/* 1: the name is shipped (*rd is the remote dirfd); 0: done, *ret the answer. */
static inline int by_path(struct shipc_call *c, long dirfd, const char *path, int *rd, long *ret)
{
    int rt = shipc_path_route((int)dirfd, path, rd);

    if (rt == SHIPC_SHIP)
        return 1;
    *ret = rt < 0 ? answered(c, rt) : local(c);
    return 0;
}

/* The x86-64 kernel's struct stat (asm/stat.h), filled from struct lat_stat. */
struct kstat {
    uint64_t dev, ino, nlink;
    uint32_t mode, uid, gid, pad0;
    uint64_t rdev;
    int64_t size, blksize, blocks;
    uint64_t atime, atime_nsec, mtime, mtime_nsec, ctime, ctime_nsec;
    int64_t unused[3];
};
_Static_assert(sizeof(struct kstat) == 144, "x86-64 struct stat");

/* The x86-64 kernel's struct statfs (asm-generic/statfs.h). */
struct kstatfs {
    int64_t type, bsize;
    uint64_t blocks, bfree, bavail, files, ffree;
    int32_t fsid[2];
    int64_t namelen, frsize, flags, spare[4];
};
_Static_assert(sizeof(struct kstatfs) == 120, "x86-64 struct statfs");

/* fdtab.c: around a placeholder's going (closed, or replaced by the
 * kernel): hold() before, then last() says whether its remote descriptor
 * is to be closed (1: no process holds it any more; remote -1: nothing to
 * close, the token is dropped) */
int shipc_fd_hold(int fd);
int shipc_fd_last(int tok, int remote);
int shipc_fd_reap(void);        /* after EMFILE from the I/O node: 1, try again */

/* Close remote descriptor r (-1: the number stood for nothing, EBADF). */
static inline long shipc_rclose(int r)
{
    if (r == 1 || r == 2)               /* no longer the job's output (it may be reused) */
        shipc_conn.async_out &= ~(1 << r);
    return r < 0 ? -EBADF : fwd_close(r);
}

/* file.c: open a shipped name (remote dirfd rd) as a program descriptor */
long shipc_open_ship(int rd, const char *path, int flags, int mode);
/* stat.c: fstatat on the I/O node into a struct kstat at buf (NULL: EFAULT) */
long shipc_fstatat_ship(int rd, const char *path, int flags, void *buf);
const char *shipc_empty_ok(const char *path, int flags);   /* NULL with AT_EMPTY_PATH: "" */
/* lock.c: fcntl's lock commands on remote descriptor r, arg the program's struct flock */
long shipc_lock(struct shipc_call *c, int r, int cmd, void *arg);
/* name.c: route two names: 1 both ship (*ro, *rn); 0 done (*ret) */
int shipc_two_names(struct shipc_call *c, long od, const char *old, long nd, const char *new,
                    int *ro, int *rn, long *ret);

#endif
