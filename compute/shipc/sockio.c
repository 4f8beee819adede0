/*
 * sockio.c - the bytes of a shipped socket's sends and receives, for both
 * kernels: one rendezvous request naming the program's buffers from
 * rdv_min bytes (ciod moves them, on its mapping of the memory when that is
 * shared), else messages of at most LAT_MAX_IO (docs/protocol.md 6.1).
 *
 * Blocking.  A shipped call that may block carries a wait: until done when
 * the program has a single thread, else slices of SHIPC_SLICE_MS after
 * which ciod answers LAT_ERR_WAIT and the call is asked again with the
 * connection released in between, so the other threads' calls go through.
 */
#include <asm/unistd.h>

#include "internal.h"

#include <lattice/iov_slice.h>

#include "fwd_posix_stubs.h"      /* generated: the vectored stubs fwd_*_v */

#define MSG_PEEK_     0x2
#define MSG_WAITALL_  0x100
#define MSG_NOSIGNAL_ 0x4000
#define SIGPIPE_      13

static void nap(void)
{
    struct { long sec, nsec; } t = { 0, 200000 };  /* lets a woken thread take the connection */
    ksys2(__NR_nanosleep, &t, NULL);
}

/* The first wait of a call whose bytes may go in part (a send, a
 * MSG_WAITALL receive): ciod returns the part that went when a wait runs
 * out, so a single thread waits until done, as Linux does. */
static int exact_wait(void)
{
    return shipc_ent_threads() > 1 ? SHIPC_SLICE_MS : -1;
}

/* The wait of the next try after ciod said LAT_ERR_WAIT (other threads
 * first take the connection). */
int shipc_sock_next_wait(void)
{
    int w = exact_wait();
    if (w > 0)
        nap();
    return w;
}

static long epipe(long r, int flags)
{
    if (r == -EPIPE && !(flags & MSG_NOSIGNAL_))
        ksys3(__NR_tgkill, ksys0(__NR_getpid), ksys0(__NR_gettid), SIGPIPE_);
    return r;
}

/* The segment table of a rendezvous and the slices of a message: too big
 * for the stack of a signal handler (cnk), so one of each, held from
 * building it to the end of the one request that carries it (this lock,
 * then the connection's). */
static struct shipc_lock buf_lock;
static struct lat_rdv_seg segs[UIO_MAXIOV];
static struct iovec part[UIO_MAXIOV];

/* A socket rendezvous (docs/protocol.md 6.1): the request names the
 * program's buffers and ciod sends from them or receives into them (on its
 * mapping of the memory when that is shared: one copy).  -EOPNOTSUPP or
 * -EFAULT with nothing done: the caller moves the bytes in messages. */
static long sock_rdv(int r, int send, const void *name, long nlen, const struct iovec *iov, long cnt, int flags,
                     struct lat_sockname *sn)
{
    long n;

    for (int w = exact_wait();; w = shipc_sock_next_wait()) {     /* again while ciod says LAT_ERR_WAIT */
        shipc_lock_take(&buf_lock);
        for (long i = 0; i < cnt; i++)
            segs[i] = (struct lat_rdv_seg){ (uint64_t)(uintptr_t)iov[i].iov_base, iov[i].iov_len };
        n = send ? fwd_send_rdv(r, flags, name, name ? (uint32_t)nlen : 0, segs, (uint32_t)cnt, w)
                 : fwd_recv_rdv(r, flags, sn, segs, (uint32_t)cnt, w);
        shipc_lock_drop(&buf_lock);
        if (n != -LAT_ERR_WAIT)
            return n;
    }
}

/* ciod said: not this way (not granted; a bad buffer, which the messages
 * report exactly; an older ciod without the socket rendezvous). */
static int eager_instead(long n)
{
    return n == -EOPNOTSUPP || n == -EFAULT || n == -ENOSYS;
}

static int goes_rdv(size_t total, long cnt)
{
    uint64_t min = shipc_rdv_min();
    return min && total >= min && cnt > 0;
}

/* One message of the bytes [done, done + at most LAT_MAX_IO): sent, or
 * received (*want: its size; *sn the sender). */
static long one_msg(int r, int send, const void *name, long nlen, const struct iovec *iov, long cnt, size_t total,
                    size_t done, int flags, int w, struct lat_sockname *sn, size_t *want)
{
    shipc_lock_take(&buf_lock);
    int np = lat_iov_slice(iov, (size_t)cnt, done, SHIPC_MIN(total - done, (size_t)LAT_MAX_IO), part, UIO_MAXIOV,
                           want);
    long n = send ? fwd_sendmsg_v(r, flags, name, name ? (uint32_t)nlen : 0, part, np, w)
                  : fwd_recvmsg_v(r, flags, sn, part, np, *want, w);
    shipc_lock_drop(&buf_lock);
    return n;
}

/* The bytes in messages of at most LAT_MAX_IO (streams continue with the rest). */
static long send_eager(int r, const void *name, long nlen, const struct iovec *iov, long cnt, size_t total,
                       int flags)
{
    size_t done = 0;

    do {
        size_t chunk;
        long s;
        for (int w = exact_wait();; w = shipc_sock_next_wait())   /* again while ciod says LAT_ERR_WAIT */
            if ((s = one_msg(r, 1, name, nlen, iov, cnt, total, done, flags & ~MSG_NOSIGNAL_, w, NULL, &chunk))
                != -LAT_ERR_WAIT)
                break;
        if (s < 0)
            return done ? (long)done : epipe(s, flags);
        done += (size_t)s;
        if ((size_t)s < chunk)
            break;
    } while (done < total);
    return (long)done;
}

/* The vectors' total, or -EINVAL (too many, too much, none given). */
static long iov_sum(const struct iovec *iov, long cnt, size_t *total)
{
    *total = 0;
    if (cnt < 0 || cnt > UIO_MAXIOV || (cnt && !iov))
        return -EINVAL;
    for (long i = 0; i < cnt; i++) {
        if (iov[i].iov_len > (size_t)INT64_MAX - *total)
            return -EINVAL;
        *total += iov[i].iov_len;
    }
    return 0;
}

/* sendmsg on a shipped socket: a rendezvous from rdv_min bytes, else in messages. */
long shipc_sock_send(int r, const void *name, long nlen, const struct iovec *iov, long cnt, int flags)
{
    size_t total;

    if (nlen < 0 || nlen > LAT_MAX_SOCKADDR || iov_sum(iov, cnt, &total) < 0)
        return -EINVAL;
    if (goes_rdv(total, cnt)) {
        long s = sock_rdv(r, 1, name, nlen, iov, cnt, flags & ~MSG_NOSIGNAL_, NULL);
        if (!eager_instead(s))
            return s < 0 ? epipe(s, flags) : s;
    }
    return send_eager(r, name, nlen, iov, cnt, total, flags);
}

/* Received in messages of at most LAT_MAX_IO: a stream's MSG_WAITALL asks
 * again for the rest after a full one.  Sender into *sn. */
static long recv_eager(int r, const struct iovec *iov, long cnt, size_t total, int flags, struct lat_sockname *sn)
{
    struct lat_sockname more;
    size_t done = 0;

    for (;;) {
        size_t want;
        long m;
        /* a plain receive takes what comes: its first try needs no thread count */
        for (int w = (flags & MSG_WAITALL_) ? exact_wait() : SHIPC_SLICE_MS;; w = shipc_sock_next_wait())
            if ((m = one_msg(r, 0, NULL, 0, iov, cnt, total, done, flags, w, done ? &more : sn, &want))
                != -LAT_ERR_WAIT)
                break;
        if (m < 0)
            return done ? (long)done : m;
        if ((size_t)m == want && done + want < total && (flags & MSG_WAITALL_) && !(flags & MSG_PEEK_)) {
            done += want;       /* only the message's size stopped it */
            continue;
        }
        return (long)(done + (size_t)m);
    }
}

/* recvmsg on a shipped socket into the vectors (a rendezvous from rdv_min
 * bytes, else in messages); the sender into name, as the kernel: *nlen is
 * left alone without a name. */
long shipc_sock_recv(int r, void *name, int *nlen, const struct iovec *iov, long cnt, int flags, unsigned *mflags)
{
    struct lat_sockname sn;
    size_t total;
    long n = -EOPNOTSUPP;

    if (iov_sum(iov, cnt, &total) < 0)
        return -EINVAL;
    if (goes_rdv(total, cnt))
        n = sock_rdv(r, 0, NULL, 0, iov, cnt, flags, &sn);
    if (eager_instead(n))
        n = recv_eager(r, iov, cnt, total, flags, &sn);
    if (n < 0)
        return n;
    if (name && nlen) {
        int room = *nlen < 0 ? 0 : *nlen;
        memcpy(name, sn.addr, SHIPC_MIN(sn.len, (uint32_t)room));
        *nlen = (int)sn.len;
    }
    if (mflags)
        *mflags = sn.flags;
    return n;
}
