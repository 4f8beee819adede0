/*
 * sockets.c - a compute node program that talks to servers outside the
 * block (tests/e2e/test_t0710_sockets.py): its sockets are shipped to the
 * I/O node by cnk or the Linux-mode client.
 *
 *   sockets tcp PORT [ADDR]   connect (to 127.0.0.1 or ADDR), send, recv the echo,
 *                             shutdown, recv EOF
 *   sockets udp PORT          bind, sendto, recvfrom the echo
 *   sockets poll PORT         poll, select and epoll on a shipped socket
 *   sockets wait PORT DIR [N] a thread does file I/O while rank 0 blocks in a recv
 *                             into N bytes (default 16; large: a rendezvous)
 *   sockets big PORT BYTES    one send() of BYTES of pattern 1, then the echo of
 *                             pattern 2: a peek, a MSG_WAITALL half, the rest in big recvs
 *   sockets nb PORT BYTES DIR non-blocking: a send() of BYTES the server does not
 *                             read yet goes in part, then EAGAIN; then DIR/sent.RANK
 *                             lets the server read and count what came
 *   sockets pipe PORT BYTES   sends of BYTES to a server that closed: EPIPE, with
 *                             SIGPIPE only without MSG_NOSIGNAL
 *   sockets resolve NAME...   getaddrinfo
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <unistd.h>

static int rank;

static void die(const char *what)
{
    printf("rank %d: %s failed: %m\n", rank, what);
    exit(1);
}

static struct sockaddr_in loopback(int port)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

static const char *tcp_addr;   /* NULL: 127.0.0.1 */

static int tcp_connect(int port)
{
    struct sockaddr_in a = loopback(port);
    if (tcp_addr && inet_pton(AF_INET, tcp_addr, &a.sin_addr) != 1)
        die("inet_pton");
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) < 0)
        die("connect");
    return s;
}

static void recv_exact(int s, char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = recv(s, buf + got, n - got, 0);
        if (r <= 0)
            die("recv");
        got += (size_t)r;
    }
}

static int tcp(int port)
{
    char msg[64], back[64];
    int s = tcp_connect(port);
    int n = snprintf(msg, sizeof msg, "hello from rank %d\n", rank);

    if (send(s, msg, (size_t)n, 0) != n)
        die("send");
    recv_exact(s, back, (size_t)n);
    if (memcmp(msg, back, (size_t)n))
        die("echo");
    struct sockaddr_in peer;
    socklen_t pl = sizeof peer;
    if (getpeername(s, (struct sockaddr *)&peer, &pl) < 0 || ntohs(peer.sin_port) != port)
        die("getpeername");
    shutdown(s, SHUT_WR);
    if (recv(s, back, sizeof back, 0) != 0)
        die("eof");
    int one = 1, v = 0;
    socklen_t vl = sizeof v;
    if (setsockopt(s, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one) < 0 ||
        getsockopt(s, SOL_SOCKET, SO_KEEPALIVE, &v, &vl) < 0 || !v)
        die("sockopt");
    close(s);
    printf("rank %d: tcp ok\n", rank);
    return 0;
}

static int udp(int port)
{
    struct sockaddr_in me = loopback(0), to = loopback(port), from;
    socklen_t fl = sizeof from, ml = sizeof me;
    char msg[64], back[64];
    int s = socket(AF_INET, SOCK_DGRAM, 0);
    int n = snprintf(msg, sizeof msg, "datagram from rank %d", rank);

    if (s < 0 || bind(s, (struct sockaddr *)&me, sizeof me) < 0)
        die("bind");
    if (sendto(s, msg, (size_t)n, 0, (struct sockaddr *)&to, sizeof to) != n)
        die("sendto");
    ssize_t r = recvfrom(s, back, sizeof back, 0, (struct sockaddr *)&from, &fl);
    if (r != n || memcmp(msg, back, (size_t)n) || ntohs(from.sin_port) != port)
        die("recvfrom");
    if (getsockname(s, (struct sockaddr *)&me, &ml) < 0 || !me.sin_port)
        die("getsockname");
    close(s);
    printf("rank %d: udp ok from port %d\n", rank, ntohs(from.sin_port));
    return 0;
}

/* The server echoes: nothing readable until we send. */
static int polls(int port)
{
    int s = tcp_connect(port), p[2];
    char b[8];

    if (pipe(p) < 0)
        die("pipe");
    struct pollfd pf[2] = { { s, POLLIN, 0 }, { p[0], POLLIN, 0 } };
    if (poll(pf, 2, 50) != 0)
        die("poll before");
    send(s, "ping", 4, 0);
    if (poll(pf, 2, 5000) != 1 || !(pf[0].revents & POLLIN))
        die("poll");
    recv_exact(s, b, 4);
    send(s, "ping", 4, 0);
    fd_set rd;
    FD_ZERO(&rd);
    FD_SET(s, &rd);
    FD_SET(p[0], &rd);
    struct timeval tv = { 5, 0 };
    if (select((s > p[0] ? s : p[0]) + 1, &rd, NULL, NULL, &tv) != 1 || !FD_ISSET(s, &rd))
        die("select");
    recv_exact(s, b, 4);
    int ep = epoll_create1(0);
    struct epoll_event ev = { .events = EPOLLIN, .data.u64 = 42 }, out[4];
    if (epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev) < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev) < 0)
        die("epoll_ctl");
    if (epoll_wait(ep, out, 4, 50) != 0)
        die("epoll before");
    send(s, "ping", 4, 0);
    if (epoll_wait(ep, out, 4, 5000) != 1 || out[0].data.u64 != 42)
        die("epoll_wait");
    recv_exact(s, b, 4);
    /* a closed descriptor leaves the set: the next owner of its number is not in it */
    int s2 = tcp_connect(port), q[2];
    struct epoll_event ev2 = { .events = EPOLLIN, .data.u64 = 7 };
    if (epoll_ctl(ep, EPOLL_CTL_ADD, s2, &ev2) < 0)
        die("epoll_ctl again");
    close(s2);
    if (pipe(q) < 0 || q[0] != s2 || write(q[1], "x", 1) != 1)
        die("pipe on the closed number");
    if (epoll_wait(ep, out, 4, 50) != 0)
        die("epoll_wait after close");
    /* regular files are always ready: Linux refuses them */
    int f = open("/etc/hosts", O_RDONLY);
    if (f < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, f, &ev) == 0 || errno != EPERM)
        die("epoll_ctl of a regular file");
    close(f);
    close(q[0]);
    close(q[1]);
    close(ep);
    close(s);
    printf("rank %d: poll select epoll ok\n", rank);
    return 0;
}

static const char *dir;

/* File I/O through the I/O node, then a file saying it is done. */
static void *file_io(void *arg)
{
    char path[512], buf[4096];
    (void)arg;
    snprintf(path, sizeof path, "%s/io.%d", dir, rank);
    memset(buf, 'x', sizeof buf);
    for (int i = 0; i < 200; i++) {
        FILE *f = fopen(path, "w");
        if (!f || fwrite(buf, 1, sizeof buf, f) != sizeof buf || fclose(f))
            die("write");
        f = fopen(path, "r");
        if (!f || fread(buf, 1, sizeof buf, f) != sizeof buf || fclose(f))
            die("read");
    }
    snprintf(path, sizeof path, "%s/done.%d", dir, rank);
    FILE *f = fopen(path, "w");
    if (!f || fclose(f))
        die("done file");
    printf("rank %d: io done\n", rank);
    fflush(stdout);
    return NULL;
}

static int wait_mode(int port, size_t room)
{
    pthread_t t;
    int s = rank == 0 ? tcp_connect(port) : -1;
    char *b = calloc(1, room + 1);

    if (!b)
        die("calloc");
    if (s >= 0)
        send(s, "waiting", 7, 0);
    if (pthread_create(&t, NULL, file_io, NULL))
        die("pthread_create");
    if (s >= 0) {
        /* blocks until the server has seen every rank's done file */
        ssize_t n = recv(s, b, room, 0);
        if (n <= 0)
            die("blocking recv");
        b[n] = 0;
        printf("rank %d: recv got %s\n", rank, b);
        close(s);
    }
    pthread_join(t, NULL);
    return 0;
}

/* Byte i of pattern k (tests/e2e/test_t0710_sockets.py has the same). */
static unsigned char pat(size_t i, int k)
{
    return (unsigned char)((i % 4093) * (k ? 13 : 7) + i / 4093 + (size_t)k);
}

static char *pattern_buf(size_t n, int k)
{
    char *b = malloc(n ? n : 1);
    if (!b)
        die("malloc");
    for (size_t i = 0; i < n; i++)
        b[i] = (char)pat(i, k);
    return b;
}

static size_t first_wrong(const char *b, size_t n, int k)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)b[i] != pat(i, k))
            return i;
    return n;
}

/* One large send, then the server's answer of as many bytes: a peek, a
 * MSG_WAITALL half, and the rest in large plain recvs, checked byte for byte. */
static int big(int port, size_t n)
{
    int s = tcp_connect(port);
    char *out = pattern_buf(n, 0), *in = calloc(1, n);

    if (!in)
        die("calloc");
    ssize_t w = send(s, out, n, 0);
    if (w != (ssize_t)n) {
        printf("rank %d: big send returned %zd of %zu\n", rank, w, n);
        return 1;
    }
    ssize_t pk = recv(s, in, n, MSG_PEEK);
    if (pk <= 0 || first_wrong(in, (size_t)pk, 1) != (size_t)pk)
        die("peek");
    memset(in, 0, (size_t)pk);
    ssize_t half = recv(s, in, n / 2, MSG_WAITALL);
    if (half != (ssize_t)(n / 2)) {
        printf("rank %d: MSG_WAITALL recv returned %zd of %zu\n", rank, half, n / 2);
        return 1;
    }
    size_t got = (size_t)half, calls = 1;
    while (got < n) {
        ssize_t r = recv(s, in + got, n - got, 0);
        if (r <= 0)
            die("recv");
        got += (size_t)r;
        calls++;
    }
    if (recv(s, in, 1, 0) != 0)
        die("eof");
    size_t bad = first_wrong(in, n, 1);
    if (bad != n) {
        printf("rank %d: byte %zu received wrong\n", rank, bad);
        return 1;
    }
    close(s);
    printf("rank %d: big ok sent=%zd got=%zu peek=%zd recvs=%zu\n", rank, w, got, pk, calls);
    return 0;
}

/* Non-blocking: the server reads nothing until DIR/sent.RANK exists, so
 * one send() of n bytes can only go in part, and the next is EAGAIN; a
 * recv with nothing there is EAGAIN too.  Then the server reads to end of
 * file and answers the count it got, which must be ours. */
static int nonblocking(int port, size_t n, const char *d)
{
    int s = tcp_connect(port);
    char *out = pattern_buf(n, 0), in[64], path[512];

    if (fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK) < 0)
        die("fcntl");
    ssize_t w = send(s, out, n, 0);
    if (w <= 0 || (size_t)w >= n) {
        printf("rank %d: non-blocking send returned %zd of %zu\n", rank, w, n);
        return 1;
    }
    size_t sent = (size_t)w;
    ssize_t again;
    while ((again = send(s, out + sent, n - sent, 0)) > 0)    /* what the buffers still took */
        sent += (size_t)again;
    if (again != -1 || errno != EAGAIN)
        die("send EAGAIN");
    char *big_in = malloc(n);
    if (!big_in || recv(s, big_in, n, MSG_DONTWAIT) != -1 || errno != EAGAIN)
        die("recv EAGAIN");
    snprintf(path, sizeof path, "%s/sent.%d", d, rank);
    FILE *f = fopen(path, "w");
    if (!f || fclose(f))
        die("sent file");
    if (shutdown(s, SHUT_WR) < 0 || fcntl(s, F_SETFL, fcntl(s, F_GETFL) & ~O_NONBLOCK) < 0)
        die("shutdown");
    ssize_t r = recv(s, in, sizeof in - 1, MSG_WAITALL);
    if (r <= 0)
        die("count");
    in[r] = 0;
    if (strtoull(in, NULL, 10) != sent) {
        printf("rank %d: sent %zu, the server got %s\n", rank, sent, in);
        return 1;
    }
    close(s);
    printf("rank %d: nb ok first=%zd sent=%zu of %zu\n", rank, w, sent, n);
    return 0;
}

static volatile sig_atomic_t sigpipes;

static void on_sigpipe(int sig)
{
    (void)sig;
    sigpipes++;
}

/* The server closes at once: sends go on until the connection's error
 * shows (ECONNRESET or EPIPE), then EPIPE, with SIGPIPE only when the send
 * did not say MSG_NOSIGNAL. */
static int broken_pipe(int port, size_t n)
{
    int s = tcp_connect(port);
    char *out = pattern_buf(n, 0);
    ssize_t w;
    long tries = 0;

    signal(SIGPIPE, on_sigpipe);
    while ((w = send(s, out, n, MSG_NOSIGNAL)) >= 0 || errno != EPIPE) {
        if (w < 0 && errno != ECONNRESET)
            die("send before EPIPE");
        if (++tries > 100000)
            die("send never failed");
    }
    if (sigpipes != 0) {
        printf("rank %d: SIGPIPE despite MSG_NOSIGNAL\n", rank);
        return 1;
    }
    if (send(s, out, n, 0) != -1 || errno != EPIPE || sigpipes != 1) {
        printf("rank %d: send without MSG_NOSIGNAL: errno %d, %d SIGPIPE\n", rank, errno, (int)sigpipes);
        return 1;
    }
    close(s);
    printf("rank %d: epipe ok sigpipe=%d\n", rank, (int)sigpipes);
    return 0;
}

static int resolve(int argc, char **argv)
{
    for (int i = 2; i < argc; i++) {
        struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *res;
        int e = getaddrinfo(argv[i], "80", &hints, &res);
        if (e) {
            printf("rank %d: resolve %s failed: %s\n", rank, argv[i], gai_strerror(e));
            return 1;
        }
        char ip[64];
        inet_ntop(AF_INET, &((struct sockaddr_in *)res->ai_addr)->sin_addr, ip, sizeof ip);
        printf("rank %d: resolve %s -> %s\n", rank, argv[i], ip);
        freeaddrinfo(res);
    }
    return 0;
}

int main(int argc, char **argv)
{
    const char *r = getenv("LATTICE_RANK");
    rank = r ? atoi(r) : 0;
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 3) {
        fprintf(stderr, "usage: sockets tcp|udp|poll|wait|big|nb|pipe|resolve ARG...\n");
        return 2;
    }
    if (!strcmp(argv[1], "resolve"))
        return resolve(argc, argv);
    int port = atoi(argv[2]);
    if (!strcmp(argv[1], "tcp")) {
        tcp_addr = argc > 3 ? argv[3] : NULL;
        return tcp(port);
    }
    if (!strcmp(argv[1], "udp"))
        return udp(port);
    if (!strcmp(argv[1], "poll"))
        return polls(port);
    if (!strcmp(argv[1], "big") && argc > 3)
        return big(port, strtoul(argv[3], NULL, 0));
    if (!strcmp(argv[1], "nb") && argc > 4)
        return nonblocking(port, strtoul(argv[3], NULL, 0), argv[4]);
    if (!strcmp(argv[1], "pipe") && argc > 3)
        return broken_pipe(port, strtoul(argv[3], NULL, 0));
    if (!strcmp(argv[1], "wait") && argc > 3) {
        dir = argv[3];
        return wait_mode(port, argc > 4 ? strtoul(argv[4], NULL, 0) : 15);
    }
    return 2;
}
