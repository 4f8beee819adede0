/*
 * lofar_impl.c - the I/O-node side of lofar.h.
 *
 * Ring: `slots` datagrams; the receiver thread fills slot seq % slots once it
 * is free, so a slow consumer holds the stream back in the socket's buffer
 * rather than losing pieces already taken in.  Piece k of a job goes to the
 * process with index (k mod count) among the pset's processes of the job
 * (zoid_caller()); a process's j-th call therefore gets piece index + j*count.
 * The buffer lofar_next's reply is sent from is the ring slot itself
 * (userbuf), given back when the reply is out (lofar_release).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <lattice/zoid_ion.h>

#include "lofar.h"

enum slot_state { FREE, FULL, TAKEN };

struct slot {
    enum slot_state state;
    uint32_t len;
    uint8_t  data[LOFAR_PIECE_MAX];
};

static struct {
    pthread_mutex_t lock;
    pthread_cond_t  cond;
    pthread_t       rx;
    int             sock, out;
    struct sockaddr_storage dest;
    socklen_t       destlen;
    struct slot    *ring;
    uint32_t        slots;
    uint64_t        head;           /* pieces received */
    uint64_t        job, base;      /* the job served and its piece 0 */
    uint32_t        nprocs;         /* the pset's processes of the job (zoid_caller count): no fixed cap */
    uint64_t       *next;           /* [nprocs] pieces each process of the job took */
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

static void *receiver(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&L.lock);
    while (!L.stop) {
        struct slot *s = &L.ring[L.head % L.slots];
        if (s->state != FREE) {
            pthread_cond_wait(&L.cond, &L.lock);
            continue;
        }
        pthread_mutex_unlock(&L.lock);
        ssize_t n = recv(L.sock, s->data, sizeof(s->data), 0);
        pthread_mutex_lock(&L.lock);
        if (n < 0)
            continue;                   /* EINTR, or the socket shut down for stop */
        s->len = (uint32_t)n;
        s->state = FULL;
        L.head++;
        pthread_cond_broadcast(&L.cond);
    }
    pthread_mutex_unlock(&L.lock);
    return NULL;
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

/* "port=P dest=HOST:PORT slots=N": P + the pset number is where the stream comes in. */
int lofar_init(const char *config)
{
    char buf[512], *save = NULL, msg[256];
    unsigned long port = 0, slots = 64;
    int err = 0;

    snprintf(buf, sizeof(buf), "%s", config);
    for (char *w = strtok_r(buf, " ,", &save); w; w = strtok_r(NULL, " ,", &save)) {
        if (!strncmp(w, "port=", 5))
            port = strtoul(w + 5, NULL, 10);
        else if (!strncmp(w, "slots=", 6))
            slots = strtoul(w + 6, NULL, 10);
        else if (!strncmp(w, "dest=", 5))
            err = parse_dest(w + 5);
        else
            err = EINVAL;
    }
    if (err || port == 0 || port + zoid_pset() > 65535 || slots < 2 || slots > 65536 || !L.destlen)
        return EINVAL;
    L.slots = (uint32_t)slots;
    L.ring = calloc(L.slots, sizeof(*L.ring));
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)(port + zoid_pset())),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    L.sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    L.out = socket(L.dest.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (!L.ring || L.sock < 0 || L.out < 0 || bind(L.sock, (struct sockaddr *)&a, sizeof(a)) < 0)
        return errno ? errno : ENOMEM;
    int big = 4 << 20;
    setsockopt(L.sock, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
    if ((err = pthread_create(&L.rx, NULL, receiver, NULL)) != 0)
        return err;
    snprintf(msg, sizeof(msg), "lofar: stream on udp 127.0.0.1:%lu, %u slots", port + zoid_pset(), L.slots);
    zoid_ras(ZOID_INFO, msg);
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
