/* PMI-1 wire protocol, client side: framing, reply parsing and validation. */
#include "wire.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* Bytes read past the end of the last reply line (the server should send
 * none, since requests and replies alternate, but a read may return them). */
static char pend[PMIW_LINE_MAX];
static size_t npend;

void pmiw_error(const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "lattice libpmi: %s\n", buf);
}

static int write_all(int fd, const char *p, size_t n)
{
    while (n) {
        /* send(MSG_NOSIGNAL): a dead server is an error to report, not a
         * SIGPIPE that kills the program; write() if fd is not a socket. */
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == ENOTSOCK)
            w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            pmiw_error("cannot write to the PMI server (PMI_FD=%d): %s", fd, w < 0 ? strerror(errno) : "short write");
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int pmiw_send(int fd, const char *req)
{
    size_t n = strlen(req);
    if (n + 1 >= PMIW_LINE_MAX || memchr(req, '\n', n)) {
        pmiw_error("request too long or contains a newline: %.60s", req);
        return -1;
    }
    char line[PMIW_LINE_MAX];
    memcpy(line, req, n);
    line[n] = '\n';
    return write_all(fd, line, n + 1);
}

/* Read one '\n'-terminated line into out (without the newline). */
static int read_line(int fd, char *out)
{
    for (;;) {
        char *nl = memchr(pend, '\n', npend);
        if (nl) {
            size_t n = (size_t)(nl - pend);
            memcpy(out, pend, n);
            out[n] = '\0';
            npend -= n + 1;
            memmove(pend, nl + 1, npend);
            return 0;
        }
        if (npend == sizeof pend) {
            pmiw_error("reply longer than %d bytes from the PMI server", PMIW_LINE_MAX);
            return -1;
        }
        ssize_t r = read(fd, pend + npend, sizeof pend - npend);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            pmiw_error("cannot read from the PMI server (PMI_FD=%d): %s", fd, strerror(errno));
            return -1;
        }
        if (r == 0) {
            pmiw_error("the PMI server closed the connection%s", npend ? " in the middle of a reply" : "");
            return -1;
        }
        if (memchr(pend + npend, '\0', (size_t)r)) {
            pmiw_error("reply from the PMI server contains a NUL byte");
            return -1;
        }
        npend += (size_t)r;
    }
}

int pmiw_parse(struct pmiw_reply *rp, const char **why)
{
    char *p = rp->line;
    rp->nfields = 0;
    while (*p) {
        while (*p == ' ')
            p++;
        if (!*p)
            break;
        char *k = p, *end = strchr(p, ' ');
        if (end)
            *end = '\0';
        p = end ? end + 1 : p + strlen(p);
        char *eq = strchr(k, '=');
        if (!eq || eq == k) {
            *why = "a field is not key=value";
            return -1;
        }
        if (!eq[1]) {
            *why = "a field has an empty value";
            return -1;
        }
        if (rp->nfields == PMIW_FIELDS_MAX) {
            *why = "too many fields";
            return -1;
        }
        *eq = '\0';
        rp->key[rp->nfields] = k;
        rp->val[rp->nfields++] = eq + 1;
    }
    if (!rp->nfields || strcmp(rp->key[0], "cmd")) {
        *why = "it does not start with cmd=";
        return -1;
    }
    /* Hydra leaves rc out of some successful replies (maxes): absent is 0. */
    const char *rc = pmiw_get(rp, "rc");
    char *e;
    rp->rc = 0;
    if (!rc)
        return 0;
    errno = 0;
    long v = strtol(rc, &e, 10);
    if (errno || *e || v < -1000000 || v > 1000000) {
        *why = "its rc is not an integer";
        return -1;
    }
    rp->rc = (int)v;
    return 0;
}

const char *pmiw_get(const struct pmiw_reply *rp, const char *key)
{
    for (int i = 0; i < rp->nfields; i++)
        if (!strcmp(rp->key[i], key))
            return rp->val[i];
    return NULL;
}

/* LATTICE_PMI_DEBUG=1 prints every exchange, to see what a library asks. */
static int debug = -1;

int pmiw_call(int fd, const char *req, const char *want, struct pmiw_reply *rp)
{
    if (debug < 0)
        debug = getenv("LATTICE_PMI_DEBUG") && strcmp(getenv("LATTICE_PMI_DEBUG"), "0");
    if (pmiw_send(fd, req) < 0 || read_line(fd, rp->line) < 0)
        return -1;
    if (debug)
        fprintf(stderr, "lattice libpmi: [%d] %s -> %s\n", (int)getpid(), req, rp->line);
    char copy[160];
    snprintf(copy, sizeof copy, "%.150s", rp->line);  /* parsing splits the line */
    const char *why;
    if (pmiw_parse(rp, &why) < 0) {
        pmiw_error("malformed reply to '%.40s': %s: '%s'", req, why, copy);
        return -1;
    }
    if (strcmp(rp->val[0], want)) {
        pmiw_error("reply to '%.40s' is cmd=%s, expected cmd=%s (msg=%s)", req, rp->val[0], want,
                   pmiw_get(rp, "msg") ? pmiw_get(rp, "msg") : "none");
        return -1;
    }
    return 0;
}
