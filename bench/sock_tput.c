/*
 * sock_tput.c - TCP throughput to and from a server outside the block
 * (bench/sockets.py).  The same dynamic executable runs directly on Linux
 * (the baseline), under cnk and under `--kernel linux`, where its socket is
 * shipped to the I/O node (127.0.0.1 is not a compute node's address).
 *
 *   sock_tput PORT MSG_BYTES MIB [send|recv]
 *
 * send (the default): connects to a sink at 127.0.0.1:PORT, sends MIB MiB
 * in send() calls of MSG_BYTES, shuts down its sending side and waits for
 * the sink's 8-byte count of what it received.  recv: connects to a source
 * there, asks for MIB MiB (8 bytes) and receives them in recv() calls of
 * MSG_BYTES up to end of file.  The time runs from connect to the end.
 * Prints
 *   msg=BYTES mib=MIB secs=S MBps=R
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void die(const char *what)
{
    printf("sock_tput: %s failed: %m\n", what);
    exit(1);
}

/* The count is right: print the rate (0), else say what came (1). */
static int report(size_t msg, uint64_t total, uint64_t got, double secs)
{
    if (got != total) {
        printf("sock_tput: %llu of %llu bytes arrived\n", (unsigned long long)got, (unsigned long long)total);
        return 1;
    }
    printf("msg=%zu mib=%llu secs=%.6f MBps=%.1f\n", msg, (unsigned long long)(total >> 20), secs,
           (double)total / secs / 1e6);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: sock_tput PORT MSG_BYTES MIB [send|recv]\n");
        return 2;
    }
    int receiving = argc == 5 && !strcmp(argv[4], "recv");
    int port = atoi(argv[1]);
    size_t msg = strtoul(argv[2], NULL, 0);
    uint64_t total = strtoull(argv[3], NULL, 0) << 20, got = 0;
    char *buf = malloc(msg);
    if (!buf || !msg)
        die("malloc");
    for (size_t i = 0; i < msg; i++)
        buf[i] = (char)i;

    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    double t0 = now();
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0 || connect(s, (struct sockaddr *)&a, sizeof a) < 0)
        die("connect");
    if (receiving) {            /* ask the source for total bytes, take them to end of file */
        ssize_t r;
        if (send(s, &total, sizeof total, 0) != sizeof total)
            die("send");
        while ((r = recv(s, buf, msg, 0)) > 0)
            got += (uint64_t)r;
        if (r < 0)
            die("recv");
        double secs = now() - t0;
        close(s);
        return report(msg, total, got, secs);
    }
    for (uint64_t sent = 0; sent < total;) {
        size_t n = total - sent < msg ? (size_t)(total - sent) : msg;
        ssize_t w = send(s, buf, n, 0);
        if (w <= 0)
            die("send");
        sent += (uint64_t)w;
    }
    if (shutdown(s, SHUT_WR) < 0)
        die("shutdown");
    size_t have = 0;
    while (have < sizeof got) {
        ssize_t r = recv(s, (char *)&got + have, sizeof got - have, 0);
        if (r <= 0)
            die("recv");
        have += (size_t)r;
    }
    double secs = now() - t0;
    close(s);
    return report(msg, total, got, secs);
}
