/*
 * lattice/sock_rule.h - which sockets are shipped to the I/O node and which
 * stay on the compute node (compute/cnk/README.md "Sockets"): the one rule
 * of cnk and the Linux-mode client, in their shipping core
 * (compute/shipc/sock.c).
 *
 * Every socket is created local.  An AF_INET/AF_INET6 socket that is not
 * yet connected, listening or decided is decided by the first destination
 * it connects or sends to: an address of the block's compute nodes (here:
 * this host's non-loopback interface addresses, where every compute node
 * runs) keeps it local for good -- MPI's TCP traffic and anything listening
 * or accepting stays on the node; any other address, loopback included,
 * ships it, and lat_sock_carry() says what the socket on the I/O node must
 * get from it.  AF_UNIX, netlink and the rest stay local.
 *
 * Header-only and freestanding (no libc) so that cnk and libcnclient share
 * it.  The includer defines LAT_SOCK_SYSCALL(nr, a, b, c, d, e), a raw
 * system call returning its result or a negative number, and keeps one
 * struct lat_sock_rule.
 */
#ifndef LATTICE_SOCK_RULE_H
#define LATTICE_SOCK_RULE_H

#include <stddef.h>
#include <stdint.h>

#include <asm/unistd.h>

#ifndef LAT_SOCK_SYSCALL
#error "define LAT_SOCK_SYSCALL(nr, a, b, c, d, e) before including lattice/sock_rule.h"
#endif

#define LAT_SOCK_FDS 65536              /* descriptors the rule remembers */

/* Linux x86-64 values (no libc headers here) */
#define LAT_SK_AF_INET       2
#define LAT_SK_AF_INET6      10
#define LAT_SK_SOL_SOCKET    1
#define LAT_SK_SO_TYPE       3
#define LAT_SK_SO_ACCEPTCONN 30
#define LAT_SK_SO_PROTOCOL   38
#define LAT_SK_SO_DOMAIN     39
#define LAT_SK_NONBLOCK      04000      /* O_NONBLOCK = SOCK_NONBLOCK */
#define LAT_SK_CLOEXEC       02000000   /* O_CLOEXEC = SOCK_CLOEXEC */

/* This host's addresses, loopback excluded (network byte order). */
struct lat_sock_addrs {
    int nv4, nv6;
    uint32_t v4[64];
    uint8_t v6[32][16];
};

struct lat_sock_rule {
    int state;                          /* addrs: 0 unread, 1 being read, 2 read */
    struct lat_sock_addrs addrs;
    uint8_t pinned[LAT_SOCK_FDS / 8];   /* decided local: a bit per descriptor */
};

/* Local for good (on), or undecided again (a new socket at that number). */
static inline void lat_sock_pin(struct lat_sock_rule *r, int fd, int on)
{
    if (fd < 0 || fd >= LAT_SOCK_FDS)
        return;
    uint8_t bit = (uint8_t)(1u << (fd & 7));
    if (on)
        __atomic_fetch_or(&r->pinned[fd >> 3], bit, __ATOMIC_RELAXED);
    else
        __atomic_fetch_and(&r->pinned[fd >> 3], (uint8_t)~bit, __ATOMIC_RELAXED);
}

static inline int lat_sock_pinned(const struct lat_sock_rule *r, int fd)
{
    return fd >= 0 && fd < LAT_SOCK_FDS && (__atomic_load_n(&r->pinned[fd >> 3], __ATOMIC_RELAXED) >> (fd & 7) & 1);
}

static inline int lat_sock_same(const uint8_t *a, const uint8_t *b, int n)
{
    for (int i = 0; i < n; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

static inline int lat_sock_hex(char h)
{
    return h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : -1;
}

/* IPv4 from SIOCGIFCONF, IPv6 from /proc/net/if_inet6 (node-local). */
static inline void lat_sock_read_addrs(struct lat_sock_addrs *a)
{
    struct { char name[16]; uint16_t family, port; uint32_t addr; char pad[16]; } req[64];
    struct { int len, pad; void *buf; } ifc = { sizeof req, 0, req };
    char text[4096];
    long s = LAT_SOCK_SYSCALL(__NR_socket, LAT_SK_AF_INET, 2 /* SOCK_DGRAM */ | LAT_SK_CLOEXEC, 0, 0, 0);

    a->nv4 = a->nv6 = 0;
    if (s >= 0 && LAT_SOCK_SYSCALL(__NR_ioctl, s, 0x8912 /* SIOCGIFCONF */, (long)&ifc, 0, 0) == 0)
        for (int i = 0; i < ifc.len / (int)sizeof req[0] && a->nv4 < 64; i++)
            if (req[i].family == LAT_SK_AF_INET && (req[i].addr & 0xff) != 127)
                a->v4[a->nv4++] = req[i].addr;
    if (s >= 0)
        LAT_SOCK_SYSCALL(__NR_close, s, 0, 0, 0, 0);
    long f = LAT_SOCK_SYSCALL(__NR_openat, -100 /* AT_FDCWD */, (long)"/proc/net/if_inet6", LAT_SK_CLOEXEC, 0, 0);
    long n = f >= 0 ? LAT_SOCK_SYSCALL(__NR_read, f, (long)text, sizeof text - 1, 0, 0) : -1;
    if (f >= 0)
        LAT_SOCK_SYSCALL(__NR_close, f, 0, 0, 0, 0);
    /* lines of 32 hex digits, then fields, the interface name last */
    for (long i = 0; n > 0 && i + 32 < n && a->nv6 < 32;) {
        int ok = 1;
        for (int j = 0; j < 16; j++) {
            int h = lat_sock_hex(text[i + 2 * j]), l = lat_sock_hex(text[i + 2 * j + 1]);
            ok &= h >= 0 && l >= 0;
            a->v6[a->nv6][j] = (uint8_t)(h << 4 | l);
        }
        long e = i;
        while (e < n && text[e] != '\n')
            e++;
        int lo = e - i >= 3 && text[e - 1] == 'o' && text[e - 2] == 'l' && text[e - 3] == ' ';
        if (ok && !lo)
            a->nv6++;
        i = e + 1;
    }
}

/* The addresses, read once.  A thread that finds another reading them (or
 * a signal handler that interrupted the reader) reads its own copy into
 * *mine instead of waiting: nothing here can deadlock. */
static inline const struct lat_sock_addrs *lat_sock_addrs_of(struct lat_sock_rule *r, struct lat_sock_addrs *mine)
{
    int unread = 0;

    if (__atomic_load_n(&r->state, __ATOMIC_ACQUIRE) == 2)
        return &r->addrs;
    if (__atomic_compare_exchange_n(&r->state, &unread, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        lat_sock_read_addrs(&r->addrs);
        __atomic_store_n(&r->state, 2, __ATOMIC_RELEASE);
        return &r->addrs;
    }
    if (unread == 2)
        return &r->addrs;
    lat_sock_read_addrs(mine);
    return mine;
}

/* 1: the destination is a compute node's address (the socket stays local). */
static inline int lat_sock_dest_is_node(struct lat_sock_rule *r, const void *dest, long len)
{
    const uint8_t *sa = dest;
    struct lat_sock_addrs mine;

    if (len < 2)
        return 1;
    int fam = sa[0] | sa[1] << 8;
    if (fam == LAT_SK_AF_INET6 && len >= 24) {
        static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
        if (lat_sock_same(sa + 8, mapped, 12)) {        /* ::ffff:a.b.c.d is a.b.c.d */
            uint8_t s4[8] = { LAT_SK_AF_INET, 0, 0, 0, sa[20], sa[21], sa[22], sa[23] };
            return lat_sock_dest_is_node(r, s4, 8);
        }
        const struct lat_sock_addrs *a = lat_sock_addrs_of(r, &mine);
        for (int i = 0; i < a->nv6; i++)
            if (lat_sock_same(a->v6[i], sa + 8, 16))
                return 1;
        return 0;
    }
    if (fam == LAT_SK_AF_INET && len >= 8) {
        const struct lat_sock_addrs *a = lat_sock_addrs_of(r, &mine);
        for (int i = 0; i < a->nv4; i++)
            if (lat_sock_same((const uint8_t *)&a->v4[i], sa + 4, 4))
                return 1;
        return 0;
    }
    return 1;                           /* AF_UNSPEC and others: the kernel judges */
}

/* An int socket option, or -1. */
static inline int lat_sock_opt(int fd, int level, int name)
{
    int v = 0, len = sizeof v;
    return LAT_SOCK_SYSCALL(__NR_getsockopt, fd, level, name, (long)&v, (long)&len) < 0 ? -1 : v;
}

/* Local descriptor fd is about to connect or send to dest: 1 if the rule
 * ships it now; 0 if it stays on the node (pinned when it is a socket the
 * rule has decided for good; an undecided one is judged at its next call). */
static inline int lat_sock_ships(struct lat_sock_rule *r, int fd, const void *dest, long dlen)
{
    if (!dest || fd < 0 || fd >= LAT_SOCK_FDS || lat_sock_pinned(r, fd))
        return 0;
    int dom = lat_sock_opt(fd, LAT_SK_SOL_SOCKET, LAT_SK_SO_DOMAIN);
    if (dom < 0)
        return 0;                       /* not a socket: the kernel says so */
    uint8_t peer[128];
    int plen = sizeof peer;
    if ((dom != LAT_SK_AF_INET && dom != LAT_SK_AF_INET6) ||
        lat_sock_opt(fd, LAT_SK_SOL_SOCKET, LAT_SK_SO_ACCEPTCONN) > 0 ||
        LAT_SOCK_SYSCALL(__NR_getpeername, fd, (long)peer, (long)&plen, 0, 0) == 0 ||   /* connected here */
        lat_sock_dest_is_node(r, dest, dlen)) {
        lat_sock_pin(r, fd, 1);
        return 0;
    }
    return 1;
}

/* What the socket made on the I/O node takes from the local one: domain,
 * type (+ SOCK_NONBLOCK for O_NONBLOCK), protocol, FD_CLOEXEC, the options
 * below that differ from their default, and the bound address if it has a
 * port (a UDP socket bound before it sends). */
#define LAT_SOCK_NCARRY 5
struct lat_sock_carry {
    int domain, type, protocol, cloexec;
    int nopt;
    int opt[LAT_SOCK_NCARRY][3];        /* level, name, value */
    uint8_t bound[128];
    uint32_t blen;                      /* 0: no port to bind */
};

static inline void lat_sock_carry(int fd, struct lat_sock_carry *c)
{
    static const int opts[LAT_SOCK_NCARRY][2] = {
        { LAT_SK_SOL_SOCKET, 2 /* SO_REUSEADDR */ }, { LAT_SK_SOL_SOCKET, 15 /* SO_REUSEPORT */ },
        { LAT_SK_SOL_SOCKET, 9 /* SO_KEEPALIVE */ }, { LAT_SK_SOL_SOCKET, 6 /* SO_BROADCAST */ },
        { 6 /* IPPROTO_TCP */, 1 /* TCP_NODELAY */ } };
    long fl = LAT_SOCK_SYSCALL(__NR_fcntl, fd, 3 /* F_GETFL */, 0, 0, 0);
    long fdfl = LAT_SOCK_SYSCALL(__NR_fcntl, fd, 1 /* F_GETFD */, 0, 0, 0);
    int blen = sizeof c->bound;

    c->domain = lat_sock_opt(fd, LAT_SK_SOL_SOCKET, LAT_SK_SO_DOMAIN);
    c->type = lat_sock_opt(fd, LAT_SK_SOL_SOCKET, LAT_SK_SO_TYPE) | (fl > 0 && (fl & LAT_SK_NONBLOCK) ? LAT_SK_NONBLOCK : 0);
    c->protocol = lat_sock_opt(fd, LAT_SK_SOL_SOCKET, LAT_SK_SO_PROTOCOL);
    c->cloexec = fdfl > 0 && (fdfl & 1 /* FD_CLOEXEC */);
    c->nopt = 0;
    for (int i = 0; i < LAT_SOCK_NCARRY; i++) {
        int v = lat_sock_opt(fd, opts[i][0], opts[i][1]);
        if (v > 0) {
            c->opt[c->nopt][0] = opts[i][0];
            c->opt[c->nopt][1] = opts[i][1];
            c->opt[c->nopt++][2] = v;
        }
    }
    if (LAT_SOCK_SYSCALL(__NR_getsockname, fd, (long)c->bound, (long)&blen, 0, 0) < 0 || blen < 4 ||
        blen > (int)sizeof c->bound || (c->bound[2] == 0 && c->bound[3] == 0))
        blen = 0;
    c->blen = (uint32_t)blen;
}

#endif
