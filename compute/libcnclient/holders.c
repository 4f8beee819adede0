/*
 * holders.c - the processes that share one PROC connection (a shell and
 * the programs it runs, a fork()ed child, a popen()ed command) share the
 * I/O node's descriptor table of that connection too.  A remote
 * descriptor must then be closed on the I/O node only when no process
 * holds it any more, and a program a process exec()s must find the remote
 * descriptors it inherited.  The kernel keeps both facts for us:
 *
 * - A placeholder (the local descriptor at the program's number) is made
 *   private, an O_PATH of /dev/null as cheap as an open, and becomes a
 *   shared one before the process makes another or execs (spawn.c): a
 *   sealed, empty memfd named "lattice-rfd:<connection inode>:<remote>",
 *   opened write-only (the kernel's own read is EBADF, write EPERM, mmap
 *   EACCES).  fork() and exec() carry it as they carry any descriptor
 *   (close-on-exec as the program asked), so a program finds what it
 *   inherited by name in /proc/self/fd (adopt), whether its parent
 *   forked, vfork()ed or posix_spawn()ed it.  A private one cannot be
 *   held by anyone else: its closer closes the remote one at once.
 * - The placeholder's open file holds a shared flock.  It lasts while any
 *   process still has a descriptor to it, and goes when the last one is
 *   closed, by close(), exec's close-on-exec or the process's death.  So
 *   a closer opens a second file of the same memfd before it lets its
 *   descriptor go (hold), then tries an exclusive flock on it (last): it
 *   succeeds only when nobody holds the placeholder any more.  A seal
 *   (F_SEAL_FUTURE_WRITE) marks the remote descriptor closed, so two
 *   closers racing close it once.
 *
 * Remote 0, 1 and 2 (the rank's stdin, stdout, stderr on cnode's own
 * descriptors) are never closed on the I/O node: every process of the
 * rank may still write to them, and ciod closes them with the connection.
 *
 * exit() lets the process's own go (lat_holders_exit).  A last holder that
 * ends without closing (a shell's subshell leaves by _exit, a signal, an
 * exec's close-on-exec) leaves its remote descriptors open on the I/O
 * node, where a rank may have LAT_MAX_FDS: the shared page keeps which
 * are open and which process holds which (a registry after struct
 * shipc_shared, grown by the rank's first program), so when the I/O node
 * says EMFILE the client closes those that only processes which have
 * ended held, and tries again once (reap).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <lattice/ksys.h>

#include "client.h"

#define RFD_PREFIX "lattice-rfd:"

static unsigned long conn_ino;              /* names this connection's placeholders */

/* ---- the registry in the shared page ---- */
#define WORDS ((int)LAT_MAX_FDS / 64)
#define NHOLDERS 240
struct holder {
    int32_t pid;                            /* 0: free */
    uint32_t pad;
    uint64_t bits[WORDS];                   /* the remote descriptors it holds */
};
struct registry {
    uint64_t open[WORDS];                   /* open on the I/O node, made by a placeholder */
    struct holder h[NHOLDERS];
};
#define REG_OFF 128
#define REG_SIZE (REG_OFF + sizeof(struct registry))
_Static_assert(sizeof(struct lat_page) <= REG_OFF, "the registry follows the page's head");

static struct registry *reg;                /* NULL: none (a page too small) */
static struct holder *me;                   /* this process's entry, or NULL */

static void bit_set(uint64_t *w, int r)
{
    __atomic_fetch_or(&w[r / 64], 1ull << (r % 64), __ATOMIC_RELAXED);
}

static void bit_clear(uint64_t *w, int r)
{
    __atomic_fetch_and(&w[r / 64], ~(1ull << (r % 64)), __ATOMIC_RELAXED);
}

/* ended: gone, or a zombie (its descriptors are closed already) */
static int ended(pid_t pid)
{
    char path[40], buf[256];
    if (ksys2(__NR_kill, pid, 0) == -ESRCH)
        return 1;
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    long fd = ksys4(__NR_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return fd == -ENOENT;
    long n = ksys3(__NR_read, fd, buf, sizeof buf - 1);
    ksys1(__NR_close, fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    char *rp = strrchr(buf, ')');
    return rp && (rp[2] == 'Z' || rp[2] == 'X');
}

/* This process's entry: its own (a program before it in this process had
 * it), else a free one, else one of a process that ended. */
static struct holder *entry(pid_t pid)
{
    for (int i = 0; i < NHOLDERS; i++)
        if (__atomic_load_n(&reg->h[i].pid, __ATOMIC_ACQUIRE) == pid)
            return &reg->h[i];
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < NHOLDERS; i++) {
            int32_t was = __atomic_load_n(&reg->h[i].pid, __ATOMIC_ACQUIRE);
            if (was && (pass == 0 || !ended(was)))
                continue;
            if (!__atomic_compare_exchange_n(&reg->h[i].pid, &was, (int32_t)pid, 0, __ATOMIC_ACQ_REL,
                                             __ATOMIC_RELAXED))
                continue;
            memset(reg->h[i].bits, 0, sizeof reg->h[i].bits);
            return &reg->h[i];
        }
    return NULL;
}

/* This process holds exactly what its table stands for now (after a
 * fork, or an exec's adoption). */
static void register_table(void)
{
    if (!reg)
        return;
    me = entry((pid_t)syscall(SYS_getpid));
    if (!me)
        return;
    uint64_t bits[WORDS] = { 0 };
    for (int fd = shipc_fd_next_shipped(0, ~0u); fd >= 0; fd = shipc_fd_next_shipped((unsigned)fd + 1, ~0u)) {
        int r;
        if (shipc_fd_route(fd, &r) == SHIPC_SHIP && r >= 3 && r < (int)LAT_MAX_FDS)
            bits[r / 64] |= 1ull << (r % 64);
    }
    for (int i = 0; i < WORDS; i++)
        __atomic_store_n(&me->bits[i], bits[i], __ATOMIC_RELAXED);
}

/* A second open file of our descriptor fd, for a moment: at the soft
 * RLIMIT_NOFILE it is allowed one more (as the program's own open would
 * have got the number it needs), then the limit is put back. */
static long reopen(int fd, int flags)
{
    char path[40];
    struct rlimit rl, wide;
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    long r = ksys4(__NR_openat, AT_FDCWD, path, flags, 0);
    if (r != -EMFILE || ksys4(__NR_prlimit64, 0, RLIMIT_NOFILE, 0, &rl) < 0 || rl.rlim_cur >= rl.rlim_max)
        return r;
    wide = rl;
    wide.rlim_cur++;
    if (ksys4(__NR_prlimit64, 0, RLIMIT_NOFILE, &wide, 0) < 0)
        return r;
    r = ksys4(__NR_openat, AT_FDCWD, path, flags, 0);
    ksys4(__NR_prlimit64, 0, RLIMIT_NOFILE, &rl, 0);
    return r;
}

/* A shared placeholder for remote: a sealed memfd, reopened write-only at
 * the memfd's own number (the lowest free one, as the kernel's open
 * picks), with its shared flock.  A kernel descriptor or -errno. */
static int shared_placeholder(int remote, int cloexec)
{
    char name[64];
    snprintf(name, sizeof name, RFD_PREFIX "%lu:%d", conn_ino, remote);
    long m = ksys2(__NR_memfd_create, name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (m < 0)
        return (int)m;
    long fd = ksys3(__NR_fcntl, m, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_GROW | F_SEAL_SHRINK);
    if (fd >= 0)
        fd = reopen((int)m, O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        long r = ksys3(__NR_dup3, fd, m, cloexec ? O_CLOEXEC : 0);
        ksys1(__NR_close, fd);
        fd = r < 0 ? r : m;
    }
    if (fd < 0) {
        ksys1(__NR_close, m);
        return (int)fd;
    }
    long r = ksys2(__NR_flock, fd, LOCK_SH);
    if (r < 0) {
        ksys1(__NR_close, fd);
        return (int)r;
    }
    return (int)fd;
}

/* A new placeholder: private to this process (an O_PATH of /dev/null, as
 * cheap as an open) until the process makes another that could inherit
 * it (lat_holders_share).  A kernel descriptor or -errno. */
static int make(int remote, int cloexec)
{
    long fd = ksys4(__NR_openat, AT_FDCWD, "/dev/null", O_PATH | (cloexec ? O_CLOEXEC : 0), 0);
    if (fd >= 0 && reg && remote >= 3 && !lat_vforked()) {
        bit_set(reg->open, remote);
        if (me)
            bit_set(me->bits, remote);
    }
    return (int)fd;
}

#define TOK_PRIVATE (-2)

static int is_private(int fd)
{
    long fl = ksys2(__NR_fcntl, fd, F_GETFL);
    return fl >= 0 && (fl & O_PATH);
}

/* Before placeholder fd goes: a second open file of its memfd; -1: none
 * (or it stands for the rank's stdio, which is never closed);
 * TOK_PRIVATE: nobody else can hold it. */
static int hold(int fd)
{
    int remote;
    if (shipc_fd_route(fd, &remote) != SHIPC_SHIP || remote < 3)
        return -1;
    if (is_private(fd))
        return TOK_PRIVATE;
    long q = reopen(fd, O_WRONLY | O_CLOEXEC);
    return q < 0 ? -1 : (int)q;
}

/* After: 1 when nobody holds the placeholder any more and we are the one
 * to close remote on the I/O node. */
static int last(int tok, int remote)
{
    int closing = 0;
    if (tok == TOK_PRIVATE) {
        closing = remote >= 0;
    } else if (remote < 0 || tok < 0) {
        /* no second file (out of descriptors): leave it open, never
         * close what another process may still use */
        if (tok >= 0)
            ksys1(__NR_close, tok);
        return 0;
    } else {
        if (ksys2(__NR_flock, tok, LOCK_EX | LOCK_NB) == 0) {
            long seals = ksys2(__NR_fcntl, tok, F_GET_SEALS);
            if (seals >= 0 && !(seals & F_SEAL_FUTURE_WRITE) &&
                ksys3(__NR_fcntl, tok, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) == 0)
                closing = 1;
        }
        ksys1(__NR_close, tok);
    }
    if (reg && remote >= 0 && !lat_vforked()) {
        if (me)
            bit_clear(me->bits, remote);
        if (closing)
            bit_clear(reg->open, remote);
    }
    return closing;
}

/* A private placeholder made shared in place (dup3 over it: the number
 * never goes free). */
static void share_one(int fd, int remote, int cloexec)
{
    if (remote < 3 || !is_private(fd))
        return;
    int m = shared_placeholder(remote, cloexec);
    if (m < 0)
        return;         /* it stays private: the new process will not see it */
    ksys3(__NR_dup3, m, fd, cloexec ? O_CLOEXEC : 0);
    ksys1(__NR_close, m);
}

/* Before a process is made that may inherit this one's descriptors (fork,
 * vfork, posix_spawn, system, popen, clone) or before an exec: every
 * placeholder becomes a shared one, which the other process (or the new
 * program) can name and hold. */
void lat_holders_share(void)
{
    if (!lat_active() || !conn_ino || lat_vforked())
        return;
    shipc_fd_each(share_one);
}

/* The I/O node said EMFILE: close the remote descriptors open there that
 * no live process holds (their last holder ended without closing them).
 * 1 if any was closed (try again), else 0. */
static int reap(void)
{
    if (!reg || lat_vforked())
        return 0;
    uint64_t live[WORDS] = { 0 }, dead[WORDS];
    for (int i = 0; i < NHOLDERS; i++) {
        int32_t pid = __atomic_load_n(&reg->h[i].pid, __ATOMIC_ACQUIRE);
        if (!pid)
            continue;
        if (ended(pid)) {
            __atomic_compare_exchange_n(&reg->h[i].pid, &pid, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED);
            continue;
        }
        for (int w = 0; w < WORDS; w++)
            live[w] |= __atomic_load_n(&reg->h[i].bits[w], __ATOMIC_RELAXED);
    }
    int any = 0;
    for (int w = 0; w < WORDS; w++) {
        dead[w] = __atomic_load_n(&reg->open[w], __ATOMIC_RELAXED) & ~live[w];
        for (int b = 0; b < 64; b++)
            if (dead[w] & (1ull << b)) {
                int64_t a[4] = { w * 64 + b, 0, 0, 0 };
                bit_clear(reg->open, w * 64 + b);
                shipc_call_msg(LAT_SYS_CLOSE, a, NULL, 0, NULL, 0, NULL);
                any = 1;
            }
    }
    return any;
}

static const struct shipc_fd_ops ops = { make, hold, last, reap };

/* "/memfd:lattice-rfd:<ino>:<remote> (deleted)" of this connection: remote, else -1 */
static int placeholder_remote(const char *link)
{
    char want[48];
    int n = snprintf(want, sizeof want, "/memfd:" RFD_PREFIX "%lu:", conn_ino);
    if (strncmp(link, want, (size_t)n) != 0)
        return -1;
    char *end;
    long r = strtol(link + n, &end, 10);
    if (end == link + n || strcmp(end, " (deleted)") != 0 || r < 0 || r >= LAT_MAX_FDS)
        return -1;
    return (int)r;
}

/* The placeholders this program inherited (a program before it in this
 * process, or a parent), found by name: they stand for their remote
 * descriptors here too. */
static void adopt(void)
{
    long dir = ksys4(__NR_openat, AT_FDCWD, "/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    char buf[2048], link[128];
    long n;
    if (dir < 0)
        return;
    while ((n = ksys3(__NR_getdents64, dir, buf, sizeof buf)) > 0) {
        for (long off = 0; off < n;) {
            struct { uint64_t ino; int64_t off; unsigned short reclen; unsigned char type; char name[]; } *d =
                (void *)(buf + off);
            off += d->reclen;
            char *end;
            long fd = strtol(d->name, &end, 10);
            if (*end || end == d->name || fd == dir || fd >= shipc_own_floor())
                continue;
            long len = ksys4(__NR_readlinkat, dir, d->name, link, sizeof link - 1);
            if (len <= 0)
                continue;
            link[len] = 0;
            int remote = placeholder_remote(link);
            if (remote >= 0)
                shipc_fd_adopt((int)fd, remote, (ksys2(__NR_fcntl, fd, F_GETFD) & FD_CLOEXEC) != 0);
        }
    }
    ksys1(__NR_close, dir);
}

/* The registry after the lock in the shared page (seq_fd): the rank's
 * first program grows the page for it, before any other process exists. */
static void registry_init(int seq_fd, int first)
{
    struct stat st;
    if (syscall(SYS_fstat, seq_fd, &st) != 0)
        return;
    if (st.st_size < (off_t)REG_SIZE && (!first || ksys2(__NR_ftruncate, seq_fd, REG_SIZE) < 0))
        return;
    /* the raw call: mmap is interposed, and we are inside the library's start */
    long p = ksys6(__NR_mmap, 0, REG_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, seq_fd, 0);
    if (p < 0 && p > -4096)
        return;
    reg = (struct registry *)((char *)p + REG_OFF);
}

void lat_holders_init(int conn, int seq_fd, int first)
{
    struct stat st;
    if (syscall(SYS_fstat, conn, &st) != 0)
        return;
    conn_ino = (unsigned long)st.st_ino;
    adopt();
    registry_init(seq_fd, first);
    register_table();
    shipc_fd_set_ops(&ops);
}

/* In a fork()ed child: it holds what its parent did. */
void lat_holders_forked(void)
{
    register_table();
}

/* exit(): streams flushed first (glibc flushes after every handler ran),
 * then the process's remote descriptors let go, closed where it was the
 * last holder. */
void lat_holders_exit(void)
{
    if (lat_vforked())
        return;         /* a raw fork()'s child: its table is its parent's copy, unshared */
    fflush(NULL);
    for (int fd = shipc_fd_next_shipped(0, ~0u); fd >= 0; fd = shipc_fd_next_shipped((unsigned)fd + 1, ~0u)) {
        int remote;
        if (shipc_fd_route(fd, &remote) == SHIPC_SHIP && remote >= 3)
            shipc_fd_release(fd);
    }
    if (me)
        __atomic_store_n(&me->pid, 0, __ATOMIC_RELEASE);
    me = NULL;
}
