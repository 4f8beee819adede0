/*
 * copy.c - sendfile and copy_file_range with a shipped side, emulated with
 * reads and writes through a bounce buffer, at most LAT_MAX_IO bytes per
 * call (callers loop on short counts).
 */
#include <linux/fcntl.h>

#include <lattice/fwd_posix.h>

#include "internal.h"

/* ---- sendfile, copy_file_range: emulated when a side is shipped ---- */

#define BOUNCE (64 * 1024)

static char bounce[BOUNCE];
static struct shipc_lock bounce_lock;    /* taken before conn_lock, never after */

struct end {
    int fd;
    int remote;                     /* -1: local */
    int64_t *off;                   /* NULL: the descriptor's own position */
};

static long end_io(struct end *e, int wr, size_t n)
{
    long r;

    if (e->remote >= 0) {
        struct iovec v = { bounce, n };
        r = shipc_rw(e->remote, wr, &v, 1, e->off ? *e->off : -1);
    } else if (e->off) {
        r = ksys4(wr ? __NR_pwrite64 : __NR_pread64, e->fd, bounce, n, *e->off);
    } else {
        r = ksys3(wr ? __NR_write : __NR_read, e->fd, bounce, n);
    }
    if (r > 0 && e->off)
        *e->off += r;
    return r;
}

/* Give back bytes read but not written, so nothing is skipped. */
static void end_unread(struct end *e, long n)
{
    if (n <= 0)
        return;
    if (e->off)
        *e->off -= n;
    else if (e->remote >= 0)
        fwd_lseek(e->remote, -n, 1 /* SEEK_CUR */);
    else
        ksys3(__NR_lseek, e->fd, -n, 1 /* SEEK_CUR */);
}

static long copy_loop(struct end *in, struct end *out, size_t count)
{
    size_t done = 0;
    long err = 0;

    shipc_lock_take(&bounce_lock);
    while (done < count && done < LAT_MAX_IO) {
        size_t want = SHIPC_MIN(count - done, (size_t)BOUNCE);
        long n = end_io(in, 0, want);
        if (n <= 0) {
            err = n;
            break;
        }
        long w = end_io(out, 1, (size_t)n);
        end_unread(in, n - (w > 0 ? w : 0));
        if (w < 0) {
            err = w;
            break;
        }
        done += (size_t)w;
        if (w < n || (size_t)n < want)
            break;
    }
    shipc_lock_drop(&bounce_lock);
    return done ? (long)done : err;
}

/* Route both ends: 1 = emulate, 0 = done (*ret). */
static int two_fds(struct shipc_call *c, int in, int out, struct end *ei, struct end *eo, long *ret)
{
    int a = shipc_fd_route(in, &ei->remote), b = shipc_fd_route(out, &eo->remote);

    if (a < 0 || b < 0) {
        *ret = answered(c, -EBADF);
        return 0;
    }
    if (a == SHIPC_LOCAL && b == SHIPC_LOCAL) {
        *ret = local(c);
        return 0;
    }
    if (a == SHIPC_LOCAL)
        ei->remote = -1;
    if (b == SHIPC_LOCAL)
        eo->remote = -1;
    ei->fd = in;
    eo->fd = out;
    return 1;
}

/* An optional loff_t in the program's memory, copied in. */
static int get_off(const int64_t *user, int64_t *mine, int64_t **use)
{
    *use = NULL;
    if (!user)
        return 0;
    if (*user < 0)
        return -EINVAL;
    *mine = *user;
    *use = mine;
    return 0;
}

long shipc_sys_sendfile(struct shipc_call *c)
{
    struct end in, out;
    int64_t *user = (int64_t *)c->a[2], off = 0;
    long ret;

    if (!two_fds(c, (int)c->a[1], (int)c->a[0], &in, &out, &ret))
        return ret;
    out.off = NULL;
    if ((ret = get_off(user, &off, &in.off)) < 0)
        return answered(c, ret);
    ret = copy_loop(&in, &out, (size_t)c->a[3]);
    if (user)
        *user = off;
    return shipped(c, ret);
}

long shipc_sys_copy_file_range(struct shipc_call *c)
{
    struct end in, out;
    int64_t *uin = (int64_t *)c->a[1], *uout = (int64_t *)c->a[3], oin = 0, oout = 0;
    long ret;

    if (!two_fds(c, (int)c->a[0], (int)c->a[2], &in, &out, &ret))
        return ret;
    if (c->a[5])
        return answered(c, -EINVAL);
    if ((ret = get_off(uin, &oin, &in.off)) < 0 || (ret = get_off(uout, &oout, &out.off)) < 0)
        return answered(c, ret);
    ret = copy_loop(&in, &out, (size_t)c->a[4]);
    if (uin)
        *uin = oin;
    if (uout)
        *uout = oout;
    return shipped(c, ret);
}
