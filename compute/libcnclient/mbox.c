/*
 * mbox.c - the mailbox (docs/protocol.md section 6.4): a small file call
 * travels through a page pair shared with our ciod thread instead of the
 * socket, as under cnk.  When ciod is polling (srv_spin) no system call is
 * made at all; otherwise one LAT_MBOX_RING on the socket wakes it.  We poll
 * rep_seq about 40 us, then sleep on it (FUTEX_WAIT; ciod wakes us when
 * cli_wait is set), checking every 100 ms that the connection still lives.
 *
 * Only the process that said hello shares one (ciod opens our memfd through
 * /proc/<that pid>/fd: LATTICE_IO_PID); a fork()ed child has none, an
 * exec()'d program shares a new one.  Calls hold conn.c's lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "client.h"

#define SPIN_NS  40000L                 /* polling before sleeping, as cnk */
#define SKIP     8                      /* waits that sleep at once after a poll in vain */
#define LIVE_NS  100000000L             /* a sleep's slice: then the socket is checked */

static struct lat_mbox *mbox;           /* NULL: every call on the socket */
static volatile char *ours;             /* 1 in this process; a wipe-on-fork page */
static int conn = -1;

/* A child forked without the atfork handlers (a raw fork or clone system
 * call) has no mailbox mapping (MADV_DONTFORK) and reads 0 from ours
 * (MADV_WIPEONFORK), so it never touches its parent's mailbox. */
static int fork_guard(void *page)
{
    char *g = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g == MAP_FAILED || madvise(g, 4096, MADV_WIPEONFORK) < 0 || madvise(page, LAT_MBOX_SIZE, MADV_DONTFORK) < 0) {
        if (g != MAP_FAILED)
            munmap(g, 4096);
        return -1;
    }
    *g = 1;
    ours = g;
    return 0;
}

/* The process cnode started (the pid of the hello), with LAT_DP_SHM granted
 * and not LATTICE_MAILBOX=0: a sealed memfd, mapped and shared, then closed
 * (ciod keeps its own mapping).  Any failure leaves the socket. */
void lat_mbox_init(int fd, unsigned dp_flags)
{
    const char *off = getenv("LATTICE_MAILBOX"), *pid = getenv("LATTICE_IO_PID");

    if (!(dp_flags & LAT_DP_SHM) || (off && !strcmp(off, "0")) || !pid || atol(pid) != (long)getpid())
        return;
    int m = (int)syscall(SYS_memfd_create, "libcnclient-mailbox", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (m < 0)
        return;
    void *p = MAP_FAILED;
    if (syscall(SYS_ftruncate, m, (long)LAT_MBOX_SIZE) == 0 &&
        syscall(SYS_fcntl, m, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0)
        p = mmap(NULL, LAT_MBOX_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, m, 0);
    if (p != MAP_FAILED && fork_guard(p) < 0) {
        munmap(p, LAT_MBOX_SIZE);
        p = MAP_FAILED;
    }
    if (p != MAP_FAILED) {
        lat_usercopy_init();
        conn = fd;
        if (lat_call(LAT_MBOX_SHARE, m, 0, 0, 0, NULL, 0, NULL, 0, NULL) == 0)
            mbox = p;
        else
            munmap(p, LAT_MBOX_SIZE);
    }
    syscall(SYS_close, m);
}

/* In a fork()ed child: the page is the parent's conversation (and not
 * mapped here). */
void lat_mbox_forget(void)
{
    mbox = NULL;
}

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

/* A plain request (no header flags) of a call the protocol lets travel in
 * the mailbox (lat_mbox_ok), whose request and largest reply fit the slots,
 * with buffers we can copy. */
int lat_mbox_takes(uint16_t type, const struct iovec *out, int nout, const struct iovec *in, int nin)
{
    const size_t omax = LAT_MBOX_REQ_MAX - sizeof(struct lat_sysreq);
    const size_t imax = LAT_MBOX_REP_MAX - sizeof(struct lat_sysret);

    return mbox && *ours && lat_mbox_ok(type, 0) && nout >= 0 && nout <= LAT_MBOX_MAXIOV &&
           nin >= 0 && nin <= LAT_MBOX_MAXIOV && iov_sum(out, nout, omax) <= omax &&
           iov_sum(in, nin, imax) <= imax && lat_user_copyable(out, nout, 0) && lat_user_copyable(in, nin, 1);
}

static long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

/* Sleeps until rep_seq is sq.  0, or -EIO when the connection is gone. */
static int64_t mbox_sleep(uint32_t sq)
{
    int64_t r = 0;

    for (;;) {
        __atomic_store_n(&mbox->cli_wait, 1, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        uint32_t v = __atomic_load_n(&mbox->rep_seq, __ATOMIC_ACQUIRE);
        if (v == sq)
            break;
        struct timespec ts = { 0, LIVE_NS };
        char b;
        if (syscall(SYS_futex, &mbox->rep_seq, FUTEX_WAIT, v, &ts, NULL, 0) < 0 && errno == ETIMEDOUT &&
            syscall(SYS_recvfrom, conn, &b, 1, MSG_DONTWAIT | MSG_PEEK, NULL, NULL) == 0) {
            r = lat_conn_broken("mailbox: end of file", ECONNRESET);
            break;
        }
    }
    __atomic_store_n(&mbox->cli_wait, 0, __ATOMIC_RELAXED);
    return r;
}

/* Until rep_seq is sq: polled, then asleep.  A poll that found nothing
 * makes the next few waits sleep at once (as cnk: nodes sharing cores). */
static int64_t mbox_wait(uint32_t sq)
{
    static unsigned skip;               /* the connection's lock held */
    long end = now_ns() + SPIN_NS;

    if (skip) {
        skip--;
        return mbox_sleep(sq);
    }
    for (unsigned i = 1; __atomic_load_n(&mbox->rep_seq, __ATOMIC_ACQUIRE) != sq; i++) {
        if (i % 64 == 0 && now_ns() > end) {
            skip = SKIP;
            return mbox_sleep(sq);
        }
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
    return 0;
}

/* The ring carries the seq of the call it announces: ciod checks every
 * message on the socket has a seq after the last one. */
static int ring(uint32_t sq)
{
    struct lat_hdr h = { .magic = LAT_MAGIC, .version = LAT_VERSION, .type = LAT_MBOX_RING, .seq = sq };
    size_t done = 0;

    while (done < sizeof h) {
        long n = syscall(SYS_sendto, conn, (char *)&h + done, sizeof h - done, MSG_NOSIGNAL, NULL, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        done += (size_t)n;
    }
    return 0;
}

/* One call through the mailbox, seq sq; conn.c's lock held.  ret >= 0 or
 * -errno; -EFAULT for a buffer the kernel would refuse (a write's before
 * anything is sent, a read's after the call was done). */
int64_t lat_mbox_call_locked(uint32_t sq, uint16_t type, const int64_t a[4], const struct iovec *out, int nout,
                             const struct iovec *in, int nin, size_t *got)
{
    struct lat_sysreq req = { { a[0], a[1], a[2], a[3] } };
    uint8_t *body = mbox->req + sizeof(struct lat_hdr);
    size_t olen = iov_sum(out, nout, SIZE_MAX);

    if (lat_user_read(body + sizeof req, out, nout, olen) < 0)
        return -EFAULT;
    memcpy(body, &req, sizeof req);
    struct lat_hdr h = { .magic = LAT_MAGIC, .version = LAT_VERSION, .type = type,
                         .len = (uint32_t)(sizeof req + olen), .seq = sq };
    memcpy(mbox->req, &h, sizeof h);
    __atomic_store_n(&mbox->req_seq, sq, __ATOMIC_RELEASE);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (!__atomic_load_n(&mbox->srv_spin, __ATOMIC_RELAXED) && ring(sq) < 0)
        return lat_conn_broken("send", errno);
    int64_t r = mbox_wait(sq);
    if (r < 0)
        return r;

    const uint8_t *rep = mbox->rep + sizeof(struct lat_hdr);
    struct lat_sysret rs;
    memcpy(&h, mbox->rep, sizeof h);
    memcpy(&rs, rep, sizeof rs);
    int is_error = (h.type & ~LAT_REPLY) == LAT_ERROR;
    if (h.magic != LAT_MAGIC || h.version != LAT_VERSION || h.seq != sq || h.len < sizeof rs ||
        h.len > LAT_MBOX_REP_MAX || (!is_error && h.type != (type | LAT_REPLY)))
        return lat_conn_broken("malformed mailbox reply", EPROTO);
    if (is_error)
        return -(rs.err > 0 ? rs.err : ENOSYS);
    size_t dlen = h.len - sizeof rs;
    if (dlen > iov_sum(in, nin, SIZE_MAX))
        return -EIO;
    if (lat_user_write(in, nin, rep + sizeof rs, dlen) < 0)
        return -EFAULT;
    if (got)
        *got = dlen;
    if (rs.ret < 0)
        return -(rs.err > 0 ? rs.err : EIO);
    return rs.ret;
}
