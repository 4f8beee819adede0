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
 *                        (its socket and its mailbox) before it blocks
 *                        (default 20; 0 never polls)
 *
 * Mailbox: a process granted LAT_DP_SHM may share a page pair (struct
 * lat_mbox) through which its small calls travel without the socket; ciod
 * copies each request out before checking it, as a socket message.
 */
#include "ciod.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define RDV_MIN_DEFAULT (64u << 10)

enum { DP_MESSAGES, DP_VMONLY, DP_SHARED };

static uint32_t rdv_min = RDV_MIN_DEFAULT;
static int mode = DP_SHARED;
static uint64_t spin_ns = 20000;

/* The counters live in one shared anonymous mapping made before any
 * worker is forked: what the job's worker counts, the monitor reports. */
struct counters {
    atomic_uint_fast64_t sys_calls[NSYS];
    atomic_uint_fast64_t call_bytes[NSYS], call_ns[NSYS];
    atomic_uint_fast64_t call_hist[NSYS][LAT_HIST_BUCKETS];
    atomic_uint_fast64_t ctr[LAT_CTR__END];
};
atomic_uint_fast64_t *dp_ctr, *sys_calls;
static atomic_uint_fast64_t *call_bytes, *call_ns, (*call_hist)[LAT_HIST_BUCKETS];

void datapath_init(void)
{
    const char *s = getenv("LATTICE_RDV_MIN");
    char *end;
    struct counters *k = mmap(NULL, sizeof(*k), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

    if (k == MAP_FAILED) {
        logmsg("cannot map the counters: %s", strerror(errno));
        exit(1);
    }
    sys_calls = k->sys_calls;
    call_bytes = k->call_bytes;
    call_ns = k->call_ns;
    call_hist = k->call_hist;
    dp_ctr = k->ctr;

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

static bool mbox_waiting(const struct lat_mbox *x, uint32_t done)
{
    return x && __atomic_load_n(&x->req_seq, __ATOMIC_ACQUIRE) != done;
}

/* A process in a burst of calls sends the next one a few microseconds after
 * our reply; polling for it that long saves waking a blocked thread, which
 * costs more than the call.  The polls are non-blocking reads into the
 * connection's read-ahead, so the one that finds the request has read it,
 * and loads of the mailbox's req_seq (mb: the process's mailbox, map NULL
 * if none; done: the last seq served from it), with srv_spin set meanwhile
 * so the process need not ring.  A poll that found nothing makes the next
 * few waits block at once, so a computing process costs little.  Returns
 * true when a request waits in the mailbox: srv_spin then stays 1 while it
 * is served (the process sends nothing before our reply, and we come back
 * here after it), so the next request needs no ring even if we are slow
 * to return, and the line holding req_seq is not written on the way. */
bool dp_spin(struct conn *c, unsigned *skip, const struct dp_shm *mb, uint32_t done)
{
    struct lat_mbox *x = (struct lat_mbox *)mb->map;

    if (!spin_ns || c->ra_pos < c->ra_len)
        goto last;
    if (*skip) {
        (*skip)--;
        goto last;
    }
    if (x && !__atomic_load_n(&x->srv_spin, __ATOMIC_RELAXED))
        __atomic_store_n(&x->srv_spin, 1, __ATOMIC_RELAXED);
    uint64_t end = dp_now_ns() + spin_ns;
    for (unsigned i = 0;; i++) {
        if (mbox_waiting(x, done))
            return true;
        /* with a mailbox, the socket (big transfers only) is polled one
         * time in 128: each poll is a system call the mailbox waits behind */
        if (x && i % 128) {
            __builtin_ia32_pause();
            continue;
        }
        if (dp_now_ns() >= end)
            break;
        ssize_t n = recv(c->fd, c->ra, CONN_RA, MSG_DONTWAIT);
        if (n > 0) {
            c->ra_pos = 0;
            c->ra_len = (uint32_t)n;
            goto last;
        }
        if (n == 0 || errno != EAGAIN)
            goto last;                  /* EOF or an error: conn_recv's read sees it */
    }
    *skip = 8;
last:
    if (!x)
        return false;
    /* about to block: from now on the process rings; a request stored
     * before it could see that is found here */
    __atomic_store_n(&x->srv_spin, 0, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    return mbox_waiting(x, done);
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

/* The process's own descriptor, reopened through /proc and mapped: only a
 * memfd (tmpfs or hugetlbfs, named "/memfd:...") sealed so it cannot shrink
 * under our mapping (a shrunk file would fault ciod on access), of at least
 * len bytes.  0 or an errno, *why saying why. */
static int map_memfd(pid_t pid, int64_t memfd, uint64_t len, char **map, const char **why)
{
    char path[64], target[64];
    struct statfs sfs;
    struct stat st;

    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)pid, (int)memfd);
    ssize_t tl = readlink(path, target, sizeof(target) - 1);
    if (tl < 7 || strncmp(target, "/memfd:", 7))
        return *why = "not a memfd", EBADF;
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return *why = strerror(errno), errno;
    int seals = fcntl(fd, F_GET_SEALS);
    int err = 0;
    if (fstatfs(fd, &sfs) < 0 || (sfs.f_type != TMPFS_MAGIC && sfs.f_type != HUGETLBFS_MAGIC))
        err = EBADF, *why = "not a memfd";
    else if (seals < 0 || !(seals & F_SEAL_SHRINK))
        err = EPERM, *why = "not sealed against shrinking";
    else if (fstat(fd, &st) < 0 || (uint64_t)st.st_size < len)
        err = EINVAL, *why = "smaller than the region";
    if (!err) {
        /* NORESERVE: the process's own mapping reserved what it wanted;
         * ours must not reserve the rest of a hugetlb file whose pages the
         * process takes at first touch (cnk's LATTICE_BIGMEM_RESERVE=0) */
        void *m = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
        if (m == MAP_FAILED)
            err = errno, *why = strerror(errno);
        else
            *map = m;
    }
    close(fd);
    return err;
}

int dp_share(struct dp_shm *shm, pid_t pid, const char *loc, uint64_t base, uint64_t len, int64_t memfd)
{
    const char *why = NULL;
    char *m = NULL;

    dp_unshare(shm);
    if (len == 0)
        return 0;
    if (memfd < 0 || memfd > INT32_MAX || base + len < base || len > (1ull << 46))
        return share_refused(loc, pid, (int)memfd, EINVAL, "bad region");
    int err = map_memfd(pid, memfd, len, &m, &why);
    if (err)
        return share_refused(loc, pid, (int)memfd, err, why);
    *shm = (struct dp_shm){ m, base, len };
    atomic_fetch_add(&dp_ctr[LAT_CTR_SHM_SHARES], 1);
    return 0;
}

/* ---- the mailbox (docs/protocol.md section 6.4) ---- */

/* Maps the process's mailbox memfd; *done: the seq it holds now (served). */
int dp_mbox_share(struct dp_shm *mb, pid_t pid, const char *loc, int64_t memfd, uint32_t *done)
{
    const char *why = "bad descriptor";
    char *m = NULL;
    int err = EBADF;

    dp_unshare(mb);
    if (memfd >= 0 && memfd <= INT32_MAX)
        err = map_memfd(pid, memfd, LAT_MBOX_SIZE, &m, &why);
    if (err) {
        ras_event(RAS_WARNING, loc, "process %d shares descriptor %d as its mailbox: %s; its calls use the socket",
                  (int)pid, (int)memfd, why);
        return err;
    }
    *mb = (struct dp_shm){ m, 0, LAT_MBOX_SIZE };
    *done = __atomic_load_n(&((struct lat_mbox *)m)->req_seq, __ATOMIC_ACQUIRE);
    atomic_fetch_add(&dp_ctr[LAT_CTR_MBOX_SHARES], 1);
    return 0;
}

/* Copies request seq out of the mailbox into h and buf (at least
 * LAT_MBOX_REQ_MAX bytes): the process may scribble on the page meanwhile,
 * so only the copy is checked and used.  0, or -1 with why. */
int dp_mbox_take(const struct dp_shm *mb, uint32_t seq, struct lat_hdr *h, char *buf, char *why, size_t whylen)
{
    const struct lat_mbox *x = (const struct lat_mbox *)mb->map;

    memcpy(h, x->req, sizeof(*h));
    if (h->magic != LAT_MAGIC || h->version != LAT_VERSION)
        return errprintf(why, whylen, "bad header (magic 0x%08x version %u)", h->magic, h->version);
    if (h->seq != seq)
        return errprintf(why, whylen, "header seq %u, req_seq %u", h->seq, seq);
    if (h->len > LAT_MBOX_REQ_MAX)
        return errprintf(why, whylen, "%u bytes, beyond the mailbox's %u", h->len, LAT_MBOX_REQ_MAX);
    memcpy(buf, x->req + sizeof(*h), h->len);
    return 0;
}

/* The reply, exactly as reply_ret would send it, then rep_seq; the process
 * is woken if it sleeps.  Data that does not fit (the process asked for
 * more than the mailbox holds) is an EIO reply. */
void dp_mbox_reply(const struct dp_shm *mb, uint16_t type, uint32_t seq, int64_t ret, int err,
                   const void *data, size_t len)
{
    struct lat_mbox *x = (struct lat_mbox *)mb->map;
    struct lat_sysret r = { .ret = ret, .err = err };

    if (len > LAT_MBOX_REP_MAX - sizeof(r)) {
        r = (struct lat_sysret){ .ret = -1, .err = EIO };
        len = 0;
    }
    struct lat_hdr h = { .magic = LAT_MAGIC, .version = LAT_VERSION, .type = (uint16_t)(type | LAT_REPLY),
                         .len = (uint32_t)(sizeof(r) + len), .seq = seq };
    memcpy(x->rep, &h, sizeof(h));
    memcpy(x->rep + sizeof(h), &r, sizeof(r));
    if (len)
        memcpy(x->rep + sizeof(h) + sizeof(r), data, len);
    __atomic_store_n(&x->rep_seq, seq, __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(&x->cli_wait, __ATOMIC_RELAXED))
        syscall(SYS_futex, &x->rep_seq, FUTEX_WAKE, 1, NULL, NULL, 0);
}

/* The segments as pointers into our mapping; false if one lies outside. */
bool dp_shm_translate(const struct dp_shm *shm, const struct iovec *segs, unsigned n, struct iovec *out)
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

/* n segments (unaligned in a payload) as iovecs, and their sum; EINVAL if
 * one wraps or the sum passes INT64_MAX (a call's result must hold it). */
int dp_seg_iovecs(const void *data, unsigned n, struct iovec *segs, uint64_t *total)
{
    uint64_t sum = 0;

    for (unsigned i = 0; i < n; i++) {
        struct lat_rdv_seg s;
        memcpy(&s, (const char *)data + i * sizeof(s), sizeof(s));
        if (s.len > (uint64_t)INT64_MAX - sum || s.addr + s.len < s.addr)
            return EINVAL;
        sum += s.len;
        segs[i] = (struct iovec){ (void *)(uintptr_t)s.addr, (size_t)s.len };
    }
    *total = sum;
    return 0;
}

/* The segments of a rendezvous request, checked against its count. */
int dp_segments(const char *data, size_t dlen, int64_t count, struct iovec *segs, unsigned *nseg)
{
    unsigned n = (unsigned)(dlen / sizeof(struct lat_rdv_seg));
    uint64_t sum;

    if (dlen % sizeof(struct lat_rdv_seg) || n == 0 || n > LAT_RDV_MAXSEG || count < 0 ||
        dp_seg_iovecs(data, n, segs, &sum) != 0 || sum != (uint64_t)count)
        return EINVAL;
    *nseg = n;
    return 0;
}

/* The part [skip, skip + len) of the remote segments. */
int dp_seg_slice(const struct iovec *segs, unsigned n, uint64_t skip, size_t len, struct iovec *out)
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
    if (dp_shm_translate(shm, segs, nseg, rv))
        return shm_rdv(rv, nseg, wr, pos, win, winlen, io, ctx, err);
    dp_ctr_max(LAT_CTR_RDV_BUF_MAX, winlen < count ? winlen : count);
    while (done < count) {
        size_t n = count - done < winlen ? (size_t)(count - done) : winlen;
        int k = dp_seg_slice(segs, nseg, done, n, rv);
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
            k = dp_seg_slice(segs, nseg, done, (size_t)r, rv);
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
