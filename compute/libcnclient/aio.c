/*
 * aio.c - POSIX asynchronous I/O (aio_read, aio_write, aio_fsync,
 * aio_error, aio_return, aio_suspend, aio_cancel, lio_listio and their
 * *64 names) on shipped descriptors.
 *
 * glibc runs a request on its own helper threads with its internal pread
 * and pwrite, which no interposer sees: on a placeholder they failed with
 * EBADF (and MPICH's ROMIO, whose nonblocking MPI-IO is built on them,
 * then waited for ever).  A request on a shipped descriptor is done here
 * at submission, through the shipping core like any pread/pwrite/fsync,
 * and recorded in the aiocb as glibc records a finished one (its error
 * and return fields), with the notification the program asked for.
 * POSIX allows it: a request may complete before aio_read returns.
 * aio_error, aio_return and aio_suspend then answer from the record, the
 * same way glibc's do, and aio_cancel finds nothing left to cancel
 * (AIO_ALLDONE).  Requests on node-local descriptors are glibc's.
 */
#include <aio.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "client.h"

/* struct aiocb and aiocb64 are the same on x86-64 (off_t is 64 bits) */
_Static_assert(sizeof(struct aiocb) == sizeof(struct aiocb64), "one layout");

static int shipped(int fd)
{
    int r;
    return lat_fd_route(fd, &r) == LAT_SHIP;
}

struct thread_note {
    void (*fn)(union sigval);
    union sigval v;
};

static void *notify_thread(void *arg)
{
    struct thread_note n = *(struct thread_note *)arg;
    free(arg);
    n.fn(n.v);
    return NULL;
}

/* The completion notice of sev, as glibc gives it (SI_ASYNCIO). */
static void notify(const struct sigevent *sev)
{
    if (!sev)
        return;
    switch (sev->sigev_notify) {
    case SIGEV_SIGNAL:
    case SIGEV_THREAD_ID: {
        siginfo_t si;
        memset(&si, 0, sizeof si);
        si.si_signo = sev->sigev_signo;
        si.si_code = SI_ASYNCIO;
        si.si_pid = getpid();
        si.si_uid = getuid();
        si.si_value = sev->sigev_value;
        if (sev->sigev_notify == SIGEV_SIGNAL)
            syscall(SYS_rt_sigqueueinfo, getpid(), sev->sigev_signo, &si);
        else
            syscall(SYS_rt_tgsigqueueinfo, getpid(), sev->_sigev_un._tid, sev->sigev_signo, &si);
        break;
    }
    case SIGEV_THREAD: {
        struct thread_note *n = malloc(sizeof *n);
        pthread_attr_t own, *attr = sev->sigev_notify_attributes;
        pthread_t t;
        if (!n)
            break;
        n->fn = sev->sigev_notify_function;
        n->v = sev->sigev_value;
        if (!attr) {
            pthread_attr_init(&own);
            pthread_attr_setdetachstate(&own, PTHREAD_CREATE_DETACHED);
            attr = &own;
        }
        int state = PTHREAD_CREATE_DETACHED;
        if (attr != &own)
            pthread_attr_getdetachstate(attr, &state);
        if (pthread_create(&t, attr, notify_thread, n) != 0)
            free(n);
        else if (state != PTHREAD_CREATE_DETACHED)
            pthread_detach(t);      /* nobody joins a notification thread */
        if (attr == &own)
            pthread_attr_destroy(&own);
        break;
    }
    default:                    /* SIGEV_NONE */
        break;
    }
}

/* One request on a shipped descriptor, done now: its record in cb. */
static void run(struct aiocb *cb, int op)
{
    long r;
    switch (op) {
    case LIO_READ:
        r = lat_sys(SYS_pread64, cb->aio_fildes, (long)cb->aio_buf, (long)cb->aio_nbytes, cb->aio_offset, 0, 0);
        break;
    case LIO_WRITE:
        r = lat_sys(SYS_pwrite64, cb->aio_fildes, (long)cb->aio_buf, (long)cb->aio_nbytes, cb->aio_offset, 0, 0);
        break;
    case O_SYNC:
        r = lat_sys(SYS_fsync, cb->aio_fildes, 0, 0, 0, 0, 0);
        break;
    case O_DSYNC:
        r = lat_sys(SYS_fdatasync, cb->aio_fildes, 0, 0, 0, 0, 0);
        break;
    default:                    /* LIO_NOP */
        return;
    }
    cb->__return_value = r < 0 ? -1 : r;
    __atomic_store_n(&cb->__error_code, r < 0 ? errno : 0, __ATOMIC_RELEASE);
}

static int submit(struct aiocb *cb, int op)
{
    int e = errno;
    if (op != O_SYNC && op != O_DSYNC && (cb->aio_reqprio < 0 || cb->aio_offset < 0))
        return lat_fail(EINVAL);
    run(cb, op);
    errno = e;
    notify(&cb->aio_sigevent);
    return 0;
}

#define AIO_RW(name, op)                                                    \
    int name(struct aiocb *cb)                                              \
    {                                                                       \
        if (lat_active() && shipped(cb->aio_fildes))                        \
            return submit(cb, op);                                          \
        return REAL(name)(cb);                                              \
    }
AIO_RW(aio_read, LIO_READ)
AIO_RW(aio_write, LIO_WRITE)

int aio_read64(struct aiocb64 *cb) { return aio_read((struct aiocb *)cb); }
int aio_write64(struct aiocb64 *cb) { return aio_write((struct aiocb *)cb); }

int aio_fsync(int op, struct aiocb *cb)
{
    if (lat_active() && shipped(cb->aio_fildes)) {
        if (op != O_SYNC && op != O_DSYNC)
            return lat_fail(EINVAL);
        return submit(cb, op);
    }
    return REAL(aio_fsync)(op, cb);
}

int aio_fsync64(int op, struct aiocb64 *cb) { return aio_fsync(op, (struct aiocb *)cb); }

/* A finished request's record is where glibc keeps its own: one answer
 * for both kinds. */
int aio_error(const struct aiocb *cb)
{
    return __atomic_load_n(&cb->__error_code, __ATOMIC_ACQUIRE);
}

ssize_t aio_return(struct aiocb *cb)
{
    return cb->__return_value;
}

int aio_error64(const struct aiocb64 *cb) { return aio_error((const struct aiocb *)cb); }
ssize_t aio_return64(struct aiocb64 *cb) { return aio_return((struct aiocb *)cb); }

/* Ours are finished when they are submitted: when one in the list is,
 * there is nothing to wait for; else glibc waits for its own. */
int aio_suspend(const struct aiocb *const list[], int n, const struct timespec *timeout)
{
    if (lat_active())
        for (int i = 0; i < n; i++)
            if (list[i] && shipped(list[i]->aio_fildes) && aio_error(list[i]) != EINPROGRESS)
                return 0;
    return REAL(aio_suspend)(list, n, timeout);
}

int aio_suspend64(const struct aiocb64 *const list[], int n, const struct timespec *timeout)
{
    return aio_suspend((const struct aiocb *const *)list, n, timeout);
}

int aio_cancel(int fd, struct aiocb *cb)
{
    if (lat_active() && shipped(fd)) {
        if (cb && cb->aio_fildes != fd)
            return lat_fail(EINVAL);
        return AIO_ALLDONE;     /* every request on it finished at submission */
    }
    return REAL(aio_cancel)(fd, cb);
}

int aio_cancel64(int fd, struct aiocb64 *cb) { return aio_cancel(fd, (struct aiocb *)cb); }

/* The shipped entries run now, in order; the node-local ones go to glibc
 * as one list (LIO_WAIT: it waits for them).  The list's own notice
 * comes when glibc's part is done, or at once when there is none. */
int lio_listio(int mode, struct aiocb *const list[], int n, struct sigevent *sev)
{
    if (!lat_active())
        return REAL(lio_listio)(mode, list, n, sev);
    if ((mode != LIO_WAIT && mode != LIO_NOWAIT) || n < 0)
        return lat_fail(EINVAL);
    int nlocal = 0, nship = 0, failed = 0;
    for (int i = 0; i < n; i++)
        if (list[i] && list[i]->aio_lio_opcode != LIO_NOP)
            shipped(list[i]->aio_fildes) ? nship++ : nlocal++;
    if (!nship)
        return REAL(lio_listio)(mode, list, n, sev);
    struct aiocb **local = nlocal ? malloc((size_t)nlocal * sizeof *local) : NULL;
    if (nlocal && !local)
        return lat_fail(EAGAIN);
    int k = 0, e = errno;
    for (int i = 0; i < n; i++) {
        struct aiocb *cb = list[i];
        if (!cb || cb->aio_lio_opcode == LIO_NOP)
            continue;
        if (!shipped(cb->aio_fildes)) {
            local[k++] = cb;
            continue;
        }
        if (cb->aio_lio_opcode != LIO_READ && cb->aio_lio_opcode != LIO_WRITE) {
            cb->__return_value = -1;
            cb->__error_code = EINVAL;
            failed = 1;
            continue;
        }
        run(cb, cb->aio_lio_opcode);
        failed |= cb->__error_code != 0;
        notify(&cb->aio_sigevent);      /* each request's own too, as glibc gives it */
    }
    errno = e;
    int r = 0;
    if (k)
        r = REAL(lio_listio)(mode, local, k, mode == LIO_NOWAIT ? sev : NULL);
    else if (mode == LIO_NOWAIT)
        notify(sev);
    free(local);
    if (r < 0)
        return r;
    if (mode == LIO_WAIT && failed)
        return lat_fail(EIO);   /* one or more requests failed: their records say why */
    return 0;
}

int lio_listio64(int mode, struct aiocb64 *const list[], int n, struct sigevent *sev)
{
    return lio_listio(mode, (struct aiocb *const *)list, n, sev);
}
