/*
 * lofar_impl.c - the I/O-node side of lofar.h.
 *
 * Ring: `slots` datagrams; the receiver thread takes one datagram in hand and
 * puts it in slot seq % slots once that is free, so a slow consumer holds the
 * stream back in the socket's buffer rather than losing pieces already taken
 * in.  Piece k of a job goes to the process with index (k mod count) among
 * the pset's processes of the job (zoid_caller()); a process's j-th call
 * therefore gets piece index + j*count.  The buffer lofar_next's reply is
 * sent from is the ring slot itself (userbuf), given back when the reply is
 * out (lofar_release).
 *
 * Whose data (docs/plugins.md): on the unix transport (unix=@NAME) the
 * kernel tells each datagram's sender (SCM_CREDENTIALS), and a job's stream
 * holds only datagrams of its owner (zoid_caller()->uid): while a job runs,
 * another user's datagram is refused as it arrives; datagrams that came
 * between jobs wait in the ring with their sender and the next job's first
 * call drops those of other users.  Refusals are counted, with a RAS event at
 * the 1st, 2nd, 4th, 8th... .  UDP (port=P) carries no sender: it is the
 * trusted-network transport and takes anything that reaches it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <lattice/zoid_ion.h>

#include "lofar.h"

#define NOBODY UINT32_MAX           /* a sender the kernel did not name: nobody's data */

enum slot_state { FREE, FULL, TAKEN };

struct slot {
    enum slot_state state;
    uint32_t len;
    uint32_t uid;                   /* the sender (unix transport) */
    uint8_t  data[LOFAR_PIECE_MAX];
};

static struct {
    pthread_mutex_t lock;
    pthread_cond_t  cond;
    pthread_t       rx;
    int             sock, out;
    int             authenticated;  /* the unix transport: every datagram has its sender */
    struct sockaddr_storage dest;
    socklen_t       destlen;
    struct slot    *ring;
    uint32_t        slots;
    uint64_t        head;           /* pieces received */
    uint64_t        job, base;      /* the job served and its piece 0 */
    uint32_t        nprocs;         /* the pset's processes of the job (zoid_caller count): no fixed cap */
    uint64_t       *next;           /* [nprocs] pieces each process of the job took */
    uint64_t        refused;        /* datagrams of other users, since the start */
    /* gather */
    uint64_t        round, *mine;   /* [nprocs] rounds each process contributed to */
    uint32_t        contributed, veclen;
    int64_t         sum[LOFAR_VEC_MAX];
    int             stop;
} L = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER, .sock = -1, .out = -1 };

static _Thread_local uint64_t taken;    /* the piece lofar_alloc gave this thread */

/* Wait for the condition, looking every 200 ms whether the caller is gone
 * (a killed job must not leave a ciod thread waiting for data forever). */
static int wait_caller_locked(void)
{
    struct timespec t;

    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_nsec += 200 * 1000 * 1000;
    if (t.tv_nsec >= 1000000000) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&L.cond, &L.lock, &t);
    return zoid_caller_gone() || L.stop ? EINTR : 0;
}

/* n datagrams of other users refused (under L.lock): counted, and a RAS
 * event when the count passes a power of two, so a flood costs the log
 * a line per doubling. */
static void refused_locked(uint64_t n, const char *what, uint32_t uid, uint64_t job, uint32_t owner)
{
    char msg[256];
    uint64_t before = L.refused;

    L.refused += n;
    if (n == 0 || (before ? 64 - __builtin_clzll(before) : 0) == 64 - __builtin_clzll(L.refused))
        return;
    snprintf(msg, sizeof(msg), "lofar: %s from uid %u refused: job %" PRIu64 " is uid %u's (%" PRIu64
             " datagrams of other users refused so far)", what, uid, job, owner, L.refused);
    zoid_ras(ZOID_WARNING, msg);
}

/* The next datagram into buf: its length (-1: none) and its sender's uid. */
static ssize_t receive(uint8_t *buf, uint32_t *uid)
{
    /* room for the credentials and a few descriptors a sender may attach, which are closed */
    union { char b[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(8 * sizeof(int))]; struct cmsghdr align; } u;
    struct iovec v = { buf, LOFAR_PIECE_MAX };
    struct msghdr mh = { .msg_iov = &v, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof(u.b) };
    ssize_t n = recvmsg(L.sock, &mh, MSG_CMSG_CLOEXEC);

    *uid = NOBODY;
    if (n < 0)
        return -1;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
        if (cm->cmsg_level != SOL_SOCKET)
            continue;
        if (cm->cmsg_type == SCM_CREDENTIALS && cm->cmsg_len == CMSG_LEN(sizeof(struct ucred))) {
            struct ucred cr;
            memcpy(&cr, CMSG_DATA(cm), sizeof(cr));
            *uid = cr.uid;
        } else if (cm->cmsg_type == SCM_RIGHTS) {
            for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
                int fd;
                memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(fd));
                close(fd);
            }
        }
    }
    return n > LOFAR_PIECE_MAX ? LOFAR_PIECE_MAX : n;   /* a longer datagram: its first bytes */
}

/* Whether a datagram of uid may join the stream now (under L.lock): while a
 * job runs, only if it is the owner's; between jobs it waits in the ring for
 * the next job's first call. */
static int accepted_locked(uint32_t uid)
{
    uint64_t job;
    uint32_t owner;

    if (!L.authenticated || zoid_running_job(&job, &owner, NULL) != 0 || uid == owner)
        return 1;
    refused_locked(1, "a datagram", uid, job, owner);
    return 0;
}

static void *receiver(void *arg)
{
    static uint8_t buf[LOFAR_PIECE_MAX];    /* the datagram in hand: one receiver */
    (void)arg;
    for (;;) {
        uint32_t uid;
        ssize_t n = receive(buf, &uid);
        pthread_mutex_lock(&L.lock);
        int ok = !L.stop && n >= 0 && accepted_locked(uid);
        while (ok && L.ring[L.head % L.slots].state != FREE) {
            pthread_cond_wait(&L.cond, &L.lock);
            ok = !L.stop && accepted_locked(uid);    /* the job may have changed meanwhile */
        }
        if (ok) {
            struct slot *s = &L.ring[L.head % L.slots];
            memcpy(s->data, buf, (size_t)n);
            s->len = (uint32_t)n;
            s->uid = uid;
            s->state = FULL;
            L.head++;
            pthread_cond_broadcast(&L.cond);
        }
        int stop = L.stop;
        pthread_mutex_unlock(&L.lock);
        if (stop)
            return NULL;
    }
}

static int parse_dest(const char *text)
{
    char host[256];
    const char *colon = strrchr(text, ':');
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM }, *ai;

    if (!colon || (size_t)(colon - text) >= sizeof(host))
        return EINVAL;
    memcpy(host, text, (size_t)(colon - text));
    host[colon - text] = 0;
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0)
        return EINVAL;
    memcpy(&L.dest, ai->ai_addr, ai->ai_addrlen);
    L.destlen = ai->ai_addrlen;
    freeaddrinfo(ai);
    return 0;
}

/* The stream's socket, bound: UDP on 127.0.0.1:port+pset, or the abstract
 * unix datagram socket NAME.pset (no file to plant or to remove), whose
 * datagrams carry their sender's credentials. */
static int open_stream(unsigned long port, const char *unix_name, char *where, size_t wlen)
{
    int one = 1, big = 4 << 20;

    if (unix_name) {
        struct sockaddr_un a = { .sun_family = AF_UNIX };
        int n = snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, "%s.%u", unix_name, zoid_pset());
        snprintf(where, wlen, "unix @%.200s.%u", unix_name, zoid_pset());
        if (n <= 0 || (size_t)n >= sizeof(a.sun_path) - 1)
            return ENAMETOOLONG;
        L.sock = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (L.sock < 0 || setsockopt(L.sock, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) < 0
            || bind(L.sock, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) < 0)
            return errno;
        L.authenticated = 1;
    } else {
        struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)(port + zoid_pset())),
                                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
        snprintf(where, wlen, "udp 127.0.0.1:%lu", port + zoid_pset());
        L.sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (L.sock < 0 || bind(L.sock, (struct sockaddr *)&a, sizeof(a)) < 0)
            return errno;
    }
    setsockopt(L.sock, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
    return 0;
}

/* "port=P | unix=@NAME, dest=HOST:PORT, slots=N": P + the pset number, or
 * NAME.pset, is where the stream comes in. */
int lofar_init(const char *config)
{
    char buf[512], *save = NULL, msg[640], where[256], *unix_name = NULL;
    unsigned long port = 0, slots = 64;
    int err = 0;

    snprintf(buf, sizeof(buf), "%s", config);
    for (char *w = strtok_r(buf, " ,", &save); w; w = strtok_r(NULL, " ,", &save)) {
        if (!strncmp(w, "port=", 5))
            port = strtoul(w + 5, NULL, 10);
        else if (!strncmp(w, "unix=@", 6) && w[6])
            unix_name = w + 6;
        else if (!strncmp(w, "slots=", 6))
            slots = strtoul(w + 6, NULL, 10);
        else if (!strncmp(w, "dest=", 5))
            err = parse_dest(w + 5);
        else
            err = EINVAL;
    }
    if (err || !unix_name == !port || port + zoid_pset() > 65535 || slots < 2 || slots > 65536 || !L.destlen) {
        snprintf(msg, sizeof(msg), "lofar: bad configuration \"%.200s\": want one of port=P and unix=@NAME, "
                 "dest=HOST:PORT, slots=2..65536", config);
        zoid_ras(ZOID_ERROR, msg);
        return EINVAL;
    }
    L.slots = (uint32_t)slots;
    L.ring = calloc(L.slots, sizeof(*L.ring));
    L.out = socket(L.dest.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (!L.ring || L.out < 0)
        return errno ? errno : ENOMEM;
    if ((err = open_stream(port, unix_name, where, sizeof(where))) != 0) {
        snprintf(msg, sizeof(msg), "lofar: cannot take the stream on %s: %s", where, strerror(err));
        zoid_ras(ZOID_ERROR, msg);
        return err;
    }
    if ((err = pthread_create(&L.rx, NULL, receiver, NULL)) != 0)
        return err;
    snprintf(msg, sizeof(msg), "lofar: stream on %s %s, %u slots", where, L.authenticated
             ? "(authenticated: only the job owner's datagrams)"
             : "(unauthenticated: any local user may send into a job's stream; trusted hosts only, "
               "unix= authenticates)", L.slots);
    zoid_ras(L.authenticated ? ZOID_INFO : ZOID_WARNING, msg);
    return 0;
}

void lofar_fini(void)
{
    pthread_mutex_lock(&L.lock);
    L.stop = 1;
    pthread_cond_broadcast(&L.cond);
    pthread_mutex_unlock(&L.lock);
    shutdown(L.sock, SHUT_RDWR);
    pthread_join(L.rx, NULL);
}

/* The caller's job is the one served: a new one starts afresh, at the
 * oldest piece still waiting in the ring, its tables sized to its
 * processes.  0, or an errno: EINVAL for an index beyond the job's
 * processes, ENOMEM. */
/* A new job's stream: the datagrams waiting in the ring from its owner, in
 * order; those of other users are dropped (under L.lock).  Nothing else
 * writes the slots meanwhile: the receiver fills them under the lock. */
static void keep_owners_locked(uint32_t owner, uint64_t job)
{
    uint64_t w = L.base, dropped = 0;
    uint32_t uid = NOBODY;

    for (uint64_t k = L.base; k < L.head; k++) {
        struct slot *s = &L.ring[k % L.slots];
        if (s->uid != owner) {
            uid = s->uid;
            dropped++;
        } else if (w++ != k) {
            struct slot *to = &L.ring[(w - 1) % L.slots];
            to->len = s->len;
            to->uid = s->uid;
            memcpy(to->data, s->data, s->len);
        }
    }
    for (uint64_t k = w; k < L.head; k++)
        L.ring[k % L.slots].state = FREE;
    L.head = w;
    refused_locked(dropped, "datagrams waiting since before the job (the last)", uid, job, owner);
}

/* The caller's job is the one served: a new one starts afresh, at the
 * oldest piece still waiting in the ring (its owner's only), its tables
 * sized to its processes.  0, or an errno: EINVAL for an index beyond the
 * job's processes, ENOMEM. */
static int job_check_locked(const struct zoid_caller *c)
{
    if (c->job == L.job && L.next)
        return c->index < L.nprocs ? 0 : EINVAL;
    uint64_t *next = calloc(c->count, sizeof(*next)), *mine = calloc(c->count, sizeof(*mine));
    if (!next || !mine) {
        free(next);
        free(mine);
        return ENOMEM;
    }
    free(L.next);
    free(L.mine);
    L.next = next;
    L.mine = mine;
    L.nprocs = c->count;
    L.job = c->job;
    L.base = L.head;
    while (L.base > 0 && L.head - L.base < L.slots && L.ring[(L.base - 1) % L.slots].state == FULL)
        L.base--;
    /* pieces of an earlier job that its processes left behind a gap: nobody takes them
     * now, and the receiver would wait for their slots for ever */
    for (uint64_t k = L.head > L.slots ? L.head - L.slots : 0; k < L.base; k++)
        if (L.ring[k % L.slots].state == FULL)
            L.ring[k % L.slots].state = FREE;
    pthread_cond_broadcast(&L.cond);
    if (L.authenticated)
        keep_owners_locked(c->uid, c->job);
    L.round = 0;
    L.contributed = 0;
    memset(L.sum, 0, sizeof(L.sum));
    return c->index < L.nprocs ? 0 : EINVAL;
}

void *lofar_alloc(uint32_t fn, unsigned arg, size_t bytes)
{
    const struct zoid_caller *c = zoid_caller();
    (void)fn;
    (void)arg;
    if (bytes > LOFAR_PIECE_MAX || c->count == 0 || c->index >= c->count) {
        errno = EINVAL;
        return NULL;
    }
    pthread_mutex_lock(&L.lock);
    int bad = job_check_locked(c);
    if (bad) {
        pthread_mutex_unlock(&L.lock);
        errno = bad;
        return NULL;
    }
    uint64_t k = L.base + c->index + (uint64_t)c->count * L.next[c->index]++;
    while (L.head <= k) {
        int err = wait_caller_locked();
        if (err) {
            pthread_mutex_unlock(&L.lock);
            errno = err;
            return NULL;
        }
    }
    struct slot *s = &L.ring[k % L.slots];
    s->state = TAKEN;
    taken = k;
    pthread_mutex_unlock(&L.lock);
    return s->data;
}

void lofar_release(uint32_t fn, unsigned arg, void *buf)
{
    (void)fn;
    (void)arg;
    pthread_mutex_lock(&L.lock);
    ((struct slot *)((char *)buf - offsetof(struct slot, data)))->state = FREE;
    pthread_cond_broadcast(&L.cond);
    pthread_mutex_unlock(&L.lock);
}

int32_t lofar_next(uint8_t *buf, uint32_t cap, uint64_t *seq)
{
    const struct slot *s = (const struct slot *)(buf - offsetof(struct slot, data));
    *seq = taken - L.base;
    return (int32_t)(s->len < cap ? s->len : cap);
}

int64_t lofar_put(const int64_t *vals, uint32_t n)
{
    const struct zoid_caller *c = zoid_caller();
    int64_t round;

    if (n == 0 || n > LOFAR_VEC_MAX || c->count == 0 || c->index >= c->count) {
        errno = EINVAL;
        return -1;
    }
    pthread_mutex_lock(&L.lock);
    int bad = job_check_locked(c);
    if (bad) {
        pthread_mutex_unlock(&L.lock);
        errno = bad;
        return -1;
    }
    while (L.mine[c->index] > L.round) {
        int err = wait_caller_locked();
        if (err) {
            pthread_mutex_unlock(&L.lock);
            errno = err;
            return -1;
        }
    }
    if (L.contributed == 0)
        L.veclen = n;
    if (n != L.veclen) {
        pthread_mutex_unlock(&L.lock);
        errno = EINVAL;
        return -1;
    }
    for (uint32_t i = 0; i < n; i++)
        L.sum[i] += vals[i];
    L.mine[c->index]++;
    round = (int64_t)L.round;
    if (++L.contributed == c->count) {
        sendto(L.out, L.sum, n * sizeof(int64_t), 0, (struct sockaddr *)&L.dest, L.destlen);
        memset(L.sum, 0, sizeof(L.sum));
        L.contributed = 0;
        L.round++;
        pthread_cond_broadcast(&L.cond);
    }
    pthread_mutex_unlock(&L.lock);
    return round;
}
