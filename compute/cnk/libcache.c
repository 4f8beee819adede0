/*
 * libcache.c - the host's read-only cache of shipped library files.
 *
 * Without it every private file mapping of a shipped descriptor is filled
 * by shipped preads into the rank's big memory, so each rank of an MPI job
 * receives its own copy of every shared library.  With it, the first rank
 * of a pset on this host to map a file fetches it once into the user's
 * cache directory on the host's tmpfs (created by the pset's ciod, mode
 * 0700, owned by the job's user, kept across that user's jobs while the
 * block is booted), and every rank maps that file for real, outside big
 * memory: one copy of the pages per pset, shared copy-on-write.
 *
 * The directory is /dev/shm/lattice-libcache-mKEY-UID, KEY being the
 * machine's, which cnk derives from the address of ciod's unix socket
 * (getpeername on its PROC connection) as ciod does from its --listen
 * (protocol/lattice/libcache_name.h, docs/protocol.md "Library cache"): no
 * message carries it, and the cache outlives the block.  A file is named by its
 * (dev, ino, size, mtime, ctime) from a shipped fstat, so a changed file is
 * never served stale, in this job or a later one (nobody can set a ctime).
 * Fetchers agree with flock on NAME.lock; the file appears by rename,
 * complete.  Anything that goes wrong says "copy instead".
 */
#include <asm/unistd.h>
#include <linux/errno.h>
#include <linux/fcntl.h>
#include <linux/mman.h>
#include <linux/stat.h>
#include <linux/uio.h>

#include <lattice/libcache_name.h>
#include <lattice/wire.h>

#include "cnk.h"

#define SOL_SOCKET_  1
#define SO_PEERCRED_ 17
#define LOCK_EX_     2
#define WINDOW_MIN   (16l << 20)    /* a file this big is fetched only for a map of a quarter of it */

struct kucred { int32_t pid; uint32_t uid, gid; };
struct ksockaddr_un { uint16_t family; char path[108]; };

/* The parts of the kernel's struct stat (x86-64) the checks need. */
struct kstat_ {
    uint64_t dev, ino, nlink;
    uint32_t mode, uid, gid, pad0;
    uint64_t rdev;
    int64_t size, blksize, blocks;
    uint64_t times[6];
    int64_t unused[3];
};
_Static_assert(sizeof(struct kstat_) == 144, "x86-64 struct stat");

static int dirfd_ = -1;         /* the cache directory, one of cnk's own descriptors */

/* The version last served, by descriptor: ld.so maps a library's segments
 * over its first map from the same descriptor, which needs no new fstat
 * while no shipped descriptor has been closed or replaced meanwhile. */
static struct klock memo_lock;
static struct {
    int fd, remote;
    unsigned epoch;
    int64_t size;
    char name[128];             /* 7 hex numbers: 118 at most */
} memo = { .fd = -1 };

/* Open and check the directory; NULL, or why there is no cache (one word,
 * for the report line). */
static const char *open_dir(char *path, size_t pathlen)
{
    const char *sw = kgetenv(cnk.envp, "LATTICE_LIBCACHE");
    struct kucred cred = { 0 };
    int len = sizeof cred;
    struct kstat_ st;

    if (sw && !strcmp(sw, "0"))
        return "switched-off";
    if (ksys5(__NR_getsockopt, cnk.conn_fd, SOL_SOCKET_, SO_PEERCRED_, &cred, &len) < 0 || cred.pid <= 0)
        return "no-local-io-node";
    /* ciod's own address names the machine (the kernel NUL-terminates it
     * when it fits; one that fills sun_path is not one of ours) */
    struct ksockaddr_un peer = { 0 };
    int plen = sizeof peer;
    uint32_t key = 0;
    if (ksys3(__NR_getpeername, cnk.conn_fd, &peer, &plen) == 0 && peer.family == 1 &&
        plen < (int)sizeof peer)
        key = lat_libcache_key(peer.path);
    if (!key || pathlen < LAT_LIBCACHE_MAX)
        return "no-local-io-node";
    lat_libcache_name(path, key, (uint32_t)ksys0(__NR_getuid));
    long fd = ksys4(__NR_openat, AT_FDCWD, path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
    if (fd == -ENOENT)
        return "no-directory";
    if (fd < 0)
        return fd == -ELOOP || fd == -ENOTDIR ? "refused-not-a-directory" : "cannot-open";
    /* /dev/shm is anybody's: only a directory the I/O node made for this job's user will do */
    int ok = ksys2(__NR_fstat, fd, &st) == 0 && S_ISDIR(st.mode) &&
             st.uid == (uint32_t)ksys0(__NR_getuid) && (st.mode & 07777) == 0700;
    long moved = ok ? shipc_own_dup((int)fd, 1) : -1;
    ksys1(__NR_close, fd);
    if (!ok)
        return "refused-owner-or-mode";
    if (moved < 0)
        return "cannot-open";
    dirfd_ = (int)moved;
    return NULL;
}

void libcache_init(void)
{
    char path[64];
    const char *why = open_dir(path, sizeof path);
    if (why)
        kfmt(cnk.report->lib_off, sizeof cnk.report->lib_off, "%s", why);
    else
        kfmt(cnk.report->lib_dir, sizeof cnk.report->lib_dir, "%s", path);
}

/* fstat of a shipped descriptor, on the I/O node. */
static long remote_stat(int fd, struct lat_stat *w)
{
    int remote;
    size_t got = 0;
    if (shipc_fd_route(fd, &remote) != SHIPC_SHIP)
        return -EBADF;
    int64_t a[4] = { remote, AT_EMPTY_PATH, 0, 0 };
    struct iovec out = { (void *)"", 1 }, in = { w, sizeof *w };
    long r = shipc_call_msg(LAT_SYS_FSTATAT, a, &out, 1, &in, 1, &got);
    return r < 0 ? r : got == sizeof *w ? 0 : -EIO;
}

static int same_version(const struct lat_stat *a, const struct lat_stat *b)
{
    return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime_sec == b->mtime_sec &&
           a->mtime_nsec == b->mtime_nsec && a->ctime_sec == b->ctime_sec && a->ctime_nsec == b->ctime_nsec;
}

/* The cache file of this version, if complete: descriptor or -errno. */
static long open_cached(const char *name, int64_t size)
{
    struct kstat_ st;
    long cfd = ksys4(__NR_openat, dirfd_, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0);
    if (cfd >= 0 && (ksys2(__NR_fstat, cfd, &st) < 0 || !S_ISREG(st.mode) || st.size != size)) {
        ksys1(__NR_close, cfd);
        return -ESTALE;
    }
    return cfd;
}

/* Copy the file behind shipped fd into name (we hold its lock): the bytes
 * travel once, through the pset's I/O node, straight into the tmpfs pages. */
static long fetch(int fd, const struct lat_stat *w, const char *name)
{
    char tmp[sizeof memo.name + 8];
    size_t size = (size_t)w->size, done = 0;
    struct lat_stat after;
    long r;

    kfmt(tmp, sizeof tmp, "%s.part", name);
    ksys3(__NR_unlinkat, dirfd_, tmp, 0);      /* of a fetcher that died: its mode is read-only */
    long tfd = ksys4(__NR_openat, dirfd_, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0400);
    if (tfd < 0)
        return tfd;
    /* reserve the pages first: a full tmpfs must be ENOSPC, not SIGBUS */
    r = ksys4(__NR_fallocate, tfd, 0, 0, size);
    long p = r < 0 ? r : ksys6(__NR_mmap, 0, size, PROT_READ | PROT_WRITE, MAP_SHARED, tfd, 0);
    while (p >= 0 && done < size) {
        r = shipc_pread(fd, (char *)p + done, size - done, (int64_t)done);
        if (r <= 0)
            break;
        done += (size_t)r;
    }
    if (p >= 0)
        ksys2(__NR_munmap, p, size);
    ksys1(__NR_close, tfd);
    /* all of it, and the file did not change while we read it */
    if (p >= 0 && done == size && remote_stat(fd, &after) == 0 && same_version(w, &after))
        r = ksys4(__NR_renameat, dirfd_, tmp, dirfd_, name);
    else
        r = p < 0 ? p : r < 0 ? r : -ESTALE;
    if (r < 0)
        ksys3(__NR_unlinkat, dirfd_, tmp, 0);
    else
        __atomic_fetch_add(&cnk.report->lib_fetched, size, __ATOMIC_RELAXED);
    return r;
}

static void name_of(const struct lat_stat *w, char *name, size_t len)
{
    kfmt(name, len, "%llx-%llx-%llx-%llx.%llx-%llx.%llx", (unsigned long long)w->dev,
         (unsigned long long)w->ino, (unsigned long long)w->size, (unsigned long long)w->mtime_sec,
         (unsigned long long)w->mtime_nsec, (unsigned long long)w->ctime_sec, (unsigned long long)w->ctime_nsec);
}

/* The cached file last served for fd, if that still holds. */
static long open_memo(int fd, int remote, unsigned epoch)
{
    char name[sizeof memo.name];
    int64_t size = -1;
    klock(&memo_lock);
    if (memo.fd == fd && memo.remote == remote && memo.epoch == epoch) {
        memcpy(name, memo.name, sizeof name);
        size = memo.size;
    }
    kunlock(&memo_lock);
    return size < 0 ? -ENOENT : open_cached(name, size);
}

static void remember(int fd, int remote, unsigned epoch, const char *name, int64_t size)
{
    klock(&memo_lock);
    memo.fd = fd;
    memo.remote = remote;
    memo.epoch = epoch;
    memo.size = size;
    kfmt(memo.name, sizeof memo.name, "%s", name);
    kunlock(&memo_lock);
}

long libcache_open(int fd, size_t len)
{
    struct lat_stat w;
    char name[sizeof memo.name], lock[sizeof memo.name + 8];
    int remote;

    if (dirfd_ < 0 || shipc_fd_route(fd, &remote) != SHIPC_SHIP)
        return -ENOENT;
    unsigned epoch = shipc_fd_epoch();        /* before the fstat: a close after it voids the memo */
    long cfd = open_memo(fd, remote, epoch);
    if (cfd >= 0)
        return cfd;
    long r = remote_stat(fd, &w);
    if (r < 0)
        return r;
    if (!S_ISREG(w.mode) || w.size <= 0)
        return -ENODEV;
    name_of(&w, name, sizeof name);
    cfd = open_cached(name, w.size);
    if (cfd >= 0) {
        remember(fd, remote, epoch, name, w.size);
        return cfd;
    }
    /* a small window onto a big data file: not worth a copy of all of it */
    if (w.size > WINDOW_MIN && len < (size_t)w.size / 4)
        return -EFBIG;
    /* the first rank here fetches; the others wait on the lock, then find it */
    kfmt(lock, sizeof lock, "%s.lock", name);
    long lfd = ksys4(__NR_openat, dirfd_, lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (lfd < 0)
        return lfd;
    while ((r = ksys2(__NR_flock, lfd, LOCK_EX_)) == -EINTR)
        ;
    cfd = r < 0 ? r : open_cached(name, w.size);
    if (cfd == -ENOENT && (r = fetch(fd, &w, name)) == 0)
        cfd = open_cached(name, w.size);
    else if (cfd == -ENOENT)
        cfd = r;
    ksys1(__NR_close, lfd);     /* unlocks */
    if (cfd >= 0)
        remember(fd, remote, epoch, name, w.size);
    return cfd;
}
