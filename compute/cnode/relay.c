/*
 * relay.c - a compute process's PROC connection to an I/O node on another
 * host, sealed on its behalf (docs/protocol.md section 3.3).
 *
 * The process (cnk, or libcnclient in Linux mode) speaks plain frames and
 * must never hold a key: a job's memory is the job's.  So for a tcp: I/O
 * node, cnode connects and gives the process one end of a unix socketpair;
 * a relay process of its own holds the TCP link.  The handshake passes
 * through unchanged (the process's hello is said by cnode's child before
 * exec, as on one host); when ciod's ack proves it holds the block key the
 * relay derives the session keys, wipes the block key from its memory and
 * from then on seals what the process sends and opens what ciod sends, a
 * thread each way.  A frame that fails its tag ends the relay, and with it
 * the process's connection.
 *
 * The relay is a process, not a thread of cnode: cnode forks its job's
 * processes and stays single-threaded for that; it is double-forked so
 * that cnode, which waits for its children by pid, has no child to reap,
 * and it ends when either side of it closes (the process's end closes when
 * the process and all it forked have ended).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <openssl/crypto.h>

#include <lattice/hello_mac.h>
#include <lattice/seal.h>

#include "cnode.h"

#define FRAME_ROOM (LAT_SEAL_LEN_BYTES + LAT_SEAL_MAX + LAT_SEAL_TAG_BYTES)
#define PAIR_BUFFER (2 << 20)       /* bytes each way on the process's socketpair */

struct relay {
    int             tcp, proc;          /* ciod's link (sealed), the process's end (plain) */
    struct lat_seal s;
    uint8_t        *up, *down;          /* a frame each way */
};

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        c += w;
        n -= (size_t)w;
    }
    return 0;
}

/* One plain frame from fd into buf (header first): its size, 0 at EOF, -1. */
static long plain_frame(int fd, uint8_t *buf, size_t room)
{
    struct lat_hdr h;
    int r = net_read_full(fd, buf, sizeof h, 1);
    if (r <= 0)
        return r;
    memcpy(&h, buf, sizeof h);
    if (h.len > LAT_MAX_PAYLOAD || sizeof h + h.len > room) {
        errno = EMSGSIZE;
        return -1;
    }
    return net_read_full(fd, buf + sizeof h, h.len, 0) < 0 ? -1 : (long)(sizeof h + h.len);
}

/* The process's frames, sealed, to ciod. */
static void *up_thread(void *arg)
{
    struct relay *r = arg;
    long n;
    while ((n = plain_frame(r->proc, r->up + LAT_SEAL_LEN_BYTES, LAT_SEAL_MAX)) > 0) {
        uint8_t *p = r->up + LAT_SEAL_LEN_BYTES;
        if (lat_seal_begin(&r->s, (uint32_t)n, r->up) < 0 || lat_seal_update(&r->s, p, (size_t)n, p) < 0 ||
            lat_seal_end(&r->s, p + n) < 0 ||
            write_all(r->tcp, r->up, LAT_SEAL_LEN_BYTES + (size_t)n + LAT_SEAL_TAG_BYTES) < 0)
            break;
    }
    if (n < 0 && errno == EMSGSIZE)
        say("process connection relay: the process sent a frame over the limit; closing");
    shutdown(r->tcp, SHUT_RDWR);
    shutdown(r->proc, SHUT_RDWR);
    return NULL;
}

/* ciod's frames, opened, to the process; nothing unauthentic passes. */
static void down_loop(struct relay *r)
{
    for (;;) {
        uint32_t len;
        int rc = net_read_full(r->tcp, r->down, LAT_SEAL_LEN_BYTES, 1);
        if (rc <= 0)
            break;
        uint64_t n = r->s.k.rx_n;
        if (lat_open_begin(&r->s, r->down, &len) < 0 ||
            net_read_full(r->tcp, r->down, (size_t)len + LAT_SEAL_TAG_BYTES, 0) < 0 ||
            lat_open_update(&r->s, r->down, len, r->down) < 0 || lat_open_end(&r->s, r->down + len) < 0) {
            say("process connection relay: frame %llu from the I/O node failed authentication (altered, "
                "replayed or injected on the way); closing", (unsigned long long)n);
            break;
        }
        if (write_all(r->proc, r->down, len) < 0)
            break;
    }
    shutdown(r->tcp, SHUT_RDWR);
    shutdown(r->proc, SHUT_RDWR);
}

/* The handshake, passed through: challenge down, hello up, ack down.  0
 * with the session keys, or -1 (the process sees what ciod said, or EOF). */
static int handshake(struct relay *r, uint8_t key[LAT_KEY_BYTES])
{
    struct lat_hdr h;
    struct lat_challenge ch;
    struct lat_hello hello;
    struct {
        struct lat_hello_ack ack;
        struct lat_datapath dp;
    } a;
    uint8_t hb[sizeof(struct lat_hello) + sizeof(struct lat_hello_proc)], want[LAT_MAC_BYTES];

    if (net_read_full(r->tcp, &h, sizeof h, 0) < 0 || h.type != LAT_CHALLENGE || h.len != sizeof ch ||
        net_read_full(r->tcp, &ch, sizeof ch, 0) < 0 || write_all(r->proc, &h, sizeof h) < 0 ||
        write_all(r->proc, &ch, sizeof ch) < 0)
        return -1;
    if (net_read_full(r->proc, &h, sizeof h, 0) < 0 || h.type != LAT_HELLO ||
        (h.len != sizeof hello && h.len != sizeof hb) || net_read_full(r->proc, hb, h.len, 0) < 0 ||
        write_all(r->tcp, &h, sizeof h) < 0 || write_all(r->tcp, hb, h.len) < 0)
        return -1;
    memcpy(&hello, hb, sizeof hello);
    if (net_read_full(r->tcp, &h, sizeof h, 0) < 0 || h.type != (LAT_HELLO | LAT_REPLY) ||
        (h.len != sizeof a.ack && h.len != sizeof a) || net_read_full(r->tcp, &a, h.len, 0) < 0 ||
        write_all(r->proc, &h, sizeof h) < 0 || write_all(r->proc, &a, h.len) < 0)
        return -1;
    /* a refusal ends it; an acceptance counts only with ciod's proof */
    if (a.ack.err || lat_ack_proof(key, ch.nonce, hello.nonce, &a.ack, h.len == sizeof a ? &a.dp : NULL, want) < 0 ||
        CRYPTO_memcmp(want, a.ack.proof, sizeof want) != 0)
        return -1;
    struct lat_seal_keys k;
    int rc = lat_seal_derive(key, ch.nonce, hello.nonce, hello.role, hello.node, hello.job, false, &k);
    if (rc == 0)
        rc = lat_seal_init(&r->s, &k);
    lat_seal_wipe(&k, sizeof k);
    return rc;
}

static void relay_main(int tcp, int proc, uint8_t key[LAT_KEY_BYTES]) __attribute__((noreturn));
static void relay_main(int tcp, int proc, uint8_t key[LAT_KEY_BYTES])
{
    struct relay r = { .tcp = tcp, .proc = proc };
    pthread_t up;

    prctl(PR_SET_NAME, "cnode-relay");
    r.up = malloc(FRAME_ROOM);
    r.down = malloc(FRAME_ROOM);
    int ok = r.up && r.down && handshake(&r, key) == 0;
    lat_seal_wipe(key, LAT_KEY_BYTES);  /* our copy of cnode's: from now on only the session keys */
    if (!ok || pthread_create(&up, NULL, up_thread, &r) != 0)
        _exit(1);
    down_loop(&r);
    pthread_join(up, NULL);
    lat_seal_free(&r.s);
    _exit(0);
}

int relay_connect(const char *addr, const uint8_t key[LAT_KEY_BYTES], double retry_seconds)
{
    if (strncmp(addr, "tcp:", 4) != 0)
        return net_connect(addr, retry_seconds);      /* one host: the process's own connection */
    int tcp = net_connect(addr, retry_seconds), sv[2];
    if (tcp < 0)
        return -1;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        int e = errno;
        close(tcp);
        errno = e;
        return -1;
    }
    /* a whole 1 MiB chunk crosses the socketpair in one go: each wake-up
     * saved is a scheduling delay less on a busy node (root may pass wmem_max) */
    for (int i = 0; i < 2; i++) {
        int room = PAIR_BUFFER;
        if (setsockopt(sv[i], SOL_SOCKET, SO_SNDBUFFORCE, &room, sizeof room) < 0)
            setsockopt(sv[i], SOL_SOCKET, SO_SNDBUF, &room, sizeof room);
        if (setsockopt(sv[i], SOL_SOCKET, SO_RCVBUFFORCE, &room, sizeof room) < 0)
            setsockopt(sv[i], SOL_SOCKET, SO_RCVBUF, &room, sizeof room);
    }
    pid_t pid = fork();
    if (pid == 0) {
        if (fork() != 0)
            _exit(0);                   /* the relay is the grandchild: nobody's to reap */
        /* keep only its two ends (and stderr for say): not the node connection */
        int t = fcntl(tcp, F_DUPFD, 100), p = fcntl(sv[0], F_DUPFD, 100);
        if (t < 0 || p < 0 || dup2(t, 3) < 0 || dup2(p, 4) < 0)
            _exit(1);
        if (syscall(SYS_close_range, 5, ~0u, 0) < 0)
            for (int fd = 5; fd < 1024; fd++)
                close(fd);
        relay_main(3, 4, (uint8_t *)key);      /* our own copy of cnode's memory: it wipes the key */
    }
    int e = errno;
    close(tcp);
    close(sv[0]);
    if (pid < 0) {
        close(sv[1]);
        errno = e;
        return -1;
    }
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
        ;
    return sv[1];
}
