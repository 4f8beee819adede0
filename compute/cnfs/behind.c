/*
 * behind.c - write-through writes answered before the I/O node has them.
 *
 * A write through the page cache costs the program one copy more than a
 * direct_io one (its bytes into the cache, before the kernel hands them to
 * us), and the kernel sends the next write only when this one is answered.
 * So the write's request is answered as soon as its bytes are in our
 * receive buffer, and one thread ships them to ciod while the program
 * copies its next bytes into the cache.  At most one write is behind: the
 * next one, and any other request (main.c), waits for it first, so
 * requests still reach the I/O node in the order the kernel sent them.
 * An error of a write behind is the open file's, said at its next write,
 * fsync or close (FLUSH), as NFS says a write-behind's.
 */
#include <errno.h>
#include <pthread.h>

#include "cnfs.h"
#include "shipc.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t posted = PTHREAD_COND_INITIALIZER, done = PTHREAD_COND_INITIALIZER;
static struct {
    int *err;                   /* the open file's error slot */
    int rfd;
    const char *buf;            /* in a receive buffer: main.c leaves it alone meanwhile */
    size_t size;
    off_t off;
} job;
static int busy, started, broken;

static void *writer(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&lock);
    for (;;) {
        while (!busy)
            pthread_cond_wait(&posted, &lock);
        pthread_mutex_unlock(&lock);
        struct iovec v = { (void *)job.buf, job.size };
        long r = shipc_rw(job.rfd, 1, &v, 1, job.off);
        pthread_mutex_lock(&lock);
        if (r < 0 && !*job.err)
            *job.err = (int)-r;
        else if (r >= 0 && (size_t)r < job.size && !*job.err)
            *job.err = ENOSPC;          /* a regular file's short write: no room for the rest */
        busy = 0;
        pthread_cond_broadcast(&done);
    }
    return NULL;
}

void behind_drain(void)
{
    pthread_mutex_lock(&lock);
    while (busy)
        pthread_cond_wait(&done, &lock);
    pthread_mutex_unlock(&lock);
}

int behind_post(int *err, int rfd, const char *buf, size_t size, off_t off)
{
    behind_drain();
    pthread_mutex_lock(&lock);
    if (!started && !broken) {
        pthread_t t;
        started = pthread_create(&t, NULL, writer, NULL) == 0;
        broken = !started;
    }
    if (!started) {
        pthread_mutex_unlock(&lock);
        return -1;              /* no thread: the caller writes at once */
    }
    job.err = err;
    job.rfd = rfd;
    job.buf = buf;
    job.size = size;
    job.off = off;
    busy = 1;
    pthread_cond_signal(&posted);
    pthread_mutex_unlock(&lock);
    return 0;
}

int behind_holds(const char *buf)
{
    pthread_mutex_lock(&lock);
    int held = busy && buf <= job.buf && job.buf < buf + CNFS_RECV_BYTES;
    pthread_mutex_unlock(&lock);
    return held;
}
