/*
 * stdin.c - the job's standard input, in its I/O worker (docs/protocol.md
 * section 4.1).
 *
 * A job with LAT_JOB_STDIN names the rank that reads its input, or every
 * rank.  Each reading rank of this pset gets a pipe here, made when the
 * worker starts, so a read that comes before any input waits for it.  The
 * monitor passes each LAT_CTL_STDIN on (W_STDIN, worker.c); the pump thread
 * writes the chunk into every reading rank's pipe, then acknowledges it,
 * which lets the service node send more: what waits here is bounded by its
 * window (LAT_STDIN_WINDOW) and the pipes.  A rank's shipped read of its
 * descriptor 0 reads its pipe (ship.c, stdin_read), waiting there without
 * holding anything another process needs.  With every rank reading, the
 * input goes at the pace of the slowest reader.  A rank whose connection
 * closed (it ended, read or not) reads no more: its pipe goes
 * (stdin_gone), so that the others and the window go on without it.
 */
#include "ciod.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct chunk {
    struct chunk *next;
    uint32_t      len, flags;
    char          data[];
};

struct reader {
    int32_t rank;
    int     rd, wr;                     /* the pipe; wr -1 after end of file */
};

static struct {
    pthread_mutex_t lock;
    pthread_cond_t  more;
    struct chunk   *head, *tail;
    struct reader  *r;                  /* fixed once the pump runs */
    unsigned        n;
} in = { .lock = PTHREAD_MUTEX_INITIALIZER, .more = PTHREAD_COND_INITIALIZER };

/* All of len into a reader's pipe; false (pipe closed) if it cannot take it. */
static bool put_all(struct reader *r, const char *p, size_t len)
{
    while (len) {
        ssize_t n = write(r->wr, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            close(r->wr);
            r->wr = -1;
            return false;
        }
        p += n;
        len -= (size_t)n;
    }
    return true;
}

/* Every chunk queued is taken at once and acknowledged in one message per
 * ACK_BATCH bytes, not one per chunk: each acknowledgement is a round trip
 * to the monitor (worker.c), and one a chunk held the input to their pace. */
#define ACK_BATCH (256u * 1024u)

static void *pump_main(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "ciod-stdin");
    for (;;) {
        pthread_mutex_lock(&in.lock);
        while (!in.head)
            pthread_cond_wait(&in.more, &in.lock);
        struct chunk *c = in.head;
        in.head = in.tail = NULL;
        pthread_mutex_unlock(&in.lock);
        uint32_t unacked = 0;
        while (c) {
            for (unsigned i = 0; i < in.n; i++) {
                struct reader *r = &in.r[i];
                if (r->wr >= 0 && c->len)
                    put_all(r, c->data, c->len);
                if (r->wr >= 0 && (c->flags & LAT_STDIN_EOF)) {
                    close(r->wr);
                    r->wr = -1;
                }
            }
            unacked += c->len;
            struct chunk *next = c->next;
            free(c);
            c = next;
            if (unacked >= ACK_BATCH || !c) {
                worker_stdin_ack(unacked);
                unacked = 0;
            }
        }
    }
    return NULL;
}

int stdin_setup(const struct job_spec *js, char *why, size_t whylen)
{
    uint32_t who;
    pthread_attr_t attr;
    pthread_t t;

    if (!(js->hdr->flags & LAT_JOB_STDIN))
        return 0;
    who = js->stdin_rank;
    if (!(in.r = calloc(js->nslots ? js->nslots : 1, sizeof(*in.r))))
        return errprintf(why, whylen, "standard input: out of memory");
    for (uint32_t i = 0; i < js->nslots; i++) {
        int fds[2];
        if (who != LAT_STDIN_ALL && js->slot[i].rank != who)
            continue;
        if (pipe2(fds, O_CLOEXEC) < 0)
            return errprintf(why, whylen, "standard input of rank %u: pipe: %s", js->slot[i].rank,
                             strerror(errno));
        fcntl(fds[0], F_SETFL, O_NONBLOCK);     /* stdin_read waits in poll, with the connection */
        fcntl(fds[1], F_SETPIPE_SZ, (int)LAT_STDIN_MAX * 4);   /* a rank's big read gets more than 64 KiB; may fail */
        in.r[in.n++] = (struct reader){ (int32_t)js->slot[i].rank, fds[0], fds[1] };
    }
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64u * 1024u);
    if (pthread_create(&t, &attr, pump_main, NULL) != 0)
        return errprintf(why, whylen, "standard input: no thread");
    return 0;
}

void stdin_put(uint32_t flags, const void *data, size_t len)
{
    struct chunk *c = malloc(sizeof(*c) + len);

    if (!c) {                           /* the ranks lose this input; the window must go on */
        ras_event(RAS_ERROR, cfg.location, "standard input: %zu bytes lost (out of memory)", len);
        worker_stdin_ack((uint32_t)len);
        return;
    }
    c->next = NULL;
    c->len = (uint32_t)len;
    c->flags = flags;
    memcpy(c->data, data, len);
    pthread_mutex_lock(&in.lock);
    if (in.tail)
        in.tail->next = c;
    else
        in.head = c;
    in.tail = c;
    pthread_cond_signal(&in.more);
    pthread_mutex_unlock(&in.lock);
}

int stdin_fd(int32_t rank)
{
    int fd = -1;

    pthread_mutex_lock(&in.lock);
    for (unsigned i = 0; i < in.n; i++)
        if (in.r[i].rank == rank)
            fd = in.r[i].rd;
    pthread_mutex_unlock(&in.lock);
    return fd;
}

void stdin_gone(int32_t rank)
{
    pthread_mutex_lock(&in.lock);
    for (unsigned i = 0; i < in.n; i++)
        if (in.r[i].rank == rank && in.r[i].rd >= 0) {
            close(in.r[i].rd);          /* the pump's write to it fails (EPIPE) rather than waits */
            in.r[i].rd = -1;
        }
    pthread_mutex_unlock(&in.lock);
}

ssize_t stdin_read(int fd, int conn_fd, void *buf, size_t n)
{
    for (;;) {
        ssize_t m = read(fd, buf, n);
        if (m >= 0 || (errno != EAGAIN && errno != EINTR))
            return m;
        struct pollfd pf[2] = { { fd, POLLIN, 0 }, { conn_fd, POLLRDHUP, 0 } };
        while (poll(pf, 2, -1) < 0 && errno == EINTR)
            ;
        if (pf[1].revents) {            /* the process hung up: nobody waits for this read */
            errno = EINTR;
            return -1;
        }
    }
}
