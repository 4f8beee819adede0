/*
 * datapath.c - how the bytes of a shipped read or write travel, and the
 * I/O node's counters (docs/protocol.md sections 3.1 and 6.1).
 *
 * Eager: the data is in the request or the reply, at most LAT_MAX_IO per
 * message.  Rendezvous: the request names segments of the compute process's
 * memory and ciod moves the bytes itself with process_vm_readv/writev,
 * through the connection's own receive buffer (window = LAT_MAX_IO), so a
 * rendezvous costs no memory beyond what every connection already has.  The
 * data then crosses memory twice (file <-> buffer <-> process) instead of
 * three times (file <-> buffer <-> socket <-> process) and needs one round
 * trip however large the transfer.
 *
 * Shared memory: a process granted LAT_DP_SHM may share a region of its
 * memory (cnk's big memory, a sealed memfd) with LAT_DP_SHARE; ciod maps it
 * and a rendezvous whose segments all lie in the region is one read(2) or
 * write(2) between the file and that mapping: the bytes are copied once.
 * Other segments (memory outside the region) go through the window.
 *
 * Rendezvous and sharing are granted only on a unix-socket connection whose
 * hello names a child of the peer (the compute node's cnode forked the
 * process after connecting), so a process can never point ciod at someone
 * else's memory; a shared region is opened through that pid's own
 * descriptor table, and every segment is bounded against it.
 *
 * Settings (environment of ciod, read once at start):
 *   LATTICE_DATAPATH     shm (default): shared memory, else rendezvous;
 *                        vm: rendezvous through the window only;
 *                        messages: neither, as for a process on another
 *                        host: big transfers are pipelined series of chunks
 *   LATTICE_RDV_MIN      bytes from which a transfer goes rendezvous
 *                        (default 65536; 0 turns rendezvous off)
 *   LATTICE_SPIN_US      how long a process thread polls for the next request
 *                        before it blocks (default 20; 0 never polls)
 */
#include "ciod.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define RDV_MIN_DEFAULT (64u << 10)

enum { DP_MESSAGES, DP_VMONLY, DP_SHARED };

static uint32_t rdv_min = RDV_MIN_DEFAULT;
static int mode = DP_SHARED;
static uint64_t spin_ns = 20000;

atomic_uint_fast64_t dp_ctr[LAT_CTR__END];
static atomic_uint_fast64_t call_bytes[NSYS], call_ns[NSYS];
static atomic_uint_fast64_t call_hist[NSYS][LAT_HIST_BUCKETS];

void datapath_init(void)
{
    const char *s = getenv("LATTICE_RDV_MIN");
    char *end;

    if (s && *s) {
        unsigned long v = strtoul(s, &end, 0);
        if (!*end && v <= LAT_MAX_IO * 64ul)
            rdv_min = (uint32_t)v;
        else
            logmsg("ignoring LATTICE_RDV_MIN=%s", s);
    }
    if ((s = getenv("LATTICE_DATAPATH")) && *s) {
        if (!strcmp(s, "messages"))
            mode = DP_MESSAGES;
        else if (!strcmp(s, "vm"))
            mode = DP_VMONLY;
        else if (strcmp(s, "shm"))
            logmsg("ignoring LATTICE_DATAPATH=%s (shm, vm or messages)", s);
    }
    if (mode == DP_MESSAGES)
        rdv_min = 0;
    if ((s = getenv("LATTICE_SPIN_US")) && *s)
        spin_ns = strtoull(s, NULL, 10) * 1000;
    collective_init();
    atomic_store(&dp_ctr[LAT_CTR_EAGER_MAX], LAT_MAX_IO);
    atomic_store(&dp_ctr[LAT_CTR_RDV_MIN], rdv_min);
    atomic_store(&dp_ctr[LAT_CTR_COLLECTIVE], coll_on());
    atomic_store(&dp_ctr[LAT_CTR_DATAPATH], rdv_min ? (unsigned)mode : DP_MESSAGES);
}

/* ---- counters ---- */

uint64_t dp_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

void dp_account(unsigned call, uint64_t ns, uint64_t bytes)
{
    unsigned b = ns ? 63u - (unsigned)__builtin_clzll(ns) : 0;

    if (call >= NSYS)
        return;
    if (b >= LAT_HIST_BUCKETS)
        b = LAT_HIST_BUCKETS - 1;
    atomic_fetch_add_explicit(&call_bytes[call], bytes, memory_order_relaxed);
    atomic_fetch_add_explicit(&call_ns[call], ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&call_hist[call][b], 1, memory_order_relaxed);
}

void dp_ctr_max(enum lat_ctr i, uint64_t v)
{
    uint_fast64_t cur = atomic_load(&dp_ctr[i]);
    while (v > cur && !atomic_compare_exchange_weak(&dp_ctr[i], &cur, v))
        ;
}

size_t dp_counters(uint64_t *out, size_t cap)
{
    size_t n = 0, need = NSYS + 2 + NSYS * (2 + LAT_HIST_BUCKETS) + LAT_CTR__END;
    struct lat_counters_ext ext = { NSYS, LAT_HIST_BUCKETS, LAT_CTR__END, 0 };

    if (cap < need)
        return 0;
    for (unsigned i = 0; i < NSYS; i++)
        out[n++] = atomic_load(&sys_calls[i]);
    for (unsigned i = 0; i < NSYS; i++) {
        out[n++] = atomic_load(&call_bytes[i]);
        out[n++] = atomic_load(&call_ns[i]);
        for (unsigned b = 0; b < LAT_HIST_BUCKETS; b++)
            out[n++] = atomic_load(&call_hist[i][b]);
    }
    for (unsigned i = 0; i < LAT_CTR__END; i++)
        out[n++] = atomic_load(&dp_ctr[i]);
    memcpy(&out[n], &ext, sizeof(ext));     /* last: how to read the rest */
    n += sizeof(ext) / sizeof(uint64_t);
    return n;
}

/* ---- waiting for a request ---- */

/* A process in a burst of calls sends the next one a few microseconds after
 * our reply; polling for it that long saves waking a blocked thread, which
 * costs more than the call.  The polls are non-blocking reads into the
 * connection's read-ahead, so the one that finds the request has read it.
 * A poll that found nothing makes the next few waits block at once, so a
 * computing process costs little. */
void dp_spin(struct conn *c, unsigned *skip)
{
    if (!spin_ns || c->ra_pos < c->ra_len)
        return;
    if (*skip) {
        (*skip)--;
        return;
    }
    uint64_t end = dp_now_ns() + spin_ns;
    do {
        ssize_t n = recv(c->fd, c->ra, CONN_RA, MSG_DONTWAIT);
        if (n > 0) {
            c->ra_pos = 0;
            c->ra_len = (uint32_t)n;
            return;
        }
        if (n == 0 || errno != EAGAIN)
            return;                     /* EOF or an error: conn_recv's read sees it */
    } while (dp_now_ns() < end);
    *skip = 8;
}

/* ---- the hello ---- */

/* Is pid a child of the process at the other end of this unix socket? */
static bool child_of_peer(int sock, uint32_t pid)
{
    struct ucred cr;
    socklen_t cl = sizeof(cr);
    char path[64], line[256];
    long ppid = -1;
    FILE *f;

    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0 || cr.pid <= 0 || pid == 0)
        return false;
    snprintf(path, sizeof(path), "/proc/%u/status", pid);
    if (!(f = fopen(path, "re")))
        return false;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "PPid: %ld", &ppid) == 1)
            break;
    fclose(f);
    return ppid == cr.pid;
}

void dp_hello(struct conn *c, const struct lat_hello_proc *hp, struct lat_datapath *dp)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);

    *dp = (struct lat_datapath){ .eager_max = LAT_MAX_IO, .window = LAT_MAX_IO };
    if (!hp || !(hp->flags & LAT_DP_VM) || rdv_min == 0)
        return;
    if (getsockname(c->fd, (struct sockaddr *)&ss, &sl) < 0 || ss.ss_family != AF_UNIX)
        return;                         /* another host: messages only */
    if (!child_of_peer(c->fd, hp->pid)) {
        ras_event(RAS_WARNING, cfg.location, "process connection from %s names pid %u, not a child of "
                  "its node: no rendezvous", c->peer, hp->pid);
        return;
    }
    dp->rdv_min = rdv_min;
    dp->flags = LAT_DP_VM | (mode == DP_SHARED ? LAT_DP_SHM : 0);
}

/* ---- shared memory ---- */

void dp_unshare(struct dp_shm *shm)
{
    if (shm->map)
        munmap(shm->map, shm->len);
    *shm = (struct dp_shm){ 0 };
}

static int share_refused(const char *loc, pid_t pid, int fd, int err, const char *why)
{
    atomic_fetch_add(&dp_ctr[LAT_CTR_SHM_REFUSED], 1);
    ras_event(RAS_WARNING, loc, "process %d shares descriptor %d: %s; its transfers use the window",
              (int)pid, fd, why);
    return err;
}

/* The process's own descriptor, reopened through /proc: only a memfd
 * (tmpfs or hugetlbfs, named "/memfd:...") sealed so it cannot shrink under
 * our mapping (a shrunk file would fault ciod on access). */
int dp_share(struct dp_shm *shm, pid_t pid, const char *loc, uint64_t base, uint64_t len, int64_t memfd)
{
    char path[64], target[64];
    struct statfs sfs;
    struct stat st;

    dp_unshare(shm);
    if (len == 0)
        return 0;
    if (memfd < 0 || memfd > INT32_MAX || base + len < base || len > (1ull << 46))
        return share_refused(loc, pid, (int)memfd, EINVAL, "bad region");
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, (int)memfd);
    ssize_t tl = readlink(path, target, sizeof(target) - 1);
    if (tl < 7 || strncmp(target, "/memfd:", 7))
        return share_refused(loc, pid, (int)memfd, EBADF, "not a memfd");
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return share_refused(loc, pid, (int)memfd, errno, strerror(errno));
    int seals = fcntl(fd, F_GET_SEALS);
    int err = 0;
    const char *why = NULL;
    if (fstatfs(fd, &sfs) < 0 || (sfs.f_type != TMPFS_MAGIC && sfs.f_type != HUGETLBFS_MAGIC))
        err = EBADF, why = "not a memfd";
    else if (seals < 0 || !(seals & F_SEAL_SHRINK))
        err = EPERM, why = "not sealed against shrinking";
    else if (fstat(fd, &st) < 0 || (uint64_t)st.st_size < len)
        err = EINVAL, why = "smaller than the region";
    if (!err) {
        void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m == MAP_FAILED)
            err = errno, why = strerror(errno);
        else
            *shm = (struct dp_shm){ m, base, len };
    }
    close(fd);
    if (err)
        return share_refused(loc, pid, (int)memfd, err, why);
    atomic_fetch_add(&dp_ctr[LAT_CTR_SHM_SHARES], 1);
    return 0;
}

/* The segments as pointers into our mapping; false if one lies outside. */
static bool shm_translate(const struct dp_shm *shm, const struct iovec *segs, unsigned n, struct iovec *out)
{
    if (!shm || !shm->map)
        return false;
    for (unsigned i = 0; i < n; i++) {
        uint64_t a = (uint64_t)(uintptr_t)segs[i].iov_base, l = segs[i].iov_len;
        if (a < shm->base || l > shm->len || a - shm->base > shm->len - l)
            return false;
        out[i] = (struct iovec){ shm->map + (a - shm->base), (size_t)l };
    }
    return true;
}

/* One copy: the file system call reads or fills our mapping of the
 * process's memory, segment by segment, a short one ending the transfer.
 * Except for reads whose memory and file offset disagree modulo 64 (pos:
 * the file offset where the transfer starts, -1 unknown): the kernel's copy
 * from the page cache into such memory runs at a quarter of its speed here
 * (3.8x slower measured), so those read through the window and a memcpy. */
static int64_t shm_rdv(const struct iovec *local, unsigned n, bool wr, int64_t pos, char *win, size_t winlen,
                       ssize_t (*io)(void *, char *, size_t, uint64_t), void *ctx, int *err)
{
    uint64_t done = 0;

    for (unsigned i = 0; i < n; i++) {
        size_t put = 0;
        while (put < local[i].iov_len) {
            char *dst = (char *)local[i].iov_base + put;
            bool bounce = !wr && ((uintptr_t)dst - (uint64_t)(pos < 0 ? 0 : pos) - done) % 64 != 0;
            size_t cap = bounce ? winlen : 1u << 30;
            size_t want = local[i].iov_len - put < cap ? local[i].iov_len - put : cap;
            ssize_t r = io(ctx, bounce ? win : dst, want, done);
            if (r < 0 && !done)
                *err = errno;
            if (r <= 0)
                goto out;
            if (bounce)
                memcpy(dst, win, (size_t)r);
            put += (size_t)r;
            done += (uint64_t)r;
            if ((size_t)r < want)
                goto out;               /* end of file, full disk */
        }
    }
out:
    atomic_fetch_add(&dp_ctr[LAT_CTR_SHM], 1);
    atomic_fetch_add(&dp_ctr[LAT_CTR_SHM_BYTES], done);
    atomic_fetch_add(&dp_ctr[LAT_CTR_RDV], 1);
    atomic_fetch_add(&dp_ctr[LAT_CTR_RDV_BYTES], done);
    return (int64_t)done;
}

/* ---- rendezvous ---- */

/* The segments of a rendezvous request, checked against its count. */
int dp_segments(const char *data, size_t dlen, int64_t count, struct iovec *segs, unsigned *nseg)
{
    uint64_t sum = 0;
    unsigned n = (unsigned)(dlen / sizeof(struct lat_rdv_seg));

    if (dlen % sizeof(struct lat_rdv_seg) || n == 0 || n > LAT_RDV_MAXSEG || count < 0)
        return EINVAL;
    for (unsigned i = 0; i < n; i++) {
        struct lat_rdv_seg s;
        memcpy(&s, data + i * sizeof(s), sizeof(s));
        if (s.len > (uint64_t)INT64_MAX - sum || s.addr + s.len < s.addr)
            return EINVAL;
        sum += s.len;
        segs[i] = (struct iovec){ (void *)(uintptr_t)s.addr, (size_t)s.len };
    }
    if (sum != (uint64_t)count)
        return EINVAL;
    *nseg = n;
    return 0;
}

/* The part [skip, skip + len) of the remote segments. */
static int seg_slice(const struct iovec *segs, unsigned n, uint64_t skip, size_t len, struct iovec *out)
{
    int k = 0;

    for (unsigned i = 0; i < n && len > 0; i++) {
        if (skip >= segs[i].iov_len) {
            skip -= segs[i].iov_len;
            continue;
        }
        size_t take = segs[i].iov_len - skip < len ? segs[i].iov_len - (size_t)skip : len;
        out[k++] = (struct iovec){ (char *)segs[i].iov_base + skip, take };
        skip = 0;
        len -= take;
    }
    return k;
}

/* Moves count bytes between the process's memory and `src`/`dst`, one
 * window at a time.  Returns bytes done; *err is set on a failure before
 * anything moved (EFAULT when the memory is out of reach). */
int64_t dp_rdv(pid_t pid, const struct dp_shm *shm, char *win, size_t winlen, bool wr, int64_t pos,
               const struct iovec *segs, unsigned nseg, uint64_t count,
               ssize_t (*io)(void *ctx, char *buf, size_t n, uint64_t done), void *ctx, int *err)
{
    struct iovec rv[LAT_RDV_MAXSEG];
    uint64_t done = 0;

    *err = 0;
    if (shm_translate(shm, segs, nseg, rv))
        return shm_rdv(rv, nseg, wr, pos, win, winlen, io, ctx, err);
    dp_ctr_max(LAT_CTR_RDV_BUF_MAX, winlen < count ? winlen : count);
    while (done < count) {
        size_t n = count - done < winlen ? (size_t)(count - done) : winlen;
        int k = seg_slice(segs, nseg, done, n, rv);
        struct iovec lv = { win, n };
        ssize_t m;

        if (wr) {
            m = process_vm_readv(pid, &lv, 1, rv, (unsigned long)k, 0);
            if (m <= 0) {
                atomic_fetch_add(&dp_ctr[LAT_CTR_RDV_FAULT], 1);
                *err = m < 0 ? EFAULT : EIO;
                break;
            }
            ssize_t w = io(ctx, win, (size_t)m, done);
            if (w < 0) {
                *err = errno;
                break;
            }
            done += (uint64_t)w;
            if ((size_t)w < n)
                break;                  /* full disk, short write */
        } else {
            ssize_t r = io(ctx, win, n, done);
            if (r < 0) {
                *err = errno;
                break;
            }
            lv.iov_len = (size_t)r;
            k = seg_slice(segs, nseg, done, (size_t)r, rv);
            m = r ? process_vm_writev(pid, &lv, 1, rv, (unsigned long)k, 0) : 0;
            if (m < r) {
                atomic_fetch_add(&dp_ctr[LAT_CTR_RDV_FAULT], 1);
                *err = EFAULT;
                break;
            }
            done += (uint64_t)r;
            if ((size_t)r < n)
                break;                  /* end of file */
        }
    }
    atomic_fetch_add(&dp_ctr[LAT_CTR_RDV], 1);
    atomic_fetch_add(&dp_ctr[LAT_CTR_RDV_BYTES], done);
    return (int64_t)done;
}
