/*
 * ship.c - function shipping: one compute process's I/O system calls,
 * reissued here as the job owner.
 *
 * The thread owns everything of the process on this side: its working
 * directory and umask (unshare(CLONE_FS)), its file-system identity
 * (identity.c) and a table of LAT_MAX_FDS remote descriptors.  Remote
 * descriptors 0, 1 and 2 are not files: 0 reads end-of-file, 1 and 2
 * turn writes into the rank's output on the control connection.
 *
 * A request is decoded (arguments, path, data), the remote descriptors
 * are mapped to real ones, the real call runs and its result and errno
 * go back unchanged.  Handlers sit in a table indexed by message type.
 * The connection's one receive buffer also carries data read for a reply:
 * a request's own bytes are no longer needed by then.
 */
#include "ciod.h"
#include "shipcall.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

atomic_uint_fast64_t sys_calls[NSYS];

/* struct proc, struct call, sys_fn: shipcall.h (shared with sock.c) */

/* ---- helpers: results, arguments, descriptors ---- */

/* The NUL-terminated path at data + off; *next is just past its NUL. */
static const char *arg_path(struct call *k, size_t off, size_t *next)
{
    const char *s = k->data + off, *nul;
    size_t room = off <= k->dlen ? k->dlen - off : 0;

    nul = memchr(s, '\0', room < LAT_MAX_PATH ? room : LAT_MAX_PATH);
    if (!nul) {
        fail(k, room >= LAT_MAX_PATH ? ENAMETOOLONG : EINVAL);
        return NULL;
    }
    if (next)
        *next = off + (size_t)(nul - s) + 1;
    return s;
}

static struct rfd *arg_fd(struct proc *p, struct call *k, int i)
{
    int64_t n = k->rq.a[i];

    if (n < 0 || n >= LAT_MAX_FDS || p->fds[n].kind == FD_FREE) {
        fail(k, EBADF);
        return NULL;
    }
    return &p->fds[n];
}

static bool arg_realfd(struct proc *p, struct call *k, int i, int *fd, int special_err)
{
    struct rfd *r = arg_fd(p, k, i);

    if (!r)
        return false;
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
static bool arg_dirfd(struct proc *p, struct call *k, int i, const char *path, int *fd)
{
    if (path && path[0] == '/') {
        *fd = AT_FDCWD;
        return true;
    }
    if (k->rq.a[i] == LAT_AT_FDCWD) {
        *fd = AT_FDCWD;
        return true;
    }
    return arg_realfd(p, k, i, fd, ENOTDIR);
}

static bool arg_count(struct call *k, int i, size_t *n)
{
    if (k->rq.a[i] < 0 || (uint64_t)k->rq.a[i] > LAT_MAX_IO) {
        fail(k, EINVAL);
        return false;
    }
    *n = (size_t)k->rq.a[i];
    return true;
}

static int fd_alloc(struct proc *p, enum fd_kind kind, int fd)
{
    for (unsigned i = 0; i < LAT_MAX_FDS; i++) {
        if (p->fds[i].kind == FD_FREE) {
            p->fds[i] = (struct rfd){ kind, fd, NULL };
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

/* ---- the calls, in wire order ---- */

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

static int sys_openat(struct proc *p, struct call *k)
{
    const char *path = arg_path(k, 0, NULL);
    int dir, flags, mode, fd, r;

    if (!path || !arg_int(k, 1, &flags) || !arg_int(k, 2, &mode) || !arg_dirfd(p, k, 0, path, &dir))
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
    result(k, r);
    return 0;
}

static int sys_close(struct proc *p, struct call *k)
{
    struct rfd *r = arg_fd(p, k, 0);
    int rc = 0;

    if (!r)
        return 0;
    if (r->kind == FD_REAL)
        rc = close(r->fd);
    if (r->kind == FD_COLL)
        coll_close(r->co);
    *r = (struct rfd){ FD_FREE, -1, NULL };
    /* Linux frees the descriptor even when close reports an error */
    result(k, rc < 0 && errno != EINTR ? -1 : 0);
    return 0;
}

/* ---- rendezvous (datapath.c): the data moves between the file and the
 * process's memory, never through the socket ---- */

struct rdv_io {
    int      fd;
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
    return io->off < 0 ? read(io->fd, buf, n) : pread(io->fd, buf, n, (off_t)(io->off + (int64_t)done));
}

static ssize_t rdv_write(void *ctx, char *buf, size_t n, uint64_t done)
{
    struct rdv_io *io = ctx;
    size_t put = 0;

    while (put < n) {                   /* as write(2) on a regular file: all of it, or an error */
        ssize_t w = io->off < 0 ? write(io->fd, buf + put, n - put)
                                : pwrite(io->fd, buf + put, n - put, (off_t)(io->off + (int64_t)(done + put)));
        if (w <= 0)
            return put ? (ssize_t)put : w;
        put += (size_t)w;
    }
    return (ssize_t)put;
}

/* READ/WRITE (off -1) or PREAD/PWRITE with a3 = LAT_RDV. */
static int rdv(struct proc *p, struct call *k, struct rfd *r, bool wr, int64_t off)
{
    struct iovec segs[LAT_RDV_MAXSEG];
    struct rdv_io io = { r->fd, NULL, off };
    unsigned nseg;
    int err;

    if (!(p->dp.flags & LAT_DP_VM))
        return fail(k, EOPNOTSUPP);     /* not granted in the hello */
    if ((err = dp_segments(k->data, k->dlen, k->rq.a[1], segs, &nseg)) != 0)
        return fail(k, err);
    if (r->kind == FD_STDIN && !wr)
        return result(k, 0);
    if (r->kind == FD_COLL && !wr)
        io.co = r->co;
    else if (r->kind == FD_COLL)
        io.fd = coll_fd(r->co);         /* a write on a read-only descriptor: EBADF from the kernel */
    else if (r->kind != FD_REAL)
        return fail(k, EOPNOTSUPP);     /* standard streams: the client sends the bytes */
    if (wr)
        coll_changed();
    int64_t done = dp_rdv(p->pid, outbuf(p), LAT_MAX_IO, wr, segs, nseg, (uint64_t)k->rq.a[1],
                          wr ? rdv_write : rdv_read, &io, &err);
    if (done == 0 && err)
        return fail(k, err);
    return result(k, done);
}

static int shipped_fd_rdv(struct proc *p, struct call *k, bool wr)
{
    int fd;

    if (!arg_realfd(p, k, 0, &fd, ESPIPE))
        return 0;
    if (k->rq.a[2] < 0)
        return fail(k, EINVAL);
    return rdv(p, k, &p->fds[k->rq.a[0]], wr, k->rq.a[2]);
}

static int sys_read(struct proc *p, struct call *k)
{
    struct rfd *r = arg_fd(p, k, 0);
    size_t n;
    ssize_t got;

    if (r && k->rq.a[3] == LAT_RDV)
        return rdv(p, k, r, false, -1);
    if (!r || !arg_count(k, 1, &n))
        return 0;
    if (r->kind == FD_STDIN)
        return result(k, 0);            /* compute processes have no input */
    if (r->kind == FD_COLL) {
        got = coll_pread(r->co, outbuf(p), n, *coll_pos(r->co));
        if (got > 0)
            *coll_pos(r->co) += got;
    } else if (r->kind != FD_REAL) {
        return fail(k, EBADF);
    } else {
        got = read(r->fd, outbuf(p), n);
    }
    result(k, got);
    if (got > 0) {
        k->out = outbuf(p);
        k->outlen = got;
    }
    return 0;
}

static int sys_write(struct proc *p, struct call *k)
{
    struct rfd *r = arg_fd(p, k, 0);

    if (!r)
        return 0;
    if (k->rq.a[3] == LAT_RDV)
        return rdv(p, k, r, true, -1);
    if (k->dlen > LAT_MAX_IO)
        return fail(k, EINVAL);
    switch (r->kind) {
    case FD_STDOUT:
    case FD_STDERR:
        job_rank_output(p->rank, p->job, r->kind == FD_STDOUT ? LAT_STDOUT : LAT_STDERR,
                        k->data, k->dlen);
        return result(k, (int64_t)k->dlen);
    case FD_REAL:
        coll_changed();
        return result(k, write(r->fd, k->data, k->dlen));
    default:
        return fail(k, EBADF);
    }
    return 0;
}

static int sys_pread(struct proc *p, struct call *k)
{
    size_t n;
    ssize_t got;
    int fd;

    if (k->rq.a[3] == LAT_RDV)
        return shipped_fd_rdv(p, k, false);
    if (!arg_realfd(p, k, 0, &fd, ESPIPE) || !arg_count(k, 1, &n))
        return 0;
    if (p->fds[k->rq.a[0]].kind == FD_COLL)
        got = coll_pread(p->fds[k->rq.a[0]].co, outbuf(p), n, k->rq.a[2]);
    else
        got = pread(fd, outbuf(p), n, (off_t)k->rq.a[2]);
    result(k, got);
    if (got > 0) {
        k->out = outbuf(p);
        k->outlen = got;
    }
    return 0;
}

static int sys_pwrite(struct proc *p, struct call *k)
{
    int fd;

    if (k->rq.a[3] == LAT_RDV)
        return shipped_fd_rdv(p, k, true);
    if (!arg_realfd(p, k, 0, &fd, ESPIPE))
        return 0;
    if (k->dlen > LAT_MAX_IO)
        return fail(k, EINVAL);
    coll_changed();
    result(k, pwrite(fd, k->data, k->dlen, (off_t)k->rq.a[2]));
    return 0;
}

static int sys_lseek(struct proc *p, struct call *k)
{
    int fd, whence;

    if (!arg_realfd(p, k, 0, &fd, ESPIPE) || !arg_int(k, 2, &whence))
        return 0;
    if (p->fds[k->rq.a[0]].kind == FD_COLL) {
        /* a shared open: its own position; the shared descriptor's is never used */
        int64_t *pos = coll_pos(p->fds[k->rq.a[0]].co), to;
        if (whence == SEEK_CUR) {
            if (__builtin_add_overflow(*pos, k->rq.a[1], &to))
                return fail(k, EOVERFLOW);
            if (to < 0)
                return fail(k, EINVAL);
        } else if ((to = lseek(fd, (off_t)k->rq.a[1], whence)) < 0) {
            return result(k, -1);
        }
        *pos = to;
        return result(k, to);
    }
    result(k, lseek(fd, (off_t)k->rq.a[1], whence));
    return 0;
}

/* fstat of a remote descriptor arrives as ("", AT_EMPTY_PATH). */
static bool empty_path_special(struct proc *p, struct call *k, const char *path, int flags,
                               struct stat *st)
{
    struct rfd *r;

    if (path[0] || !(flags & AT_EMPTY_PATH) || k->rq.a[0] == LAT_AT_FDCWD)
        return false;
    r = arg_fd(p, k, 0);
    if (!r || r->kind == FD_REAL || r->kind == FD_COLL)
        return false;
    special_stat(p, r->kind, st);
    return true;
}

static int sys_fstatat(struct proc *p, struct call *k)
{
    const char *path = arg_path(k, 0, NULL);
    struct stat st;
    int dir, flags;

    if (!path || !arg_int(k, 1, &flags))
        return 0;
    if (!empty_path_special(p, k, path, flags, &st)) {
        if (k->err || !arg_dirfd(p, k, 0, path, &dir))
            return 0;
        int err = coll_on() ? coll_stat(&p->who, path, flags, &st) : -1;
        if (err > 0)
            return fail(k, err);
        if (err < 0 && fstatat(dir, path, &st, flags) < 0)
            return result(k, -1);
    }
    to_lat_stat(&st, &k->small.st);
    k->out = &k->small.st;
    k->outlen = sizeof(k->small.st);
    result(k, 0);
    return 0;
}

static int sys_statx(struct proc *p, struct call *k)
{
    const char *path = arg_path(k, 0, NULL);
    struct stat st;
    int dir, flags, mask;

    if (!path || !arg_int(k, 1, &flags) || !arg_int(k, 2, &mask))
        return 0;
    memset(&k->small.stx, 0, sizeof(k->small.stx));
    if (empty_path_special(p, k, path, flags, &st)) {
        k->small.stx.stx_mask = STATX_BASIC_STATS;
        k->small.stx.stx_mode = st.st_mode;
        k->small.stx.stx_nlink = st.st_nlink;
        k->small.stx.stx_uid = st.st_uid;
        k->small.stx.stx_gid = st.st_gid;
        k->small.stx.stx_blksize = st.st_blksize;
    } else {
        if (k->err || !arg_dirfd(p, k, 0, path, &dir))
            return 0;
        if (statx(dir, path, flags, (unsigned)mask, &k->small.stx) < 0)
            return result(k, -1);
    }
    k->out = &k->small.stx;
    k->outlen = sizeof(k->small.stx);
    result(k, 0);
    return 0;
}

static int sys_faccessat(struct proc *p, struct call *k)
{
    const char *path = arg_path(k, 0, NULL);
    int dir, mode, flags;
    long rc;

    if (!path || !arg_int(k, 1, &mode) || !arg_int(k, 2, &flags) || !arg_dirfd(p, k, 0, path, &dir))
        return 0;
    /* Plain access() checks the real uid -- ciod's, not the job's.  With
     * AT_EACCESS the kernel checks the fsuid/fsgid/groups this thread took,
     * and for the job real and effective ids are the same. */
    rc = syscall(SYS_faccessat2, dir, path, mode, flags | AT_EACCESS);
    if (rc < 0 && errno == ENOSYS) {
        struct stat st;
        rc = fstatat(dir, path, &st, flags & AT_SYMLINK_NOFOLLOW);
        if (rc == 0 && mode != F_OK && !ident_may(&p->who, &st, mode)) {
            errno = EACCES;
            rc = -1;
        }
    }
    result(k, rc);
    return 0;
}

static int sys_unlinkat(struct proc *p, struct call *k)
{
    const char *path = arg_path(k, 0, NULL);
    int dir, flags;

    if (!path || !arg_int(k, 1, &flags) || !arg_dirfd(p, k, 0, path, &dir))
        return 0;
    coll_changed();
    result(k, unlinkat(dir, path, flags));
    return 0;
}

static int sys_renameat(struct proc *p, struct call *k)
{
    size_t next;
    const char *from = arg_path(k, 0, &next), *to = from ? arg_path(k, next, NULL) : NULL;
    int odir, ndir, flags;

    if (!to || !arg_int(k, 2, &flags) || !arg_dirfd(p, k, 0, from, &odir)
        || !arg_dirfd(p, k, 1, to, &ndir))
        return 0;
    coll_changed();
    result(k, renameat2(odir, from, ndir, to, (unsigned)flags));
    return 0;
}

static int sys_mkdirat(struct proc *p, struct call *k)
{
    const char *path = arg_path(k, 0, NULL);
    int dir, mode;

    if (!path || !arg_int(k, 1, &mode) || !arg_dirfd(p, k, 0, path, &dir))
        return 0;
    coll_changed();
    result(k, mkdirat(dir, path, (mode_t)mode));
    return 0;
}

static int sys_getdents64(struct proc *p, struct call *k)
{
    size_t n;
    long got;
    int fd;

    if (!arg_realfd(p, k, 0, &fd, ENOTDIR) || !arg_count(k, 1, &n))
        return 0;
    got = syscall(SYS_getdents64, fd, outbuf(p), n);
    result(k, got);
    if (got > 0) {
        k->out = outbuf(p);
        k->outlen = got;
    }
    return 0;
}

static int sys_readlinkat(struct proc *p, struct call *k)
{
    const char *path = arg_path(k, 0, NULL);
    char copy[LAT_MAX_PATH];
    ssize_t got;
    int dir;

    if (!path || !arg_dirfd(p, k, 0, path, &dir))
        return 0;
    if (k->rq.a[1] <= 0)
        return fail(k, EINVAL);         /* as readlink(2) */
    /* No link is longer than a page: a larger buffer is clamped, not refused. */
    size_t n = (uint64_t)k->rq.a[1] > LAT_MAX_IO ? LAT_MAX_IO : (size_t)k->rq.a[1];
    strcpy(copy, path);                 /* the reply overwrites the request */
    got = readlinkat(dir, copy, outbuf(p), n);
    result(k, got);
    if (got > 0) {
        k->out = outbuf(p);
        k->outlen = got;
    }
    return 0;
}

static int sys_truncate(struct proc *p, struct call *k)
{
    const char *path = arg_path(k, 0, NULL);

    (void)p;
    if (path) {
        coll_changed();
        result(k, truncate(path, (off_t)k->rq.a[1]));
    }
    return 0;
}

static int sys_ftruncate(struct proc *p, struct call *k)
{
    int fd;

    if (arg_realfd(p, k, 0, &fd, EINVAL)) {
        coll_changed();
        result(k, ftruncate(fd, (off_t)k->rq.a[1]));
    }
    return 0;
}

static int sys_fsync(struct proc *p, struct call *k)
{
    int fd;

    if (arg_realfd(p, k, 0, &fd, EINVAL))
        result(k, fsync(fd));
    return 0;
}

static int sys_fdatasync(struct proc *p, struct call *k)
{
    int fd;

    if (arg_realfd(p, k, 0, &fd, EINVAL))
        result(k, fdatasync(fd));
    return 0;
}

static int sys_dup(struct proc *p, struct call *k)
{
    struct rfd *r = arg_fd(p, k, 0);
    int fd = -1, n;

    if (!r)
        return 0;
    if (r->kind == FD_REAL && (fd = fcntl(r->fd, F_DUPFD_CLOEXEC, 0)) < 0)
        return result(k, -1);
    n = fd_alloc(p, r->kind, fd);
    if (n < 0) {
        if (fd >= 0)
            close(fd);
        return fail(k, EMFILE);
    }
    if (r->kind == FD_COLL)             /* shares the position, as dup(2) does */
        p->fds[n].co = coll_dup(r->co);
    result(k, n);
    return 0;
}

static int sys_fcntl(struct proc *p, struct call *k)
{
    struct rfd *r = arg_fd(p, k, 0);
    int cmd, arg;

    if (!r || !arg_int(k, 1, &cmd))
        return 0;
    if (cmd != F_GETFL && cmd != F_SETFL)
        return fail(k, EINVAL);
    if (r->kind == FD_COLL)             /* a shared open: read-only, its flags are everyone's */
        return result(k, cmd == F_SETFL ? 0 : fcntl(coll_fd(r->co), F_GETFL));
    if (r->kind != FD_REAL)             /* the standard streams keep their flags */
        return result(k, cmd == F_SETFL ? 0 : r->kind == FD_STDIN ? O_RDONLY : O_WRONLY);
    if (cmd == F_GETFL)
        return result(k, fcntl(r->fd, F_GETFL));
    if (arg_int(k, 2, &arg))
        result(k, fcntl(r->fd, F_SETFL, arg));
    return 0;
}

static int sys_chdir(struct proc *p, struct call *k)
{
    const char *path = arg_path(k, 0, NULL);

    (void)p;
    if (path)
        result(k, chdir(path));
    return 0;
}

static int sys_fchdir(struct proc *p, struct call *k)
{
    int fd;

    if (arg_realfd(p, k, 0, &fd, ENOTDIR))
        result(k, fchdir(fd));
    return 0;
}

static int sys_getcwd(struct proc *p, struct call *k)
{
    size_t n = k->rq.a[0] < 0 ? 0 : (uint64_t)k->rq.a[0] > LAT_MAX_IO ? LAT_MAX_IO
                                                                        : (size_t)k->rq.a[0];
    /* the system call returns the length including the NUL, ERANGE if n is short */
    long got = syscall(SYS_getcwd, outbuf(p), n);

    result(k, got);
    if (got > 0) {
        k->out = outbuf(p);
        k->outlen = got;
    }
    return 0;
}

static int sys_umask(struct proc *p, struct call *k)
{
    (void)p;
    result(k, umask((mode_t)(k->rq.a[0] & 0777)));
    return 0;
}

static int sys_fchmodat(struct proc *p, struct call *k)
{
    const char *path = arg_path(k, 0, NULL);
    int dir, mode, flags;

    if (!path || !arg_int(k, 1, &mode) || !arg_int(k, 2, &flags) || !arg_dirfd(p, k, 0, path, &dir))
        return 0;
    coll_changed();
    result(k, fchmodat(dir, path, (mode_t)mode, flags));
    return 0;
}

static int sys_fchmod(struct proc *p, struct call *k)
{
    struct rfd *r = arg_fd(p, k, 0);
    int mode;

    if (!r || !arg_int(k, 1, &mode))
        return 0;
    if (r->kind != FD_REAL && r->kind != FD_COLL)
        return result(k, 0);            /* like fchmod on a pipe: nothing to keep */
    coll_changed();
    result(k, fchmod(r->kind == FD_COLL ? coll_fd(r->co) : r->fd, (mode_t)mode));
    return 0;
}

static int sys_utimensat(struct proc *p, struct call *k)
{
    struct lat_timespec lt[2];
    struct timespec ts[2];
    const char *path;
    int dir, flags;

    if (k->dlen < sizeof(lt))
        return fail(k, EINVAL);
    memcpy(lt, k->data, sizeof(lt));
    path = arg_path(k, sizeof(lt), NULL);
    if (!path || !arg_int(k, 1, &flags))
        return 0;
    for (int i = 0; i < 2; i++)
        ts[i] = (struct timespec){ .tv_sec = lt[i].sec, .tv_nsec = lt[i].nsec };
    if (!path[0] && (flags & AT_EMPTY_PATH)) {
        /* futimens(fd): the system call with a NULL path acts on dirfd */
        if (!arg_realfd(p, k, 0, &dir, EINVAL))
            return 0;
        return result(k, syscall(SYS_utimensat, dir, NULL, k->rq.a[2] ? ts : NULL, 0));
    }
    if (!arg_dirfd(p, k, 0, path, &dir))
        return 0;
    coll_changed();
    result(k, utimensat(dir, path, k->rq.a[2] ? ts : NULL, flags));
    return 0;
}

static int sys_statfs(struct proc *p, struct call *k)
{
    const char *path = arg_path(k, 0, NULL);
    struct statfs s;

    (void)p;
    if (!path)
        return 0;
    if (statfs(path, &s) < 0)
        return result(k, -1);
    to_lat_statfs(&s, &k->small.sfs);
    k->out = &k->small.sfs;
    k->outlen = sizeof(k->small.sfs);
    result(k, 0);
    return 0;
}

static int sys_fstatfs(struct proc *p, struct call *k)
{
    struct statfs s;
    int fd;

    if (!arg_realfd(p, k, 0, &fd, EINVAL))
        return 0;
    if (fstatfs(fd, &s) < 0)
        return result(k, -1);
    to_lat_statfs(&s, &k->small.sfs);
    k->out = &k->small.sfs;
    k->outlen = sizeof(k->small.sfs);
    result(k, 0);
    return 0;
}

#define CALL(type, fn) [type - LAT_SYS__BASE] = fn
static const sys_fn calls[NSYS] = {
    CALL(LAT_SYS_OPENAT, sys_openat),         CALL(LAT_SYS_CLOSE, sys_close),
    CALL(LAT_SYS_READ, sys_read),             CALL(LAT_SYS_WRITE, sys_write),
    CALL(LAT_SYS_PREAD, sys_pread),           CALL(LAT_SYS_PWRITE, sys_pwrite),
    CALL(LAT_SYS_LSEEK, sys_lseek),           CALL(LAT_SYS_FSTATAT, sys_fstatat),
    CALL(LAT_SYS_STATX, sys_statx),           CALL(LAT_SYS_FACCESSAT, sys_faccessat),
    CALL(LAT_SYS_UNLINKAT, sys_unlinkat),     CALL(LAT_SYS_RENAMEAT, sys_renameat),
    CALL(LAT_SYS_MKDIRAT, sys_mkdirat),       CALL(LAT_SYS_GETDENTS64, sys_getdents64),
    CALL(LAT_SYS_READLINKAT, sys_readlinkat), CALL(LAT_SYS_TRUNCATE, sys_truncate),
    CALL(LAT_SYS_FTRUNCATE, sys_ftruncate),   CALL(LAT_SYS_FSYNC, sys_fsync),
    CALL(LAT_SYS_FDATASYNC, sys_fdatasync),   CALL(LAT_SYS_DUP, sys_dup),
    CALL(LAT_SYS_FCNTL, sys_fcntl),           CALL(LAT_SYS_CHDIR, sys_chdir),
    CALL(LAT_SYS_FCHDIR, sys_fchdir),         CALL(LAT_SYS_GETCWD, sys_getcwd),
    CALL(LAT_SYS_UMASK, sys_umask),           CALL(LAT_SYS_FCHMODAT, sys_fchmodat),
    CALL(LAT_SYS_FCHMOD, sys_fchmod),         CALL(LAT_SYS_UTIMENSAT, sys_utimensat),
    CALL(LAT_SYS_STATFS, sys_statfs),         CALL(LAT_SYS_FSTATFS, sys_fstatfs),
    SOCK_CALLS                                /* sock.c */
};

/* ---- the connection ---- */

/* Counters: time and bytes of each call; eager or rendezvous for the data calls. */
static void account(uint16_t type, const struct call *k, uint64_t ns)
{
    bool data = type == LAT_SYS_READ || type == LAT_SYS_WRITE || type == LAT_SYS_PREAD ||
                type == LAT_SYS_PWRITE;
    uint64_t bytes = k->ret > 0 && (data || type == LAT_SYS_GETDENTS64) ? (uint64_t)k->ret
                                                                        : k->dlen + k->outlen;

    dp_account(type - LAT_SYS__BASE, ns, bytes);
    if (data && k->rq.a[3] != LAT_RDV) {
        atomic_fetch_add_explicit(&dp_ctr[LAT_CTR_EAGER], 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&dp_ctr[LAT_CTR_EAGER_BYTES], k->ret > 0 ? (uint64_t)k->ret : 0,
                                  memory_order_relaxed);
    }
}

static int serve_call(struct proc *p, const struct lat_hdr *h, char *why, size_t whylen)
{
    struct call k;
    sys_fn fn;

    if (h->type == LAT_PLUG_CALL)       /* plugin.c */
        return plugin_serve(p->c, h, p->job, p->rank, p->node) < 0
                   ? errprintf(why, whylen, "reply failed: %s", strerror(errno)) : 0;
    if (h->type < LAT_SYS__BASE || h->type >= LAT_SYS__END || !(fn = calls[h->type - LAT_SYS__BASE])) {
        reply_error(p->c, h->seq, ENOSYS, "message type 0x%04x is not a shipped call", h->type);
        return 0;
    }
    if (h->len < sizeof(k.rq))
        return errprintf(why, whylen, "call 0x%04x with %u bytes, less than its arguments",
                         h->type, h->len);
    memset(&k, 0, offsetof(struct call, small));
    memcpy(&k.rq, p->c->buf, sizeof(k.rq));
    k.data = p->c->buf + sizeof(k.rq);
    k.dlen = h->len - sizeof(k.rq);
    atomic_fetch_add(&sys_calls[h->type - LAT_SYS__BASE], 1);
    uint64_t t0 = dp_now_ns();
    errno = 0;
    fn(p, &k);
    int rc = reply_ret(p->c, h->type, h->seq, k.ret, k.err, k.out, k.outlen);
    account(h->type, &k, dp_now_ns() - t0);
    return rc < 0 ? errprintf(why, whylen, "reply failed: %s", strerror(errno)) : 0;
}

void ship_serve(struct conn *c, const struct lat_hello *hello, const struct lat_hello_proc *hp,
                uint32_t seq)
{
    struct proc *p = calloc(1, sizeof(*p));
    char cwd[LAT_MAX_PATH], why[CIOD_ERRLEN], loc[128], name[16];
    struct lat_hdr h;
    int err, rc;

    if (!p) {
        hello_ack(c, seq, ENOMEM);
        return;
    }
    p->c = c;
    p->job = hello->job;
    p->node = hello->node & 0xffff;     /* bits 16..31: the process's index on its node */
    err = job_proc_attach(p->node, hello->node >> 16, hello->job, &p->who, cwd, sizeof(cwd), &p->rank);
    if (err) {
        ras_event(RAS_WARNING, cfg.location,
                  "process connection from %s for job %" PRIu64 " node %u process %u refused: no such job there",
                  c->peer, hello->job, p->node, hello->node >> 16);
        goto refuse;
    }
    node_location(p->node, loc, sizeof(loc));
    /* own cwd and umask; then every path is resolved as the job owner */
    if (unshare(CLONE_FS) < 0 || (err = ident_enter(&p->who)) != 0 || chdir(cwd) < 0) {
        err = err ? err : errno;
        ras_event(RAS_ERROR, loc, "cannot set up file access for job %" PRIu64 " rank %d in %s: %s",
                  p->job, p->rank, cwd, strerror(err));
        goto refuse;
    }
    for (unsigned i = 0; i < LAT_MAX_FDS; i++)
        p->fds[i] = (struct rfd){ FD_FREE, -1, NULL };
    p->fds[0].kind = FD_STDIN;
    p->fds[1].kind = FD_STDOUT;
    p->fds[2].kind = FD_STDERR;
    snprintf(name, sizeof(name), "ciod-proc%u", p->node & 0xffff);
    pthread_setname_np(pthread_self(), name);
    dp_hello(c, hp, &p->dp);
    p->pid = hp ? (pid_t)hp->pid : 0;
    if (hello_ack_dp(c, seq, 0, hp ? &p->dp : NULL) < 0)
        goto out;

    unsigned skip = 0;
    while (dp_spin(c->fd, &skip), (rc = conn_recv(c, &h, why, sizeof(why))) > 0)
        if (serve_call(p, &h, why, sizeof(why)) < 0) {
            rc = -1;
            break;
        }
    if (rc < 0)
        ras_event(RAS_WARNING, loc, "process connection of job %" PRIu64 " rank %d: %s; closing",
                  p->job, p->rank, why);
out:
    for (unsigned i = 0; i < LAT_MAX_FDS; i++) {
        if (p->fds[i].kind == FD_REAL)
            close(p->fds[i].fd);
        if (p->fds[i].kind == FD_COLL)
            coll_close(p->fds[i].co);
    }
    free(p);
    return;
refuse:
    hello_ack(c, seq, err);
    free(p);
}
