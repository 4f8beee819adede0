/*
 * stdin_pump.c - the job's standard input for a rank in the node sandbox.
 *
 * Under cnk and with the preloaded client a rank reads its descriptor 0 by
 * shipping the read to ciod on its PROC connection, and ciod answers from
 * the job's input (ionode/ciod/stdin.c, docs/protocol.md section 4.1).  A
 * sandboxed process has no PROC connection, so its descriptor 0 is a pipe
 * and a pump process of cnode's feeds it: the pump holds a PROC connection
 * in the rank's own slot (which nothing else uses in a sandboxed job) and
 * ships reads of descriptor 0 there, so ciod serves it exactly as it serves
 * the rank itself elsewhere: the same bytes, in order, and end of file when
 * the caller's input ends.  The pump writes each answer into the pipe and
 * ends, closing it, at end of file (the rank reads its end), when nobody
 * holds the pipe's read end any more (the rank and what it forked ended or
 * closed it: then the pump's pending read is dropped, ciod sees the
 * connection go), or when ciod closes the connection.  It runs as the job's
 * owner without capabilities, in the job's container (killed with it at
 * job end), double-forked so that cnode has nobody to reap.
 */
#include "job.h"

#define PUMP_CHUNK LAT_MAX_IO           /* bytes asked per shipped read: what the I/O node's pipe holds, one round trip */

int stdin_reads(const struct job *j, const struct proc *pr)
{
    return sandboxed(j) && (j->nj.flags & LAT_JOB_STDIN) &&
           (j->stdin_rank == LAT_STDIN_ALL || j->stdin_rank == pr->rank);
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Shipped reads of descriptor 0 on conn into the pipe out, until one of the
 * ends above.  Only an unexpected end is logged. */
static void pump(int conn, int out, uint8_t *buf, uint32_t rank)
{
    for (uint32_t seq = 1;; seq++) {    /* the hello was seq 0 */
        struct lat_sysreq rq = { .a = { 0, PUMP_CHUNK } };
        if (net_send(conn, LAT_SYS_READ, seq, &rq, sizeof rq, NULL, 0) < 0)
            return;
        /* the answer, or the rank's side of the pipe gone (POLLERR on a
         * pipe's write end: no reader left) while the input waits */
        struct pollfd pf[2] = { { conn, POLLIN, 0 }, { out, 0, 0 } };
        while (poll(pf, 2, -1) < 0)
            if (errno != EINTR)
                return;
        if (pf[1].revents)
            return;
        struct lat_hdr h;
        if (net_recv_frame(conn, &h, buf, 1) <= 0)
            return;                     /* ciod closed it: the job is over */
        struct lat_sysret r;
        if (h.type != (LAT_SYS_READ | LAT_REPLY) || h.seq != seq || h.len < sizeof r) {
            say("rank %u: standard input: unexpected answer 0x%x (seq %u of %u) from the I/O node", rank, h.type,
                h.seq, seq);
            return;
        }
        memcpy(&r, buf, sizeof r);
        if (r.ret == 0)
            return;                     /* end of the input */
        if (r.ret < 0 || (uint64_t)r.ret != h.len - sizeof r || (uint64_t)r.ret > PUMP_CHUNK) {
            if (r.ret >= 0 || r.err != EINTR)
                say("rank %u: standard input: the I/O node answered %lld (%s)", rank, (long long)r.ret,
                    r.ret < 0 ? strerror(r.err) : "wrong length");
            return;
        }
        if (write_all(out, buf + sizeof r, (size_t)r.ret) < 0)
            return;                     /* EPIPE: the rank's side went while we wrote */
    }
}

/* The pump process, cnode's grandchild: conn and out are all it keeps. */
static void pump_main(const struct job *j, const struct proc *pr, int conn, int out) __attribute__((noreturn));
static void pump_main(const struct job *j, const struct proc *pr, int conn, int out)
{
    prctl(PR_SET_DUMPABLE, 0);
    /* a copy of cnode's memory: not the block key */
    explicit_bzero((void *)j->pers->key, sizeof j->pers->key);
    int c = fcntl(conn, F_DUPFD, 10), o = fcntl(out, F_DUPFD, 10);
    if (c < 0 || o < 0 || dup2(c, 3) < 0 || dup2(o, 4) < 0)
        _exit(1);
    int nul = open("/dev/null", O_RDONLY);
    if (nul < 0 || dup2(nul, 0) < 0)
        _exit(1);
    if (syscall(SYS_close_range, 5, ~0u, 0) < 0)        /* 1 and 2 stay: cnode's log */
        for (int fd = 5; fd < 1024; fd++)
            close(fd);
    if (geteuid() == 0) {
        gid_t groups[1024];
        size_t ng = j->nj.ngroups < 1024 ? j->nj.ngroups : 1024;
        for (size_t i = 0; i < ng; i++)
            groups[i] = j->groups[i];
        if (setgroups(ng, groups) < 0 || setgid(j->nj.gid) < 0 || setuid(j->nj.uid) < 0 ||
            (j->nj.uid == 0 && drop_capabilities() < 0)) {
            say("rank %u: standard input: cannot take the job's identity: %s", pr->rank, strerror(errno));
            _exit(1);
        }
    }
    struct sigaction ign = { .sa_handler = SIG_IGN }, dfl = { .sa_handler = SIG_DFL };
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            sigaction(sig, sig == SIGPIPE ? &ign : &dfl, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    uint8_t *buf = malloc(LAT_MAX_PAYLOAD);
    if (!buf) {
        say("rank %u: standard input: out of memory", pr->rank);
        _exit(1);
    }
    pump(3, 4, buf, pr->rank);
    _exit(0);
}

int stdin_pump(struct job *j, const struct proc *pr, char *why, size_t len)
{
    int conn = relay_connect(j->pers->ciod, j->pers->key, 2.0);
    if (conn < 0) {
        snprintf(why, len, "cannot connect to the I/O node for its standard input: %s", strerror(errno));
        return -1;
    }
    /* the rank's own slot, so that ciod answers with the rank's input */
    if (net_hello(conn, LAT_ROLE_PROC, j->pers->node | pr->t << 16, j->nj.job, j->pers->key, 0) < 0) {
        int e = errno;
        close(conn);
        snprintf(why, len, "the I/O node refused the connection for its standard input: %s", strerror(e));
        return -1;
    }
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) {
        int e = errno;
        close(conn);
        snprintf(why, len, "pipe: %s", strerror(e));
        return -1;
    }
    int inside;         /* born in the job's container (container_fork) */
    pid_t pid = container_fork(&j->box, &inside);
    if (pid == 0) {
        if ((inside ? container_entered : container_enter)(&j->box, 0) < 0) {
            say("rank %u: standard input: cannot enter the job's container %s: %s", pr->rank, j->box.path,
                strerror(errno));
            _exit(1);
        }
        if (fork() != 0)
            _exit(0);                   /* the pump is the grandchild: nobody's to reap */
        close(p[0]);
        pump_main(j, pr, conn, p[1]);
    }
    int e = errno;
    close(conn);
    close(p[1]);
    if (pid < 0) {
        close(p[0]);
        snprintf(why, len, "cannot create its standard input's pump: %s", strerror(e));
        return -1;
    }
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        close(p[0]);
        snprintf(why, len, "cannot start its standard input's pump (cnode's log says why)");
        return -1;
    }
    return p[0];
}
