/*
 * net.c - listening address, connection objects and framed messages.
 *
 * A connection is reference counted: the thread serving it holds one
 * reference, and so does anyone about to write to it (a job holds its
 * control connection, the node table holds the node connections).  The
 * descriptor is closed only by the last conn_put(), so a writer never
 * races a close; conn_hangup() shuts the socket down to tell the peer.
 */
#include "ciod.h"

#include <lattice/peer.h>

#include <errno.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* "unix:/abs/path" or "tcp:HOST:PORT" (HOST may be [v6addr]). */
static int listen_unix(const char *path, char *err, size_t errlen)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    struct stat st;
    int fd;

    if (path[0] != '/' || strlen(path) >= sizeof(sa.sun_path))
        return errprintf(err, errlen, "unix socket path must be absolute and shorter than %zu: %s",
                         sizeof(sa.sun_path), path);
    strcpy(sa.sun_path, path);
    /* Its directory must be this daemon's own, no link, that nobody else may
     * write in: in one another user planted, they could swap the socket for a
     * listener of theirs (the host agent makes it so: lattice.safepath). */
    char dir[sizeof(sa.sun_path)];
    strcpy(dir, path);
    *strrchr(dir, '/') = '\0';
    if (lstat(*dir ? dir : "/", &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
        ((st.st_mode & (S_IWGRP | S_IWOTH)) && !(st.st_mode & S_ISVTX)))
        return errprintf(err, errlen, "refusing to listen on %s: its directory is missing, a link, another "
                         "user's or writable by others", path);
    /* A socket left by an earlier ciod would make bind fail; only remove sockets. */
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
        unlink(path);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return errprintf(err, errlen, "socket: %s", strerror(errno));
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 256) < 0) {
        errprintf(err, errlen, "cannot listen on %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

static int listen_tcp(const char *where, char *err, size_t errlen)
{
    char host[256];
    const char *colon = strrchr(where, ':');
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
    struct addrinfo *res, *ai;
    int fd = -1, rc, one = 1;
    size_t hl;

    if (!colon || colon == where || !colon[1] || (size_t)(colon - where) >= sizeof(host))
        return errprintf(err, errlen, "bad tcp address (want tcp:HOST:PORT): tcp:%s", where);
    hl = colon - where;
    memcpy(host, where, hl);
    host[hl] = '\0';
    if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') {
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = '\0';
    }
    rc = getaddrinfo(host, colon + 1, &hints, &res);
    if (rc != 0)
        return errprintf(err, errlen, "cannot resolve %s: %s", where, gai_strerror(rc));
    for (ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0)
            continue;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 256) == 0)
            break;
        rc = errno;
        close(fd);
        fd = -1;
        errno = rc;
    }
    freeaddrinfo(res);
    if (fd < 0)
        return errprintf(err, errlen, "cannot listen on tcp:%s: %s", where, strerror(errno));
    return fd;
}

int net_listen(const char *addr, char *err, size_t errlen)
{
    if (strncmp(addr, "unix:", 5) == 0)
        return listen_unix(addr + 5, err, errlen);
    if (strncmp(addr, "tcp:", 4) == 0)
        return listen_tcp(addr + 4, err, errlen);
    return errprintf(err, errlen, "bad address (want unix:/path or tcp:HOST:PORT): %s", addr);
}

void net_unlink(const char *addr)
{
    if (strncmp(addr, "unix:", 5) == 0)
        unlink(addr + 5);
}

/* buf: the peer for diagnostics; who: what identifies it for RAS folding,
 * which a peer cannot vary at will (its uid, its host: not pid or port). */
static void describe_peer(int fd, char *buf, size_t len, char *who, size_t wholen)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    char host[64], serv[16];

    snprintf(buf, len, "fd %d", fd);
    snprintf(who, wholen, "unknown peer");
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) < 0)
        return;
    if (ss.ss_family == AF_UNIX) {
        struct ucred cr;
        socklen_t cl = sizeof(cr);
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0) {
            snprintf(buf, len, "pid %d uid %u", (int)cr.pid, (unsigned)cr.uid);
            snprintf(who, wholen, "uid %u", (unsigned)cr.uid);
        }
    } else if (getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), serv, sizeof(serv),
                           NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
        snprintf(buf, len, "%s:%s", host, serv);
        snprintf(who, wholen, "host %s", host);
    }
}

struct conn *conn_new(int fd)
{
    struct conn *c = calloc(1, sizeof(*c));
    int one = 1;

    if (!c)
        return NULL;
    c->buf = malloc(LAT_MAX_PAYLOAD);
    if (!c->buf) {
        free(c);
        return NULL;
    }
    c->fd = fd;
    atomic_init(&c->refs, 1);
    pthread_mutex_init(&c->wlock, NULL);
    /* Shipped calls are small request/reply pairs: don't let Nagle delay them. */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    net_keepalive(fd);         /* lattice/peer.h: the heartbeat between hosts */
    describe_peer(fd, c->peer, sizeof(c->peer), c->who, sizeof(c->who));
    c->tcp = lat_seal_wanted(fd);
    return c;
}

int conn_seal(struct conn *c, const struct lat_seal_keys *k)
{
    struct lat_seal *s = malloc(sizeof(*s));
    uint8_t *b = malloc(CONN_SBUF);

    if (!s || !b || lat_seal_init(s, k) < 0) {
        free(s);
        free(b);
        errno = ENOMEM;
        return -1;
    }
    c->seal = s;
    c->sbuf = b;
    return 0;
}

struct conn *conn_get(struct conn *c)
{
    if (c)
        atomic_fetch_add(&c->refs, 1);
    return c;
}

void conn_put(struct conn *c)
{
    if (!c || atomic_fetch_sub(&c->refs, 1) != 1)
        return;
    close(c->fd);
    pthread_mutex_destroy(&c->wlock);
    if (c->seal)
        lat_seal_free(c->seal);
    free(c->seal);
    if (c->seal_next)
        lat_seal_wipe(c->seal_next, sizeof(*c->seal_next));
    free(c->seal_next);
    free(c->sbuf);
    free(c->buf);
    free(c);
}

void conn_hangup(struct conn *c)
{
    shutdown(c->fd, SHUT_RDWR);
}

/* 1 = all read, 0 = EOF before the first byte, -1 = error or EOF midway. */
static int read_full(int fd, void *p, size_t len)
{
    size_t got = 0;

    while (got < len) {
        ssize_t n = recv(fd, (char *)p + got, len - got, 0);
        if (n > 0) {
            got += n;
        } else if (n == 0) {
            if (got == 0)
                return 0;
            errno = EPIPE;
            return -1;
        } else if (errno != EINTR) {
            return -1;
        }
    }
    return 1;
}

/* len bytes of the stream: what the read-ahead holds first, then the
 * socket.  As read_full; EOF after bytes from the read-ahead is midway. */
static int take(struct conn *c, void *p, size_t len)
{
    size_t have = c->ra_len - c->ra_pos, n = have < len ? have : len;

    memcpy(p, c->ra + c->ra_pos, n);
    c->ra_pos += (uint32_t)n;
    if (n == len)
        return 1;
    int rc = read_full(c->fd, (char *)p + n, len - n);
    if (rc == 0 && n > 0) {
        errno = EPIPE;
        return -1;
    }
    return rc;
}

/* The rules of a header (docs/protocol.md 2 and 3.2), plain or opened. */
static int hdr_ok(const struct lat_hdr *h, char *why, size_t whylen)
{
    if (h->magic != LAT_MAGIC)
        return errprintf(why, whylen, "bad magic 0x%08x", h->magic);
    if (h->version != LAT_VERSION)
        return errprintf(why, whylen, "protocol version %u, want %u", h->version, LAT_VERSION);
    if (h->flags && !(h->type >= LAT_SYS__BASE && h->type < LAT_SYS__END))    /* a shipped call's: ship.c */
        return errprintf(why, whylen, "header flags 0x%02x on type 0x%04x (only shipped calls carry them)",
                         h->flags, h->type);
    if (h->len > LAT_MAX_PAYLOAD)
        return errprintf(why, whylen, "type 0x%04x claims %u payload bytes (limit %u)",
                         h->type, h->len, LAT_MAX_PAYLOAD);
    return 0;
}

/* The seq rule (docs/protocol.md 3.2): a message recorded earlier on this
 * connection and sent again, or one out of order, is refused here, before
 * anyone acts on it.  The mailbox is not on the socket, and a PMI
 * connection carries raw PMI after its hello (not read here). */
static int seq_ok(struct conn *c, const struct lat_hdr *h, char *why, size_t whylen)
{
    if (c->seq_seen && (int32_t)(h->seq - c->seq_last) <= 0)
        return errprintf(why, whylen, "type 0x%04x with seq %u, not after the last one %u "
                         "(replayed or out of order)", h->type, h->seq, c->seq_last);
    c->seq_seen = true;
    c->seq_last = h->seq;
    return 0;
}

/* A sealed frame (docs/protocol.md 3.3): its length, the header and payload
 * decrypted into h and c->buf, the tag checked before anything in them is
 * looked at.  A frame altered, replayed, reordered or injected on the way
 * fails here, and the caller closes the connection. */
static int recv_sealed(struct conn *c, struct lat_hdr *h, char *why, size_t whylen)
{
    uint8_t lb[LAT_SEAL_LEN_BYTES], tag[LAT_SEAL_TAG_BYTES];
    struct lat_hdr ct;
    uint32_t len;
    uint64_t n = c->seal->k.rx_n;
    int rc = take(c, lb, sizeof(lb));

    if (rc == 0)
        return 0;
    if (rc < 0)
        return errprintf(why, whylen, errno == EPIPE ? "truncated sealed frame" : "receive failed: %s",
                         strerror(errno));
    if (lat_open_begin(c->seal, lb, &len) < 0) {
        shutdown(c->fd, SHUT_RDWR);
        return errprintf(why, whylen, "sealed frame %" PRIu64 " announces %u bytes (a frame has %zu to %u): "
                         "not this link's", n, len, sizeof(ct), LAT_SEAL_MAX);
    }
    if (take(c, &ct, sizeof(ct)) != 1 || take(c, c->buf, len - sizeof(ct)) != 1 || take(c, tag, sizeof(tag)) != 1)
        return errprintf(why, whylen, "truncated sealed frame %" PRIu64 " (%u bytes announced)", n, len);
    if (lat_open_update(c->seal, &ct, sizeof(ct), h) < 0 ||
        lat_open_update(c->seal, c->buf, len - sizeof(ct), c->buf) < 0 || lat_open_end(c->seal, tag) < 0) {
        memset(h, 0, sizeof(*h));
        shutdown(c->fd, SHUT_RDWR);     /* the stream is not this link's any more: nothing more is read */
        return errprintf(why, whylen, "sealed frame %" PRIu64 " of %u bytes failed authentication (altered, "
                         "replayed, reordered or injected on the way)", n, len);
    }
    if (hdr_ok(h, why, whylen) < 0)
        return -1;
    if (h->len != len - sizeof(ct))
        return errprintf(why, whylen, "sealed frame of %u bytes holds type 0x%04x of %u payload bytes",
                         len, h->type, h->len);
    return seq_ok(c, h, why, whylen) < 0 ? -1 : 1;
}

int conn_recv(struct conn *c, struct lat_hdr *h, char *why, size_t whylen)
{
    if (c->ra_pos == c->ra_len) {       /* one read for a small message, header and payload */
        ssize_t n;
        while ((n = recv(c->fd, c->ra, CONN_RA, 0)) < 0 && errno == EINTR)
            ;
        c->ra_pos = 0;
        c->ra_len = n > 0 ? (uint32_t)n : 0;
        if (n == 0)
            return 0;
        if (n < 0)
            return errprintf(why, whylen, "receive failed: %s", strerror(errno));
    }
    if (c->seal)
        return recv_sealed(c, h, why, whylen);
    int rc = take(c, h, sizeof(*h));

    if (rc == 0)
        return 0;
    if (rc < 0) {
        errprintf(why, whylen, errno == EPIPE ? "truncated header" : "receive failed: %s",
                  strerror(errno));
        return -1;
    }
    if (hdr_ok(h, why, whylen) < 0)
        return -1;
    if (h->len && take(c, c->buf, h->len) != 1)
        return errprintf(why, whylen, "truncated payload of type 0x%04x (%u bytes announced)",
                         h->type, h->len);
    return seq_ok(c, h, why, whylen) < 0 ? -1 : 1;
}

static int write_full(int fd, struct iovec *iov, int n)
{
    struct msghdr mh = { .msg_iov = iov, .msg_iovlen = n };

    while (mh.msg_iovlen > 0) {
        ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        while (mh.msg_iovlen > 0 && (size_t)w >= mh.msg_iov->iov_len) {
            w -= mh.msg_iov->iov_len;
            mh.msg_iov++;
            mh.msg_iovlen--;
        }
        if (mh.msg_iovlen > 0) {
            mh.msg_iov->iov_base = (char *)mh.msg_iov->iov_base + w;
            mh.msg_iov->iov_len -= w;
        }
    }
    return 0;
}

static int flush(struct conn *c, size_t n)
{
    struct iovec v = { c->sbuf, n };
    return write_full(c->fd, &v, 1);
}

/* The message as one sealed frame, through the scratch buffer (a small one
 * in one write).  A failure midway leaves the stream broken: hang up. */
static int send_sealed(struct conn *c, const struct iovec *v, int k, size_t total)
{
    size_t at = LAT_SEAL_LEN_BYTES;

    if (lat_seal_begin(c->seal, (uint32_t)total, c->sbuf) < 0)
        goto broken;
    for (int i = 0; i < k; i++) {
        const char *p = v[i].iov_base;
        size_t left = v[i].iov_len;
        while (left > 0) {
            if (at == CONN_SBUF) {
                if (flush(c, at) < 0)
                    goto broken;
                at = 0;
            }
            size_t n = CONN_SBUF - at < left ? CONN_SBUF - at : left;
            if (lat_seal_update(c->seal, p, n, c->sbuf + at) < 0)
                goto broken;
            at += n;
            p += n;
            left -= n;
        }
    }
    if (CONN_SBUF - at < LAT_SEAL_TAG_BYTES) {
        if (flush(c, at) < 0)
            goto broken;
        at = 0;
    }
    if (lat_seal_end(c->seal, c->sbuf + at) < 0 || flush(c, at + LAT_SEAL_TAG_BYTES) < 0)
        goto broken;
    return 0;
broken:;
    int e = errno;
    shutdown(c->fd, SHUT_RDWR);
    errno = e;
    return -1;
}

int conn_sendv_locked(struct conn *c, uint16_t type, uint32_t seq, const struct iovec *iov, int n)
{
    struct iovec v[8];
    struct lat_hdr h = { .magic = LAT_MAGIC, .version = LAT_VERSION, .type = type, .seq = seq };
    size_t len = 0;
    int i, k = 1;

    if (n > 7) {
        errno = EINVAL;
        return -1;
    }
    v[0] = (struct iovec){ &h, sizeof(h) };
    for (i = 0; i < n; i++) {
        if (iov[i].iov_len == 0)
            continue;
        len += iov[i].iov_len;
        v[k++] = iov[i];
    }
    if (len > LAT_MAX_PAYLOAD) {        /* a bug on our side: never send what a peer must refuse */
        errno = EMSGSIZE;
        return -1;
    }
    h.len = (uint32_t)len;
    if (c->seal)
        return send_sealed(c, v, k, sizeof(h) + len);
    return write_full(c->fd, v, k);
}

int conn_sendv(struct conn *c, uint16_t type, uint32_t seq, const struct iovec *iov, int n)
{
    int rc;

    pthread_mutex_lock(&c->wlock);
    rc = conn_sendv_locked(c, type, seq, iov, n);
    pthread_mutex_unlock(&c->wlock);
    return rc;
}

int conn_send(struct conn *c, uint16_t type, uint32_t seq, const void *p, size_t len)
{
    struct iovec v = { (void *)p, len };
    return conn_sendv(c, type, seq, &v, 1);
}

int reply_ret(struct conn *c, uint16_t type, uint32_t seq, int64_t ret, int err,
              const void *data, size_t len)
{
    struct lat_sysret r = { .ret = ret, .err = err };
    struct iovec v[2] = { { &r, sizeof(r) }, { (void *)data, len } };

    return conn_sendv(c, type | LAT_REPLY, seq, v, 2);
}

int reply_error(struct conn *c, uint32_t seq, int err, const char *fmt, ...)
{
    char text[CIOD_ERRLEN];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    return reply_ret(c, LAT_ERROR, seq, -1, err, text, strlen(text));
}
