/*
 * sockets.c - a compute node program that talks to servers outside the
 * block (tests/e2e/test_t0710_sockets.py): its sockets are shipped to the
 * I/O node by cnk or the Linux-mode client.
 *
 *   sockets tcp PORT [ADDR]   connect (to 127.0.0.1 or ADDR), send, recv the echo,
 *                             shutdown, recv EOF
 *   sockets udp PORT          bind, sendto, recvfrom the echo
 *   sockets poll PORT         poll, select and epoll on a shipped socket
 *   sockets wait PORT DIR     a thread does file I/O while rank 0 blocks in recv
 *   sockets resolve NAME...   getaddrinfo
 */
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
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

static int wait_mode(int port)
{
    pthread_t t;
    int s = rank == 0 ? tcp_connect(port) : -1;
    char b[16] = { 0 };

    if (s >= 0)
        send(s, "waiting", 7, 0);
    if (pthread_create(&t, NULL, file_io, NULL))
        die("pthread_create");
    if (s >= 0) {
        /* blocks until the server has seen every rank's done file */
        ssize_t n = recv(s, b, sizeof b - 1, 0);
        if (n <= 0)
            die("blocking recv");
        printf("rank %d: recv got %s\n", rank, b);
        close(s);
    }
    pthread_join(t, NULL);
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
        fprintf(stderr, "usage: sockets tcp|udp|poll|wait|resolve ARG...\n");
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
    if (!strcmp(argv[1], "wait") && argc > 3) {
        dir = argv[3];
        return wait_mode(port);
    }
    return 2;
}
