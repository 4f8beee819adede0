/*
 * lock.c - record locks and flock for a job's processes, held here on the
 * I/O node, so that ranks on different compute nodes exclude each other
 * (docs/protocol.md section 6.6).
 *
 * Every process of a job is served by a thread of the same worker, so the
 * worker's own POSIX locks would have one owner for all of them.  Open file
 * description (OFD) locks are owned by an open file instead: a process's
 * POSIX locks on a file are OFD locks on one open of that file made for the
 * process, its lock file.  That gives POSIX's rules: one owner per process
 * and file (a process's locks never conflict with each other, a new one
 * replaces or splits its old ones), released when the process closes any
 * descriptor of the file, or ends.  The process's own OFD locks and flock
 * work on its remote descriptor's open file, as on Linux; for a collective
 * open (one open shared by the pset, collective.c) they use the lock file.
 *
 * A blocking request sleeps in the kernel (F_OFD_SETLKW, flock) and is woken
 * every TICK_MS by a per-thread timer to see whether the process hung up or
 * the request's wait ran out (then LAT_ERR_WAIT: the process asks again).
 */
#include "shipcall.h"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#define TICK_MS  100
#define LOCK_SIG (SIGRTMIN + 3)

struct lockfile {
    dev_t dev;
    ino_t ino;
    int   fd;
    struct lockfile *next;
};

static pthread_once_t sig_once = PTHREAD_ONCE_INIT;

static void on_tick(int sig)
{
    (void)sig;                          /* only to interrupt the blocking call */
}

static void sig_setup(void)
{
    struct sigaction sa = { .sa_handler = on_tick };    /* no SA_RESTART: the call returns EINTR */

    sigemptyset(&sa.sa_mask);
    sigaction(LOCK_SIG, &sa, NULL);
}

static int64_t now_ms(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static bool hung_up(const struct proc *p)
{
    struct pollfd pf = { p->c->fd, POLLRDHUP, 0 };

    return poll(&pf, 1, 0) > 0 && (pf.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* The process's lock file for the file fd is open on, made at its first lock. */
static struct lockfile *lockfile_of(struct proc *p, int fd, int *err)
{
    struct stat st;
    struct lockfile *l;
    char path[64];
    int lfd;

    if (fstat(fd, &st) < 0)
        return *err = errno, NULL;
    for (l = p->locks; l; l = l->next)
        if (l->dev == st.st_dev && l->ino == st.st_ino)
            return l;
    /* opened again through the descriptor, as the owner: read and write if
     * the owner may, so that both kinds of lock can be taken through it */
    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    lfd = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (lfd < 0) {
        int acc = fcntl(fd, F_GETFL);
        lfd = acc < 0 ? -1 : open(path, (acc & O_ACCMODE) | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    }
    if (lfd < 0)
        return *err = errno, NULL;
    if (!(l = malloc(sizeof(*l)))) {
        close(lfd);
        return *err = ENOLCK, NULL;
    }
    *l = (struct lockfile){ st.st_dev, st.st_ino, lfd, p->locks };
    p->locks = l;
    return l;
}

void lock_closing(struct proc *p, const struct rfd *r)
{
    struct stat st;
    int fd = r->kind == FD_REAL ? r->fd : r->kind == FD_COLL ? coll_fd(r->co) : -1;

    if (!p->locks || fd < 0 || fstat(fd, &st) < 0)
        return;
    for (struct lockfile **l = &p->locks; *l; l = &(*l)->next)
        if ((*l)->dev == st.st_dev && (*l)->ino == st.st_ino) {
            struct lockfile *gone = *l;
            *l = gone->next;
            close(gone->fd);            /* releases the process's locks on the file */
            free(gone);
            return;
        }
}

void lock_end(struct proc *p)
{
    while (p->locks) {
        struct lockfile *l = p->locks;
        p->locks = l->next;
        close(l->fd);
        free(l);
    }
    if (p->lock_timer_ok)
        timer_delete(p->lock_timer);
    p->lock_timer_ok = false;
}

struct blocking {
    int   fd;
    int   cmd;                          /* F_OFD_SETLKW, or 0 for flock */
    int   op;                           /* flock's */
    struct flock *fl;
};

static int block_once(const struct blocking *b)
{
    return b->cmd ? fcntl(b->fd, b->cmd, b->fl) : flock(b->fd, b->op);
}

/* A blocking lock call, waiting at most wait_ms (-1: until done): 0 done,
 * else the error (LAT_ERR_WAIT: not yet; EINTR: the process hung up). */
static int wait_for(struct proc *p, const struct blocking *b, int wait_ms)
{
    struct itimerspec tick = { { 0, TICK_MS * 1000000L }, { 0, TICK_MS * 1000000L } }, off = { 0 };
    struct timespec zero = { 0, 0 };
    sigset_t sig, old, during;
    int64_t deadline = now_ms() + wait_ms;
    int rc, err = 0;

    pthread_once(&sig_once, sig_setup);
    if (!p->lock_timer_ok) {
        struct sigevent ev = { .sigev_notify = SIGEV_THREAD_ID, .sigev_signo = LOCK_SIG };
        ev._sigev_un._tid = gettid();
        if (timer_create(CLOCK_MONOTONIC, &ev, &p->lock_timer) < 0)
            return errno == EAGAIN ? ENOLCK : errno;
        p->lock_timer_ok = true;
    }
    sigemptyset(&sig);
    sigaddset(&sig, LOCK_SIG);
    pthread_sigmask(SIG_BLOCK, &sig, &old);
    during = old;
    sigdelset(&during, LOCK_SIG);
    timer_settime(p->lock_timer, 0, &tick, NULL);
    for (;;) {
        /* a tick between the unmask and the call is not lost: the next one comes */
        pthread_sigmask(SIG_SETMASK, &during, NULL);
        rc = block_once(b);
        err = rc < 0 ? errno : 0;
        pthread_sigmask(SIG_BLOCK, &sig, NULL);
        if (rc == 0 || err != EINTR)
            break;
        if (hung_up(p))
            break;                      /* err EINTR: the process is gone */
        if (wait_ms >= 0 && now_ms() >= deadline) {
            err = LAT_ERR_WAIT;
            break;
        }
    }
    timer_settime(p->lock_timer, 0, &off, NULL);
    while (sigtimedwait(&sig, NULL, &zero) > 0)
        ;                               /* a tick already on its way */
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return err;
}

static bool lock_fd(struct call *k, const struct rfd *r, int *fd)
{
    if (r->kind == FD_REAL)
        *fd = r->fd;
    else if (r->kind == FD_COLL)
        *fd = coll_fd(r->co);
    else
        return fail(k, EINVAL), false;  /* the standard streams are the I/O node's, not a file */
    return true;
}

int srv_lock(struct proc *p, struct call *k, struct rfd *r, int cmd, int wait, struct lat_flock *lf)
{
    bool ofd = cmd == F_OFD_GETLK || cmd == F_OFD_SETLK || cmd == F_OFD_SETLKW;
    bool posix = cmd == F_GETLK || cmd == F_SETLK || cmd == F_SETLKW;
    bool get = cmd == F_GETLK || cmd == F_OFD_GETLK;
    struct flock fl = { .l_type = lf->type, .l_whence = lf->whence, .l_start = lf->start, .l_len = lf->len };
    int fd, on, acc, err;

    if (!ofd && !posix)
        return fail(k, EINVAL);
    if (!lock_fd(k, r, &fd))
        return 0;
    if ((fl.l_type != F_RDLCK && fl.l_type != F_WRLCK && fl.l_type != F_UNLCK) || fl.l_whence < SEEK_SET ||
        fl.l_whence > SEEK_END || (ofd && lf->pid != 0))
        return fail(k, EINVAL);
    acc = fcntl(fd, F_GETFL) & O_ACCMODE;
    if (!get && ((fl.l_type == F_RDLCK && acc == O_WRONLY) || (fl.l_type == F_WRLCK && acc == O_RDONLY)))
        return fail(k, EBADF);          /* the kind of lock needs the descriptor open for it */
    on = fd;
    if (posix || r->kind == FD_COLL) {
        struct lockfile *l = lockfile_of(p, fd, &err);
        if (!l)
            return fail(k, err);
        on = l->fd;
        if (fl.l_whence == SEEK_CUR) {  /* the lock file's position is not the descriptor's */
            int64_t cur = r->kind == FD_COLL ? *coll_pos(r->co) : lseek(fd, 0, SEEK_CUR);
            if (cur < 0)
                return result(k, -1);
            fl.l_start += cur;
            fl.l_whence = SEEK_SET;
        }
    }
    fl.l_pid = 0;
    cmd = get ? F_OFD_GETLK : (cmd == F_SETLK || cmd == F_OFD_SETLK) ? F_OFD_SETLK : F_OFD_SETLKW;
    if (cmd == F_OFD_SETLKW) {
        err = wait_for(p, &(struct blocking){ on, cmd, 0, &fl }, wait);
        if (err)
            return fail(k, err);
    } else if (fcntl(on, cmd, &fl) < 0)
        return result(k, -1);
    if (get)
        *lf = (struct lat_flock){ .type = fl.l_type, .whence = fl.l_whence, .pid = fl.l_pid,
                                  .start = fl.l_start, .len = fl.l_len };
    return result(k, 0);
}

int srv_flock(struct proc *p, struct call *k, struct rfd *r, int op, int wait)
{
    int fd, err, how = op & ~LOCK_NB;

    if (how != LOCK_SH && how != LOCK_EX && how != LOCK_UN)
        return fail(k, EINVAL);
    if (!lock_fd(k, r, &fd))
        return 0;
    if (r->kind == FD_COLL) {           /* the shared open is the pset's: lock the process's own */
        struct lockfile *l = lockfile_of(p, fd, &err);
        if (!l)
            return fail(k, err);
        fd = l->fd;
    }
    if ((op & LOCK_NB) || how == LOCK_UN)
        return result(k, flock(fd, op));
    err = wait_for(p, &(struct blocking){ fd, 0, op, NULL }, wait);
    return err ? fail(k, err) : result(k, 0);
}
