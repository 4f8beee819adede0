/*
 * conn.c - the PROC connection to ciod (docs/protocol.md section 6): start,
 * one request and its reply (seq checked), data straight between the
 * program's buffers and the socket, the broken state.
 *
 * Every call holds conn_lock from its request to its reply (whole transfers
 * and pipelined series too, bulk.c), so replies come in the order of their
 * requests.  A fault in a program buffer is EFAULT, never a lost
 * connection: a request that faults before any byte went is not sent, and
 * reply bytes that land in a bad buffer are drained so the stream stays in
 * step.  A call in flight is never abandoned (EINTR is retried).
 */
#include <linux/fcntl.h>
#include <linux/stat.h>

#include "internal.h"

#define MSG_NOSIGNAL_ 0x4000
#define MSG_DONTWAIT_ 0x40

struct shipc_conn shipc_conn = { .fd = -1 };
struct shipc_lock shipc_conn_lock_;
static uint32_t own_seq;
static struct shipc_shared *shared;    /* Linux mode: the page of the processes on the connection */
static long self_pid;                  /* the holder's name in shared->owner */
/* under conn_lock: */
static struct iovec sendv[UIO_MAXIOV + 2];
static char sink[4096];

/* "eager_max,rdv_min,flags" (LATTICE_IO_DP, set by cnode from the hello ack) */
static void datapath_init(const char *s)
{
    uint64_t v[3] = { 0, 0, 0 };
    int i = 0;

    shipc_conn.rdv_min = shipc_conn.dp_flags = 0;
    for (; s && *s && i < 3; s++) {
        if (*s == ',') {
            i++;
            continue;
        }
        if (*s < '0' || *s > '9')
            return;
        v[i] = v[i] * 10 + (uint64_t)(*s - '0');
    }
    shipc_conn.rdv_min = (v[2] & LAT_DP_VM) && i == 2 ? v[1] : 0;
    shipc_conn.dp_flags = shipc_conn.rdv_min ? v[2] : 0;
}

/* Writes of the job's output sent without waiting for their reply, as into
 * a pipe's buffer (docs/architecture.md "The output path"): at most
 * ASYNC_MAX unanswered; their replies are taken before any other request
 * goes, so nothing overtakes them; an error comes on a later write. */
#define ASYNC_MAX 32
static uint32_t async_sq[ASYNC_MAX];
static unsigned async_n;
static long async_err;
static int async_sending;

void shipc_async_drain(void)
{
    for (unsigned i = 0; i < async_n; i++) {
        long r = shipc_recv_reply(LAT_SYS_WRITE, async_sq[i], NULL, 0, NULL, 0);
        if (r < 0 && !async_err)
            async_err = r;
    }
    async_n = 0;
}

long shipc_async_write(int rfd, const struct iovec *out, int nout, size_t total)
{
    int64_t a[4] = { rfd, 0, 0, 0 };
    uint32_t sq;
    long r;

    if (async_n == ASYNC_MAX)
        shipc_async_drain();
    if (async_err) {
        r = async_err;
        async_err = 0;
        return r;
    }
    async_sending = 1;
    r = shipc_send_req(LAT_SYS_WRITE, 0, a, out, nout, &sq);
    async_sending = 0;
    if (r < 0)
        return r;
    async_sq[async_n++] = sq;
    return (long)total;
}

int shipc_init(const struct shipc_cfg *cfg)
{
    struct { uint64_t dev, ino, nlink; uint32_t mode; uint32_t rest[31]; } st;   /* struct stat's head */
    long r = ksys2(__NR_fstat, cfg->conn, &st);

    if (r < 0)
        return (int)r;
    if ((st.mode & S_IFMT) != S_IFSOCK)
        return -ENOTSOCK;
    /* calls wait for their reply: the connection must block */
    long fl = ksys2(__NR_fcntl, cfg->conn, F_GETFL);
    if (fl >= 0 && (fl & O_NONBLOCK))
        ksys3(__NR_fcntl, cfg->conn, F_SETFL, fl & ~O_NONBLOCK);
    shipc_conn.fd = cfg->conn;
    shipc_conn.dead = shipc_conn.forked = 0;
    shared = cfg->shared;
    self_pid = ksys0(__NR_getpid);
    shipc_conn.seq = shared ? &shared->seq : cfg->seq ? cfg->seq : &own_seq;
    datapath_init(cfg->dp);
    if (shipc_conn.rdv_min)
        shipc_rdv_wait_init();
    shipc_mbox_init(cfg);
    /* on the same host only (the mailbox's LAT_DP_SHM): ciod then sees what
     * a process sent before it died, with no relay in between */
    shipc_conn.async_out = cfg->async_out && !shared && (shipc_conn.dp_flags & LAT_DP_SHM) ? 1 << 1 | 1 << 2 : 0;
    return 0;
}

uint64_t shipc_rdv_min(void)
{
    return shipc_conn.rdv_min;
}

void shipc_conn_lock(void)
{
    shipc_lock_take(&shipc_conn_lock_);
}

void shipc_conn_unlock(void)
{
    shipc_lock_drop(&shipc_conn_lock_);
}

/* A fork()ed child takes turns with its parent through the shared page;
 * the mailbox and ciod's reach into memory are the hello process's. */
void shipc_forked(void)
{
    shipc_conn.forked = 1;
    shipc_conn.rdv_min = 0;
    shipc_conn.dp_flags = 0;
    self_pid = ksys0(__NR_getpid);
    shipc_mbox_forget();
}

/* ---- the lock the processes on one connection share ----
 *
 * A futex word in the shared page (not FUTEX_PRIVATE: other processes wait
 * on it too), taken after conn_lock, so only one thread of a process ever
 * waits on it.  A holder that dies (a signal, _exit from a handler) would
 * leave everyone waiting: a waiter checks every 100 ms whether the holder
 * is alive, and when it is not, the stream is out of step (a request half
 * sent or a reply unread): the connection is marked dead for every
 * process, which then says so once and fails calls with EIO, never hangs. */
#define XLOCK_CHECK_NS 100000000L

/* pid ended (gone, or a zombie nobody reaped yet)?  /proc is node-local. */
static int pid_gone(long pid)
{
    char path[32] = "/proc/", buf[512];
    int i = 6;
    char num[16];
    int n = 0;

    if (pid <= 0 || ksys2(__NR_kill, pid, 0) == -ESRCH)
        return pid > 0;
    for (long v = pid; v && n < (int)sizeof num; v /= 10)
        num[n++] = (char)('0' + v % 10);
    while (n)
        path[i++] = num[--n];
    for (const char *t = "/stat"; *t; t++)
        path[i++] = *t;
    path[i] = 0;
    long fd = ksys4(__NR_openat, AT_FDCWD, path, O_RDONLY | O_CLOEXEC, 0);
    if (fd < 0)
        return fd == -ENOENT;
    long got = ksys3(__NR_read, fd, buf, sizeof buf - 1);
    ksys1(__NR_close, fd);
    if (got <= 0)
        return 0;
    buf[got] = 0;
    /* "pid (comm) S ...": the state follows the last ')' */
    char *rp = 0;
    for (char *p = buf; *p; p++)
        if (*p == ')')
            rp = p;
    return rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
}

static void xlock_take(void)
{
    uint32_t c = 0;

    if (!__atomic_compare_exchange_n(&shared->lock, &c, 1, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
        if (c != 2)
            c = __atomic_exchange_n(&shared->lock, 2, __ATOMIC_ACQUIRE);
        while (c) {
            struct { long s, ns; } ts = { 0, XLOCK_CHECK_NS };
            if (ksys6(__NR_futex, (long)&shared->lock, FUTEX_WAIT, 2, (long)&ts, 0, 0) == -ETIMEDOUT) {
                long o = __atomic_load_n(&shared->owner, __ATOMIC_ACQUIRE);
                if (o && o != self_pid && pid_gone(o) && __atomic_load_n(&shared->owner, __ATOMIC_ACQUIRE) == o) {
                    /* its call never finished: take the lock over, dead */
                    __atomic_store_n(&shared->dead, 1, __ATOMIC_RELEASE);
                    __atomic_store_n(&shared->lock, 2, __ATOMIC_RELEASE);
                    break;
                }
            }
            c = __atomic_exchange_n(&shared->lock, 2, __ATOMIC_ACQUIRE);
        }
    }
    __atomic_store_n(&shared->owner, (int32_t)self_pid, __ATOMIC_RELEASE);
    if (__atomic_load_n(&shared->dead, __ATOMIC_ACQUIRE) && !shipc_conn.dead)
        shipc_broken("another process on it died during its call", -EPIPE);
}

static void xlock_drop(void)
{
    __atomic_store_n(&shared->owner, 0, __ATOMIC_RELEASE);
    if (__atomic_exchange_n(&shared->lock, 0, __ATOMIC_RELEASE) == 2)
        ksys3(__NR_futex, (long)&shared->lock, FUTEX_WAKE, 1);
}

void shipc_conn_take(void)
{
    shipc_lock_take(&shipc_conn_lock_);
    if (shared)
        xlock_take();
}

void shipc_conn_drop(void)
{
    if (shared)
        xlock_drop();
    shipc_lock_drop(&shipc_conn_lock_);
}

uint32_t shipc_next_seq(void)
{
    uint32_t s = __atomic_add_fetch(shipc_conn.seq, 1, __ATOMIC_SEQ_CST);
    return s ? s : __atomic_add_fetch(shipc_conn.seq, 1, __ATOMIC_SEQ_CST);
}

/* Once broken, the stream is out of step for good: the entry says so once. */
long shipc_broken(const char *why, long err)
{
    if (!shipc_conn.dead)
        shipc_ent_broken(why, (int)-err);
    shipc_conn.dead = 1;
    if (shared)         /* the other processes on it are out of step too */
        __atomic_store_n(&shared->dead, 1, __ATOMIC_RELEASE);
    return -EIO;
}

/* *sent counts bytes on the wire, so a fault before any is recoverable. */
long shipc_send_all(struct iovec *v, int cnt, size_t *sent)
{
    *sent = 0;
    while (cnt > 0) {
        struct kmsghdr mh = { .iov = v, .iovlen = (size_t)SHIPC_MIN(cnt, UIO_MAXIOV) };
        int before = cnt;
        long n = ksys3(__NR_sendmsg, shipc_conn.fd, &mh, MSG_NOSIGNAL_);
        if (n == -EINTR)
            continue;           /* a request in flight is never abandoned */
        if (n < 0)
            return n;
        *sent += (size_t)n;
        while (cnt > 0 && (size_t)n >= v->iov_len) {
            n -= (long)v->iov_len;
            v++;
            cnt--;
        }
        if (cnt > 0) {
            v->iov_base = (char *)v->iov_base + n;
            v->iov_len -= (size_t)n;
            if (n == 0 && cnt == before)
                return -EPIPE;  /* no progress on a blocking stream */
        }
    }
    return 0;
}

static long recv_all(void *buf, size_t len, size_t *done)
{
    *done = 0;
    while (*done < len) {
        long n = ksys3(__NR_read, shipc_conn.fd, (char *)buf + *done, len - *done);
        if (n == -EINTR)
            continue;
        if (n == 0)
            return -ECONNRESET;
        if (n < 0)
            return n;
        *done += (size_t)n;
    }
    return 0;
}

static long discard(size_t len)
{
    size_t got;

    while (len > 0) {
        size_t n = SHIPC_MIN(len, sizeof sink);
        long r = recv_all(sink, n, &got);
        if (r < 0)
            return r;
        len -= n;
    }
    return 0;
}

/* len reply bytes into the program's vectors.  0, -EFAULT (a bad buffer,
 * the bytes were drained) or a transport error. */
static long recv_data(const struct iovec *in, int nin, size_t len)
{
    long fault = 0;

    for (int i = 0; i < nin && len > 0; i++) {
        size_t want = SHIPC_MIN(in[i].iov_len, len), got;
        long r = recv_all(in[i].iov_base, want, &got);
        if (r == -EFAULT) {
            fault = r;
            r = discard(want - got);
        }
        if (r < 0)
            return r;
        len -= want;
    }
    return fault;
}

int shipc_reply_ok(const struct lat_hdr *rh, uint16_t type, uint32_t want_seq, int is_error)
{
    return rh->magic == LAT_MAGIC && rh->version == LAT_VERSION && rh->len <= LAT_MAX_PAYLOAD &&
           rh->len >= sizeof(struct lat_sysret) && rh->seq == want_seq &&
           (is_error || rh->type == (type | LAT_REPLY));
}

/* A small call's reply comes within microseconds: polling for it a little
 * saves the wakeup of a blocked read, which costs more.  The polls are
 * non-blocking reads of the reply's head, so the one that finds it has
 * already read it.  A poll that found nothing makes the next few calls
 * block at once.  Returns the bytes of head read (0: read it all). */
static size_t spin_for_reply(void *head, size_t len)
{
    static unsigned skip;

    if (skip) {
        skip--;
        return 0;
    }
    for (int i = 0; i < 64; i++) {
        long n = ksys6(__NR_recvfrom, shipc_conn.fd, (long)head, (long)len, MSG_DONTWAIT_, 0, 0);
        if (n > 0)
            return (size_t)n;
        if (n != -EAGAIN)
            return 0;                   /* EOF, EINTR...: the blocking read sees it again */
    }
    skip = 8;
    return 0;
}

/* Sends one request, flags its LAT_HF_* transport; conn_lock held.  *sq:
 * its seq.  0, -EFAULT (a bad program buffer, nothing on the wire) or -EIO
 * (the connection broke). */
long shipc_send_req(uint16_t type, uint8_t flags, const int64_t a[4], const struct iovec *out, int nout,
                    uint32_t *sq)
{
    struct lat_sysreq req = { { a[0], a[1], a[2], a[3] } };
    struct lat_hdr h = { .magic = LAT_MAGIC, .version = LAT_VERSION, .flags = flags, .type = type };
    size_t outlen = 0, n;
    long r;

    if (shipc_conn.dead || shipc_conn.fd < 0)
        return -EIO;
    if (async_n && !async_sending)
        shipc_async_drain();
    for (int i = 0; i < nout; i++)
        outlen += out[i].iov_len;
    if (nout < 0 || nout > UIO_MAXIOV || outlen > LAT_MAX_PAYLOAD - sizeof req)
        return -EINVAL;
    h.seq = *sq = shipc_next_seq();
    h.len = (uint32_t)(sizeof req + outlen);
    sendv[0] = (struct iovec){ &h, sizeof h };
    sendv[1] = (struct iovec){ &req, sizeof req };
    for (int i = 0; i < nout; i++)
        sendv[2 + i] = out[i];
    r = shipc_send_all(sendv, nout + 2, &n);
    if (r == -EFAULT && n == 0)
        return r;
    return r < 0 ? shipc_broken("send", r) : 0;
}

/* The reply to request sq, data into in; conn_lock held.  spin: poll for
 * it first (a call that waits for its reply at once).  ret >= 0 or -errno. */
long shipc_recv_reply(uint16_t type, uint32_t sq, const struct iovec *in, int nin, size_t *got, int spin)
{
    struct { struct lat_hdr h; struct lat_sysret rs; } head;
    _Static_assert(sizeof head == sizeof(struct lat_hdr) + sizeof(struct lat_sysret), "no padding");
    size_t cap = 0, n, pre = spin ? spin_for_reply(&head, sizeof head) : 0;
    long r;

    if (got)
        *got = 0;
    for (int i = 0; i < nin; i++)
        cap += in[i].iov_len;
    /* every reply starts with a header and a lat_sysret: one read for both */
    if ((r = recv_all((char *)&head + pre, sizeof head - pre, &n)) < 0)
        return shipc_broken("receive", r);
    int is_error = (head.h.type & ~LAT_REPLY) == LAT_ERROR;
    if (!shipc_reply_ok(&head.h, type, sq, is_error))
        return shipc_broken("malformed reply", -EPROTO);
    size_t dlen = head.h.len - sizeof head.rs;
    if (is_error || dlen > cap) {
        /* ciod could not decode it, or sent more than was asked for */
        if ((r = discard(dlen)) < 0)
            return shipc_broken("receive", r);
        return is_error ? -(head.rs.err > 0 ? head.rs.err : ENOSYS) : -EIO;
    }
    r = recv_data(in, nin, dlen);
    if (r < 0 && r != -EFAULT)
        return shipc_broken("receive", r);
    if (got)
        *got = dlen;
    if (head.rs.ret < 0)
        return -(head.rs.err > 0 ? head.rs.err : EIO);
    return r < 0 ? r : (long)head.rs.ret;
}

/* A region of the process's memory shared with ciod (LAT_DP_SHARE,
 * docs/protocol.md section 6.2: cnk's big memory): a rendezvous inside it
 * is one file system call on ciod's mapping of it, one copy.  len 0 drops
 * the share.  0 or -errno: then rendezvous goes through ciod's window. */
int shipc_share(uintptr_t base, size_t len, int memfd)
{
    int64_t a[4] = { (int64_t)base, (int64_t)len, memfd, 0 };

    if (!(shipc_conn.dp_flags & LAT_DP_SHM))
        return -EOPNOTSUPP;
    return (int)shipc_call_msg(LAT_DP_SHARE, a, NULL, 0, NULL, 0, NULL);
}
