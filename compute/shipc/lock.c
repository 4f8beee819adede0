/*
 * lock.c - record locks, OFD locks and flock on shipped descriptors: held
 * on the I/O node for the process (docs/protocol.md 6.6), so ranks on
 * different compute nodes exclude each other.  Node-local descriptors keep
 * the node kernel's locks (the handlers' by_fd).
 *
 * A blocking request (F_SETLKW, F_OFD_SETLKW, flock without LOCK_NB) waits
 * in slices of LOCK_SLICE_MS: ciod answers LAT_ERR_WAIT when a slice runs
 * out and the request is asked again.  The connection is released in
 * between, so the program's other threads ship meanwhile, and under cnk a
 * signal held back while the connection was held (kthread.crit) is
 * delivered there; its handler runs and the wait goes on, as with
 * SA_RESTART.  The job's end ends the wait (ciod sees the hang-up).
 */
#include <asm/unistd.h>
#include <linux/fcntl.h>

#include <lattice/fwd_posix.h>

#include "internal.h"

#define LOCK_SLICE_MS 100           /* ciod looks at a waiting lock every 100 ms anyway */
#define LOCK_SH_ 1
#define LOCK_EX_ 2
#define LOCK_NB_ 4
#define LOCK_UN_ 8

/* The x86-64 kernel's struct flock (asm-generic/fcntl.h). */
struct kflock {
    int16_t type, whence;
    int64_t start, len;
    int32_t pid;
};
_Static_assert(sizeof(struct kflock) == 32, "x86-64 struct flock");

/* Between two slices: lets a thread woken on the connection take it. */
static void nap(void)
{
    struct { long sec, nsec; } t = { 0, 200000 };
    ksys2(__NR_nanosleep, &t, NULL);
}

/* fcntl(fd, cmd, arg) on remote descriptor r: cmd is F_GETLK, F_SETLK,
 * F_SETLKW or an F_OFD_ one, arg the program's struct flock. */
long shipc_lock(struct shipc_call *c, int r, int cmd, void *arg)
{
    struct kflock *fl = arg;
    int blocking = cmd == F_SETLKW || cmd == F_OFD_SETLKW;
    struct lat_flock lf;
    long ret;

    if (!fl)
        return answered(c, -EFAULT);
    for (;;) {                          /* again while ciod says LAT_ERR_WAIT */
        lf = (struct lat_flock){ .type = fl->type, .whence = fl->whence, .pid = fl->pid,
                                 .start = fl->start, .len = fl->len };
        if (cmd == F_GETLK || cmd == F_SETLK || cmd == F_SETLKW)
            lf.pid = 0;                 /* a record lock's l_pid is the kernel's to fill */
        ret = fwd_lock(r, cmd, blocking ? LOCK_SLICE_MS : 0, &lf);
        if (ret != -LAT_ERR_WAIT)
            break;
        nap();
    }
    if (ret == 0 && (cmd == F_GETLK || cmd == F_OFD_GETLK)) {
        fl->type = lf.type;             /* no conflict: the rest stays as given, as Linux leaves it */
        if (lf.type != F_UNLCK) {
            fl->whence = lf.whence;
            fl->start = lf.start;
            fl->len = lf.len;
            fl->pid = lf.pid;           /* -1: held through an I/O node (6.6) */
        }
    }
    return shipped(c, ret);
}

long shipc_sys_flock(struct shipc_call *c)
{
    int r, op = (int)c->a[1];
    int how = op & ~LOCK_NB_;
    long ret;

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    if (how != LOCK_SH_ && how != LOCK_EX_ && how != LOCK_UN_)
        return answered(c, -EINVAL);
    int blocking = !(op & LOCK_NB_) && how != LOCK_UN_;
    while ((ret = fwd_flock(r, op, blocking ? LOCK_SLICE_MS : 0)) == -LAT_ERR_WAIT)
        nap();                          /* asked again while ciod says LAT_ERR_WAIT */
    return shipped(c, ret);
}
