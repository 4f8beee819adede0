/*
 * conn.c - the function-shipping connection (role PROC) and its RPC.
 *
 * cnode opened and authenticated the connection before exec and left its
 * number in LATTICE_IO_FD.  One mutex serialises whole calls, and whole
 * pipelined series of chunks (file.c), so the replies come in the order of
 * their requests (thread safety); the seq number is checked on every reply.  Socket I/O uses raw system calls: our own read/write are
 * interposed.  A small file call may go through the mailbox instead
 * (mbox.c), under the same lock and seq numbers.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "client.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int active;              /* LATTICE_IO_FD was valid */
static int conn = -1;
static int dead;                /* transport failed: every call is EIO */
static int forked;              /* we are a fork()ed child: the socket is the parent's */
/* The seq of the last message sent on the connection (ciod refuses one not
 * after it): a word of the page LATTICE_IO_SEQ_FD, which cnode gives the
 * process, so that a program it execs, a child that execs, or the child of
 * a raw fork, each with its own copy of this library on the same
 * connection, never reuses a number.  Without it, our own word. */
static uint32_t own_seq;
static uint32_t *seqp = &own_seq;
static int seq_fd = -1;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void say(const char *msg)
{
    /* local fd 2 is cnode's stderr pipe: it reaches the job's stderr */
    (void)!syscall(SYS_write, 2, msg, strlen(msg));
}

void *lat_real_cached(void **slot, const char *name)
{
    void *p = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (!p) {
        p = dlsym(RTLD_NEXT, name);
        if (!p) {
            say("libcnclient: no next definition of ");
            say(name);
            say("\n");
            abort();
        }
        __atomic_store_n(slot, p, __ATOMIC_RELEASE);
    }
    return p;
}

/* A fork()ed child must not talk on its parent's connection: the replies
 * would interleave.  It loses access to remote files (EIO); its closes of
 * inherited remote descriptors only release the local placeholders. */
static void atfork_prepare(void) { pthread_mutex_lock(&lock); }
static void atfork_parent(void) { pthread_mutex_unlock(&lock); }
static void atfork_child(void)
{
    pthread_mutex_unlock(&lock);
    forked = 1;
    lat_mbox_forget();
}

/* The data path ciod agreed, LATTICE_IO_DP=eager_max,rdv_min,flags (set by
 * cnode from the hello ack): transfers from rdv_min bytes are a rendezvous;
 * LAT_DP_SHM allows a mailbox. */
static uint64_t rdv_min;
static unsigned dp_flags;

static void datapath_init(void)
{
    const char *s = getenv("LATTICE_IO_DP");
    unsigned long eager, rdv, flags;
    if (s && sscanf(s, "%lu,%lu,%lu", &eager, &rdv, &flags) == 3 && (flags & LAT_DP_VM)) {
        rdv_min = rdv;
        dp_flags = (unsigned)flags;
    }
}

uint64_t lat_rdv_min(void)
{
    return rdv_min;
}

static void seq_init(void)
{
    const char *s = getenv("LATTICE_IO_SEQ_FD");
    char *end;
    struct stat st;
    if (!s || !*s)
        return;
    errno = 0;
    long fd = strtol(s, &end, 10);
    if (errno || *end || fd < 0 || fd > INT_MAX || fd == conn || syscall(SYS_fstat, (int)fd, &st) != 0 ||
        !S_ISREG(st.st_mode) || st.st_size < (off_t)sizeof *seqp)
        return;
    void *p = mmap(NULL, sizeof *seqp, PROT_READ | PROT_WRITE, MAP_SHARED, (int)fd, 0);
    if (p == MAP_FAILED)
        return;
    seqp = p;
    seq_fd = (int)fd;
}

/* The next seq, never 0; conn.c's lock held. */
static uint32_t next_seq(void)
{
    uint32_t s = __atomic_add_fetch(seqp, 1, __ATOMIC_SEQ_CST);
    return s ? s : __atomic_add_fetch(seqp, 1, __ATOMIC_SEQ_CST);
}

static void init(void)
{
    const char *s = getenv("LATTICE_IO_FD");
    if (!s || !*s)
        return;
    char *end;
    errno = 0;
    long fd = strtol(s, &end, 10);
    struct stat st;
    if (errno || *end || fd < 0 || fd > INT_MAX || syscall(SYS_fstat, (int)fd, &st) != 0 ||
        !S_ISSOCK(st.st_mode)) {
        say("libcnclient: LATTICE_IO_FD is not a connected socket; file calls stay local\n");
        return;
    }
    conn = (int)fd;
    seq_init();
    datapath_init();
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    lat_fd_init(conn, seq_fd);
    active = 1;
    lat_mbox_init(conn, dp_flags);
    lat_stdio_init();
}

int lat_active(void)
{
    pthread_once(&once, init);
    return active;
}

int lat_conn_fd(void)
{
    return conn;
}

int lat_seq_fd(void)
{
    return seq_fd;
}

int lat_forked(void)
{
    return forked;
}

/* The library sets up stdio before main even if no call is interposed. */
__attribute__((constructor)) static void lat_client_ctor(void)
{
    (void)lat_active();
}

static void broken(const char *why, int err)
{
    if (!dead) {
        char msg[256];
        snprintf(msg, sizeof msg, "libcnclient: connection to the I/O node lost (%s: %s)\n", why,
                 strerror(err));
        say(msg);
    }
    dead = 1;
}

static int send_all(struct iovec *iov, int cnt)
{
    while (cnt > 0) {
        struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t)(cnt > IOV_MAX ? IOV_MAX : cnt) };
        long n = syscall(SYS_sendmsg, conn, &mh, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;  /* a call in flight cannot be abandoned */
            return -1;
        }
        while (cnt > 0 && (size_t)n >= iov->iov_len) {
            n -= (long)iov->iov_len;
            iov++;
            cnt--;
        }
        if (cnt > 0) {
            iov->iov_base = (char *)iov->iov_base + n;
            iov->iov_len -= (size_t)n;
        }
    }
    return 0;
}

static int recv_all(void *buf, size_t len)
{
    char *p = buf;
    while (len > 0) {
        long n = syscall(SYS_read, conn, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = ECONNRESET;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int discard(size_t len)
{
    char sink[4096];
    while (len > 0) {
        size_t n = len < sizeof sink ? len : sizeof sink;
        if (recv_all(sink, n) < 0)
            return -1;
        len -= n;
    }
    return 0;
}

/* Receive len bytes scattered over the in vectors (len <= their capacity). */
static int recv_iov(const struct iovec *in, int nin, size_t len)
{
    for (int i = 0; i < nin && len > 0; i++) {
        size_t n = in[i].iov_len < len ? in[i].iov_len : len;
        if (recv_all(in[i].iov_base, n) < 0)
            return -1;
        len -= n;
    }
    return 0;
}

void lat_conn_lock(void)
{
    pthread_mutex_lock(&lock);
}

void lat_conn_unlock(void)
{
    pthread_mutex_unlock(&lock);
}

int lat_conn_lost(void)
{
    return dead;
}

/* Once the stream is out of step, every call fails: -EIO. */
int64_t lat_conn_broken(const char *why, int err)
{
    broken(why, err);
    return -EIO;
}

int64_t lat_send_locked(uint16_t type, uint8_t flags, const int64_t a[4], const struct iovec *out, int nout,
                        uint32_t *sq)
{
    if (!active || dead || forked)
        return -EIO;
    size_t outlen = 0;
    for (int i = 0; i < nout; i++)
        outlen += out[i].iov_len;
    if (nout < 0 || nout > IOV_MAX || outlen > LAT_MAX_PAYLOAD - sizeof(struct lat_sysreq))
        return -EINVAL;

    struct lat_sysreq req = { { a[0], a[1], a[2], a[3] } };
    struct lat_hdr h = { .magic = LAT_MAGIC, .version = LAT_VERSION, .flags = flags, .type = type,
                         .len = (uint32_t)(sizeof req + outlen) };
    struct iovec v[IOV_MAX + 2];
    v[0] = (struct iovec){ &h, sizeof h };
    v[1] = (struct iovec){ &req, sizeof req };
    for (int i = 0; i < nout; i++)
        v[2 + i] = out[i];
    h.seq = *sq = next_seq();
    if (send_all(v, nout + 2) < 0)
        return lat_conn_broken("send", errno);
    return 0;
}

int64_t lat_recv_locked(uint16_t type, uint32_t sq, const struct iovec *in, int nin, size_t *got)
{
    size_t cap = 0;
    for (int i = 0; i < nin; i++)
        cap += in[i].iov_len;
    if (got)
        *got = 0;

    /* every reply starts with a header and a lat_sysret: one read for both */
    struct { struct lat_hdr h; struct lat_sysret r; } head;
    _Static_assert(sizeof head == sizeof(struct lat_hdr) + sizeof(struct lat_sysret), "no padding");
    if (recv_all(&head, sizeof head) < 0)
        return lat_conn_broken("receive", errno);
    struct lat_hdr rh = head.h;
    struct lat_sysret r = head.r;
    int is_error = rh.type == LAT_ERROR || rh.type == (LAT_ERROR | LAT_REPLY);
    if (rh.magic != LAT_MAGIC || rh.version != LAT_VERSION || rh.len > LAT_MAX_PAYLOAD ||
        rh.len < sizeof r || rh.seq != sq || (!is_error && rh.type != (type | LAT_REPLY)))
        return lat_conn_broken("malformed reply", EPROTO);
    size_t dlen = rh.len - sizeof r;
    if (is_error || dlen > cap) {
        /* ciod refused the request (or sent more than asked for) */
        if (discard(dlen) < 0)
            return lat_conn_broken("receive", errno);
        return is_error ? -(r.err > 0 ? r.err : ENOSYS) : -EIO;
    }
    if (recv_iov(in, nin, dlen) < 0)
        return lat_conn_broken("receive", errno);
    if (got)
        *got = dlen;
    if (r.ret < 0)
        return -(r.err > 0 ? r.err : EIO);
    return r.ret;
}

int64_t lat_call(uint16_t type, int64_t a0, int64_t a1, int64_t a2, int64_t a3,
                 const struct iovec *out, int nout, const struct iovec *in, int nin, size_t *got)
{
    const int64_t a[4] = { a0, a1, a2, a3 };
    uint32_t sq;

    if (got)
        *got = 0;
    pthread_mutex_lock(&lock);
    int64_t r;
    if (!dead && !forked && lat_mbox_takes(type, out, nout, in, nin)) {
        r = lat_mbox_call_locked(next_seq(), type, a, out, nout, in, nin, got);
    } else if ((r = lat_send_locked(type, 0, a, out, nout, &sq)) == 0)
        r = lat_recv_locked(type, sq, in, nin, got);
    pthread_mutex_unlock(&lock);
    return r < 0 ? lat_fail((int)-r) : r;
}

int64_t lat_call0(uint16_t type, int64_t a0, int64_t a1, int64_t a2)
{
    return lat_call(type, a0, a1, a2, 0, NULL, 0, NULL, 0, NULL);
}

int64_t lat_call_path(uint16_t type, int64_t a0, int64_t a1, int64_t a2, const char *path,
                      void *in, size_t inlen, size_t *got)
{
    struct iovec o = { (void *)path, strlen(path) + 1 };
    struct iovec i = { in, inlen };
    return lat_call(type, a0, a1, a2, 0, &o, 1, &i, in ? 1 : 0, got);
}
