/*
 * mbox.c - the mailbox (docs/protocol.md section 6.4), and one call on
 * whichever way fits it: mailbox or socket (kept in one file, so the hot
 * path inlines).
 *
 * A small call travels through a page pair shared with ciod instead of the
 * socket: when ciod's thread is polling (srv_spin) no system call is made
 * at all; otherwise one LAT_MBOX_RING message wakes it.  We poll rep_seq
 * about 40 us, then sleep on it (FUTEX_WAIT; ciod wakes us when cli_wait
 * is set), checking every 100 ms that the connection still lives.
 *
 * The program's buffers are copied with memcpy where the entry knows them
 * mapped (shipc_ent_user_ok: cnk's big memory; in Linux mode this thread's
 * stack, the brk heap, the main program's segments), else by the kernel
 * with process_vm_readv/writev on ourselves, where a bad buffer is EFAULT
 * as on the socket, not a crash.
 */
#include <linux/fcntl.h>
#include <linux/futex.h>
#include <linux/memfd.h>
#include <linux/mman.h>

#include "internal.h"

#define MBOX_SPIN_TSC 100000ull         /* TSC ticks of polling: ~40 us at 2.5 GHz */
#define MBOX_SKIP     8                 /* waits that sleep at once after a poll in vain */
#define MSG_DONTWAIT_ 0x40
#define MSG_PEEK_     0x2

static struct lat_mbox *mbox;           /* NULL: every call on the socket */
static volatile char *ours;             /* 1 in this process; a wipe-on-fork page */
static int kernel_copy;                 /* process_vm_readv/writev on ourselves work */
static long self_pid;

/* A child forked without the entry's fork handling (a raw fork or clone
 * system call) has no mailbox mapping (MADV_DONTFORK) and reads 0 from
 * ours (MADV_WIPEONFORK), so it never touches its parent's mailbox. */
static int fork_guard(void *page)
{
    long g = ksys6(__NR_mmap, 0, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

    if (g < 0 && g > -4096)
        return -1;
    if (ksys3(__NR_madvise, g, 4096, MADV_WIPEONFORK) < 0 ||
        ksys3(__NR_madvise, page, LAT_MBOX_SIZE, MADV_DONTFORK) < 0) {
        ksys2(__NR_munmap, g, 4096);
        return -1;
    }
    *(char *)g = 1;
    ours = (char *)g;
    return 0;
}

static int probe_kernel_copy(void)
{
    long probe = 42, got = 0;
    struct iovec l = { &got, sizeof got }, r = { &probe, sizeof probe };

    return ksys6(__NR_process_vm_readv, self_pid, (long)&l, 1, (long)&r, 1, 0) == (long)sizeof got && got == 42;
}

/* With LAT_DP_SHM granted and the entry willing (cfg->mailbox): a sealed
 * memfd, mapped and shared, then closed (ciod keeps its own mapping).  Any
 * failure leaves the socket. */
void shipc_mbox_init(const struct shipc_cfg *cfg)
{
    mbox = NULL;
    if (!(shipc_conn.dp_flags & LAT_DP_SHM) || !cfg->mailbox)
        return;
    long fd = ksys2(__NR_memfd_create, cfg->mailbox_name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0)
        return;
    long r = ksys2(__NR_ftruncate, fd, LAT_MBOX_SIZE);
    if (r >= 0)
        r = ksys3(__NR_fcntl, fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
    if (r >= 0)
        r = ksys6(__NR_mmap, 0, LAT_MBOX_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (r >= 0 && fork_guard((void *)r) < 0) {
        ksys2(__NR_munmap, r, LAT_MBOX_SIZE);
        r = -ENOMEM;
    }
    if (r >= 0) {
        int64_t a[4] = { fd, 0, 0, 0 };
        self_pid = ksys0(__NR_getpid);
        kernel_copy = probe_kernel_copy();
        if (shipc_call_msg(LAT_MBOX_SHARE, a, NULL, 0, NULL, 0, NULL) == 0)
            mbox = (struct lat_mbox *)r;
        else
            ksys2(__NR_munmap, r, LAT_MBOX_SIZE);
    }
    ksys1(__NR_close, fd);
}

/* In a fork()ed child: the page is the parent's conversation. */
void shipc_mbox_forget(void)
{
    mbox = NULL;
}

/* The total of the vectors, or max + 1 beyond max. */
static size_t iov_sum(const struct iovec *v, int n, size_t max)
{
    size_t t = 0;

    for (int i = 0; i < n; i++) {
        if (v[i].iov_len > max - t)
            return max + 1;
        t += v[i].iov_len;
    }
    return t;
}

/* The first len bytes of v (all: len SIZE_MAX) lie where the entry knows
 * memory mapped, readable (or writable with wr). */
static int all_known(const struct iovec *v, int n, size_t len, int wr)
{
    for (int i = 0; i < n && len > 0; i++) {
        size_t l = SHIPC_MIN(v[i].iov_len, len);
        if (l && !shipc_ent_user_ok(v[i].iov_base, l, wr))
            return 0;
        len -= l;
    }
    return 1;
}

/* The program's bytes into the mailbox: 0 or -EFAULT. */
static int copy_in(void *dst, const struct iovec *v, int n, size_t total)
{
    if (!all_known(v, n, total, 0)) {
        struct iovec d = { dst, total };
        return ksys6(__NR_process_vm_readv, self_pid, (long)&d, 1, (long)v, n, 0) == (long)total ? 0 : -EFAULT;
    }
    char *p = dst;
    for (int i = 0; i < n; i++) {
        memcpy(p, v[i].iov_base, v[i].iov_len);
        p += v[i].iov_len;
    }
    return 0;
}

/* The reply's bytes to the program: 0 or -EFAULT. */
static int copy_out(const struct iovec *v, int n, const void *src, size_t len)
{
    if (!all_known(v, n, len, 1)) {
        struct iovec s = { (void *)src, len };
        return ksys6(__NR_process_vm_writev, self_pid, (long)&s, 1, (long)v, n, 0) == (long)len ? 0 : -EFAULT;
    }
    const char *p = src;
    for (int i = 0; i < n && len > 0; i++) {
        size_t l = SHIPC_MIN(v[i].iov_len, len);
        memcpy(v[i].iov_base, p, l);
        p += l;
        len -= l;
    }
    return 0;
}

/* A plain request (no header flags) of a call the protocol lets travel in
 * the mailbox (lat_mbox_ok), whose request and largest reply fit the
 * slots, with buffers we can copy. */
static int mbox_fits(uint16_t type, const struct iovec *out, int nout, const struct iovec *in, int nin)
{
    const size_t omax = LAT_MBOX_REQ_MAX - sizeof(struct lat_sysreq);
    const size_t imax = LAT_MBOX_REP_MAX - sizeof(struct lat_sysret);

    return mbox && *ours && !shipc_conn.dead && !shipc_conn.forked && lat_mbox_ok(type, 0) &&
           nout >= 0 && nout <= LAT_MBOX_MAXIOV && nin >= 0 && nin <= LAT_MBOX_MAXIOV &&
           iov_sum(out, nout, omax) <= omax && iov_sum(in, nin, imax) <= imax &&
           (kernel_copy || (all_known(out, nout, (size_t)-1, 0) && all_known(in, nin, (size_t)-1, 1)));
}

/* Sleeps until rep_seq is sq.  0 or -EIO (the connection is gone). */
static long mbox_sleep(uint32_t sq)
{
    long r = 0;

    for (;;) {
        __atomic_store_n(&mbox->cli_wait, 1, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        uint32_t v = __atomic_load_n(&mbox->rep_seq, __ATOMIC_ACQUIRE);
        if (v == sq)
            break;
        struct { long s, ns; } ts = { 0, 100000000 };
        char b;
        if (ksys6(__NR_futex, (long)&mbox->rep_seq, FUTEX_WAIT, v, (long)&ts, 0, 0) == -ETIMEDOUT &&
            ksys6(__NR_recvfrom, shipc_conn.fd, (long)&b, 1, MSG_DONTWAIT_ | MSG_PEEK_, 0, 0) == 0) {
            r = shipc_broken("mailbox: end of file", -ECONNRESET);
            break;
        }
    }
    __atomic_store_n(&mbox->cli_wait, 0, __ATOMIC_RELAXED);
    return r;
}

/* Until rep_seq is sq: polled, then asleep.  0 or -EIO.  A poll that
 * found nothing makes the next few waits sleep at once: when the nodes
 * share the host's cores, ciod is not running while we poll, and polling
 * only keeps it (and the other ranks) off the core; as ciod's dp_spin. */
static long mbox_wait(uint32_t sq)
{
    static unsigned skip;               /* conn_lock held */
    uint64_t end = __builtin_ia32_rdtsc() + MBOX_SPIN_TSC;

    if (skip) {
        skip--;
        return mbox_sleep(sq);
    }
    while (__atomic_load_n(&mbox->rep_seq, __ATOMIC_ACQUIRE) != sq) {
        if (__builtin_ia32_rdtsc() > end) {
            skip = MBOX_SKIP;
            return mbox_sleep(sq);
        }
        __builtin_ia32_pause();
    }
    return 0;
}

/* One call through the mailbox; conn_lock held.  ret >= 0 or -errno;
 * -EFAULT for a buffer the kernel would refuse (a write's before anything
 * is sent, a read's after the call was done). */
static long mbox_call(uint16_t type, const int64_t a[4], const struct iovec *out, int nout,
                      const struct iovec *in, int nin, size_t *got)
{
    struct lat_sysreq req = { { a[0], a[1], a[2], a[3] } };
    uint8_t *body = mbox->req + sizeof(struct lat_hdr);
    size_t len = sizeof req + iov_sum(out, nout, (size_t)-1);
    long r;

    if (copy_in(body + sizeof req, out, nout, len - sizeof req) < 0)
        return -EFAULT;
    memcpy(body, &req, sizeof req);
    uint32_t sq = shipc_next_seq();
    struct lat_hdr rq = { .magic = LAT_MAGIC, .version = LAT_VERSION, .type = type, .len = (uint32_t)len,
                          .seq = sq };
    memcpy(mbox->req, &rq, sizeof rq);
    __atomic_store_n(&mbox->req_seq, sq, __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (!__atomic_load_n(&mbox->srv_spin, __ATOMIC_RELAXED)) {
        struct lat_hdr ring = { .magic = LAT_MAGIC, .version = LAT_VERSION, .type = LAT_MBOX_RING,
                                .seq = sq };    /* ciod checks seq */
        struct iovec v = { &ring, sizeof ring };
        size_t n;
        if ((r = shipc_send_all(&v, 1, &n)) < 0)
            return shipc_broken("send", r);
    }
    if ((r = mbox_wait(sq)) < 0)
        return r;

    const uint8_t *rep = mbox->rep + sizeof(struct lat_hdr);
    struct lat_hdr h;
    struct lat_sysret rs;
    memcpy(&h, mbox->rep, sizeof h);
    memcpy(&rs, rep, sizeof rs);
    int is_error = (h.type & ~LAT_REPLY) == LAT_ERROR;
    if (!shipc_reply_ok(&h, type, sq, is_error) || h.len > LAT_MBOX_REP_MAX)
        return shipc_broken("malformed mailbox reply", -EPROTO);
    if (is_error)
        return -(rs.err > 0 ? rs.err : ENOSYS);
    size_t dlen = h.len - sizeof rs;
    if (dlen > iov_sum(in, nin, (size_t)-1))
        return -EIO;
    if (copy_out(in, nin, rep + sizeof rs, dlen) < 0)
        return -EFAULT;
    if (got)
        *got = dlen;
    if (rs.ret < 0)
        return -(rs.err > 0 ? rs.err : EIO);
    return (long)rs.ret;
}

/* One request and its reply; conn_lock held.  ret >= 0 or -errno. */
long shipc_call_locked(uint16_t type, const int64_t a[4], const struct iovec *out, int nout,
                       const struct iovec *in, int nin, size_t *got)
{
    uint32_t sq;
    long r;

    if (got)
        *got = 0;
    shipc_async_drain();                /* the unawaited writes first: served before this one */
    if (mbox_fits(type, out, nout, in, nin))
        return mbox_call(type, a, out, nout, in, nin, got);
    if ((r = shipc_send_req(type, 0, a, out, nout, &sq)) < 0)
        return r;
    return shipc_recv_reply(type, sq, in, nin, got, 1);
}

long shipc_call_msg(uint16_t type, const int64_t a[4], const struct iovec *out, int nout,
                    const struct iovec *in, int nin, size_t *got)
{
    shipc_conn_take();
    long r = shipc_call_locked(type, a, out, nout, in, nin, got);
    shipc_conn_drop();
    return r;
}
