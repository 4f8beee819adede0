/*
 * ops.c - every FUSE operation, shipped to ciod on lattice-fs's PROC
 * connection and performed there by the job's I/O worker under the job
 * owner's identity (protocol/lattice/fwd_posix.h; the stubs and the bulk
 * path of compute/shipc/).
 *
 * Names travel as absolute paths on the I/O node (node.c), the last
 * component never followed where the call lets us say so (lookups,
 * ownership, times: AT_SYMLINK_NOFOLLOW; opens: O_NOFOLLOW): the kernel
 * resolves symlinks itself through readlink, inside the sandbox's view.
 * Open files and directories are remote descriptors, one per FUSE open.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include <lattice/fwd_posix.h>

#include "cnfs.h"
#include "shipc.h"

#define AT_CWD LAT_AT_FDCWD

/* An open file: its remote descriptor.  Its record locks are the remote
 * open file's (F_OFD_*): ranks on any node exclude each other, and they go
 * when the last descriptor of the open file is closed (no FLUSH is asked
 * for: it would cost every close(2) a round trip through lattice-fs). */
struct fh {
    int rfd;
    int cached;                 /* through the page cache (not direct_io) */
    fuse_ino_t ino;
    uint64_t unstamped;         /* bytes written through the cache since the cache's stamp */
    int werr;                   /* a write behind failed (behind.c): its errno, said once */
};

/* An open directory: remote entries read ahead (getdents64) and not yet
 * given to the kernel; pos is the offset after the last one given. */
struct dir {
    int rfd;
    pthread_mutex_t m;
    off_t pos;
    size_t len, at;
    char buf[32768];
};

struct dirent64_ {             /* struct linux_dirent64 */
    uint64_t ino;
    int64_t off;
    uint16_t reclen;
    uint8_t type;
    char name[];
};

#define FH(fi) ((struct fh *)(uintptr_t)(fi)->fh)

int cnfs_direct_writes;                 /* main.c: --writes direct */
struct fuse_session *cnfs_se;           /* main.c: for the kernel's notifications */
#define DIR_(fi) ((struct dir *)(uintptr_t)(fi)->fh)

static void reply_err(fuse_req_t req, long r)
{
    fuse_reply_err(req, r < 0 ? (int)-r : 0);
}

/* Attributes of the name path itself (a symbolic link is not followed).
 * STATX, not FSTATAT: ciod shares a pset's stats of one absolute path for a
 * while (collective I/O, a "no such file" too), and a file another I/O
 * node's ranks just made must be seen at once (MPI_File_open: rank 0
 * creates, the others open). */
static long stat_path(const char *path, struct stat *st, uint64_t *dev, uint64_t *ino)
{
    struct lat_statx lx;
    long r = fwd_statx(AT_CWD, AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS, path, &lx);
    if (r < 0)
        return r;
    struct statx x;
    memcpy(&x, &lx, sizeof x);
    *ino = x.stx_ino;
    return attr_from_statx(st, dev, &lx);
}

/* Entry and attributes of path, its node referenced: 0 or -errno. */
static long do_lookup(const char *path, struct fuse_entry_param *e)
{
    uint64_t dev, ino;
    memset(e, 0, sizeof *e);
    long r = stat_path(path, &e->attr, &dev, &ino);
    if (r < 0)
        return r;
    e->attr_timeout = e->entry_timeout = CNFS_TIMEOUT;
    e->ino = node_ref(path, dev, ino);
    if (e->ino)
        node_told(e->ino, e->attr.st_size);
    return e->ino ? 0 : -ENOMEM;
}

/* Reply with the entry of path, a name just made; an error if it is gone. */
static void reply_new(fuse_req_t req, const char *path)
{
    struct fuse_entry_param e;
    long r = do_lookup(path, &e);
    if (r < 0)
        reply_err(req, r);
    else if (fuse_reply_entry(req, &e) != 0)
        node_forget(e.ino, 1);      /* the request was interrupted: the kernel holds no lookup */
}

static void op_init(void *data, struct fuse_conn_info *conn)
{
    (void)data;
    conn->max_write = CNFS_MAX_IO;      /* libfuse asks the kernel for max_pages to match */
    conn->max_readahead = CNFS_MAX_IO;
    unsigned want = FUSE_CAP_ATOMIC_O_TRUNC | FUSE_CAP_POSIX_LOCKS | FUSE_CAP_FLOCK_LOCKS |
                    FUSE_CAP_ASYNC_READ | FUSE_CAP_PARALLEL_DIROPS | FUSE_CAP_READDIRPLUS |
                    FUSE_CAP_READDIRPLUS_AUTO;
    conn->want |= want & conn->capable;
    /* ranks on several nodes write one file: no write-back cache.  No
     * AUTO_INVAL_DATA: it would drop the pages of our own write-through
     * writes at the next getattr (their mtime is new); the stamps of
     * node.c decide at each open instead. */
    conn->want &= ~(unsigned)(FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE |
                              FUSE_CAP_SPLICE_MOVE | FUSE_CAP_AUTO_INVAL_DATA);
    fwd_umask(0);                       /* the kernel applied the process's umask already */
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    char path[PATH_MAX];
    struct fuse_entry_param e;
    long r = node_child(parent, name, path);
    if (r == 0)
        r = do_lookup(path, &e);
    if (r < 0)
        reply_err(req, r);          /* no negative entries: another node may make the name */
    else if (fuse_reply_entry(req, &e) != 0)
        node_forget(e.ino, 1);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t n)
{
    node_forget(ino, n);
    fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *f)
{
    for (size_t i = 0; i < count; i++)
        node_forget(f[i].ino, f[i].nlookup);
    fuse_reply_none(req);
}

/* Attributes of ino, by its open file if the kernel named one. */
static long get_attr(fuse_ino_t ino, struct fuse_file_info *fi, struct stat *st)
{
    struct lat_stat ls;
    char path[PATH_MAX];
    uint64_t dev, rino;
    if (!fi || !fi->fh) {
        long r = node_path(ino, path);
        return r < 0 ? r : stat_path(path, st, &dev, &rino);
    }
    long r = fwd_fstatat(FH(fi)->rfd, AT_EMPTY_PATH, "", &ls);
    if (r == 0)
        attr_from_lat(st, &ls);
    return r;
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct stat st;
    long r = get_attr(ino, fi, &st);
    if (r < 0) {
        reply_err(req, r);
        return;
    }
    node_told(ino, st.st_size);
    fuse_reply_attr(req, &st, CNFS_TIMEOUT);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *a, int set, struct fuse_file_info *fi)
{
    char path[PATH_MAX];
    struct fh *h = fi && fi->fh ? FH(fi) : NULL;
    long r = node_path(ino, path);
    if (r == 0 && (set & FUSE_SET_ATTR_MODE))
        r = h ? fwd_fchmod(h->rfd, (int)(a->st_mode & 07777))
              : fwd_fchmodat(AT_CWD, (int)(a->st_mode & 07777), 0, path);
    if (r == 0 && (set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID))) {
        int64_t uid = set & FUSE_SET_ATTR_UID ? (int64_t)a->st_uid : -1;
        int64_t gid = set & FUSE_SET_ATTR_GID ? (int64_t)a->st_gid : -1;
        r = h ? fwd_fchownat(h->rfd, uid, gid, AT_EMPTY_PATH, "")
              : fwd_fchownat(AT_CWD, uid, gid, AT_SYMLINK_NOFOLLOW, path);
    }
    if (r == 0 && (set & FUSE_SET_ATTR_SIZE))
        r = h ? fwd_ftruncate(h->rfd, a->st_size) : fwd_truncate(path, a->st_size);
    /* the kernel cuts its cache to a new size itself, but the stamp is
     * stale: the next open drops the cache (a stamp from the stat below
     * would take in whatever another node changed since the last one) */
    node_cache_wrote(ino);
    if (r == 0 && (set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME))) {
        struct lat_timespec t[2] = { { 0, UTIME_OMIT }, { 0, UTIME_OMIT } };
        if (set & FUSE_SET_ATTR_ATIME_NOW)
            t[0].nsec = UTIME_NOW;
        else if (set & FUSE_SET_ATTR_ATIME)
            t[0] = (struct lat_timespec){ a->st_atim.tv_sec, a->st_atim.tv_nsec };
        if (set & FUSE_SET_ATTR_MTIME_NOW)
            t[1].nsec = UTIME_NOW;
        else if (set & FUSE_SET_ATTR_MTIME)
            t[1] = (struct lat_timespec){ a->st_mtim.tv_sec, a->st_mtim.tv_nsec };
        r = fwd_utimensat(AT_CWD, AT_SYMLINK_NOFOLLOW, 1, t, path);
    }
    struct stat st;
    if (r == 0)
        r = get_attr(ino, fi, &st);
    if (r < 0) {
        reply_err(req, r);
        return;
    }
    node_told(ino, st.st_size);
    fuse_reply_attr(req, &st, CNFS_TIMEOUT);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
    char path[PATH_MAX], buf[PATH_MAX + 1];
    long r = node_path(ino, path);
    if (r == 0)
        r = fwd_readlinkat(AT_CWD, path, buf, PATH_MAX);
    if (r < 0) {
        reply_err(req, r);
        return;
    }
    buf[r] = '\0';
    fuse_reply_readlink(req, buf);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
    char path[PATH_MAX];
    long r = node_child(parent, name, path);
    if (r == 0)
        r = fwd_mknodat(AT_CWD, (int)mode, rdev, path);
    if (r < 0)
        reply_err(req, r);
    else
        reply_new(req, path);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
    char path[PATH_MAX];
    long r = node_child(parent, name, path);
    if (r == 0)
        r = fwd_mkdirat(AT_CWD, (int)mode, path);
    if (r < 0)
        reply_err(req, r);
    else
        reply_new(req, path);
}

static void op_symlink(fuse_req_t req, const char *target, fuse_ino_t parent, const char *name)
{
    char path[PATH_MAX];
    long r = node_child(parent, name, path);
    if (r == 0)
        r = fwd_symlinkat(AT_CWD, target, path);
    if (r < 0)
        reply_err(req, r);
    else
        reply_new(req, path);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
    char from[PATH_MAX], to[PATH_MAX];
    long r = node_path(ino, from);
    if (r == 0)
        r = node_child(newparent, newname, to);
    if (r == 0)
        r = fwd_linkat(AT_CWD, AT_CWD, 0, from, to);
    if (r < 0)
        reply_err(req, r);
    else
        reply_new(req, to);
}

static void remove_name(fuse_req_t req, fuse_ino_t parent, const char *name, int flags)
{
    char path[PATH_MAX];
    long r = node_child(parent, name, path);
    if (r == 0)
        r = fwd_unlinkat(AT_CWD, flags, path);
    if (r == 0)
        node_unlinked(path);
    reply_err(req, r);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    remove_name(req, parent, name, 0);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
    remove_name(req, parent, name, AT_REMOVEDIR);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                      const char *newname, unsigned int flags)
{
    char from[PATH_MAX], to[PATH_MAX];
    long r = node_child(parent, name, from);
    if (r == 0)
        r = node_child(newparent, newname, to);
    if (r == 0)
        r = fwd_renameat(AT_CWD, AT_CWD, (int)flags, from, to);
    if (r == 0 && (flags & RENAME_EXCHANGE)) {
        node_rename(from, "\001");      /* not a path: a name no node has */
        node_rename(to, from);
        node_rename("\001", to);
    } else if (r == 0) {
        node_rename(from, to);
    }
    reply_err(req, r);
}

/* The flags the I/O node opens with: never following a symlink in the
 * last component, never a controlling terminal; O_DIRECT is the page
 * cache's business here (direct_io), not the remote file system's. */
static int remote_flags(int flags)
{
    return (flags & ~(O_CREAT | O_EXCL | O_NOCTTY | O_DIRECT)) | O_NOFOLLOW | O_CLOEXEC;
}

/* Files open read-only, or write-only without O_APPEND, go through the
 * node's page cache: write-through (every write reaches the I/O node
 * before it returns, its pages stay cached), kept from one open to the
 * next while the I/O node's file is the version the cache holds (its size,
 * mtime and ctime at this open against node.c's stamp: close-to-open, as
 * NFS).  Files open read-write, for O_APPEND (the I/O node's end of the
 * file, not ours) or O_DIRECT bypass it (direct_io): every read asks the
 * I/O node, so ranks on several nodes sharing one file (MPI-IO, ROMIO's
 * read-modify-write under its locks) see each other's bytes at once. */
static int cached_open(int flags)
{
    int acc = flags & O_ACCMODE;
    return (acc == O_RDONLY || (acc == O_WRONLY && !(flags & O_APPEND) && !cnfs_direct_writes)) &&
           !(flags & O_DIRECT);
}

/* st: the I/O node's file now, for a cached open; NULL for a direct_io
 * one, which drops the cache (its writes pass it by). */
static void open_mode(struct fuse_file_info *fi, struct fh *h, const struct stat *st)
{
    h->cached = st != NULL;
    fi->direct_io = !h->cached;
    if (st) {
        int stale;
        fi->keep_cache = (unsigned)node_cache_open(h->ino, st, &stale);
        /* the kernel may trust its size for up to CNFS_TIMEOUT: a read
         * would stop at the old end.  Attributes only (offset -1): no page
         * is locked, so this cannot wait on a read queued behind us. */
        if (stale && cnfs_se)
            fuse_lowlevel_notify_inval_inode(cnfs_se, h->ino, -1, 0);
    } else {
        fi->keep_cache = 0;
        node_cache_drop(h->ino);
    }
    /* close(2) sends nothing (RELEASE, at the last close, closes remotely),
     * but after writes behind (behind.c): FLUSH, so close waits for them
     * and says their error */
    fi->noflush = !(h->cached && (fi->flags & O_ACCMODE) == O_WRONLY);
}

static struct fh *fh_new(int rfd, fuse_ino_t ino)
{
    struct fh *h = calloc(1, sizeof *h);
    if (h) {
        h->rfd = rfd;
        h->ino = ino;
    } else {
        fwd_close(rfd);
    }
    return h;
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    char path[PATH_MAX];
    struct lat_stat ls;
    struct stat st;
    int cached = cached_open(fi->flags);
    long r = node_path(ino, path);
    /* a cached open asks for the version the cache must hold in the same call */
    if (r == 0)
        r = cached ? fwd_openat_stat(AT_CWD, remote_flags(fi->flags), 0, path, &ls)
                   : fwd_openat(AT_CWD, remote_flags(fi->flags), 0, path);
    if (r < 0) {
        reply_err(req, r);
        return;
    }
    struct fh *h = fh_new((int)r, ino);
    if (!h) {
        reply_err(req, -ENOMEM);
        return;
    }
    if (cached)
        attr_from_lat(&st, &ls);
    fi->fh = (uintptr_t)h;
    open_mode(fi, h, cached ? &st : NULL);
    if (fuse_reply_open(req, fi) != 0) {
        fwd_close(h->rfd);
        free(h);
    }
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, struct fuse_file_info *fi)
{
    char path[PATH_MAX];
    struct fuse_entry_param e;
    struct lat_stat ls;
    long r = node_child(parent, name, path);
    if (r == 0)     /* the entry's attributes in the same call */
        r = fwd_openat_stat(AT_CWD, remote_flags(fi->flags) | O_CREAT | (fi->flags & O_EXCL), (int)(mode & 07777),
                            path, &ls);
    if (r < 0) {
        reply_err(req, r);
        return;
    }
    struct fh *h = fh_new((int)r, 0);
    if (!h) {
        reply_err(req, -ENOMEM);
        return;
    }
    memset(&e, 0, sizeof e);
    if (!(e.ino = node_ref(path, ls.dev, ls.ino))) {
        fwd_close(h->rfd);
        free(h);
        reply_err(req, -ENOMEM);
        return;
    }
    attr_from_lat(&e.attr, &ls);
    e.attr_timeout = e.entry_timeout = CNFS_TIMEOUT;
    node_told(e.ino, e.attr.st_size);
    h->ino = e.ino;
    fi->fh = (uintptr_t)h;
    open_mode(fi, h, cached_open(fi->flags) ? &e.attr : NULL);
    if (fuse_reply_create(req, &e, fi) != 0) {
        node_forget(e.ino, 1);
        fwd_close(h->rfd);
        free(h);
    }
}

/* The serving thread's read buffer (main.c: in the region shared with
 * ciod, which reads the file straight into it); malloc'd where none. */
__thread char *cnfs_rbuf;

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
    (void)ino;
    if (size > CNFS_MAX_IO)
        size = CNFS_MAX_IO;
    if (!cnfs_rbuf && !(cnfs_rbuf = malloc(CNFS_MAX_IO))) {
        reply_err(req, -ENOMEM);
        return;
    }
    struct iovec v = { cnfs_rbuf, size };
    long r = shipc_rw(FH(fi)->rfd, 0, &v, 1, off);
    if (r < 0)
        reply_err(req, r);
    else
        fuse_reply_buf(req, cnfs_rbuf, (size_t)r);
}

/* The open file's failed write behind, as -errno, once: the cache holds
 * bytes the I/O node does not, so the next open drops it. */
static long took_error(struct fh *h, fuse_ino_t ino)
{
    long e = -h->werr;
    h->werr = 0;
    node_cache_drop(ino);
    return e;
}

static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                     struct fuse_file_info *fi)
{
    struct fh *h = FH(fi);
    behind_drain();                     /* the write before: done, its error in h->werr */
    if (h->werr) {                      /* a write behind failed: this one is refused */
        reply_err(req, took_error(h, ino));
        return;
    }
    /* a small write is not worth a hand-off to the writer thread */
    if (h->cached && size >= CNFS_BEHIND_MIN && behind_post(&h->werr, h->rfd, buf, size, off) == 0) {
        node_cache_wrote(ino);
        h->unstamped += size;
        fuse_reply_write(req, size);
        return;
    }
    struct iovec v = { (void *)buf, size };
    long r = shipc_rw(h->rfd, 1, &v, 1, off);
    if (h->cached) {
        node_cache_wrote(ino);
        h->unstamped += r > 0 ? (uint64_t)r : 0;
    } else {
        node_cache_drop(ino);
    }
    if (r < 0)
        reply_err(req, r);
    else
        fuse_reply_write(req, (size_t)r);
}

/* The cache's new stamp after this open's own writes: one shipped call,
 * at fsync and at the last close after a large write; after a small
 * one the next open drops the file's few pages instead. */
static void stamp_after_writes(struct fh *h)
{
    struct lat_stat ls;
    struct stat st;
    if (h->cached && h->unstamped && fwd_fstatat(h->rfd, AT_EMPTY_PATH, "", &ls) == 0) {
        attr_from_lat(&st, &ls);
        node_cache_stamp(h->ino, &st);
        h->unstamped = 0;
    }
}

/* Replies that must wait for the kernel to drop a file's pages: one
 * thread, not the serving loop, asks for it (notify_inval_inode), because
 * the kernel waits for each page's lock, and a page is locked while a read
 * of it waits in /dev/fuse for the serving loop. */
struct inval {
    struct inval *next;
    fuse_req_t req;
    fuse_ino_t ino;
};

static pthread_mutex_t inval_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t inval_cond = PTHREAD_COND_INITIALIZER;
static struct inval *invals;
static int invalidator_started;

static void *invalidator(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&inval_lock);
    for (;;) {
        while (!invals)
            pthread_cond_wait(&inval_cond, &inval_lock);
        struct inval *v = invals;
        invals = v->next;
        pthread_mutex_unlock(&inval_lock);
        fuse_lowlevel_notify_inval_inode(cnfs_se, v->ino, 0, 0);
        reply_err(v->req, 0);
        free(v);
        pthread_mutex_lock(&inval_lock);
    }
    return NULL;
}

/* A fsync or a lock of an open that reads through the cache succeeded:
 * if another node changed the file since the cache's stamp, the reply
 * waits until its pages and attributes are gone, so the caller's next
 * read sees the change (MPI_File_sync, a lock before a read, as on NFS). */
static void reply_revalidated(fuse_req_t req, struct fh *h)
{
    struct lat_stat ls;
    struct stat st;
    struct inval *v;
    if (!h->cached || !cnfs_se || fwd_fstatat(h->rfd, AT_EMPTY_PATH, "", &ls) < 0) {
        reply_err(req, 0);
        return;
    }
    attr_from_lat(&st, &ls);
    if (!node_cache_check(h->ino, &st)) {
        reply_err(req, 0);
        return;
    }
    pthread_mutex_lock(&inval_lock);
    if (!invalidator_started) {
        pthread_t t;
        invalidator_started = pthread_create(&t, NULL, invalidator, NULL) == 0;
    }
    if (!invalidator_started || !(v = calloc(1, sizeof *v))) {
        pthread_mutex_unlock(&inval_lock);
        node_cache_drop(h->ino);                /* the next open drops them at least */
        fuse_lowlevel_notify_inval_inode(cnfs_se, h->ino, -1, 0);
        reply_err(req, 0);
        return;
    }
    *v = (struct inval){ .req = req, .ino = h->ino };
    struct inval **p = &invals;
    while (*p)
        p = &(*p)->next;
    *p = v;
    pthread_cond_signal(&inval_cond);
    pthread_mutex_unlock(&inval_lock);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    struct fh *h = FH(fi);
    if (h->unstamped >= CNFS_MAX_IO)
        stamp_after_writes(h);
    fwd_close(h->rfd);
    free(h);
    reply_err(req, 0);
}

/* close(2) of a file written through the cache: main.c waited for the
 * write behind; its error is close's. */
static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    struct fh *h = FH(fi);
    reply_err(req, h->werr ? took_error(h, ino) : 0);
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
    struct fh *h = FH(fi);
    long r = datasync ? fwd_fdatasync(h->rfd) : fwd_fsync(h->rfd);
    if (r == 0 && h->werr)              /* main.c waited for the write behind */
        r = took_error(h, ino);
    if (r < 0) {
        reply_err(req, r);
    } else if (h->unstamped) {
        stamp_after_writes(h);          /* this open's own writes: the cache holds them */
        reply_err(req, 0);
    } else {
        reply_revalidated(req, h);
    }
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    char path[PATH_MAX];
    long r = node_path(ino, path);
    if (r == 0)
        r = fwd_openat(AT_CWD, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0, path);
    if (r < 0) {
        reply_err(req, r);
        return;
    }
    struct dir *d = malloc(sizeof *d);
    if (!d) {
        fwd_close((int)r);
        reply_err(req, -ENOMEM);
        return;
    }
    d->rfd = (int)r;
    d->pos = 0;
    d->len = d->at = 0;
    pthread_mutex_init(&d->m, NULL);
    fi->fh = (uintptr_t)d;
    fi->cache_readdir = 0;              /* another node may change the directory */
    if (fuse_reply_open(req, fi) != 0) {
        fwd_close(d->rfd);
        free(d);
    }
}

/* readdir and readdirplus: entries from where the kernel asks (a remote
 * lseek when that is not where we are) until its buffer is full. */
static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi, int plus)
{
    struct dir *d = DIR_(fi);
    char path[PATH_MAX];
    char *out = malloc(size);
    size_t used = 0;
    long r = out ? 0 : -ENOMEM;
    pthread_mutex_lock(&d->m);
    if (r == 0 && off != d->pos) {
        r = fwd_lseek(d->rfd, off, SEEK_SET);
        d->len = d->at = 0;
        if (r >= 0) {
            d->pos = off;
            r = 0;
        }
    }
    while (r == 0) {
        if (d->at >= d->len) {
            long n = fwd_getdents64(d->rfd, d->buf, sizeof d->buf);
            if (n <= 0) {
                if (n < 0 && !used)
                    r = n;
                break;
            }
            d->len = (size_t)n;
            d->at = 0;
        }
        struct dirent64_ *e = (struct dirent64_ *)(d->buf + d->at);
        size_t need;
        if (!plus) {
            struct stat st = { .st_ino = e->ino, .st_mode = (mode_t)e->type << 12 };
            need = fuse_add_direntry(req, out + used, size - used, e->name, &st, e->off);
        } else {
            struct fuse_entry_param ep = { .attr = { .st_ino = e->ino, .st_mode = (mode_t)e->type << 12 } };
            int dots = !strcmp(e->name, ".") || !strcmp(e->name, "..");
            /* a name gone meanwhile is listed without its attributes */
            if (!dots && node_child(ino, e->name, path) == 0 && do_lookup(path, &ep) < 0)
                ep = (struct fuse_entry_param){ .attr = { .st_ino = e->ino, .st_mode = (mode_t)e->type << 12 } };
            need = fuse_add_direntry_plus(req, out + used, size - used, e->name, &ep, e->off);
            if (need > size - used && ep.ino)
                node_forget(ep.ino, 1);         /* not given: the kernel holds no lookup of it */
        }
        if (need > size - used)
            break;                              /* stays for the next call */
        used += need;
        d->pos = e->off;
        d->at += e->reclen;
    }
    pthread_mutex_unlock(&d->m);
    if (r < 0)
        reply_err(req, r);
    else
        fuse_reply_buf(req, out, used);
    free(out);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
    do_readdir(req, ino, size, off, fi, 0);
}

static void op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
    do_readdir(req, ino, size, off, fi, 1);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
    (void)ino;
    struct dir *d = DIR_(fi);
    fwd_close(d->rfd);
    pthread_mutex_destroy(&d->m);
    free(d);
    reply_err(req, 0);
}

static void op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
    (void)ino;
    int rfd = DIR_(fi)->rfd;
    reply_err(req, datasync ? fwd_fdatasync(rfd) : fwd_fsync(rfd));
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
    char path[PATH_MAX];
    struct lat_statfs ls;
    struct statvfs sv;
    long r = node_path(ino, path);
    if (r == 0)
        r = fwd_statfs(path, &ls);
    if (r < 0) {
        reply_err(req, r);
        return;
    }
    statvfs_from_lat(&sv, &ls);
    fuse_reply_statfs(req, &sv);
}

static void op_access(fuse_req_t req, fuse_ino_t ino, int mask)
{
    char path[PATH_MAX];
    long r = node_path(ino, path);
    if (r == 0)
        r = fwd_faccessat(AT_CWD, mask, 0, path);
    reply_err(req, r);
}

static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len, struct fuse_file_info *fi)
{
    long r = fwd_fallocate(FH(fi)->rfd, mode, off, len);
    node_cache_drop(ino);
    reply_err(req, r);
}

/* Locks that must wait: asked again by one thread, without waiting on the
 * I/O node (every request shares the connection) and without holding a
 * serving thread, every few milliseconds until granted, refused otherwise,
 * or the caller is interrupted; that thread replies.  A wait of the job's
 * own (another process of this node holds the lock) ends when the holder's
 * unlock comes through a serving thread. */
struct waiter {
    struct waiter *next;
    fuse_req_t req;
    struct fh *h;
    int flock_op;               /* flock's op, or 0: a record lock (fl) */
    struct flock fl;
};

static pthread_mutex_t wait_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wait_cond = PTHREAD_COND_INITIALIZER;
static struct waiter *waiting;
static int waiter_started;

/* A lock granted (not an unlock) revalidates the cache, as NFS does. */
static void lock_reply(struct waiter *w, long r)
{
    int unlock = w->flock_op ? (w->flock_op & LOCK_UN) != 0 : w->fl.l_type == F_UNLCK;
    if (r == 0 && !unlock)
        reply_revalidated(w->req, w->h);
    else
        reply_err(w->req, r);
}

/* One try without waiting: 0, -EAGAIN (held elsewhere) or another error. */
static long try_lock(struct waiter *w)
{
    if (w->flock_op) {
        long r = fwd_flock(w->h->rfd, w->flock_op | LOCK_NB, 0);
        return r == -EWOULDBLOCK ? -EAGAIN : r;
    }
    struct lat_flock lf = { .type = w->fl.l_type, .whence = w->fl.l_whence, .start = w->fl.l_start,
                            .len = w->fl.l_len };
    long r = fwd_lock(w->h->rfd, F_OFD_SETLK, 0, &lf);
    return r == -EACCES ? -EAGAIN : r;
}

static void *lock_waiter(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&wait_lock);
    for (;;) {
        while (!waiting)
            pthread_cond_wait(&wait_cond, &wait_lock);
        struct waiter *list = waiting;
        waiting = NULL;
        pthread_mutex_unlock(&wait_lock);
        struct waiter *keep = NULL;
        for (struct waiter *w = list, *nx; w; w = nx) {
            nx = w->next;
            long r = fuse_req_interrupted(w->req) ? -EINTR : try_lock(w);
            if (r == -EAGAIN) {
                w->next = keep;
                keep = w;
                continue;
            }
            lock_reply(w, r);
            free(w);
        }
        if (keep) {
            struct timespec t = { 0, 2000000 };
            nanosleep(&t, NULL);
        }
        pthread_mutex_lock(&wait_lock);
        while (keep) {
            struct waiter *nx = keep->next;
            keep->next = waiting;
            waiting = keep;
            keep = nx;
        }
    }
    return NULL;
}

/* Try once; a lock that must wait goes to the waiter, which replies. */
static void lock_or_wait(fuse_req_t req, struct waiter *w, int sleep)
{
    long r = try_lock(w);
    if (r != -EAGAIN || !sleep) {
        lock_reply(w, r);         /* EAGAIN is EWOULDBLOCK: flock's LOCK_NB answer too */
        free(w);
        return;
    }
    pthread_mutex_lock(&wait_lock);
    if (!waiter_started) {
        pthread_t t;
        waiter_started = pthread_create(&t, NULL, lock_waiter, NULL) == 0;
    }
    if (!waiter_started) {
        pthread_mutex_unlock(&wait_lock);
        reply_err(req, -ENOLCK);
        free(w);
        return;
    }
    w->next = waiting;
    waiting = w;
    pthread_cond_signal(&wait_cond);
    pthread_mutex_unlock(&wait_lock);
}

static void op_getlk(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, struct flock *lock)
{
    (void)ino;
    struct lat_flock lf = { .type = lock->l_type, .whence = lock->l_whence, .start = lock->l_start,
                            .len = lock->l_len };
    long r = fwd_lock(FH(fi)->rfd, F_OFD_GETLK, 0, &lf);
    if (r < 0) {
        reply_err(req, r);
        return;
    }
    lock->l_type = lf.type;
    if (lf.type != F_UNLCK) {
        lock->l_whence = lf.whence;
        lock->l_start = lf.start;
        lock->l_len = lf.len;
        lock->l_pid = 0;                /* held through an I/O node: no process the caller can name */
    }
    fuse_reply_lock(req, lock);
}

static void op_setlk(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, struct flock *lock, int sleep)
{
    (void)ino;
    struct waiter *w = calloc(1, sizeof *w);
    if (!w) {
        reply_err(req, -ENOLCK);
        return;
    }
    *w = (struct waiter){ .req = req, .h = FH(fi), .fl = *lock };
    lock_or_wait(req, w, sleep);
}

static void op_flock(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, int op)
{
    (void)ino;
    struct waiter *w = calloc(1, sizeof *w);
    if (!w) {
        reply_err(req, -ENOLCK);
        return;
    }
    *w = (struct waiter){ .req = req, .h = FH(fi), .flock_op = op & ~LOCK_NB };
    lock_or_wait(req, w, !(op & LOCK_NB) && !(op & LOCK_UN));
}

const struct fuse_lowlevel_ops cnfs_ops = {
    .init = op_init,
    .lookup = op_lookup,
    .forget = op_forget,
    .forget_multi = op_forget_multi,
    .getattr = op_getattr,
    .setattr = op_setattr,
    .readlink = op_readlink,
    .mknod = op_mknod,
    .mkdir = op_mkdir,
    .symlink = op_symlink,
    .link = op_link,
    .unlink = op_unlink,
    .rmdir = op_rmdir,
    .rename = op_rename,
    .open = op_open,
    .create = op_create,
    .read = op_read,
    .write = op_write,
    .release = op_release,
    .flush = op_flush,
    .fsync = op_fsync,
    .opendir = op_opendir,
    .readdir = op_readdir,
    .readdirplus = op_readdirplus,
    .releasedir = op_releasedir,
    .fsyncdir = op_fsyncdir,
    .statfs = op_statfs,
    .access = op_access,
    .fallocate = op_fallocate,
    .getlk = op_getlk,
    .setlk = op_setlk,
    .flock = op_flock,
};
