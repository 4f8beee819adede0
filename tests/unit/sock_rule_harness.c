/*
 * sock_rule_harness.c - lattice/sock_rule.h on its own (tests/unit/
 * test_sock_rule.py), freestanding as cnk builds it: raw system calls, no
 * libc in the header.  Each line: NAME VALUE.
 *
 *   sock_rule_harness HOST_IPV4     a non-loopback address of this host, or "-"
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

static long raw(long nr, long a, long b, long c, long d, long e)
{
    long r = syscall(nr, a, b, c, d, e);
    return r < 0 ? -errno : r;
}
#define LAT_SOCK_SYSCALL(nr, a, b, c, d, e) raw((nr), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e))
#include <lattice/sock_rule.h>

static struct lat_sock_rule rule;

/* the verdict, then whether it was pinned (in this order) */
static void judge(const char *what, int fd, const void *dest, long len)
{
    int ships = lat_sock_ships(&rule, fd, dest, len);
    printf("ships.%s %d pinned %d\n", what, ships, lat_sock_pinned(&rule, fd));
}

static struct sockaddr_in v4(const char *ip, int port)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    inet_pton(AF_INET, ip, &a.sin_addr);
    return a;
}

static struct sockaddr_in6 v6(const char *ip)
{
    struct sockaddr_in6 a = { .sin6_family = AF_INET6, .sin6_port = htons(9) };
    inet_pton(AF_INET6, ip, &a.sin6_addr);
    return a;
}

int main(int argc, char **argv)
{
    struct sockaddr_in lo = v4("127.0.0.1", 9);
    struct sockaddr_in6 lo6 = v6("::1"), mapped = v6("::ffff:127.0.0.1");

    if (argc != 2)
        return 2;
    printf("node.loopback %d\n", lat_sock_dest_is_node(&rule, &lo, sizeof lo));
    printf("node.loopback6 %d\n", lat_sock_dest_is_node(&rule, &lo6, sizeof lo6));
    printf("node.mapped_loopback %d\n", lat_sock_dest_is_node(&rule, &mapped, sizeof mapped));
    printf("node.short %d\n", lat_sock_dest_is_node(&rule, &lo, 1));
    if (strcmp(argv[1], "-")) {
        struct sockaddr_in host = v4(argv[1], 9);
        char m[64];
        snprintf(m, sizeof m, "::ffff:%s", argv[1]);
        struct sockaddr_in6 hostm = v6(m);
        printf("node.host %d\n", lat_sock_dest_is_node(&rule, &host, sizeof host));
        printf("node.mapped_host %d\n", lat_sock_dest_is_node(&rule, &hostm, sizeof hostm));
    }

    /* a fresh UDP socket to loopback ships; asked again it still does (undecided until shipped) */
    int u = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK, 0), one = 1;
    setsockopt(u, SOL_SOCKET, SO_BROADCAST, &one, sizeof one);
    struct sockaddr_in any = v4("127.0.0.1", 0);
    bind(u, (struct sockaddr *)&any, sizeof any);
    printf("ships.udp_loopback %d\n", lat_sock_ships(&rule, u, &lo, sizeof lo));
    struct lat_sock_carry c;
    lat_sock_carry(u, &c);
    printf("carry.domain %d\ncarry.type %d\ncarry.nopt %d\ncarry.opt0 %d,%d,%d\ncarry.bound_port %d\n", c.domain,
           c.type, c.nopt, c.opt[0][0], c.opt[0][1], c.opt[0][2], c.blen ? c.bound[2] << 8 | c.bound[3] : 0);
    /* connected here already, listening, AF_UNIX, not a socket: stay local (the first three for good) */
    int t = socket(AF_INET, SOCK_STREAM, 0), l = socket(AF_INET, SOCK_STREAM, 0);
    bind(l, (struct sockaddr *)&any, sizeof any);
    listen(l, 1);
    struct sockaddr_in la;
    socklen_t ll = sizeof la;
    getsockname(l, (struct sockaddr *)&la, &ll);
    connect(t, (struct sockaddr *)&la, sizeof la);
    judge("connected", t, &lo, sizeof lo);
    judge("listening", l, &lo, sizeof lo);
    int x = socket(AF_UNIX, SOCK_DGRAM, 0);
    judge("unix", x, &lo, sizeof lo);
    judge("file", open("/dev/null", O_RDONLY), &lo, sizeof lo);
    /* a new socket at a pinned number is undecided again */
    lat_sock_pin(&rule, x, 0);
    printf("unpinned %d\n", lat_sock_pinned(&rule, x));
    return 0;
}
