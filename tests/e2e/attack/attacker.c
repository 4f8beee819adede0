/*
 * attacker: a Linux-mode job that tries to use its shipping connection to
 * reach the memory of another program (tests/e2e/test_t0740_attacks.py).
 *
 *   attacker HOLDER LEAK PAYLOAD
 *
 * The process that said hello on the connection (LATTICE_IO_FD) forks and
 * execs HOLDER, which may be setuid root; the child keeps the connection
 * and, speaking the wire protocol itself, asks its I/O node for two
 * rendezvous on the holder's secret: a WRITE of it into the file LEAK (a
 * read of the holder's memory) and a READ of the file PAYLOAD into it (a
 * write of the holder's memory).  It prints each reply.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <lattice/wire.h>

static uint32_t seq = 0x40000000;       /* above whatever the client library used */

/* printf by a raw write: a forked child's stdio is the client library's to refuse */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    char line[512];
    va_list ap;

    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n > 0)
        (void)!syscall(SYS_write, 1, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

static int full(int fd, void *p, size_t n, int wr)
{
    for (size_t done = 0; done < n;) {
        /* raw calls: the client library must not see this traffic */
        ssize_t r = syscall(wr ? SYS_write : SYS_read, fd, (char *)p + done, n - done);
        if (r <= 0)
            return -1;
        done += (size_t)r;
    }
    return 0;
}

/* One request; prints and returns the reply's ret (errno in *err), or -2
 * when the connection is gone. */
static int64_t callf(int fd, uint16_t type, uint8_t flags, const int64_t a[4], const void *data, uint32_t dlen,
                     int *err)
{
    struct lat_hdr h = { .magic = LAT_MAGIC, .version = LAT_VERSION, .flags = flags, .type = type,
                         .len = (uint32_t)sizeof(struct lat_sysreq) + dlen, .seq = ++seq };
    struct lat_sysreq rq;
    struct lat_sysret rs;
    char skip[4096];

    memcpy(rq.a, a, sizeof rq.a);
    if (full(fd, &h, sizeof h, 1) || full(fd, &rq, sizeof rq, 1) || (dlen && full(fd, (void *)data, dlen, 1))
        || full(fd, &h, sizeof h, 0) || h.len < sizeof rs || full(fd, &rs, sizeof rs, 0)) {
        say("call 0x%04x: connection closed\n", type);
        return -2;
    }
    for (uint32_t left = h.len - (uint32_t)sizeof rs; left;) {
        uint32_t n = left < sizeof skip ? left : (uint32_t)sizeof skip;
        if (full(fd, skip, n, 0))
            return -2;
        left -= n;
    }
    *err = rs.err;
    say("call 0x%04x: ret %lld err %d (%s)\n", type, (long long)rs.ret, rs.err, rs.ret < 0 ? strerror(rs.err) : "ok");
    return rs.ret;
}

static int64_t open_remote(int fd, const char *path, int flags)
{
    int64_t a[4] = { LAT_AT_FDCWD, flags, 0644, 0 };
    int err;
    return callf(fd, LAT_SYS_OPENAT, 0, a, path, (uint32_t)strlen(path) + 1, &err);
}

int main(int argc, char **argv)
{
    const char *s = getenv("LATTICE_IO_FD");
    int to_child[2], to_holder[2], err = 0;

    if (argc != 4 || !s)
        return 2;
    int conn = atoi(s);
    printf("datapath %s\n", getenv("LATTICE_IO_DP") ? getenv("LATTICE_IO_DP") : "none");
    fflush(stdout);
    if (pipe(to_child) < 0 || pipe(to_holder) < 0)
        return 1;
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid > 0) {                      /* the process of the hello becomes the holder */
        char o[16], i[16];
        snprintf(o, sizeof o, "%d", to_child[1]);
        snprintf(i, sizeof i, "%d", to_holder[0]);
        close(to_child[0]);
        close(to_holder[1]);
        char *none[] = { NULL };        /* no client library in the holder */
        execle(argv[1], argv[1], o, i, (char *)NULL, none);
        perror("exec holder");
        return 1;
    }
    close(to_child[1]);
    close(to_holder[0]);
    signal(SIGPIPE, SIG_IGN);           /* a closed connection is an answer, not our end */
    char line[64] = "";
    unsigned long addr = 0;
    size_t len = 0;
    if (syscall(SYS_read, to_child[0], line, sizeof line - 1) <= 0 || sscanf(line, "%lx %zu", &addr, &len) != 2)
        return 1;
    /* no wait: the holder's own program wrote that line, so its exec is done (an event, not a time) */
    say("holder secret at %#lx, %zu bytes\n", addr, len);

    struct lat_rdv_seg seg = { addr, len };
    int64_t leak = open_remote(conn, argv[2], O_WRONLY | O_CREAT | O_TRUNC);
    if (leak >= 0) {
        int64_t a[4] = { leak, (int64_t)len, 0, 0 };
        say("read attempt: ");
        callf(conn, LAT_SYS_WRITE, LAT_HF_RDV, a, &seg, sizeof seg, &err);
    }
    int64_t pay = open_remote(conn, argv[3], O_RDONLY);
    if (pay >= 0) {
        int64_t a[4] = { pay, (int64_t)len, 0, 0 };
        say("write attempt: ");
        callf(conn, LAT_SYS_READ, LAT_HF_RDV, a, &seg, sizeof seg, &err);
    }
    fflush(stdout);
    if (syscall(SYS_write, to_holder[1], "x", 1) != 1)
        return 1;
    return 0;
}
