/*
 * ship.c - function shipping: one compute process's I/O system calls,
 * reissued here as the job owner.
 *
 * It runs in the job's I/O worker (worker.c), a process holding the job
 * owner's identity and no capabilities: the kernel checks every call.
 * The thread owns everything of the process on this side: its working
 * directory and umask (unshare(CLONE_FS)) and a table of LAT_MAX_FDS
 * remote descriptors.  Remote
 * descriptors 0, 1 and 2 are not files: 0 reads the rank's standard input
 * if the job gives it one (stdin.c), else end-of-file; 1 and 2 turn writes
 * into the rank's output on the control connection.
 *
 * A request is decoded (arguments, path, data), the remote descriptors
 * are mapped to real ones, the real call runs and its result and errno
 * go back unchanged.  Handlers sit in a table indexed by message type.
 * The connection's one receive buffer also carries data read for a reply:
 * a request's own bytes are no longer needed by then.
 */
#include "ciod.h"
#include "shipcall.h"
#include "fwd_posix_srv.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

/* struct proc, struct call, sys_fn: shipcall.h (shared with sock.c) */

static int plug_forward(struct proc *p, const struct lat_hdr *h, char *why, size_t whylen);

/* The generated decoder met a request whose encoding is wrong. */
int fwd_malformed(struct proc *p, struct call *k, const char *call, const char *why)
{
    char loc[128];

    node_location(p->node, loc, sizeof(loc));
    ras_job_event(p->job, RAS_WARNING, loc, "job %" PRIu64 " rank %d: malformed %s request (%zu data bytes): %s",
              p->job, p->rank, call, k->dlen, why);
    return fail(k, EINVAL);
}

/* ---- helpers: descriptors (requests are decoded by the generated
 * fwd_posix_ciod.c, which calls the srv_* implementations below) ---- */

/* The real descriptor behind r; standard streams get special_err. */
bool real_fd(struct call *k, const struct rfd *r, int special_err, int *fd)
{
    if (r->kind == FD_COLL) {           /* the shared descriptor: same file, same rights */
        *fd = coll_fd(r->co);
        return true;
    }
    if (r->kind != FD_REAL) {
        fail(k, special_err);
        return false;
    }
    *fd = r->fd;
    return true;
}

/* A dirfd for a *at call.  Linux ignores dirfd for absolute paths; so do we. */
bool at_dir(struct proc *p, struct call *k, int dirfd, const char *path, int *fd)
{
    if ((path && path[0] == '/') || dirfd == LAT_AT_FDCWD) {
        *fd = AT_FDCWD;
        return true;
    }
    if (dirfd < 0 || dirfd >= (int)LAT_MAX_FDS || p->fds[dirfd].kind == FD_FREE) {
        fail(k, EBADF);
        return false;
    }
    return real_fd(k, &p->fds[dirfd], ENOTDIR, fd);
}

static int fd_alloc(struct proc *p, enum fd_kind kind, int fd)
{
    for (unsigned i = 0; i < LAT_MAX_FDS; i++) {
        if (p->fds[i].kind == FD_FREE) {
            p->fds[i] = (struct rfd){ kind, fd, NULL, false };
            return (int)i;
        }
    }
    return -1;
}

/* Reply data lands in the receive buffer, after the request was decoded. */
static char *outbuf(struct proc *p)
{
    return p->c->buf;
}

static void to_lat_stat(const struct stat *s, struct lat_stat *o)
{
    memset(o, 0, sizeof(*o));
    o->dev = s->st_dev;
    o->ino = s->st_ino;
    o->nlink = s->st_nlink;
    o->mode = s->st_mode;
    o->uid = s->st_uid;
    o->gid = s->st_gid;
    o->rdev = s->st_rdev;
    o->size = s->st_size;
    o->blksize = s->st_blksize;
    o->blocks = s->st_blocks;
    o->atime_sec = s->st_atim.tv_sec;
    o->atime_nsec = s->st_atim.tv_nsec;
    o->mtime_sec = s->st_mtim.tv_sec;
    o->mtime_nsec = s->st_mtim.tv_nsec;
    o->ctime_sec = s->st_ctim.tv_sec;
    o->ctime_nsec = s->st_ctim.tv_nsec;
}

static void to_lat_statfs(const struct statfs *s, struct lat_statfs *o)
{
    memset(o, 0, sizeof(*o));
    o->type = s->f_type;
    o->bsize = s->f_bsize;
    o->blocks = s->f_blocks;
    o->bfree = s->f_bfree;
    o->bavail = s->f_bavail;
    o->files = s->f_files;
    o->ffree = s->f_ffree;
    memcpy(&o->fsid, &s->f_fsid, sizeof(o->fsid));
    o->namelen = s->f_namelen;
    o->frsize = s->f_frsize;
    o->flags = s->f_flags;
}

/* What 0, 1 and 2 look like to fstat: /dev/null-like input, pipe-like output. */
static void special_stat(struct proc *p, enum fd_kind kind, struct stat *st)
{
    memset(st, 0, sizeof(*st));
    st->st_mode = kind == FD_STDIN ? (S_IFCHR | 0666) : (S_IFIFO | 0600);
    st->st_nlink = 1;
    st->st_uid = p->who.uid;
    st->st_gid = p->who.gid;
    st->st_blksize = 4096;
}


/* Collective I/O: 1 if the open was answered from or into the cache. */
static int open_shared(struct proc *p, struct call *k, const char *path, int flags)
{
    struct coll_ofd *co;
    int plain, r, err;

    if (!coll_on())
        return 0;
    if ((flags & O_ACCMODE) != O_RDONLY || (flags & (O_CREAT | O_TRUNC)))
        coll_changed();                 /* it may write: cached answers may go stale */
    err = coll_open(&p->who, path, flags, &co, &plain);
    if (err < 0)
        return 0;
    if (err > 0)
        return fail(k, err), 1;
    r = co ? fd_alloc(p, FD_COLL, -1) : fd_alloc(p, FD_REAL, plain);
    if (r < 0) {
        if (co)
            coll_close(co);
        else
            close(plain);
        return fail(k, EMFILE), 1;
    }
    p->fds[r].co = co;
    return result(k, r), 1;
}


int srv_openat(struct proc *p, struct call *k, int dirfd, int flags, int mode, const char *path)
{
    int dir, fd, r;

    if (!at_dir(p, k, dirfd, path, &dir))
        return 0;
    if (open_shared(p, k, path, flags))
        return 0;
    fd = openat(dir, path, flags | O_CLOEXEC, (mode_t)mode);
    if (fd < 0)
        return result(k, -1);
    r = fd_alloc(p, FD_REAL, fd);
    if (r < 0) {
        close(fd);
        return fail(k, EMFILE);
    }
    return result(k, r);
}

/* OPENAT and FSTATAT of the new descriptor in one call: the stat of the
 * file the descriptor names, whoever changes the path meanwhile.  A failed
 * stat closes the descriptor again: the call failed as a whole. */
int srv_openat_stat(struct proc *p, struct call *k, int dirfd, int flags, int mode, const char *path,
                    struct lat_stat *out)
{
    struct stat st;
    int fd;

    srv_openat(p, k, dirfd, flags, mode, path);
    if (k->ret < 0)
        return 0;
    struct rfd *r = &p->fds[k->ret];
    if (!real_fd(k, r, EBADF, &fd))
        return 0;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        srv_close(p, k, r);
        return fail(k, e);
    }
    to_lat_stat(&st, out);
    return 0;           /* k->ret: the descriptor, from srv_openat */
}

int srv_close(struct proc *p, struct call *k, struct rfd *r)
{
    int rc = 0;

    lock_closing(p, r);
    if (r->kind == FD_REAL)
        rc = close(r->fd);
    if (r->kind == FD_COLL)
        coll_close(r->co);
    *r = (struct rfd){ FD_FREE, -1, NULL, false };
    /* Linux frees the descriptor even when close reports an error */
    return result(k, rc < 0 && errno != EINTR ? -1 : 0);
}

/* READ/WRITE on a socket: a peer that never sends (or never reads) must not
 * hold this thread in read(2)/write(2) for ever, and with it the socket and
 * the process's connection, after the process is gone.  The call is made
 * without blocking and waited for in poll together with the connection:
 * EINTR if the process hangs up meanwhile.  O_NONBLOCK set by the process
 * gives EAGAIN as before.  A write sends everything, as write(2) would. */
static ssize_t sock_rw(const struct proc *p, int fd, bool wr, void *buf, size_t n)
{
    size_t done = 0;
    bool hup = false;

    for (;;) {
        ssize_t m = wr ? send(fd, (char *)buf + done, n - done, MSG_DONTWAIT | MSG_NOSIGNAL)
                       : recv(fd, buf, n, MSG_DONTWAIT);
        if (m >= 0 && wr && (done += (size_t)m) < n)
            continue;
        if (m >= 0)
            return wr ? (ssize_t)done : m;
        int err = errno, fl = fcntl(fd, F_GETFL);
        if ((err != EAGAIN && err != EWOULDBLOCK && err != EINTR) || (fl >= 0 && (fl & O_NONBLOCK))) {
            errno = err;
            return done ? (ssize_t)done : -1;
        }
        /* a socket shut down for reading polls ready (POLLHUP) yet a
         * non-blocking receive says EAGAIN: a blocking one returns 0 */
        if (hup && !wr)
            return 0;
        struct pollfd pf[2] = { { fd, wr ? POLLOUT : POLLIN, 0 }, { p->c->fd, POLLRDHUP, 0 } };
        while (poll(pf, 2, -1) < 0 && errno == EINTR)
            ;
        if (pf[1].revents) {            /* the process hung up: nobody waits for this call */
            errno = EINTR;
            return done ? (ssize_t)done : -1;
        }
        hup = pf[0].revents & (POLLHUP | POLLERR);
    }
}

/* ---- rendezvous (datapath.c): the data moves between the file and the
 * process's memory, never through the socket ---- */

struct rdv_io {
    const struct proc *p;
    int      fd;
    bool     sock;
    bool     in;                        /* the rank's standard input (stdin.c) */
    struct coll_ofd *co;
    int64_t  off;                       /* < 0: the file position */
};

static ssize_t rdv_read(void *ctx, char *buf, size_t n, uint64_t done)
{
    struct rdv_io *io = ctx;

    if (io->co) {
        int64_t at = io->off < 0 ? *coll_pos(io->co) : io->off + (int64_t)done;
        ssize_t r = coll_pread(io->co, buf, n, at);
        if (r > 0 && io->off < 0)
            *coll_pos(io->co) += r;
        return r;
    }
    if (io->sock)
        return sock_rw(io->p, io->fd, false, buf, n);
    if (io->in)
        return stdin_read(io->fd, io->p->c->fd, buf, n);
    return io->off < 0 ? read(io->fd, buf, n) : pread(io->fd, buf, n, (off_t)(io->off + (int64_t)done));
}

static ssize_t rdv_write(void *ctx, char *buf, size_t n, uint64_t done)
{
    struct rdv_io *io = ctx;
    size_t put = 0;

    if (io->sock)
        return sock_rw(io->p, io->fd, true, buf, n);
    while (put < n) {                   /* as write(2) on a regular file: all of it, or an error */
        ssize_t w = io->off < 0 ? write(io->fd, buf + put, n - put)
                                : pwrite(io->fd, buf + put, n - put, (off_t)(io->off + (int64_t)(done + put)));
        if (w <= 0)
            return put ? (ssize_t)put : w;
        put += (size_t)w;
    }
    return (ssize_t)put;
}

/* READ/WRITE (off -1) or PREAD/PWRITE with header flag LAT_HF_RDV. */
static int rdv(struct proc *p, struct call *k, struct rfd *r, bool wr, int64_t off)
{
    struct iovec segs[LAT_RDV_MAXSEG];
    struct rdv_io io = { p, r->fd, r->kind == FD_REAL && r->sock, false, NULL, off };
    unsigned nseg;
    int err;

    if (!(p->dp.flags & LAT_DP_VM))
        return fail(k, EOPNOTSUPP);     /* not granted in the hello */
    if (!proc_same_image(p))
        return fail(k, EFAULT);         /* it exec'd or ended: the connection closes */
    if ((err = dp_segments(k->data, k->dlen, k->rq.a[1], segs, &nseg)) != 0)
        return fail(k, err);
    io.in = r->kind == FD_STDIN && !wr;
    if (io.in) {
        if ((io.fd = stdin_fd(p->rank)) < 0)
            return result(k, 0);        /* no input for this rank: end of file */
    } else if (r->kind == FD_COLL && !wr) {
        io.co = r->co;
    } else if (r->kind == FD_COLL) {
        io.fd = coll_fd(r->co);         /* a write on a read-only descriptor: EBADF from the kernel */
    } else if (r->kind != FD_REAL) {
        return fail(k, EOPNOTSUPP);     /* standard streams: the client sends the bytes */
    }
    if (wr)
        coll_changed();
    int64_t pos = wr || off >= 0 || io.in ? off : io.co ? *coll_pos(io.co) : (int64_t)lseek(io.fd, 0, SEEK_CUR);
    int64_t done = dp_rdv(p->pid, &p->shm, outbuf(p), LAT_MAX_IO, wr, pos, segs, nseg, (uint64_t)k->rq.a[1],
                          wr ? rdv_write : rdv_read, &io, &err);
    if (done == 0 && err)
        return fail(k, err);
    return result(k, done);
}


static int fd_rdv(struct proc *p, struct call *k, struct rfd *r, bool wr, int64_t off)
{
    int fd;

    if (!real_fd(k, r, ESPIPE, &fd))
        return 0;
    if (off < 0)
        return fail(k, EINVAL);
    return rdv(p, k, r, wr, off);
}

int srv_read_rdv(struct proc *p, struct call *k, struct rfd *r) { return rdv(p, k, r, false, -1); }
int srv_write_rdv(struct proc *p, struct call *k, struct rfd *r) { return rdv(p, k, r, true, -1); }
int srv_pread_rdv(struct proc *p, struct call *k, struct rfd *r, int64_t off) { return fd_rdv(p, k, r, false, off); }
int srv_pwrite_rdv(struct proc *p, struct call *k, struct rfd *r, int64_t off) { return fd_rdv(p, k, r, true, off); }

int srv_read(struct proc *p, struct call *k, struct rfd *r, void *buf, uint64_t n)
{
    ssize_t got;

    if (r->kind == FD_STDIN) {          /* the job's input, if this rank reads it; else end of file */
        int in = stdin_fd(p->rank);
        return result(k, in < 0 ? 0 : stdin_read(in, p->c->fd, buf, n));
    }
    if (r->kind == FD_COLL) {
        got = coll_pread(r->co, buf, n, *coll_pos(r->co));
        if (got > 0)
            *coll_pos(r->co) += got;
    } else if (r->kind != FD_REAL) {
        return fail(k, EBADF);
    } else {
        got = r->sock ? sock_rw(p, r->fd, false, buf, n) : read(r->fd, buf, n);
    }
    return result(k, got);
}

int srv_write(struct proc *p, struct call *k, struct rfd *r, const void *buf, uint64_t n)
{
    switch (r->kind) {
    case FD_STDOUT:
    case FD_STDERR:
        worker_output(p->rank, p->job, r->kind == FD_STDOUT ? LAT_STDOUT : LAT_STDERR, buf, n);
        return result(k, (int64_t)n);
    case FD_REAL:
        coll_changed();
        return result(k, r->sock ? sock_rw(p, r->fd, true, (void *)buf, n) : write(r->fd, buf, n));
    default:
        return fail(k, EBADF);
    }
}

int srv_pread(struct proc *p, struct call *k, struct rfd *r, void *buf, uint64_t n, int64_t off)
{
    int fd;

    (void)p;
    if (!real_fd(k, r, ESPIPE, &fd))
        return 0;
    if (r->kind == FD_COLL)
        return result(k, coll_pread(r->co, buf, n, off));
    return result(k, pread(fd, buf, n, (off_t)off));
}

int srv_pwrite(struct proc *p, struct call *k, struct rfd *r, const void *buf, uint64_t n, int64_t off)
{
    int fd;

    (void)p;
    if (!real_fd(k, r, ESPIPE, &fd))
        return 0;
    coll_changed();
    return result(k, pwrite(fd, buf, n, (off_t)off));
}

int srv_lseek(struct proc *p, struct call *k, struct rfd *r, int64_t off, int whence)
{
    int fd;

    (void)p;
    if (!real_fd(k, r, ESPIPE, &fd))
        return 0;
    if (r->kind == FD_COLL) {
        /* a shared open: its own position; the shared descriptor's is never used */
        int64_t *pos = coll_pos(r->co), to;
        if (whence == SEEK_CUR) {
            if (__builtin_add_overflow(*pos, off, &to))
                return fail(k, EOVERFLOW);
            if (to < 0)
                return fail(k, EINVAL);
        } else if ((to = lseek(fd, (off_t)off, whence)) < 0) {
            return result(k, -1);
        }
        *pos = to;
        return result(k, to);
    }
    return result(k, lseek(fd, (off_t)off, whence));
}

/* fstat of a remote descriptor arrives as ("", AT_EMPTY_PATH): 1 if it
 * names a standard stream (*st filled), 0 if not, -1 if a bad descriptor. */
static int empty_path_special(struct proc *p, struct call *k, int dirfd, const char *path, int flags,
                              struct stat *st)
{
    if (path[0] || !(flags & AT_EMPTY_PATH) || dirfd == LAT_AT_FDCWD)
        return 0;
    if (dirfd < 0 || dirfd >= (int)LAT_MAX_FDS || p->fds[dirfd].kind == FD_FREE)
        return fail(k, EBADF), -1;
    if (p->fds[dirfd].kind == FD_REAL || p->fds[dirfd].kind == FD_COLL)
        return 0;
    special_stat(p, p->fds[dirfd].kind, st);
    return 1;
}

int srv_fstatat(struct proc *p, struct call *k, int dirfd, int flags, const char *path, struct lat_stat *out)
{
    struct stat st;
    int dir, sp = empty_path_special(p, k, dirfd, path, flags, &st);

    if (sp < 0)
        return 0;
    if (!sp) {
        if (!at_dir(p, k, dirfd, path, &dir))
            return 0;
        int err = coll_on() ? coll_stat(&p->who, path, flags, &st) : -1;
        if (err > 0)
            return fail(k, err);
        if (err < 0 && fstatat(dir, path, &st, flags) < 0)
            return result(k, -1);
    }
    to_lat_stat(&st, out);
    return result(k, 0);
}

_Static_assert(sizeof(struct statx) == sizeof(struct lat_statx), "lat_statx is a struct statx");

int srv_statx(struct proc *p, struct call *k, int dirfd, int flags, int mask, const char *path,
              struct lat_statx *out)
{
    struct statx stx;
    struct stat st;
    int dir, sp = empty_path_special(p, k, dirfd, path, flags, &st);

    if (sp < 0)
        return 0;
    memset(&stx, 0, sizeof(stx));
    if (sp) {
        stx.stx_mask = STATX_BASIC_STATS;
        stx.stx_mode = st.st_mode;
        stx.stx_nlink = st.st_nlink;
        stx.stx_uid = st.st_uid;
        stx.stx_gid = st.st_gid;
        stx.stx_blksize = st.st_blksize;
    } else {
        if (!at_dir(p, k, dirfd, path, &dir))
            return 0;
        if (statx(dir, path, flags, (unsigned)mask, &stx) < 0)
            return result(k, -1);
    }
    memcpy(out, &stx, sizeof(stx));
    return result(k, 0);
}

int srv_faccessat(struct proc *p, struct call *k, int dirfd, int mode, int flags, const char *path)
{
    int dir;
    long rc;

    if (!at_dir(p, k, dirfd, path, &dir))
        return 0;
    /* the worker's real and effective ids are both the owner's */
    rc = syscall(SYS_faccessat2, dir, path, mode, flags);
    if (rc < 0 && errno == ENOSYS)
        rc = faccessat(dir, path, mode, flags);
    return result(k, rc);
}

int srv_unlinkat(struct proc *p, struct call *k, int dirfd, int flags, const char *path)
{
    int dir;

    if (!at_dir(p, k, dirfd, path, &dir))
        return 0;
    coll_changed();
    return result(k, unlinkat(dir, path, flags));
}

int srv_renameat(struct proc *p, struct call *k, int olddirfd, int newdirfd, int flags,
                 const char *from, const char *to)
{
    int odir, ndir;

    if (!at_dir(p, k, olddirfd, from, &odir) || !at_dir(p, k, newdirfd, to, &ndir))
        return 0;
    coll_changed();
    return result(k, renameat2(odir, from, ndir, to, (unsigned)flags));
}

int srv_mkdirat(struct proc *p, struct call *k, int dirfd, int mode, const char *path)
{
    int dir;

    if (!at_dir(p, k, dirfd, path, &dir))
        return 0;
    coll_changed();
    return result(k, mkdirat(dir, path, (mode_t)mode));
}

int srv_getdents64(struct proc *p, struct call *k, struct rfd *r, void *buf, uint64_t n)
{
    int fd;

    (void)p;
    if (!real_fd(k, r, ENOTDIR, &fd))
        return 0;
    return result(k, syscall(SYS_getdents64, fd, buf, n));
}

int srv_readlinkat(struct proc *p, struct call *k, int dirfd, const char *path, char *buf, int64_t n)
{
    int dir;

    if (!at_dir(p, k, dirfd, path, &dir))
        return 0;
    return result(k, readlinkat(dir, path, buf, (size_t)n));
}

int srv_truncate(struct proc *p, struct call *k, const char *path, int64_t length)
{
    (void)p;
    coll_changed();
    return result(k, truncate(path, (off_t)length));
}

int srv_ftruncate(struct proc *p, struct call *k, struct rfd *r, int64_t length)
{
    int fd;

    (void)p;
    if (!real_fd(k, r, EINVAL, &fd))
        return 0;
    coll_changed();
    return result(k, ftruncate(fd, (off_t)length));
}

int srv_fsync(struct proc *p, struct call *k, struct rfd *r)
{
    int fd;

    (void)p;
    return real_fd(k, r, EINVAL, &fd) ? result(k, fsync(fd)) : 0;
}

int srv_fdatasync(struct proc *p, struct call *k, struct rfd *r)
{
    int fd;

    (void)p;
    return real_fd(k, r, EINVAL, &fd) ? result(k, fdatasync(fd)) : 0;
}

int srv_dup(struct proc *p, struct call *k, struct rfd *r)
{
    int fd = -1, n;

    if (r->kind == FD_REAL && (fd = fcntl(r->fd, F_DUPFD_CLOEXEC, 0)) < 0)
        return result(k, -1);
    n = fd_alloc(p, r->kind, fd);
    if (n < 0) {
        if (fd >= 0)
            close(fd);
        return fail(k, EMFILE);
    }
    p->fds[n].sock = r->sock;
    if (r->kind == FD_COLL)             /* shares the position, as dup(2) does */
        p->fds[n].co = coll_dup(r->co);
    return result(k, n);
}

int srv_fcntl(struct proc *p, struct call *k, struct rfd *r, int cmd, int arg)
{
    (void)p;
    if (cmd != F_GETFL && cmd != F_SETFL)
        return fail(k, EINVAL);
    if (r->kind == FD_COLL)             /* a shared open: read-only, its flags are everyone's */
        return result(k, cmd == F_SETFL ? 0 : fcntl(coll_fd(r->co), F_GETFL));
    if (r->kind != FD_REAL)             /* the standard streams keep their flags */
        return result(k, cmd == F_SETFL ? 0 : r->kind == FD_STDIN ? O_RDONLY : O_WRONLY);
    if (cmd == F_GETFL)
        return result(k, fcntl(r->fd, F_GETFL));
    return result(k, fcntl(r->fd, F_SETFL, arg));
}

int srv_chdir(struct proc *p, struct call *k, const char *path)
{
    (void)p;
    return result(k, chdir(path));
}

int srv_fchdir(struct proc *p, struct call *k, struct rfd *r)
{
    int fd;

    (void)p;
    return real_fd(k, r, ENOTDIR, &fd) ? result(k, fchdir(fd)) : 0;
}

int srv_getcwd(struct proc *p, struct call *k, char *buf, int64_t n)
{
    (void)p;
    /* the system call returns the length including the NUL, ERANGE if n is short */
    return result(k, syscall(SYS_getcwd, buf, (size_t)n));
}

int srv_umask(struct proc *p, struct call *k, int64_t mask)
{
    (void)p;
    return result(k, umask((mode_t)(mask & 0777)));
}

int srv_fchmodat(struct proc *p, struct call *k, int dirfd, int mode, int flags, const char *path)
{
    int dir;

    if (!at_dir(p, k, dirfd, path, &dir))
        return 0;
    coll_changed();
    return result(k, fchmodat(dir, path, (mode_t)mode, flags));
}

int srv_fchmod(struct proc *p, struct call *k, struct rfd *r, int mode)
{
    (void)p;
    if (r->kind != FD_REAL && r->kind != FD_COLL)
        return result(k, 0);            /* like fchmod on a pipe: nothing to keep */
    coll_changed();
    return result(k, fchmod(r->kind == FD_COLL ? coll_fd(r->co) : r->fd, (mode_t)mode));
}

int srv_utimensat(struct proc *p, struct call *k, int dirfd, int flags, int has_times,
                  const struct lat_timespec *lt, const char *path)
{
    struct timespec ts[2];
    int dir;

    for (int i = 0; i < 2; i++)
        ts[i] = (struct timespec){ .tv_sec = lt[i].sec, .tv_nsec = lt[i].nsec };
    if (!path[0] && (flags & AT_EMPTY_PATH)) {
        /* futimens(fd): the system call with a NULL path acts on dirfd */
        if (dirfd < 0 || dirfd >= (int)LAT_MAX_FDS || p->fds[dirfd].kind == FD_FREE)
            return fail(k, EBADF);
        if (!real_fd(k, &p->fds[dirfd], EINVAL, &dir))
            return 0;
        return result(k, syscall(SYS_utimensat, dir, NULL, has_times ? ts : NULL, 0));
    }
    if (!at_dir(p, k, dirfd, path, &dir))
        return 0;
    coll_changed();
    return result(k, utimensat(dir, path, has_times ? ts : NULL, flags));
}

static int statfs_reply(struct call *k, int rc, const struct statfs *s, struct lat_statfs *out)
{
    if (rc < 0)
        return result(k, -1);
    to_lat_statfs(s, out);
    return result(k, 0);
}

int srv_statfs(struct proc *p, struct call *k, const char *path, struct lat_statfs *out)
{
    struct statfs s;

    (void)p;
    return statfs_reply(k, statfs(path, &s), &s, out);
}

int srv_fstatfs(struct proc *p, struct call *k, struct rfd *r, struct lat_statfs *out)
{
    struct statfs s;
    int fd;

    (void)p;
    if (!real_fd(k, r, EINVAL, &fd))
        return 0;
    return statfs_reply(k, fstatfs(fd, &s), &s, out);
}

/* ---- the connection ---- */

/* Counters: time and bytes of each call; eager or rendezvous for the data calls. */
static void account(uint16_t type, const struct call *k, uint64_t ns)
{
    bool data = type == LAT_SYS_READ || type == LAT_SYS_WRITE || type == LAT_SYS_PREAD ||
                type == LAT_SYS_PWRITE;
    bool moved = data || type == LAT_SYS_GETDENTS64 || type == LAT_SYS_SEND_RDV || type == LAT_SYS_RECV_RDV;
    uint64_t bytes = k->ret > 0 && moved ? (uint64_t)k->ret : k->dlen + k->outlen;

    dp_account(type - LAT_SYS__BASE, ns, bytes);
    if (data && !(k->flags & LAT_HF_RDV)) {
        atomic_fetch_add_explicit(&dp_ctr[LAT_CTR_EAGER], 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&dp_ctr[LAT_CTR_EAGER_BYTES], k->ret > 0 ? (uint64_t)k->ret : 0,
                                  memory_order_relaxed);
    }
}

/* A chunk of a pipelined series (header flag LAT_HF_PIPE_*, docs/protocol.md
 * section 6.2): -1 when it must not run (an earlier one was short or
 * failed), 1 when it runs, 0 for any other call. */
static int pipe_chunk(struct proc *p, struct call *k)
{
    if (!(k->flags & (LAT_HF_PIPE_FIRST | LAT_HF_PIPE_NEXT)))
        return 0;
    if (k->flags & LAT_HF_PIPE_FIRST) {
        p->pipe_broken = false;
        atomic_fetch_add_explicit(&dp_ctr[LAT_CTR_PIPE_SERIES], 1, memory_order_relaxed);
    }
    atomic_fetch_add_explicit(&dp_ctr[LAT_CTR_PIPE_CHUNKS], 1, memory_order_relaxed);
    if (!p->pipe_broken)
        return 1;
    atomic_fetch_add_explicit(&dp_ctr[LAT_CTR_PIPE_CANCELLED], 1, memory_order_relaxed);
    k->ret = -1;
    k->err = ECANCELED;
    return -1;
}

/* After a chunk ran: a failed or short one breaks its series. */
static void pipe_after(struct proc *p, uint16_t type, const struct call *k)
{
    int64_t want = type == LAT_SYS_READ || type == LAT_SYS_PREAD ? k->rq.a[1] : (int64_t)k->dlen;

    if (k->ret < 0 || k->ret < want)
        p->pipe_broken = true;
}

/* LAT_DP_SHARE (big memory) and LAT_MBOX_SHARE (the mailbox): a struct
 * lat_sysreq naming the process's memfd, granted only with LAT_DP_SHM. */
static int serve_share(struct proc *p, const struct lat_hdr *h, char *why, size_t whylen)
{
    const char *what = h->type == LAT_DP_SHARE ? "LAT_DP_SHARE" : "LAT_MBOX_SHARE";
    struct lat_sysreq rq;
    int err = EPERM;

    if (h->len != sizeof(rq)) {
        reply_error(p->c, h->seq, EINVAL, "%s of %u bytes, not %zu", what, h->len, sizeof(rq));
        return 0;
    }
    memcpy(&rq, p->c->buf, sizeof(rq));
    /* granted in the hello: pid is our node's child */
    if ((p->dp.flags & LAT_DP_SHM) && !proc_same_image(p))
        err = EFAULT;
    else if ((p->dp.flags & LAT_DP_SHM) && h->type == LAT_DP_SHARE)
        err = dp_share(&p->shm, p->pid, cfg.location, (uint64_t)rq.a[0], (uint64_t)rq.a[1], rq.a[2]);
    else if (p->dp.flags & LAT_DP_SHM)
        err = dp_mbox_share(&p->mbox, p->pid, cfg.location, rq.a[0], &p->mbox_done);

    if (reply_ret(p->c, h->type, h->seq, err ? -1 : 0, err, NULL, 0) < 0)
        return errprintf(why, whylen, "reply failed: %s", strerror(errno));
    return 0;
}

static sys_fn call_fn(uint16_t type)
{
    return type >= LAT_SYS__BASE && type < LAT_SYS__END ? fwd_calls[type - LAT_SYS__BASE] : NULL;
}

/* Runs shipped call h, its payload (at least a lat_sysreq) in p->c->buf. */
static void run_call(struct proc *p, const struct lat_hdr *h, sys_fn fn, struct call *k)
{
    memset(k, 0, sizeof(*k));
    memcpy(&k->rq, p->c->buf, sizeof(k->rq));
    k->flags = h->flags;
    k->data = p->c->buf + sizeof(k->rq);
    k->dlen = h->len - sizeof(k->rq);
    atomic_fetch_add(&sys_calls[h->type - LAT_SYS__BASE], 1);
    int piped = pipe_chunk(p, k);
    errno = 0;
    if (piped >= 0)
        fn(p, k);
    if (piped > 0)
        pipe_after(p, h->type, k);
}

static int serve_call(struct proc *p, const struct lat_hdr *h, char *why, size_t whylen)
{
    struct call k;
    sys_fn fn;

    if (h->type == LAT_PLUG_CALL)
        return plug_forward(p, h, why, whylen);
    if (h->type == LAT_DP_SHARE || h->type == LAT_MBOX_SHARE)
        return serve_share(p, h, why, whylen);
    if (!(fn = call_fn(h->type))) {
        reply_error(p->c, h->seq, ENOSYS, "message type 0x%04x is not a shipped call", h->type);
        return 0;
    }
    if (h->len < sizeof(k.rq))
        return errprintf(why, whylen, "call 0x%04x with %u bytes, less than its arguments",
                         h->type, h->len);
    if (!lat_hdr_flags_ok(h->type, h->flags)) {
        reply_error(p->c, h->seq, EINVAL, "header flags 0x%02x are not a transport of call 0x%04x",
                    h->flags, h->type);
        return 0;
    }
    /* a write of the job's output may be one the process did not wait for
     * (cnk, compute/shipc/conn.c): anything else, it waits for */
    int64_t rfd;
    memcpy(&rfd, p->c->buf, sizeof(rfd));
    bool out = h->type == LAT_SYS_WRITE && (rfd == 1 || rfd == 2) &&
               (p->fds[rfd].kind == FD_STDOUT || p->fds[rfd].kind == FD_STDERR);
    uint64_t t0 = dp_now_ns();
    if (!out)
        worker_in_call(p->c, true);
    run_call(p, h, fn, &k);
    /* out of the call before its reply: once replied, the process may write
     * (unawaited) and exit while we are still here (worker.c, served_all) */
    if (!out)
        worker_in_call(p->c, false);
    int rc = reply_ret(p->c, h->type, h->seq, k.ret, k.err, k.out, k.outlen);
    account(h->type, &k, dp_now_ns() - t0);
    if (rc < 0 && (errno == EPIPE || errno == ECONNRESET))
        return 0;                       /* it died: what it sent before still goes out (its output) */
    return rc < 0 ? errprintf(why, whylen, "reply failed: %s", strerror(errno)) : 0;
}

/* The request waiting in the mailbox, answered there.  Only what
 * lat_mbox_ok() allows travels through it (wire.h); anything else, or a request that does not fit the
 * mailbox, is answered LAT_ERROR EINVAL with a RAS warning, and the
 * process's next call is served as usual. */
static void serve_mbox(struct proc *p)
{
    struct lat_mbox *x = (struct lat_mbox *)p->mbox.map;
    uint32_t sq = __atomic_load_n(&x->req_seq, __ATOMIC_ACQUIRE);
    char why[CIOD_ERRLEN], loc[128];
    struct lat_hdr h;
    struct call k;
    sys_fn fn = NULL;

    p->mbox_done = sq;
    if (dp_mbox_take(&p->mbox, sq, &h, p->c->buf, why, sizeof(why)) == 0) {
        if (!(fn = call_fn(h.type)) || !lat_mbox_ok(h.type, h.flags))
            snprintf(why, sizeof(why), "message type 0x%04x (header flags 0x%02x) may not travel in the mailbox",
                     h.type, h.flags);
        else if (h.len < sizeof(k.rq))
            snprintf(why, sizeof(why), "call 0x%04x with %u bytes, less than its arguments", h.type, h.len);
        else {
            uint64_t t0 = dp_now_ns();
            worker_in_call(p->c, true);
            run_call(p, &h, fn, &k);
            atomic_fetch_add(&dp_ctr[LAT_CTR_MBOX_CALLS], 1);    /* counted before the process can look */
            worker_in_call(p->c, false);        /* before the reply, as ship_call */
            dp_mbox_reply(&p->mbox, h.type, sq, k.ret, k.err, k.out, k.outlen);
            account(h.type, &k, dp_now_ns() - t0);
            return;
        }
    }
    atomic_fetch_add(&dp_ctr[LAT_CTR_MBOX_BAD], 1);
    node_location(p->node, loc, sizeof(loc));
    ras_job_event(p->job, RAS_WARNING, loc, "mailbox of job %" PRIu64 " rank %d: request %u: %s; answered EINVAL",
              p->job, p->rank, sq, why);
    dp_mbox_reply(&p->mbox, LAT_ERROR, sq, -1, EINVAL, NULL, 0);
}

/* LAT_MBOX_RING: the process stored a request while we were not polling
 * (it may have been served since: then there is nothing to do). */
static void serve_ring(struct proc *p)
{
    struct lat_mbox *x = (struct lat_mbox *)p->mbox.map;

    atomic_fetch_add(&dp_ctr[LAT_CTR_MBOX_RINGS], 1);
    if (x && __atomic_load_n(&x->req_seq, __ATOMIC_ACQUIRE) != p->mbox_done)
        serve_mbox(p);
}

/* A plug-in call goes to the monitor, which loaded the plug-ins, over this
 * process's line; its reply comes back here.  While the call waits (a
 * plug-in may block), a process that hangs up closes the line, which tells
 * the plug-in its caller is gone. */
static int plug_forward(struct proc *p, const struct lat_hdr *h, char *why, size_t whylen)
{
    struct iovec v = { p->c->buf, h->len };
    struct lat_hdr rh;

    if (!p->plug) {
        reply_ret(p->c, h->type, h->seq, -1, ENOENT, NULL, 0);
        return 0;
    }
    if (conn_sendv(p->plug, h->type, h->seq, &v, 1) < 0)
        return errprintf(why, whylen, "plug-in line: %s", strerror(errno));
    for (;;) {
        struct pollfd pf[2] = { { p->plug->fd, POLLIN, 0 }, { p->c->fd, POLLRDHUP, 0 } };
        if (poll(pf, 2, -1) < 0 && errno != EINTR)
            return errprintf(why, whylen, "poll: %s", strerror(errno));
        if (pf[1].revents & (POLLRDHUP | POLLHUP | POLLERR))
            return errprintf(why, whylen, "the process hung up during a plug-in call");
        if (pf[0].revents)
            break;
    }
    if (conn_recv(p->plug, &rh, why, whylen) <= 0)
        return errprintf(why, whylen, "plug-in line closed");
    v = (struct iovec){ p->plug->buf, rh.len };
    return conn_sendv(p->c, rh.type, rh.seq, &v, 1) < 0 ? errprintf(why, whylen, "reply failed: %s",
                                                                    strerror(errno)) : 0;
}

/*
 * The connection is bound to its process, not to a pid: at the first request
 * (the process runs its program by then; its node said the hello before the
 * exec) the worker takes a pidfd of it and opens /proc/PID/mem, which holds
 * that address space.  Before the process's memory is touched, reading
 * address 0 of it fails with EIO while the address space lives, and reads
 * nothing once the process exec'd or ended.  A process that lives on in a
 * new program (the pidfd says so) is bound to it again only if the kernel
 * lets the owner open its memory now: a setuid or otherwise non-dumpable
 * program is not, and the connection closes.  Opening is the kernel's
 * ptrace check, made as the owner.
 */
static bool mem_open(struct proc *p)
{
    char path[48];

    snprintf(path, sizeof(path), "/proc/%d/mem", (int)p->pid);
    p->mem = open(path, O_RDONLY | O_CLOEXEC);
    return p->mem >= 0;
}

static void proc_bind(struct proc *p)
{
    if (p->mem != -1 || !p->pid || !(p->dp.flags & LAT_DP_VM))
        return;
    p->pidfd = (int)syscall(SYS_pidfd_open, p->pid, 0);
    if (p->pidfd < 0 || !mem_open(p))
        p->mem = -2;                    /* never bound: its memory will not be touched */
}

bool proc_same_image(struct proc *p)
{
    char b, loc[128];
    const char *why = "cannot be reached as the job owner";

    if (p->mem >= 0 && pread(p->mem, &b, 1, 0) < 0 && errno == EIO)
        return true;
    if (p->mem >= 0) {
        close(p->mem);
        p->mem = -2;
        why = "ended";
        if (syscall(SYS_pidfd_send_signal, p->pidfd, 0, NULL, 0) == 0) {
            if (mem_open(p) && pread(p->mem, &b, 1, 0) < 0 && errno == EIO)
                return true;            /* exec'd a program the owner may reach */
            why = "exec'd a program the job owner may not reach";
        }
    }
    if (!p->exec_gone) {
        node_location(p->node, loc, sizeof(loc));
        ras_job_event(p->job, RAS_WARNING, loc, "job %" PRIu64 " rank %d: process %d %s: its I/O connection is closed",
                  p->job, p->rank, (int)p->pid, why);
    }
    p->exec_gone = true;
    return false;
}

void ship_serve(struct conn *c, struct conn *plug, const struct wproc *wp, const struct ident *who,
                const char *job_cwd)
{
    struct proc *p = calloc(1, sizeof(*p));
    char why[CIOD_ERRLEN], loc[128], name[16];
    struct lat_hdr h;
    int rc = 0;

    if (!p)
        return;
    p->c = c;
    p->plug = plug;
    p->job = wp->job;
    p->node = wp->node;
    p->rank = wp->rank;
    p->who = *who;
    p->pid = (pid_t)wp->pid;
    p->dp = wp->dp;
    p->mem = p->pidfd = -1;
    node_location(p->node, loc, sizeof(loc));
    /* its own cwd and umask; the worker's identity is the owner's */
    if (unshare(CLONE_FS) < 0 || chdir(job_cwd) < 0) {
        ras_job_event(p->job, RAS_ERROR, loc, "cannot set up file access for job %" PRIu64 " rank %d in %s: %s",
                  p->job, p->rank, job_cwd, strerror(errno));
        free(p);
        return;
    }
    for (unsigned i = 0; i < LAT_MAX_FDS; i++)
        p->fds[i] = (struct rfd){ FD_FREE, -1, NULL, false };
    p->fds[0].kind = FD_STDIN;
    p->fds[1].kind = FD_STDOUT;
    p->fds[2].kind = FD_STDERR;
    snprintf(name, sizeof(name), "ciod-proc%u", p->node & 0xffff);
    pthread_setname_np(pthread_self(), name);

    unsigned skip = 0;
    for (;;) {
        if (dp_spin(c, &skip, &p->mbox, p->mbox_done)) {
            serve_mbox(p);
            continue;
        }
        if ((rc = conn_recv(c, &h, why, sizeof(why))) <= 0) {
            if (rc < 0 && errno == ECONNRESET)
                rc = 0;                 /* it died with replies unread (writes it did not wait for) */
            break;
        }
        proc_bind(p);
        if (h.type == LAT_MBOX_RING)
            serve_ring(p);
        else if (serve_call(p, &h, why, sizeof(why)) < 0) {
            rc = -1;
            break;
        }
        if (p->exec_gone) {
            rc = 0;                     /* said in a RAS event already */
            break;
        }
    }
    if (rc < 0)
        ras_job_event(p->job, RAS_WARNING, loc, "process connection of job %" PRIu64 " rank %d: %s; closing",
                  p->job, p->rank, why);
    lock_end(p);
    dp_unshare(&p->shm);
    dp_unshare(&p->mbox);
    if (p->mem >= 0)
        close(p->mem);
    if (p->pidfd >= 0)
        close(p->pidfd);
    for (unsigned i = 0; i < LAT_MAX_FDS; i++) {
        if (p->fds[i].kind == FD_REAL)
            close(p->fds[i].fd);
        if (p->fds[i].kind == FD_COLL)
            coll_close(p->fds[i].co);
    }
    free(p);
}
