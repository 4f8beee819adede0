/*
 * job.c - one job on this node: receive it from ciod (JOB, IMAGE...,
 * START), launch the compute process, forward its local stdout/stderr,
 * report how it ended.  After LAT_NODE_EXIT the node is ready for the next.
 *
 * The compute process runs from a memfd holding the pushed executable (the
 * node never looks the program up in a file system, as CNK), with its own
 * PROC connection to ciod, in one of two ways (lat_node_job.flags):
 *
 *   Linux mode   fexecve(image) with the client library preloaded;
 *   LAT_JOB_CNK  exec cnk --memory BYTES --cores N [--trace] -- argv..., with
 *                the image on fd 4 and a report page (struct cnk_report) on
 *                fd 6 that cnk keeps current; read after the process ended.
 *
 * Either way the exit message's text ends in a report line, "kernel=..."
 * (see report_line), that the service node records per rank.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cnode.h"
#include "../include/lattice/cnk_report.h"   /* path-relative: cnode builds with -Iprotocol only */

#define MAX_GROUPS 65536u
#define PIPE_CHUNK 65536

/* descriptors in the child just before exec */
enum { CHILD_PROC_FD = 3, CHILD_IMAGE_FD = 4, CHILD_ERR_FD = 5, CHILD_REPORT_FD = CNK_REPORT_FD,
       CHILD_KERNEL_FD = 7 };
_Static_assert(CNK_REPORT_FD == 6, "cnk's report descriptor follows the error pipe");
#define REPORT_BYTES 4096

enum state { IDLE, LOADING, RUNNING };

struct job {
    const struct personality *pers;
    const struct kernels *k;
    int conn;
    enum state state;

    struct lat_node_job nj;
    uint8_t *desc;              /* copy of the JOB payload */
    uint32_t *groups;
    char **argv, **env;         /* point into desc */
    int memfd;
    int reportfd;               /* cnk jobs: the report page, -1 otherwise */
    uint64_t received;

    pid_t pid;
    int pidfd;
    int out[3];                 /* [1], [2]: read ends of the stdout/stderr pipes, -1 at EOF */
    int exited, status;
};

static void closefd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

struct job *job_new(const struct personality *pers, const struct kernels *k, int conn)
{
    struct job *j = calloc(1, sizeof *j);
    if (!j) {
        say("out of memory");
        exit(1);
    }
    j->pers = pers;
    j->k = k;
    j->conn = conn;
    j->memfd = j->reportfd = j->pidfd = j->out[0] = j->out[1] = j->out[2] = -1;
    return j;
}

static void reset(struct job *j)
{
    free(j->desc);
    free(j->argv);
    free(j->env);
    j->desc = NULL;
    j->argv = j->env = NULL;
    j->groups = NULL;
    closefd(&j->memfd);
    closefd(&j->reportfd);
    closefd(&j->pidfd);
    closefd(&j->out[1]);
    closefd(&j->out[2]);
    j->received = 0;
    j->pid = 0;
    j->exited = 0;
    j->state = IDLE;
}

int job_running(const struct job *j)
{
    return j->state == RUNNING;
}

static void send_or_die(struct job *j, uint16_t type, const void *a, size_t alen, const void *b, size_t blen)
{
    if (net_send(j->conn, type, a, alen, b, blen) < 0) {
        say("connection to ciod lost (%s); ending", strerror(errno));
        job_kill_now(j);
        exit(1);
    }
}

static void send_exit(struct job *j, uint32_t how, int32_t value, const char *text)
{
    struct lat_exit ex = { j->nj.job, j->nj.rank, j->pers->node, how, value };
    send_or_die(j, LAT_NODE_EXIT, &ex, sizeof ex, text, text ? strlen(text) : 0);
}

/* The job could not be started: tell ciod why and forget it. */
static void launch_failed(struct job *j, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void launch_failed(struct job *j, int err, const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    say("job %llu rank %u: %s", (unsigned long long)j->nj.job, j->nj.rank, text);
    send_exit(j, LAT_EXIT_LAUNCH, err, text);
    reset(j);
}

/* ---- receiving the job ---- */

/* Split n NUL-terminated strings starting at *pos; NULL if they run past end. */
static char **strings(uint8_t *buf, size_t len, size_t *pos, uint32_t n)
{
    char **v = calloc((size_t)n + 1, sizeof *v);
    if (!v)
        return NULL;
    for (uint32_t i = 0; i < n; i++) {
        uint8_t *s = buf + *pos, *nul = memchr(s, 0, len - *pos);
        if (!nul) {
            free(v);
            return NULL;
        }
        v[i] = (char *)s;
        *pos += (size_t)(nul - s) + 1;
    }
    return v;
}

static const char *parse_job(struct job *j, const struct msg *m)
{
    size_t len = m->h.len;
    memcpy(&j->nj, m->p, sizeof j->nj);
    const struct lat_node_job *nj = &j->nj;
    if (nj->ngroups > MAX_GROUPS)
        return "too many groups";
    if (nj->nargs < 1)
        return "no argv[0]";
    if ((uint64_t)nj->nargs + nj->nenv > LAT_MAX_ARGS)
        return "too many arguments and environment strings";
    if (nj->image_size == 0 || nj->image_size > LAT_MAX_IMAGE)
        return "bad image size";
    if (nj->size == 0 || nj->rank >= nj->size)
        return "rank out of range";
    if (nj->flags & ~(uint32_t)LAT_JOB_FLAGS_ALL)
        return "unknown job flags";
    if ((nj->flags & LAT_JOB_TRACE) && !(nj->flags & LAT_JOB_CNK))
        return "flag TRACE without flag CNK";
    size_t pos = sizeof *nj + (size_t)nj->ngroups * sizeof(uint32_t);
    if (pos > len)
        return "groups run past the message";
    if (!(j->desc = malloc(len + 1)))
        return "out of memory";
    memcpy(j->desc, m->p, len);
    j->groups = (uint32_t *)(j->desc + sizeof *nj);
    if (!(j->argv = strings(j->desc, len, &pos, nj->nargs)))
        return "argv strings run past the message";
    if (!(j->env = strings(j->desc, len, &pos, nj->nenv)))
        return "environment strings run past the message";
    if (pos != len)
        return "trailing bytes after the strings";
    if (!j->argv[0][0])
        return "empty argv[0]";
    return NULL;
}

static void on_job(struct job *j, const struct msg *m)
{
    if (j->state == RUNNING) {
        say("ignoring a new job while job %llu runs", (unsigned long long)j->nj.job);
        return;
    }
    reset(j);
    if (m->h.len < sizeof j->nj) {
        say("ignoring a JOB message of %u bytes", m->h.len);
        return;
    }
    const char *why = parse_job(j, m);
    if (why) {
        launch_failed(j, EPROTO, "malformed job message: %s", why);
        return;
    }
    if ((j->nj.flags & LAT_JOB_CNK) && j->k->cnk_fd < 0) {
        launch_failed(j, ENOENT, "this compute node has no compute node kernel (cnode runs without --cnk)");
        return;
    }
    /* no MFD_CLOEXEC: a #! script's interpreter opens it as /dev/fd/N */
    j->memfd = (int)syscall(SYS_memfd_create, "lattice-image", 0);
    if (j->memfd < 0) {
        launch_failed(j, errno, "cannot store the executable: %s", strerror(errno));
        return;
    }
    j->state = LOADING;
}

static void on_image(struct job *j, const struct msg *m)
{
    if (j->state != LOADING)
        return;  /* the rest of a job we already refused */
    if (m->h.len > j->nj.image_size - j->received) {
        launch_failed(j, EPROTO, "executable image larger than the %llu bytes announced",
                      (unsigned long long)j->nj.image_size);
        return;
    }
    size_t done = 0;
    while (done < m->h.len) {
        ssize_t n = write(j->memfd, m->p + done, m->h.len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            launch_failed(j, errno, "cannot store the executable: %s", strerror(errno));
            return;
        }
        done += (size_t)n;
    }
    j->received += m->h.len;
}

/* ---- launching ---- */

static int is_cnk(const struct job *j)
{
    return (j->nj.flags & LAT_JOB_CNK) != 0;
}

/* Is s one of the variables the node sets itself? */
static int ours_var(const char *s, int cnk)
{
    static const char *const names[] = { "LATTICE_IO_FD=", "LATTICE_RANK=", "LATTICE_SIZE=", "LATTICE_NODE=",
                                         "LATTICE_PERSONALITY=" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strncmp(s, names[i], strlen(names[i])))
            return 1;
    return !cnk && !strncmp(s, "LD_PRELOAD=", 11);
}

/* env for the compute process: the job's, with ours set; in Linux mode the
 * client library preloaded first (under cnk the program's LD_PRELOAD is its own) */
static char **make_env(struct job *j, int procfd_num)
{
    enum { OURS = 6 };
    int cnk = is_cnk(j);
    size_t n = 0;
    while (j->env[n])
        n++;
    char **e = calloc(n + OURS + 1, sizeof *e);
    if (!e)
        return NULL;
    size_t k = 0;
    const char *user_preload = NULL;
    for (size_t i = 0; i < n; i++) {
        const char *s = j->env[i];
        if (!cnk && !strncmp(s, "LD_PRELOAD=", 11))
            user_preload = s + 11;
        if (!ours_var(s, cnk))
            e[k++] = (char *)s;
    }
    char buf[OURS][4200];
    int m = 0;
    if (!cnk) {
        snprintf(buf[m++], sizeof buf[0], "LD_PRELOAD=%s%s%s", j->k->client,
                 user_preload && *user_preload ? ":" : "", user_preload ? user_preload : "");
        snprintf(buf[m++], sizeof buf[0], "LATTICE_IO_FD=%d", procfd_num);  /* cnk hides the connection */
    }
    snprintf(buf[m++], sizeof buf[0], "LATTICE_RANK=%u", j->nj.rank);
    snprintf(buf[m++], sizeof buf[0], "LATTICE_SIZE=%u", j->nj.size);
    snprintf(buf[m++], sizeof buf[0], "LATTICE_NODE=%s", j->pers->location);
    snprintf(buf[m++], sizeof buf[0], "LATTICE_PERSONALITY=%s", j->pers->env);
    size_t first = k;
    for (int i = 0; i < m; i++)
        if (!(e[k++] = strdup(buf[i]))) {
            while (first < k)
                free(e[first++]);
            free(e);
            return NULL;
        }
    e[k] = NULL;
    return e;
}

/* argv for cnk: cnk --memory BYTES --cores N [--trace] -- ARGV... */
static char **make_cnk_argv(struct job *j)
{
    size_t n = 0;
    while (j->argv[n])
        n++;
    char **a = calloc(n + 8, sizeof *a);
    if (!a)
        return NULL;
    static char mem[32], cores[16];
    snprintf(mem, sizeof mem, "%llu", (unsigned long long)j->pers->memory);
    snprintf(cores, sizeof cores, "%u", j->pers->cores);
    size_t k = 0;
    a[k++] = "cnk";
    a[k++] = "--memory";
    a[k++] = mem;
    a[k++] = "--cores";
    a[k++] = cores;
    if (j->nj.flags & LAT_JOB_TRACE)
        a[k++] = "--trace";
    a[k++] = "--";
    for (size_t i = 0; i < n; i++)
        a[k++] = j->argv[i];
    a[k] = NULL;
    return a;
}

static void child_fail(int errfd, int err) __attribute__((noreturn));
static void child_fail(int errfd, int err)
{
    (void)!write(errfd, &err, sizeof err);
    _exit(127);
}

/* In the child: runs between fork and exec, so only async-signal-safe calls. */
static void child(struct job *j, int procfd, int outw, int errw, int failw, char **argv, char **envp,
                  pid_t parent)
{
    int cnk = is_cnk(j);
    /* move what we keep above the slots we are about to fill */
    int p = fcntl(procfd, F_DUPFD_CLOEXEC, 10), m = fcntl(j->memfd, F_DUPFD_CLOEXEC, 10);
    int o = fcntl(outw, F_DUPFD_CLOEXEC, 10), e = fcntl(errw, F_DUPFD_CLOEXEC, 10);
    int f = fcntl(failw, F_DUPFD_CLOEXEC, 10);
    int r = cnk ? fcntl(j->reportfd, F_DUPFD_CLOEXEC, 10) : 0;
    int kfd = cnk ? fcntl(j->k->cnk_fd, F_DUPFD_CLOEXEC, 10) : 0;
    if (f < 0)
        _exit(127);
    if (p < 0 || m < 0 || o < 0 || e < 0 || r < 0 || kfd < 0)
        child_fail(f, errno);
    int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (nul < 0 || dup2(nul, 0) < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0 || dup2(p, CHILD_PROC_FD) < 0 ||
        dup2(m, CHILD_IMAGE_FD) < 0 || dup3(f, CHILD_ERR_FD, O_CLOEXEC) < 0)
        child_fail(f, errno);
    f = CHILD_ERR_FD;
    /* cnk: the report page (inherited), and cnk itself (close-on-exec) */
    if (cnk && (dup2(r, CHILD_REPORT_FD) < 0 || dup3(kfd, CHILD_KERNEL_FD, O_CLOEXEC) < 0))
        child_fail(f, errno);
    int keep = cnk ? CHILD_KERNEL_FD : CHILD_ERR_FD;
    if (syscall(SYS_close_range, keep + 1, ~0u, 0) < 0)
        for (int fd = keep + 1; fd < 1024; fd++)
            close(fd);

    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    signal(SIGPIPE, SIG_DFL);
    if (setpgid(0, 0) < 0)
        child_fail(f, errno);

    if (geteuid() == 0) {
        gid_t groups[1024];
        size_t ng = j->nj.ngroups < 1024 ? j->nj.ngroups : 1024;
        for (size_t i = 0; i < ng; i++)
            groups[i] = j->groups[i];
        if (setgroups(ng, groups) < 0 || setgid(j->nj.gid) < 0 || setuid(j->nj.uid) < 0)
            child_fail(f, -errno);  /* negative: identity, not exec */
    }
    /* after any identity change (which clears it): die with cnode */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
    if (cnk)
        fexecve(CHILD_KERNEL_FD, argv, envp);
    else
        fexecve(CHILD_IMAGE_FD, argv, envp);
    child_fail(f, errno);
}

static void launch(struct job *j)
{
    int procfd = net_connect(j->pers->ciod, 2.0);
    if (procfd < 0) {
        launch_failed(j, errno, "cannot connect to the I/O node: %s", strerror(errno));
        return;
    }
    if (net_hello(procfd, LAT_ROLE_PROC, j->pers->node, j->nj.job, j->pers->key) < 0) {
        int e = errno;
        close(procfd);
        launch_failed(j, e, "the I/O node refused the process connection: %s", strerror(e));
        return;
    }
    int outp[2], errp[2], failp[2];
    if (pipe2(outp, O_CLOEXEC) < 0) {
        close(procfd);
        launch_failed(j, errno, "pipe: %s", strerror(errno));
        return;
    }
    if (pipe2(errp, O_CLOEXEC) < 0 || pipe2(failp, O_CLOEXEC) < 0) {
        int e = errno;
        close(procfd);
        close(outp[0]);
        close(outp[1]);
        launch_failed(j, e, "pipe: %s", strerror(e));
        return;
    }
    int cnk = is_cnk(j);
    if (cnk) {
        /* the report page: zeroed, so "no magic" means cnk never started */
        j->reportfd = (int)syscall(SYS_memfd_create, "lattice-cnk-report", MFD_CLOEXEC);
        if (j->reportfd < 0 || ftruncate(j->reportfd, REPORT_BYTES) < 0) {
            int e = errno;
            close(procfd);
            close(outp[0]), close(outp[1]), close(errp[0]), close(errp[1]), close(failp[0]), close(failp[1]);
            launch_failed(j, e, "cannot create the cnk report page: %s", strerror(e));
            return;
        }
    }
    char **envp = make_env(j, CHILD_PROC_FD);
    char **argv = cnk ? make_cnk_argv(j) : j->argv;
    pid_t parent = getpid();
    errno = ENOMEM;
    pid_t pid = envp && argv ? fork() : -1;
    if (pid == 0)
        child(j, procfd, outp[1], errp[1], failp[1], argv, envp, parent);
    int forkerr = errno;
    if (cnk)
        free(argv);
    close(procfd);  /* the child has it; ciod sees EOF when the process ends */
    close(outp[1]);
    close(errp[1]);
    close(failp[1]);
    for (char **e = envp; e && *e; e++)
        if (ours_var(*e, cnk))
            free(*e);
    free(envp);
    if (pid < 0) {
        close(outp[0]);
        close(errp[0]);
        close(failp[0]);
        launch_failed(j, forkerr, "cannot create the process: %s", strerror(forkerr));
        return;
    }
    j->pid = pid;
    j->out[1] = outp[0];
    j->out[2] = errp[0];
    j->state = RUNNING;

    /* exec succeeded iff the CLOEXEC pipe closes without a word */
    int err = 0;
    ssize_t n;
    while ((n = read(failp[0], &err, sizeof err)) < 0 && errno == EINTR)
        ;
    close(failp[0]);
    j->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (n == (ssize_t)sizeof err) {
        waitpid(pid, NULL, 0);
        j->exited = 1;
        closefd(&j->out[1]);
        closefd(&j->out[2]);
        if (err < 0)
            launch_failed(j, -err, "cannot take the job's identity (uid %u gid %u): %s", j->nj.uid, j->nj.gid,
                          strerror(-err));
        else if (cnk)
            launch_failed(j, err, "cannot execute the compute node kernel %s: %s", j->k->cnk, strerror(err));
        else
            launch_failed(j, err, "cannot execute %s: %s", j->argv[0], strerror(err));
        return;
    }
    if (j->pidfd < 0)
        say("warning: pidfd_open: %s; polling for the child's exit", strerror(errno));
}

static void on_start(struct job *j, const struct msg *m)
{
    if (j->state != LOADING)
        return;
    struct lat_job_end s;
    if (m->h.len < sizeof s) {
        launch_failed(j, EPROTO, "malformed START message");
        return;
    }
    memcpy(&s, m->p, sizeof s);
    if (s.job != j->nj.job) {
        launch_failed(j, EPROTO, "START for job %llu, but job %llu was loaded", (unsigned long long)s.job,
                      (unsigned long long)j->nj.job);
        return;
    }
    if (j->received != j->nj.image_size) {
        launch_failed(j, EPROTO, "executable image incomplete: %llu of %llu bytes",
                      (unsigned long long)j->received, (unsigned long long)j->nj.image_size);
        return;
    }
    launch(j);
}

/* ---- supervising ---- */

int job_pollfds(struct job *j, struct pollfd *pfd, int max)
{
    int n = 0;
    if (j->state != RUNNING || max < 3)
        return 0;
    for (int s = 1; s <= 2; s++)
        if (j->out[s] >= 0)
            pfd[n++] = (struct pollfd){ .fd = j->out[s], .events = POLLIN };
    if (!j->exited && j->pidfd >= 0)
        pfd[n++] = (struct pollfd){ .fd = j->pidfd, .events = POLLIN };
    return n;
}

/* Forward what one pipe has; closes it at EOF. */
static void forward(struct job *j, int s)
{
    char buf[PIPE_CHUNK];
    ssize_t n = read(j->out[s], buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (n <= 0) {
        closefd(&j->out[s]);
        return;
    }
    struct lat_output o = { j->nj.rank, (uint32_t)s };
    send_or_die(j, LAT_NODE_OUTPUT, &o, sizeof o, buf, (size_t)n);
}

/* The report page as cnk left it; 0 if cnk never wrote it. */
static int read_report(struct job *j, struct cnk_report *r)
{
    memset(r, 0, sizeof *r);
    if (j->reportfd < 0 || pread(j->reportfd, r, sizeof *r, 0) != (ssize_t)sizeof *r)
        return 0;
    return r->magic == CNK_REPORT_MAGIC;
}

static const char *page_name(uint64_t bytes, char *buf, size_t len)
{
    if (bytes >= (1ull << 30) && bytes % (1ull << 30) == 0)
        snprintf(buf, len, "%lluG", (unsigned long long)(bytes >> 30));
    else if (bytes >= (1ull << 20) && bytes % (1ull << 20) == 0)
        snprintf(buf, len, "%lluM", (unsigned long long)(bytes >> 20));
    else if (bytes >= 1024 && bytes % 1024 == 0)
        snprintf(buf, len, "%lluK", (unsigned long long)(bytes >> 10));
    else if (bytes)
        snprintf(buf, len, "%llu", (unsigned long long)bytes);
    else
        snprintf(buf, len, "none");
    return buf;
}

/*
 * The report line of a cnk job, one line of space-separated fields with the
 * free text last:
 *   kernel=cnk pages=2M bigmem=1073741824 local=N shipped=N unsupported=N why=TEXT
 * (docs/protocol.md, section 5).
 */
static void report_line(const struct cnk_report *r, char *buf, size_t len)
{
    char why[sizeof r->pages_why + 1], pg[32];
    size_t n = strnlen(r->pages_why, sizeof r->pages_why);
    memcpy(why, r->pages_why, n);
    why[n] = '\0';
    for (char *c = why; *c; c++)
        if (*c == '\n' || *c == '\r')
            *c = ' ';
    snprintf(buf, len, "kernel=cnk pages=%s bigmem=%llu local=%llu shipped=%llu unsupported=%llu why=%s",
             page_name(r->page_size, pg, sizeof pg), (unsigned long long)r->bigmem_bytes,
             (unsigned long long)r->count[CNK_LOCAL], (unsigned long long)r->count[CNK_SHIPPED],
             (unsigned long long)r->count[CNK_UNSUPPORTED], why[0] ? why : "-");
}

static void finish(struct job *j)
{
    /* drain what the process wrote before it ended, to EOF (bounded, in case
     * something escaped the process group with the pipes) */
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (j->out[1] >= 0 || j->out[2] >= 0) {
        struct pollfd pfd[2];
        int n = 0, idx[2];
        for (int s = 1; s <= 2; s++)
            if (j->out[s] >= 0) {
                idx[n] = s;
                pfd[n++] = (struct pollfd){ .fd = j->out[s], .events = POLLIN };
            }
        if (poll(pfd, (nfds_t)n, 500) < 0 && errno != EINTR)
            break;
        for (int i = 0; i < n; i++)
            if (pfd[i].revents)
                forward(j, idx[i]);
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec > 5) {
            say("warning: output pipes still open 5 s after the process ended; dropping them");
            break;
        }
    }
    struct cnk_report rep;
    char line[512], text[768];
    if (is_cnk(j) && read_report(j, &rep) && rep.launch_err != 0) {
        /* cnk could not load the program: a launch failure, in cnk's words */
        rep.message[sizeof rep.message - 1] = '\0';
        launch_failed(j, rep.launch_err, "%s", rep.message[0] ? rep.message : strerror(rep.launch_err));
        return;
    }
    if (!is_cnk(j))
        snprintf(line, sizeof line, "kernel=linux");
    else if (!read_report(j, &rep))
        snprintf(line, sizeof line, "kernel=cnk report=none");
    else
        report_line(&rep, line, sizeof line);
    if (WIFSIGNALED(j->status)) {
        int sig = WTERMSIG(j->status);
        snprintf(text, sizeof text, "killed by signal %d (%s)\n%s", sig, strsignal(sig), line);
        send_exit(j, LAT_EXIT_SIGNAL, sig, text);
    } else {
        send_exit(j, LAT_EXIT_CODE, WEXITSTATUS(j->status), line);
    }
    reset(j);
}

/* The process ended: kill what is left of its process group while the
 * zombie still holds the group id (so the id cannot be reused), then reap. */
static int reap(struct job *j)
{
    siginfo_t si = { 0 };
    if (waitid(P_PID, (id_t)j->pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid != j->pid)
        return 0;
    kill(-j->pid, SIGKILL);
    int st;
    if (waitpid(j->pid, &st, 0) != j->pid)
        return 0;
    j->status = st;
    j->exited = 1;
    return 1;
}

void job_events(struct job *j, const struct pollfd *pfd, int n)
{
    if (j->state != RUNNING)
        return;
    for (int i = 0; i < n; i++) {
        if (!pfd[i].revents)
            continue;
        if (pfd[i].fd == j->out[1])
            forward(j, 1);
        else if (pfd[i].fd == j->out[2])
            forward(j, 2);
    }
    if (!j->exited && (j->pidfd < 0 || n > 0))
        reap(j);
    if (j->exited)
        finish(j);
}

void job_kill_now(struct job *j)
{
    if (j->state == RUNNING && !j->exited) {
        kill(-j->pid, SIGKILL);
        waitpid(j->pid, NULL, 0);
    }
    reset(j);
}

int job_message(struct job *j, const struct msg *m)
{
    switch (m->h.type) {
    case LAT_NODE_JOB:
        on_job(j, m);
        break;
    case LAT_NODE_IMAGE:
        on_image(j, m);
        break;
    case LAT_NODE_START:
        on_start(j, m);
        break;
    case LAT_NODE_KILL: {
        struct lat_kill k;
        if (m->h.len < sizeof k)
            break;
        memcpy(&k, m->p, sizeof k);
        if (k.sig <= 0 || k.sig >= NSIG)
            break;
        if (j->state == RUNNING && !j->exited)
            kill(-j->pid, k.sig);
        else if (j->state == LOADING) {
            char text[64];
            snprintf(text, sizeof text, "killed by signal %d before it started", k.sig);
            send_exit(j, LAT_EXIT_SIGNAL, k.sig, text);
            reset(j);
        }
        break;
    }
    case LAT_NODE_SHUTDOWN:
        job_kill_now(j);
        return 1;
    default:
        say("ignoring message type 0x%04x from ciod", m->h.type);
        break;
    }
    return 0;
}
