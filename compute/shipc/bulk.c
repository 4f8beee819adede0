/*
 * bulk.c - reads and writes of remote descriptors: a rendezvous from
 * rdv_min bytes (ciod moves the bytes itself, docs/protocol.md section
 * 6.2), else one message each way up to LAT_MAX_IO, else a pipelined
 * series of chunks (lattice/pipe_series.h).  The whole transfer holds the
 * connection, so chunks of two threads never interleave.
 */
#include <linux/fcntl.h>
#include <linux/timerfd.h>

#include "internal.h"

#include <lattice/iov_slice.h>     /* after linux/uio.h: struct iovec */
#include <lattice/pipe_series.h>

#define ASYNC_BYTES 65536u              /* larger writes of the job's output wait for their reply */

/* under conn_lock: */
static struct iovec prog_iov[UIO_MAXIOV];     /* the program's array, copied (a bad one is EFAULT) */
static struct iovec slice[UIO_MAXIOV];
static struct lat_rdv_seg segs[UIO_MAXIOV];

static long iov_total(const struct iovec *iov, int cnt, size_t *total)
{
    *total = 0;
    for (int i = 0; i < cnt; i++) {
        if (iov[i].iov_len > (size_t)INT64_MAX - *total)
            return -EINVAL;
        *total += iov[i].iov_len;
    }
    return 0;
}

/* The part [skip, skip+len) of iov, as vectors in slice. */
static int cut(const struct iovec *iov, int cnt, size_t skip, size_t len)
{
    size_t bytes;

    return lat_iov_slice(iov, (size_t)cnt, skip, len, slice, UIO_MAXIOV, &bytes);
}

static uint16_t rw_type(int wr, int64_t off)
{
    return wr ? (off < 0 ? LAT_SYS_WRITE : LAT_SYS_PWRITE) : (off < 0 ? LAT_SYS_READ : LAT_SYS_PREAD);
}

/* A transfer of at most LAT_MAX_IO; conn_lock held.  off < 0: the file position. */
static long rw_chunk(int rfd, int wr, int n, size_t chunk, int64_t off)
{
    int64_t a[4] = { rfd, wr ? 0 : (int64_t)chunk, off < 0 ? 0 : off, 0 };
    size_t got = 0;

    if (wr)
        return shipc_call_locked(rw_type(wr, off), a, slice, n, NULL, 0, NULL);
    long r = shipc_call_locked(rw_type(wr, off), a, NULL, 0, slice, n, &got);
    return r > (long)got ? (long)got : r;
}

/* A transfer above LAT_MAX_IO without rendezvous (another host, or
 * LATTICE_DATAPATH=messages): chunks sent without waiting for each reply,
 * LAT_PIPE_DEPTH in flight, so ciod works on one while the next arrives.
 * ciod cancels the chunks after a short or failed one (ECANCELED), so
 * nothing lands beyond the count returned.  conn_lock held. */
struct pipe_ctx {
    int rfd, wr, cnt;
    const struct iovec *iov;
    int64_t off;
    uint16_t type;
};

static long pipe_send(void *ctx, size_t at, size_t len, uint8_t flags, uint32_t *sq)
{
    struct pipe_ctx *p = ctx;
    int n = p->wr ? cut(p->iov, p->cnt, at, len) : 0;
    int64_t a[4] = { p->rfd, p->wr ? 0 : (int64_t)len, p->off < 0 ? 0 : p->off + (int64_t)at, 0 };

    return shipc_send_req(p->type, flags, a, p->wr ? slice : NULL, n, sq);
}

static long pipe_recv(void *ctx, uint32_t sq, size_t at, size_t len)
{
    struct pipe_ctx *p = ctx;
    int n = p->wr ? 0 : cut(p->iov, p->cnt, at, len);
    size_t got = 0;
    long r = shipc_recv_reply(p->type, sq, slice, n, &got, 0);

    return !p->wr && r > (long)got ? (long)got : r;
}

static int pipe_lost(void *ctx)
{
    (void)ctx;
    return shipc_conn.dead;
}

static long pipe_locked(int rfd, int wr, const struct iovec *iov, int cnt, size_t total, int64_t off)
{
    struct pipe_ctx p = { rfd, wr, cnt, iov, off, rw_type(wr, off) };
    struct lat_pipe_io io = { &p, pipe_send, pipe_recv, pipe_lost };

    return lat_pipe_series(&io, total, LAT_MAX_IO);
}

/* ---- waiting for a rendezvous reply ----
 *
 * A rendezvous lasts as long as ciod's read or write: ~200 us for 1 MiB to
 * tmpfs here.  Blocked in read, we ran 10-20 us after the reply came (a
 * halted virtual CPU wakes slowly), too late for ciod's 20 us poll for our
 * next request, so ciod slept too and took as long to wake: ~45 us a call
 * beyond the write (ftrace; compute/cnk/README.md "What a shipped call
 * costs").  Polling the whole time would take a core from ciod's threads
 * when several processes ship at once.  So we sleep until shortly before
 * the reply is due, judged from the last transfers' time per byte, then
 * poll.  We sleep in ppoll on the connection for POLLIN only (a blocked
 * read is also woken, for nothing, when ciod takes the request off the
 * socket) and a timerfd (exact: ppoll's own timeout fires up to the 50 us
 * timer slack late).  A poll that ends without the reply means the CPU is
 * shared (with ciod's thread, or another job): polling only delays the
 * reply then, so the next few waits just sleep. */

#define RDV_LEAD_NS 30000ull            /* wake this long before the reply is due */
#define RDV_POLL_NS 30000ull            /* and poll until this long past it, plus a quarter */
#define RDV_WAKE_NS 15000ull            /* how late a sleeping client sees the reply */

struct rdv_pollfd { int fd; short events, revents; };
struct rdv_ts { long sec, nsec; };

static int rdv_tfd = -1;                /* the client's own (hidden); -1: no sleeping early */
static uint64_t rdv_ps[2];              /* picoseconds a byte, [wr]: 0 unknown */
static unsigned rdv_skip;               /* waits left that only sleep */

void shipc_rdv_wait_init(void)
{
    if (rdv_tfd < 0) {
        long t = ksys2(__NR_timerfd_create, 1 /* CLOCK_MONOTONIC */, TFD_CLOEXEC | TFD_NONBLOCK);
        if (t < 0)
            return;
        rdv_tfd = (int)shipc_own_dup((int)t, 1);       /* out of the program's way */
        ksys1(__NR_close, t);
    }
    if (rdv_tfd >= 0 && shipc_fd_hide(rdv_tfd) < 0) {
        ksys1(__NR_close, rdv_tfd);
        rdv_tfd = -1;
    }
}

/* Until the connection has bytes (or EOF, an error: the read that follows
 * sees them), or until `until` (0: no limit; look: just look).  1 when the
 * connection is ready. */
static int conn_ready(uint64_t until, int look)
{
    struct rdv_pollfd p[2] = { { shipc_conn.fd, 1 /* POLLIN */, 0 }, { rdv_tfd, 1, 0 } };
    struct rdv_ts zero = { 0, 0 };
    struct { struct rdv_ts interval, value; } at = { { 0, 0 }, { (long)(until / 1000000000u),
                                                                   (long)(until % 1000000000u) } };
    int n = 1;

    if (until && ksys4(__NR_timerfd_settime, rdv_tfd, TFD_TIMER_ABSTIME, &at, 0) == 0)
        n = 2;
    for (;;) {
        long r = ksys4(__NR_ppoll, p, n, look ? &zero : 0, 0);
        if (r != -EINTR)
            return r < 0 || p[0].revents != 0;
    }
}

/* Returns once the reply to a rendezvous of `bytes` sent at t0 can be read,
 * and learns how long such a transfer takes.  A reply that came while we
 * slept was late by our wakeup: the next one is expected earlier at once.
 * One found by polling says when it came: earlier moves the expectation
 * half way, later a quarter, so we tend to wake early (a little polling)
 * rather than late (a wakeup). */
static void rdv_wait(int wr, uint64_t bytes, uint64_t t0)
{
    uint64_t est = rdv_ps[wr] * bytes / 1000, due = t0 + est, now = shipc_ent_now_ns();
    int late = 0;

    if (rdv_skip) {
        rdv_skip--;
        late = conn_ready(0, 0);
    } else {
        if (rdv_ps[wr] && due > now + 2 * RDV_LEAD_NS && rdv_tfd >= 0)
            late = conn_ready(due - RDV_LEAD_NS, 0);
        uint64_t stop = (due > now ? due : now) + RDV_POLL_NS + est / 4;
        while (!late && !conn_ready(0, 1))
            if (shipc_ent_now_ns() > stop) {
                rdv_skip = 8;
                late = conn_ready(0, 0);
            }
    }
    uint64_t took = shipc_ent_now_ns() - t0;
    if (late && took > RDV_WAKE_NS)
        took -= RDV_WAKE_NS;
    if (!rdv_ps[wr] || (late && took < est))
        est = took;
    else if (took < est)
        est -= (est - took) / 2;
    else
        est += (took - est) / 4;
    rdv_ps[wr] = est * 1000 / (bytes ? bytes : 1);
}

/* A rendezvous: one request naming the program's buffers; ciod moves the
 * bytes itself.  -EOPNOTSUPP or -EFAULT with nothing done: send the bytes
 * instead.  conn_lock held. */
static long rdv_locked(int rfd, int wr, const struct iovec *iov, int cnt, size_t total, int64_t off)
{
    int64_t a[4] = { rfd, (int64_t)total, off < 0 ? 0 : off, 0 };
    uint16_t type = rw_type(wr, off);
    struct iovec o = { segs, (size_t)cnt * sizeof segs[0] };
    uint64_t t0 = shipc_ent_now_ns();
    uint32_t sq;
    long r;

    for (int i = 0; i < cnt; i++)
        segs[i] = (struct lat_rdv_seg){ (uint64_t)(uintptr_t)iov[i].iov_base, iov[i].iov_len };
    if ((r = shipc_send_req(type, LAT_HF_RDV, a, &o, 1, &sq)) < 0)
        return r;
    rdv_wait(wr, total, t0);
    return shipc_recv_reply(type, sq, NULL, 0, NULL, 0);
}

/* Zero-byte transfers are shipped too: errors stay exact.  The program's
 * iovec array is read once, through shipc_get (plan D7). */
long shipc_rw(int rfd, int wr, const struct iovec *uiov, int cnt, int64_t off)
{
    const struct iovec *iov = prog_iov;
    size_t total = 0;
    long r;

    if (cnt < 0 || cnt > UIO_MAXIOV)
        return -EINVAL;
    shipc_conn_take();
    r = cnt ? shipc_get(prog_iov, uiov, (size_t)cnt * sizeof *uiov) : 0;
    if (r == 0)
        r = iov_total(iov, cnt, &total);
    if (r < 0) {
        shipc_conn_drop();
        return r;
    }
    if (wr && off < 0 && rfd > 0 && rfd < 3 && (shipc_conn.async_out & 1 << rfd) && total <= ASYNC_BYTES &&
        (!shipc_conn.rdv_min || total < shipc_conn.rdv_min)) {
        int n = cut(iov, cnt, 0, total);
        r = n < 0 ? n : shipc_async_write(rfd, slice, n, total);
        shipc_conn_drop();
        return r;
    }
    if (shipc_conn.rdv_min && total >= shipc_conn.rdv_min && cnt > 0) {
        r = rdv_locked(rfd, wr, iov, cnt, total, off);
        if (r != -EOPNOTSUPP && r != -EFAULT) {
            shipc_conn_drop();
            return r;
        }
    }
    if (total > LAT_MAX_IO)
        r = pipe_locked(rfd, wr, iov, cnt, total, off);
    else                        /* one message each way */
        r = rw_chunk(rfd, wr, cut(iov, cnt, 0, total), total, off);
    shipc_conn_drop();
    return r;
}
