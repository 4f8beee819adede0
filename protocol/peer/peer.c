/*
 * peer.c - the client side of a connection to ciod (docs/protocol.md
 * sections 1-3): the address, the framed messages, the handshake.  Used by
 * cnode (its node, PROC and PMI connections) and by ciod itself, whose
 * connection to its parent in a job's PMI fence tree is a client of the
 * parent ciod like any other.
 */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/random.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <pthread.h>

#include <lattice/hello_mac.h>
#include <lattice/peer.h>
#include <lattice/seal.h>

/* The sealed descriptors (few: a node connection, a tree connection). */
struct sealed {
    int             fd;
    struct lat_seal s;
    uint8_t        *buf;                /* a whole sealed frame, each way in turn */
    struct sealed  *next;
};
static struct sealed *sealed_list;
static pthread_mutex_t sealed_lock = PTHREAD_MUTEX_INITIALIZER;

static struct sealed *sealed_unlink(int fd)
{
    for (struct sealed **p = &sealed_list; *p; p = &(*p)->next)
        if ((*p)->fd == fd) {
            struct sealed *e = *p;
            *p = e->next;
            return e;
        }
    return NULL;
}

static void sealed_free(struct sealed *e)
{
    if (!e)
        return;
    lat_seal_free(&e->s);
    free(e->buf);
    free(e);
}

static struct sealed *sealed_find(int fd)
{
    struct sealed *e;
    pthread_mutex_lock(&sealed_lock);
    for (e = sealed_list; e && e->fd != fd; e = e->next)
        ;
    pthread_mutex_unlock(&sealed_lock);
    return e;
}

/* fd is sealed from now on with k; a stale entry of a closed descriptor goes. */
static int sealed_add(int fd, const struct lat_seal_keys *k)
{
    struct sealed *e = calloc(1, sizeof(*e));
    if (!e || !(e->buf = malloc(LAT_SEAL_LEN_BYTES + LAT_SEAL_MAX + LAT_SEAL_TAG_BYTES)) ||
        lat_seal_init(&e->s, k) < 0) {
        if (e)
            free(e->buf);
        free(e);
        errno = ENOMEM;
        return -1;
    }
    e->fd = fd;
    pthread_mutex_lock(&sealed_lock);
    sealed_free(sealed_unlink(fd));
    e->next = sealed_list;
    sealed_list = e;
    pthread_mutex_unlock(&sealed_lock);
    return 0;
}

void net_forget(int fd)
{
    pthread_mutex_lock(&sealed_lock);
    sealed_free(sealed_unlink(fd));
    pthread_mutex_unlock(&sealed_lock);
}

int net_seal_take(int fd, struct lat_seal_keys *k)
{
    pthread_mutex_lock(&sealed_lock);
    struct sealed *e = sealed_unlink(fd);
    pthread_mutex_unlock(&sealed_lock);
    if (!e)
        return 0;
    *k = e->s.k;
    sealed_free(e);
    return 1;
}

/* A peer on another host that vanishes without a word (its host lost
 * power, the network parted) is noticed by TCP keepalive probes after 5 s of
 * silence, 2 s apart, 3 of them: its connection then fails within ~11 s as
 * if it had closed.  The heartbeat of every connection between hosts, on
 * both ends (ciod sets it on what it accepts); a unix socket ignores it. */
void net_keepalive(int fd)
{
    int one = 1, idle = 5, intvl = 2, cnt = 3;

    if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one) == 0) {
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
    }
}

static int connect_once(const char *addr)
{
    if (strncmp(addr, "unix:", 5) == 0) {
        struct sockaddr_un sa = { .sun_family = AF_UNIX };
        if (strlen(addr + 5) >= sizeof sa.sun_path) {
            errno = ENAMETOOLONG;
            return -1;
        }
        strcpy(sa.sun_path, addr + 5);
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return -1;
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
            return fd;
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    if (strncmp(addr, "tcp:", 4) == 0) {
        char host[256];
        const char *colon = strrchr(addr + 4, ':');
        if (!colon || (size_t)(colon - (addr + 4)) >= sizeof host) {
            errno = EINVAL;
            return -1;
        }
        memcpy(host, addr + 4, (size_t)(colon - (addr + 4)));
        host[colon - (addr + 4)] = '\0';
        struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM }, *res;
        if (getaddrinfo(host, colon + 1, &hints, &res) != 0) {
            errno = EHOSTUNREACH;
            return -1;
        }
        int fd = -1, e = ECONNREFUSED;
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
            fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
            if (fd < 0)
                continue;
            if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
                int one = 1;        /* no Nagle for small calls */
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                net_keepalive(fd);
                break;
            }
            e = errno;
            close(fd);
            fd = -1;
        }
        freeaddrinfo(res);
        if (fd < 0)
            errno = e;
        return fd;
    }
    errno = EINVAL;
    return -1;
}

/* ciod may not be listening yet when the service node starts us. */
int net_connect(const char *addr, double retry_seconds)
{
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int fd = connect_once(addr);
        if (fd >= 0 || errno == EINVAL || errno == ENAMETOOLONG)
            return fd;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((double)(now.tv_sec - t0.tv_sec) + (now.tv_nsec - t0.tv_nsec) / 1e9 >= retry_seconds)
            return -1;
        nanosleep(&(struct timespec){ 0, 100 * 1000 * 1000 }, NULL);
    }
}

static int write_all(int fd, struct iovec *iov, int cnt)
{
    while (cnt > 0) {
        struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t)cnt };
        ssize_t n = sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        while (cnt > 0 && (size_t)n >= iov->iov_len) {
            n -= (ssize_t)iov->iov_len;
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

int net_send(int fd, uint16_t type, uint32_t seq, const void *a, size_t alen, const void *b, size_t blen)
{
    if (alen + blen > LAT_MAX_PAYLOAD) {
        errno = EMSGSIZE;
        return -1;
    }
    struct lat_hdr h = { .magic = LAT_MAGIC, .version = LAT_VERSION, .type = type, .len = (uint32_t)(alen + blen),
                         .seq = seq };
    struct iovec v[3] = { { &h, sizeof h }, { (void *)a, alen }, { (void *)b, blen } };
    struct sealed *e = sealed_find(fd);
    if (e) {                            /* one user of a descriptor at a time: its buffer is ours */
        long n = lat_seal_frame(&e->s, v, 3, e->buf);
        if (n < 0) {
            errno = EIO;
            return -1;
        }
        struct iovec f = { e->buf, (size_t)n };
        return write_all(fd, &f, 1);
    }
    return write_all(fd, v, 3);
}

/* 1 all read, 0 EOF before the first byte, -1 error */
int net_read_full(int fd, void *buf, size_t len, int eof_ok)
{
    char *p = buf;
    size_t done = 0;
    while (done < len) {
        ssize_t n = read(fd, p + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return -1;
        if (n == 0) {
            if (done == 0 && eof_ok)
                return 0;
            errno = ECONNRESET;
            return -1;
        }
        done += (size_t)n;
    }
    return 1;
}

int net_recv_frame(int fd, struct lat_hdr *h, void *payload, int eof_ok)
{
    struct sealed *e = sealed_find(fd);
    if (!e) {
        int r = net_read_full(fd, h, sizeof *h, eof_ok);
        if (r <= 0)
            return r;
        if (h->magic != LAT_MAGIC || h->version != LAT_VERSION || h->len > LAT_MAX_PAYLOAD) {
            errno = EPROTO;
            return -1;
        }
        return h->len && net_read_full(fd, payload, h->len, 0) < 0 ? -1 : 1;
    }
    uint8_t lb[LAT_SEAL_LEN_BYTES], tag[LAT_SEAL_TAG_BYTES];
    uint32_t len;
    int r = net_read_full(fd, lb, sizeof lb, eof_ok);
    if (r <= 0)
        return r;
    if (lat_open_begin(&e->s, lb, &len) < 0) {
        errno = EBADMSG;
        return -1;
    }
    if (net_read_full(fd, e->buf, len, 0) < 0 || net_read_full(fd, tag, sizeof tag, 0) < 0)
        return -1;
    /* nothing of it is looked at before its tag is checked */
    if (lat_open_update(&e->s, e->buf, len, e->buf) < 0 || lat_open_end(&e->s, tag) < 0) {
        errno = EBADMSG;
        return -1;
    }
    memcpy(h, e->buf, sizeof *h);
    if (h->magic != LAT_MAGIC || h->version != LAT_VERSION || h->len != len - sizeof *h) {
        errno = EPROTO;
        return -1;
    }
    memcpy(payload, e->buf + sizeof *h, h->len);
    return 1;
}

int net_hello(int fd, uint32_t role, uint32_t node, uint64_t job, const uint8_t key[LAT_KEY_BYTES], uint32_t seq)
{
    return net_hello_proc(fd, role, node, job, key, seq, NULL, NULL);
}

/* A header and payload of exactly len bytes, of type `type`; 0 or -1 (EPROTO). */
static int recv_fixed(int fd, uint16_t type, void *p, size_t len)
{
    struct lat_hdr h;
    if (net_read_full(fd, &h, sizeof h, 0) < 0)
        return -1;
    if (h.magic != LAT_MAGIC || h.version != LAT_VERSION || h.type != type || h.len != len) {
        errno = EPROTO;
        return -1;
    }
    return net_read_full(fd, p, len, 0) < 0 ? -1 : 0;
}

/* The handshake (docs/protocol.md section 3): ciod's challenge, our hello
 * with its mac, ciod's ack with its proof, which we check: the key never
 * travels, and a daemon that does not hold it is refused (EBADMSG).  With hp
 * (a PROC hello of the process hp->pid), *dp gets the data path ciod agreed. */
int net_hello_proc(int fd, uint32_t role, uint32_t node, uint64_t job, const uint8_t key[LAT_KEY_BYTES],
                   uint32_t seq, const struct lat_hello_proc *hp, struct lat_datapath *dp)
{
    struct lat_challenge ch;
    struct lat_hello h = { .role = role, .node = node, .job = job };
    struct {
        struct lat_hello_ack ack;
        struct lat_datapath dp;
    } r;
    _Static_assert(sizeof r == sizeof r.ack + sizeof r.dp, "no padding");
    uint8_t want[LAT_MAC_BYTES];

    if (dp)
        memset(dp, 0, sizeof *dp);
    if (recv_fixed(fd, LAT_CHALLENGE, &ch, sizeof ch) < 0)
        return -1;
    if (getrandom(h.nonce, sizeof h.nonce, 0) != (ssize_t)sizeof h.nonce ||
        lat_hello_mac(key, ch.nonce, &h, hp, h.mac) < 0) {
        errno = EIO;
        return -1;
    }
    if (net_send(fd, LAT_HELLO, seq, &h, sizeof h, hp, hp ? sizeof *hp : 0) < 0)
        return -1;
    struct lat_hdr rh;
    if (net_read_full(fd, &rh, sizeof rh, 0) < 0)
        return -1;
    /* the ack, and after it the data path if we asked for one and were not refused */
    if (rh.magic != LAT_MAGIC || rh.version != LAT_VERSION || rh.type != (LAT_HELLO | LAT_REPLY) ||
        (rh.len != sizeof r.ack && !(hp && rh.len == sizeof r))) {
        errno = EPROTO;
        return -1;
    }
    if (net_read_full(fd, &r, rh.len, 0) < 0)
        return -1;
    if (r.ack.err) {
        errno = r.ack.err;
        return -1;
    }
    int has_dp = rh.len == sizeof r;
    if (lat_ack_proof(key, ch.nonce, h.nonce, &r.ack, has_dp ? &r.dp : NULL, want) < 0 ||
        CRYPTO_memcmp(want, r.ack.proof, sizeof want) != 0) {
        errno = EBADMSG;
        return -1;
    }
    if (dp && has_dp)
        *dp = r.dp;
    net_forget(fd);                     /* a closed descriptor's, if any */
    if (lat_seal_wanted(fd)) {          /* a link between hosts: sealed from now on, each way */
        struct lat_seal_keys k;
        int rc = lat_seal_derive(key, ch.nonce, h.nonce, role, node, job, false, &k);
        if (rc == 0)
            rc = sealed_add(fd, &k);
        lat_seal_wipe(&k, sizeof k);
        if (rc < 0) {
            errno = EIO;
            return -1;
        }
    }
    return 0;
}
