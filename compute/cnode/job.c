/*
 * job.c - one job on this node: receive it from ciod (JOB, IMAGE...,
 * START), launch its compute processes (one, or one per core in virtual
 * node mode; MPMD jobs may run different images), forward their local
 * stdout/stderr and PMI traffic, report how each ended.  When every process
 * has sent its LAT_NODE_EXIT the node is ready for the next job.
 *
 * PMI: each process gets as PMI_FD (descriptor 8, above the slots below, so
 * it stays an ordinary local descriptor under cnk too) a connection of its
 * own to ciod (LAT_ROLE_PMI, raw PMI after the hello), so that its requests
 * skip this supervisor.  If ciod will not open one, it gets one end of a
 * socketpair instead: whatever it writes there goes to ciod as LAT_NODE_PMI
 * with its rank, and LAT_NODE_PMI_REPLY bytes are written back
 * (docs/protocol.md, 10).
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
 *
 * With LAT_JOB_CPUS each process is bound to its slot's real CPUs between
 * fork and exec (so the binding holds under cnk and in Linux mode) and gets
 * the MPIR_CVAR_ASYNC_PROGRESS its slot says, unless the job's environment
 * sets it (docs/architecture.md, "Nodes on cores").
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
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
       CHILD_KERNEL_FD = 7, CHILD_PMI_FD = 8,
       CHILD_SEQ_FD = CHILD_REPORT_FD };   /* Linux mode: the page of the connection's seq counter */
_Static_assert(CNK_REPORT_FD == 6, "cnk's report descriptor follows the error pipe");
#define REPORT_BYTES 4096

enum state { IDLE, LOADING, RUNNING };

/* One compute process of the job on this node. */
struct proc {
    uint32_t rank, t, app;
    pid_t pid;
    int pidfd;
    int out[3];                 /* [1], [2]: read ends of the stdout/stderr pipes, -1 at EOF */
    int pmi;                    /* our end of its PMI socketpair, -1 if closed */
    int reportfd;               /* cnk jobs: the report page, -1 otherwise */
    const uint32_t *cpu;        /* LAT_JOB_CPUS: the CPUs to bind it to (into the job's desc), else NULL */
    uint32_t ncpus;
    int32_t progress;           /* MPIR_CVAR_ASYNC_PROGRESS to add, or LAT_PROGRESS_UNSET */
    int started, exited, status, done;
};

struct job {
    const struct personality *pers;
    const struct kernels *k;
    int conn;
    uint32_t seq;               /* of the last message sent on conn (ciod checks they increase) */
    enum state state;

    struct lat_node_job nj;
    uint8_t *desc;              /* copy of the JOB payload */
    uint32_t *groups;
    char **argv[LAT_MAX_APPS], **env;   /* point into desc */
    uint32_t napps, ppn, nprocs, left;  /* left: processes that have not reported their end */
    int placed;                 /* LAT_JOB_PLACED: per-process personality (mode, memory share, t) */
    uint64_t image_size[LAT_MAX_APPS];
    int memfd[LAT_MAX_APPS];
    uint64_t received;
    struct proc proc[LAT_MAX_PPN];
};

static void closefd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

struct job *job_new(const struct personality *pers, const struct kernels *k, int conn, uint32_t hello_seq)
{
    struct job *j = calloc(1, sizeof *j);
    if (!j) {
        say("out of memory");
        exit(1);
    }
    j->pers = pers;
    j->k = k;
    j->conn = conn;
    j->seq = hello_seq;
    for (uint32_t a = 0; a < LAT_MAX_APPS; a++)
        j->memfd[a] = -1;
    for (uint32_t i = 0; i < LAT_MAX_PPN; i++) {
        struct proc *p = &j->proc[i];
        p->reportfd = p->pidfd = p->pmi = p->out[0] = p->out[1] = p->out[2] = -1;
    }
    return j;
}

static void proc_close(struct proc *p)
{
    closefd(&p->reportfd);
    closefd(&p->pidfd);
    closefd(&p->pmi);
    closefd(&p->out[1]);
    closefd(&p->out[2]);
}

static void reset(struct job *j)
{
    free(j->desc);
    for (uint32_t a = 0; a < LAT_MAX_APPS; a++) {
        free(j->argv[a]);
        j->argv[a] = NULL;
        closefd(&j->memfd[a]);
        j->image_size[a] = 0;
    }
    free(j->env);
    j->desc = NULL;
    j->env = NULL;
    j->groups = NULL;
    for (uint32_t i = 0; i < LAT_MAX_PPN; i++) {
        struct proc *p = &j->proc[i];
        proc_close(p);
        *p = (struct proc){ .reportfd = -1, .pidfd = -1, .pmi = -1, .out = { -1, -1, -1 } };
    }
    j->napps = j->nprocs = j->left = j->ppn = 0;
    j->placed = 0;
    j->received = 0;
    j->state = IDLE;
}

int job_running(const struct job *j)
{
    return j->state == RUNNING;
}

static void send_or_die(struct job *j, uint16_t type, const void *a, size_t alen, const void *b, size_t blen)
{
    if (++j->seq == 0)
        j->seq = 1;
    if (net_send(j->conn, type, j->seq, a, alen, b, blen) < 0) {
        say("connection to ciod lost (%s); ending", strerror(errno));
        job_kill_now(j);
        exit(1);
    }
}

/* A process ended (or never started): one LAT_NODE_EXIT; the job is over
 * when every process has sent its own. */
static void send_exit(struct job *j, struct proc *p, uint32_t how, int32_t value, const char *text)
{
    struct lat_exit ex = { j->nj.job, p->rank, j->pers->node, how, value };
    send_or_die(j, LAT_NODE_EXIT, &ex, sizeof ex, text, text ? strlen(text) : 0);
    if (!p->done) {
        p->done = 1;
        proc_close(p);
        j->left--;
    }
    if (j->left == 0)
        reset(j);
}

static void proc_failed(struct job *j, struct proc *p, int err, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void proc_failed(struct job *j, struct proc *p, int err, const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    say("job %llu rank %u: %s", (unsigned long long)j->nj.job, p->rank, text);
    send_exit(j, p, LAT_EXIT_LAUNCH, err, text);
}

/* The job could not be started: tell ciod why for every process and forget it. */
static void launch_failed(struct job *j, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void launch_failed(struct job *j, int err, const char *fmt, ...)
{
    char text[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    say("job %llu: %s", (unsigned long long)j->nj.job, text);
    if (j->nprocs == 0) {       /* not even the processes are known: report the one ciod named */
        j->nprocs = j->left = 1;
        j->proc[0].rank = j->nj.rank;
    }
    for (uint32_t i = 0; i < j->nprocs && j->state != IDLE; i++)
        if (!j->proc[i].done)
            send_exit(j, &j->proc[i], LAT_EXIT_LAUNCH, err, text);
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
        uint8_t *s = buf + *pos, *nul = *pos < len ? memchr(s, 0, len - *pos) : NULL;
        if (!nul) {
            free(v);
            return NULL;
        }
        v[i] = (char *)s;
        *pos += (size_t)(nul - s) + 1;
    }
    return v;
}

/* The rank mapping part of a LAT_JOB_PLACED job: this node's processes and the
 * applications' image sizes and argument counts. */
static const char *parse_mapping(struct job *j, size_t len, size_t *pos, uint32_t nargs[LAT_MAX_APPS])
{
    struct lat_job_ext ext;
    if (*pos + sizeof ext > len)
        return "rank mapping runs past the message";
    memcpy(&ext, j->desc + *pos, sizeof ext);
    *pos += sizeof ext;
    if (ext.nslots < 1 || ext.nslots > LAT_MAX_PPN || ext.ppn < 1 || ext.ppn > LAT_MAX_PPN || ext.nslots > ext.ppn ||
        ext.napps < 1 || ext.napps > LAT_MAX_APPS)
        return "rank mapping counts out of range";
    if (*pos + ext.nslots * sizeof(struct lat_slot) + ext.napps * sizeof(struct lat_node_app) > len)
        return "slots run past the message";
    j->nprocs = j->left = ext.nslots;
    j->napps = ext.napps;
    j->ppn = ext.ppn;
    int have_t0 = 0;
    for (uint32_t i = 0; i < ext.nslots; i++) {
        struct lat_slot sl;
        memcpy(&sl, j->desc + *pos, sizeof sl);
        *pos += sizeof sl;
        if (sl.node != j->pers->node || sl.t >= ext.ppn || sl.app >= ext.napps || sl.rank >= j->nj.size)
            return "slot out of range";
        for (uint32_t k = 0; k < i; k++)
            if (j->proc[k].t == sl.t || j->proc[k].rank == sl.rank)
                return "two slots with the same process index or rank";
        j->proc[i].rank = sl.rank;
        j->proc[i].t = sl.t;
        j->proc[i].app = sl.app;
        have_t0 |= sl.t == 0 && sl.rank == j->nj.rank;
    }
    if (!have_t0)
        return "no process 0 with the job's rank";
    uint64_t total = 0;
    for (uint32_t a = 0; a < ext.napps; a++) {
        struct lat_node_app na;
        memcpy(&na, j->desc + *pos, sizeof na);
        *pos += sizeof na;
        if (na.image_size > LAT_MAX_IMAGE || na.nargs < 1 || na.nargs > LAT_MAX_ARGS)
            return "bad application image size or argument count";
        j->image_size[a] = na.image_size;
        nargs[a] = na.nargs;
        total += na.image_size;
    }
    if (total != j->nj.image_size || nargs[0] != j->nj.nargs)
        return "application sizes do not add up";
    for (uint32_t i = 0; i < j->nprocs; i++)
        if (j->image_size[j->proc[i].app] == 0)
            return "a process's application has no image";
    if (!(j->nj.flags & LAT_JOB_CPUS))
        return NULL;
    /* each process's CPUs: lat_cpus[nslots], then the CPUs in the same order */
    if (*pos + ext.nslots * sizeof(struct lat_cpus) > len)
        return "CPUs run past the message";
    uint64_t ncpu = 0;
    for (uint32_t i = 0; i < ext.nslots; i++) {
        struct lat_cpus c;
        memcpy(&c, j->desc + *pos, sizeof c);
        *pos += sizeof c;
        if (c.ncpus < 1 || c.ncpus > LAT_CPU_LIMIT ||
            (c.progress != 0 && c.progress != 1 && c.progress != LAT_PROGRESS_UNSET))
            return "bad CPU count or progress value";
        j->proc[i].ncpus = c.ncpus;
        j->proc[i].progress = c.progress;
        ncpu += c.ncpus;
    }
    if (ncpu > (len - *pos) / sizeof(uint32_t))
        return "CPU numbers run past the message";
    for (uint32_t i = 0; i < ext.nslots; i++) {
        j->proc[i].cpu = (const uint32_t *)(j->desc + *pos);   /* desc is malloc'd: aligned, and *pos is 4-aligned */
        for (uint32_t k = 0; k < j->proc[i].ncpus; k++)
            if (j->proc[i].cpu[k] >= LAT_CPU_LIMIT)
                return "CPU number out of range";
        *pos += j->proc[i].ncpus * sizeof(uint32_t);
    }
    return NULL;
}

static const char *parse_job(struct job *j, const struct msg *m)
{
    size_t len = m->h.len;
    uint32_t nargs[LAT_MAX_APPS] = { 0 };
    memcpy(&j->nj, m->p, sizeof j->nj);
    const struct lat_node_job *nj = &j->nj;
    if (nj->ngroups > MAX_GROUPS)
        return "too many groups";
    if (nj->nargs < 1)
        return "no argv[0]";
    if ((uint64_t)nj->nargs + nj->nenv > LAT_MAX_ARGS)
        return "too many arguments and environment strings";
    if (nj->image_size == 0 || nj->image_size > LAT_MAX_IMAGE * LAT_MAX_APPS)
        return "bad image size";
    if (nj->size == 0 || nj->rank >= nj->size)
        return "rank out of range";
    if (nj->flags & ~(uint32_t)LAT_JOB_FLAGS_ALL)
        return "unknown job flags";
    if ((nj->flags & LAT_JOB_TRACE) && !(nj->flags & LAT_JOB_CNK))
        return "flag TRACE without flag CNK";
    if ((nj->flags & LAT_JOB_CPUS) && !(nj->flags & LAT_JOB_PLACED))
        return "flag CPUS without flag PLACED";
    size_t pos = sizeof *nj + (size_t)nj->ngroups * sizeof(uint32_t);
    if (pos > len)
        return "groups run past the message";
    if (!(j->desc = malloc(len + 1)))
        return "out of memory";
    memcpy(j->desc, m->p, len);
    j->groups = (uint32_t *)(j->desc + sizeof *nj);
    j->placed = (nj->flags & LAT_JOB_PLACED) != 0;
    if (j->placed) {
        const char *why = parse_mapping(j, len, &pos, nargs);
        if (why)
            return why;
    } else {
        j->nprocs = j->left = j->napps = j->ppn = 1;
        j->proc[0] = (struct proc){ .rank = nj->rank, .reportfd = -1, .pidfd = -1, .pmi = -1, .out = { -1, -1, -1 } };
        j->image_size[0] = nj->image_size;
        nargs[0] = nj->nargs;
    }
    if (!(j->argv[0] = strings(j->desc, len, &pos, nj->nargs)))
        return "argv strings run past the message";
    if (!(j->env = strings(j->desc, len, &pos, nj->nenv)))
        return "environment strings run past the message";
    for (uint32_t a = 1; a < j->napps; a++)
        if (!(j->argv[a] = strings(j->desc, len, &pos, nargs[a])))
            return "argv strings of an application run past the message";
    if (pos != len)
        return "trailing bytes after the strings";
    for (uint32_t a = 0; a < j->napps; a++)
        if (!j->argv[a][0][0])
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
    j->state = LOADING;
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
    for (uint32_t a = 0; a < j->napps; a++) {
        if (!j->image_size[a])
            continue;
        j->memfd[a] = (int)syscall(SYS_memfd_create, "lattice-image", 0);
        if (j->memfd[a] < 0) {
            launch_failed(j, errno, "cannot store the executable: %s", strerror(errno));
            return;
        }
    }
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
    /* the images of the applications arrive back to back */
    size_t done = 0;
    while (done < m->h.len) {
        uint64_t base = 0, off = j->received + done;
        uint32_t a = 0;
        while (a < j->napps && off >= base + j->image_size[a])
            base += j->image_size[a++];
        size_t want = m->h.len - done;
        if (want > base + j->image_size[a] - off)
            want = base + j->image_size[a] - off;
        ssize_t n = pwrite(j->memfd[a], m->p + done, want, (off_t)(off - base));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
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
    static const char *const names[] = { "LATTICE_IO_FD=", "LATTICE_IO_SEQ_FD=", "LATTICE_IO_DP=", "LATTICE_IO_PID=", "LATTICE_RANK=", "LATTICE_SIZE=", "LATTICE_NODE=",
                                         "LATTICE_PERSONALITY=", "PMI_FD=", "PMI_RANK=", "PMI_SIZE=",
                                         "PMI_JOBID=", "PMI_PORT=", "PMI_ID=" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strncmp(s, names[i], strlen(names[i])))
            return 1;
    return !cnk && !strncmp(s, "LD_PRELOAD=", 11);
}

static uint64_t proc_memory(const struct job *j)
{
    return j->pers->memory / (j->ppn ? j->ppn : 1);
}

static uint32_t proc_cores(const struct job *j)
{
    uint32_t c = j->pers->cores / (j->ppn ? j->ppn : 1);
    return c ? c : 1;
}

/* env for a compute process: the job's, with ours set; in Linux mode the
 * client library preloaded first (under cnk the program's LD_PRELOAD is its own) */
static char **make_env(struct job *j, const struct proc *p, int procfd_num)
{
    enum { OURS = 12 };
    int cnk = is_cnk(j);
    size_t n = 0;
    while (j->env[n])
        n++;
    char **e = calloc(n + OURS + 4, sizeof *e);     /* + progress below; LATTICE_IO_DP and _PID, set by the child */
    if (!e)
        return NULL;
    size_t k = 0;
    const char *user_preload = NULL;
    int progress = p->cpu ? p->progress : LAT_PROGRESS_UNSET;   /* the job's own (the user's --env) wins */
    int ucx_devices = 0;
    for (size_t i = 0; i < n; i++) {
        const char *s = j->env[i];
        if (!cnk && !strncmp(s, "LD_PRELOAD=", 11))
            user_preload = s + 11;
        if (!strncmp(s, "MPIR_CVAR_ASYNC_PROGRESS=", 25))
            progress = LAT_PROGRESS_UNSET;
        ucx_devices |= !strncmp(s, "UCX_NET_DEVICES=", 16);
        if (!ours_var(s, cnk))
            e[k++] = (char *)s;
    }
    static char buf[OURS][4200];
    int m = 0;
    if (!cnk) {
        snprintf(buf[m++], sizeof buf[0], "LD_PRELOAD=%s%s%s", j->k->client,
                 user_preload && *user_preload ? ":" : "", user_preload ? user_preload : "");
        snprintf(buf[m++], sizeof buf[0], "LATTICE_IO_FD=%d", procfd_num);  /* cnk hides the connection */
        snprintf(buf[m++], sizeof buf[0], "LATTICE_IO_SEQ_FD=%d", CHILD_SEQ_FD);
    }
    snprintf(buf[m++], sizeof buf[0], "LATTICE_RANK=%u", p->rank);
    snprintf(buf[m++], sizeof buf[0], "LATTICE_SIZE=%u", j->nj.size);
    snprintf(buf[m++], sizeof buf[0], "LATTICE_NODE=%s", j->pers->location);
    if (j->placed)      /* this process's share of the node, the job's mode, its index on the node */
        snprintf(buf[m++], sizeof buf[0], "LATTICE_PERSONALITY=%s;memory=%llu;cores=%u;mode=%s;t=%u",
                 j->pers->env_head, (unsigned long long)proc_memory(j), j->pers->cores,
                 j->nj.flags & LAT_JOB_VN ? "vn" : "co", p->t);
    else
        snprintf(buf[m++], sizeof buf[0], "LATTICE_PERSONALITY=%s", j->pers->env);
    snprintf(buf[m++], sizeof buf[0], "PMI_FD=%d", CHILD_PMI_FD);
    snprintf(buf[m++], sizeof buf[0], "PMI_RANK=%u", p->rank);
    snprintf(buf[m++], sizeof buf[0], "PMI_SIZE=%u", j->nj.size);
    snprintf(buf[m++], sizeof buf[0], "PMI_JOBID=lattice-%llu", (unsigned long long)j->nj.job);
    /* whether its node has a core of its own for MPICH's progress thread:
     * static, not one of ours_var's (launch frees those after the fork) */
    static char async0[] = "MPIR_CVAR_ASYNC_PROGRESS=0", async1[] = "MPIR_CVAR_ASYNC_PROGRESS=1";
    if (progress != LAT_PROGRESS_UNSET)
        e[k++] = progress ? async1 : async0;
    if (!ucx_devices) {     /* the job's own choice wins; else only the host's routed interfaces (netdev.c) */
        char dev[256];
        netdev_default_routes(dev, sizeof dev);
        if (dev[0])
            snprintf(buf[m++], sizeof buf[0], "UCX_NET_DEVICES=%s", dev);
    }
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

/* argv for cnk: cnk --memory BYTES --cores N --first-core I [--trace] -- ARGV... */
static char **make_cnk_argv(struct job *j, const struct proc *p)
{
    char **argv = j->argv[p->app];
    size_t n = 0;
    while (argv[n])
        n++;
    char **a = calloc(n + 10, sizeof *a);     /* 9 of ours + argv + NULL */
    if (!a)
        return NULL;
    static char mem[32], cores[16], first[16];
    snprintf(mem, sizeof mem, "%llu", (unsigned long long)proc_memory(j));
    snprintf(cores, sizeof cores, "%u", proc_cores(j));
    /* vn: each process its own core; a bound process's CPUs are its own already */
    snprintf(first, sizeof first, "%u", p->cpu ? 0 : p->t * proc_cores(j));
    size_t k = 0;
    a[k++] = "cnk";
    a[k++] = "--memory";
    a[k++] = mem;
    a[k++] = "--cores";
    a[k++] = cores;
    a[k++] = "--first-core";
    a[k++] = first;
    if (j->nj.flags & LAT_JOB_TRACE)
        a[k++] = "--trace";
    a[k++] = "--";
    for (size_t i = 0; i < n; i++)
        a[k++] = argv[i];
    a[k] = NULL;
    return a;
}

/* child_fail codes from here up: the PROC hello failed with code - this */
#define CHILD_HELLO_FAILED 0x10000
/* and from here up: binding to its CPUs failed */
#define CHILD_BIND_FAILED 0x20000
static void child_fail(int errfd, int err) __attribute__((noreturn));
static void child_fail(int errfd, int err)
{
    (void)!write(errfd, &err, sizeof err);
    _exit(127);
}

/* Decimal digits of v at the end of buf[0..n): the start. */
static char *utoa_end(char *end, unsigned long v)
{
    *--end = '\0';
    do
        *--end = (char)('0' + v % 10);
    while (v /= 10);
    return end;
}

/* In the child: the PROC hello with our pid (exec keeps it), then what
 * ciod agreed for the program's client: LATTICE_IO_DP=eager_max,rdv_min,flags
 * (docs/protocol.md section 3), and LATTICE_IO_PID=<the pid that said hello>:
 * ciod finds shared memory through that pid, so a forked child that execs
 * must not share any.  Added in envp's spare slots (make_env). */
static void proc_hello(struct job *j, struct proc *pr, int procfd, int errfd, char **envp)
{
    struct lat_hello_proc hp = { .pid = (uint32_t)getpid(), .flags = LAT_DP_VM };
    struct lat_datapath dp;
    static char var[80], pidvar[40];

    /* seq 0: the process numbers its messages from 1 (cnk, libcnclient) */
    if (net_hello_proc(procfd, LAT_ROLE_PROC, j->pers->node | pr->t << 16, j->nj.job, j->pers->key, 0, &hp,
                       &dp) < 0)
        child_fail(errfd, CHILD_HELLO_FAILED + errno);
    char num[3][24], *a = utoa_end(num[0] + 24, dp.eager_max), *b = utoa_end(num[1] + 24, dp.rdv_min);
    char *c = utoa_end(num[2] + 24, dp.flags), *w = var;
    const char *parts[] = { "LATTICE_IO_DP=", a, ",", b, ",", c };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        for (const char *s = parts[i]; *s; s++)
            *w++ = *s;
    *w = '\0';
    w = pidvar;
    for (const char *s = "LATTICE_IO_PID="; *s; s++)
        *w++ = *s;
    for (const char *s = utoa_end(num[0] + 24, hp.pid); *s; s++)
        *w++ = *s;
    *w = '\0';
    size_t k = 0;
    while (envp[k])
        k++;
    envp[k] = var;
    envp[k + 1] = pidvar;               /* envp[k + 2] is the spare NULL */
}

/* A job of root is root without capabilities (as its I/O worker on the I/O
 * node is, so the kernel lets the worker reach its memory): none held, none
 * in the bounding set, and SECBIT_NOROOT so that exec gives none back. */
static int drop_capabilities(void)
{
    struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
    struct __user_cap_data_struct caps[2] = { { 0, 0, 0 }, { 0, 0, 0 } };

    if (prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
              SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED) < 0)
        return -1;
    for (int cap = 0; cap <= 63; cap++)
        if (prctl(PR_CAPBSET_DROP, cap) < 0 && errno != EINVAL)
            return -1;
    return (int)syscall(SYS_capset, &hdr, caps);
}

/* In the child, Linux mode: the page that holds the seq of the last message
 * on the PROC connection (0: the hello's), shared by every program that
 * uses the connection after exec or fork (libcnclient, LATTICE_IO_SEQ_FD).
 * Under cnk, cnk itself is the only sender. */
static int seq_page(void)
{
    int fd = memfd_create("lattice-io-seq", MFD_CLOEXEC);
    if (fd < 0)
        return -1;
    int hi = fcntl(fd, F_DUPFD_CLOEXEC, 10);
    close(fd);
    if (hi >= 0 && ftruncate(hi, 4096) < 0) {
        close(hi);
        return -1;
    }
    return hi;
}

/* In the child: runs between fork and exec, so only async-signal-safe calls. */
static void child(struct job *j, struct proc *pr, int procfd, int pmifd, int outw, int errw, int failw,
                  char **argv, char **envp, pid_t parent, const cpu_set_t *cpus, size_t cpus_size)
{
    int cnk = is_cnk(j);
    /* move what we keep above the slots we are about to fill */
    int p = fcntl(procfd, F_DUPFD_CLOEXEC, 10), m = fcntl(j->memfd[pr->app], F_DUPFD_CLOEXEC, 10);
    int o = fcntl(outw, F_DUPFD_CLOEXEC, 10), e = fcntl(errw, F_DUPFD_CLOEXEC, 10);
    int f = fcntl(failw, F_DUPFD_CLOEXEC, 10), q = fcntl(pmifd, F_DUPFD_CLOEXEC, 10);
    int r = cnk ? fcntl(pr->reportfd, F_DUPFD_CLOEXEC, 10) : seq_page();
    int kfd = cnk ? fcntl(j->k->cnk_fd, F_DUPFD_CLOEXEC, 10) : 0;
    if (f < 0)
        _exit(127);
    if (p < 0 || m < 0 || o < 0 || e < 0 || q < 0 || r < 0 || kfd < 0)
        child_fail(f, errno);
    proc_hello(j, pr, p, f, envp);
    int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (nul < 0 || dup2(nul, 0) < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0 || dup2(p, CHILD_PROC_FD) < 0 ||
        dup2(m, CHILD_IMAGE_FD) < 0 || dup3(f, CHILD_ERR_FD, O_CLOEXEC) < 0 || dup2(q, CHILD_PMI_FD) < 0)
        child_fail(f, errno);
    f = CHILD_ERR_FD;
    /* cnk: the report page (inherited), and cnk itself (close-on-exec) */
    if (cnk && (dup2(r, CHILD_REPORT_FD) < 0 || dup3(kfd, CHILD_KERNEL_FD, O_CLOEXEC) < 0))
        child_fail(f, errno);
    if (!cnk && dup2(r, CHILD_SEQ_FD) < 0)     /* Linux mode: the seq page (seq_page) */
        child_fail(f, errno);
    if (syscall(SYS_close_range, CHILD_PMI_FD + 1, ~0u, 0) < 0)
        for (int fd = CHILD_PMI_FD + 1; fd < 1024; fd++)
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
        if (j->nj.uid == 0 && drop_capabilities() < 0)
            child_fail(f, -errno);
    }
    /* its real CPUs (docs/architecture.md, "Nodes on cores"): exec and cnk keep them */
    if (cpus && sched_setaffinity(0, cpus_size, cpus) < 0)
        child_fail(f, CHILD_BIND_FAILED + errno);
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

/* The process's own PMI connection to ciod, or -1 (then we relay; always
 * with LATTICE_PMI_RELAY=1 in our environment, for comparison and tests). */
static int pmi_connect(const struct job *j, const struct proc *pr)
{
    const char *relay = getenv("LATTICE_PMI_RELAY");
    if (relay && !strcmp(relay, "1"))
        return -1;
    int fd = net_connect(j->pers->ciod, 2.0);
    if (fd < 0)
        return -1;
    if (net_hello(fd, LAT_ROLE_PMI, j->pers->node | pr->t << 16, j->nj.job, j->pers->key, 0) < 0) {
        say("job %llu rank %u: no PMI connection of its own (%s); relaying its PMI",
            (unsigned long long)j->nj.job, pr->rank, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

/* The mask of a bound process's CPUs, sized for the highest (no fixed
 * limit: CPU_ALLOC); NULL if it has none or there is no memory. */
static cpu_set_t *cpu_mask(const struct proc *pr, size_t *size)
{
    uint32_t top = 0;
    if (!pr->cpu)
        return NULL;
    for (uint32_t k = 0; k < pr->ncpus; k++)
        top = pr->cpu[k] > top ? pr->cpu[k] : top;
    cpu_set_t *set = CPU_ALLOC(top + 1);
    if (!set)
        return NULL;
    *size = CPU_ALLOC_SIZE(top + 1);
    CPU_ZERO_S(*size, set);
    for (uint32_t k = 0; k < pr->ncpus; k++)
        CPU_SET_S(pr->cpu[k], *size, set);
    return set;
}

/* "0,1,5" (cut short with "..." if it does not fit): for messages. */
static const char *cpu_list(const struct proc *pr, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = '\0';
    for (uint32_t k = 0; k < pr->ncpus && at + 16 < len; k++)
        at += (size_t)snprintf(buf + at, len - at, "%s%u", k ? "," : "", pr->cpu[k]);
    if (at + 16 >= len)
        snprintf(buf + at, len - at, "...");
    return buf;
}

static void launch(struct job *j, struct proc *pr)
{
    int direct = pmi_connect(j, pr);    /* first: its hello is answered before the child's */
    int procfd = net_connect(j->pers->ciod, 2.0);
    if (procfd < 0) {
        if (direct >= 0)
            close(direct);
        proc_failed(j, pr, errno, "cannot connect to the I/O node: %s", strerror(errno));
        return;
    }
    /* the hello is the child's: it names the process (its pid) for the data path */
    int outp[2], errp[2], failp[2], pmip[2];
    if (pipe2(outp, O_CLOEXEC) < 0) {
        int e = errno;
        close(procfd);
        if (direct >= 0)
            close(direct);
        proc_failed(j, pr, e, "pipe: %s", strerror(e));
        return;
    }
    if (pipe2(errp, O_CLOEXEC) < 0 || pipe2(failp, O_CLOEXEC) < 0 ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pmip) < 0) {
        int e = errno;
        close(procfd);
        if (direct >= 0)
            close(direct);
        close(outp[0]);
        close(outp[1]);
        proc_failed(j, pr, e, "pipe: %s", strerror(e));
        return;
    }
    if (direct >= 0) {          /* nothing to relay: the child gets the connection itself */
        close(pmip[0]);
        close(pmip[1]);
        pmip[0] = -1;
        pmip[1] = direct;
    }
    int cnk = is_cnk(j);
    if (cnk) {
        /* the report page: zeroed, so "no magic" means cnk never started */
        pr->reportfd = (int)syscall(SYS_memfd_create, "lattice-cnk-report", MFD_CLOEXEC);
        if (pr->reportfd < 0 || ftruncate(pr->reportfd, REPORT_BYTES) < 0) {
            int e = errno;
            close(procfd);
            close(outp[0]), close(outp[1]), close(errp[0]), close(errp[1]), close(failp[0]), close(failp[1]);
            close(pmip[0]), close(pmip[1]);
            proc_failed(j, pr, e, "cannot create the cnk report page: %s", strerror(e));
            return;
        }
    }
    char **envp = make_env(j, pr, CHILD_PROC_FD);
    char **argv = cnk ? make_cnk_argv(j, pr) : j->argv[pr->app];
    size_t cpus_size = 0;
    cpu_set_t *cpus = cpu_mask(pr, &cpus_size);
    pid_t parent = getpid();
    errno = ENOMEM;
    pid_t pid = envp && argv && (cpus || !pr->cpu) ? fork() : -1;
    if (pid == 0)
        child(j, pr, procfd, pmip[1], outp[1], errp[1], failp[1], argv, envp, parent, cpus, cpus_size);
    int forkerr = errno;
    if (cpus)
        CPU_FREE(cpus);
    if (cnk)
        free(argv);
    close(procfd);  /* the child has it; ciod sees EOF when the process ends */
    close(outp[1]);
    close(errp[1]);
    close(failp[1]);
    close(pmip[1]);
    for (char **e = envp; e && *e; e++)
        if (ours_var(*e, cnk))
            free(*e);
    free(envp);
    if (pid < 0) {
        close(outp[0]);
        close(errp[0]);
        close(failp[0]);
        close(pmip[0]);
        proc_failed(j, pr, forkerr, "cannot create the process: %s", strerror(forkerr));
        return;
    }
    pr->pid = pid;
    pr->started = 1;
    pr->out[1] = outp[0];
    pr->out[2] = errp[0];
    pr->pmi = pmip[0];

    /* exec succeeded iff the CLOEXEC pipe closes without a word */
    int err = 0;
    ssize_t n;
    while ((n = read(failp[0], &err, sizeof err)) < 0 && errno == EINTR)
        ;
    close(failp[0]);
    pr->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (n == (ssize_t)sizeof err) {
        waitpid(pid, NULL, 0);
        pr->exited = 1;
        if (err >= CHILD_BIND_FAILED) {
            char list[256];
            proc_failed(j, pr, err - CHILD_BIND_FAILED, "cannot bind the process to CPUs %s: %s",
                        cpu_list(pr, list, sizeof list), strerror(err - CHILD_BIND_FAILED));
        } else if (err >= CHILD_HELLO_FAILED)
            proc_failed(j, pr, err - CHILD_HELLO_FAILED, "the I/O node refused the process connection: %s",
                        strerror(err - CHILD_HELLO_FAILED));
        else if (err < 0)
            proc_failed(j, pr, -err, "cannot take the job's identity (uid %u gid %u): %s", j->nj.uid, j->nj.gid,
                        strerror(-err));
        else if (cnk)
            proc_failed(j, pr, err, "cannot execute the compute node kernel %s: %s", j->k->cnk, strerror(err));
        else
            proc_failed(j, pr, err, "cannot execute %s: %s", j->argv[pr->app][0], strerror(err));
        return;
    }
    if (pr->pidfd < 0)
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
    j->state = RUNNING;
    uint32_t n = j->nprocs;
    for (uint32_t i = 0; i < n && j->state == RUNNING; i++)
        launch(j, &j->proc[i]);
}

/* ---- supervising ---- */

int job_pollfds(struct job *j, struct pollfd *pfd, int max)
{
    int n = 0;
    if (j->state != RUNNING)
        return 0;
    for (uint32_t i = 0; i < j->nprocs && n + 4 <= max; i++) {
        struct proc *p = &j->proc[i];
        if (!p->started || p->done)
            continue;
        for (int s = 1; s <= 2; s++)
            if (p->out[s] >= 0)
                pfd[n++] = (struct pollfd){ .fd = p->out[s], .events = POLLIN };
        if (p->pmi >= 0)
            pfd[n++] = (struct pollfd){ .fd = p->pmi, .events = POLLIN };
        if (!p->exited && p->pidfd >= 0)
            pfd[n++] = (struct pollfd){ .fd = p->pidfd, .events = POLLIN };
    }
    return n;
}

/* Forward what one pipe has; closes it at EOF. */
static void forward(struct job *j, struct proc *p, int s)
{
    char buf[PIPE_CHUNK];
    ssize_t n = read(p->out[s], buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (n <= 0) {
        closefd(&p->out[s]);
        return;
    }
    struct lat_output o = { p->rank, (uint32_t)s };
    send_or_die(j, LAT_NODE_OUTPUT, &o, sizeof o, buf, (size_t)n);
}

/* The process wrote PMI bytes: relayed as they come, ciod frames them. */
static void relay_pmi(struct job *j, struct proc *p)
{
    char buf[16384];
    ssize_t n = read(p->pmi, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (n <= 0) {
        closefd(&p->pmi);       /* closed its end (or exited): nothing more to relay */
        return;
    }
    struct lat_pmi h = { .rank = p->rank };
    send_or_die(j, LAT_NODE_PMI, &h, sizeof h, buf, (size_t)n);
}

static void on_pmi_reply(struct job *j, const struct msg *m)
{
    struct lat_pmi h;
    if (m->h.len < sizeof h || j->state != RUNNING)
        return;
    memcpy(&h, m->p, sizeof h);
    for (uint32_t i = 0; i < j->nprocs; i++) {
        struct proc *p = &j->proc[i];
        if (p->rank != h.rank || p->pmi < 0)
            continue;
        size_t done = sizeof h;
        while (done < m->h.len) {      /* a few hundred bytes: fits the socket buffer */
            ssize_t w = send(p->pmi, m->p + done, m->h.len - done, MSG_NOSIGNAL);
            if (w < 0 && errno == EINTR)
                continue;
            if (w < 0)
                break;      /* the process closed its end: it no longer listens */
            done += (size_t)w;
        }
        return;
    }
}

/* The report page as cnk left it; 0 if cnk never wrote it. */
static int read_report(const struct proc *j, struct cnk_report *r)
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
 *   kernel=cnk pages=2M bigmem=1073741824 local=N shipped=N unsupported=N
 *   libcache=DIR|off:WORD libmaps=N libfetched=BYTES libcopied=N why=TEXT
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
    char lib[sizeof r->lib_dir + sizeof r->lib_off + 8];   /* one word: the cache or why not */
    snprintf(lib, sizeof lib, "%.*s", (int)sizeof r->lib_dir, r->lib_dir);
    if (!lib[0])
        snprintf(lib, sizeof lib, "off:%.*s", (int)sizeof r->lib_off, r->lib_off[0] ? r->lib_off : "-");
    for (char *c = lib; *c; c++)
        if (*c == ' ' || *c == '\n')
            *c = '_';
    snprintf(buf, len, "kernel=cnk pages=%s bigmem=%llu local=%llu shipped=%llu unsupported=%llu "
             "libcache=%s libmaps=%llu libfetched=%llu libcopied=%llu why=%s",
             page_name(r->page_size, pg, sizeof pg), (unsigned long long)r->bigmem_bytes,
             (unsigned long long)r->count[CNK_LOCAL], (unsigned long long)r->count[CNK_SHIPPED],
             (unsigned long long)r->count[CNK_UNSUPPORTED], lib, (unsigned long long)r->lib_maps,
             (unsigned long long)r->lib_fetched, (unsigned long long)r->lib_copied, why[0] ? why : "-");
}

static void finish(struct job *j, struct proc *p)
{
    /* drain what the process wrote before it ended, to EOF (bounded, in case
     * something escaped the process group with the pipes) */
    struct timespec t0, now;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (p->out[1] >= 0 || p->out[2] >= 0) {
        struct pollfd pfd[2];
        int n = 0, idx[2];
        for (int s = 1; s <= 2; s++)
            if (p->out[s] >= 0) {
                idx[n] = s;
                pfd[n++] = (struct pollfd){ .fd = p->out[s], .events = POLLIN };
            }
        if (poll(pfd, (nfds_t)n, 500) < 0 && errno != EINTR)
            break;
        for (int i = 0; i < n; i++)
            if (pfd[i].revents)
                forward(j, p, idx[i]);
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec > 5) {
            say("warning: output pipes still open 5 s after the process ended; dropping them");
            break;
        }
    }
    struct cnk_report rep;
    char line[512], text[768];
    if (is_cnk(j) && read_report(p, &rep) && rep.launch_err != 0) {
        /* cnk could not load the program: a launch failure, in cnk's words */
        rep.message[sizeof rep.message - 1] = '\0';
        proc_failed(j, p, rep.launch_err, "%s", rep.message[0] ? rep.message : strerror(rep.launch_err));
        return;
    }
    if (!is_cnk(j))
        snprintf(line, sizeof line, "kernel=linux");
    else if (!read_report(p, &rep))
        snprintf(line, sizeof line, "kernel=cnk report=none");
    else
        report_line(&rep, line, sizeof line);
    if (WIFSIGNALED(p->status)) {
        int sig = WTERMSIG(p->status);
        snprintf(text, sizeof text, "killed by signal %d (%s)\n%s", sig, strsignal(sig), line);
        send_exit(j, p, LAT_EXIT_SIGNAL, sig, text);
    } else {
        send_exit(j, p, LAT_EXIT_CODE, WEXITSTATUS(p->status), line);
    }
}

/* The process ended: kill what is left of its process group while the
 * zombie still holds the group id (so the id cannot be reused), then reap. */
static int reap(struct proc *p)
{
    siginfo_t si = { 0 };
    if (waitid(P_PID, (id_t)p->pid, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid != p->pid)
        return 0;
    kill(-p->pid, SIGKILL);
    int st;
    if (waitpid(p->pid, &st, 0) != p->pid)
        return 0;
    p->status = st;
    p->exited = 1;
    return 1;
}

void job_events(struct job *j, const struct pollfd *pfd, int n)
{
    if (j->state != RUNNING)
        return;
    for (int i = 0; i < n; i++) {
        if (!pfd[i].revents)
            continue;
        for (uint32_t k = 0; k < j->nprocs; k++) {
            struct proc *p = &j->proc[k];
            if (!p->started || p->done)
                continue;
            if (pfd[i].fd == p->out[1])
                forward(j, p, 1);
            else if (pfd[i].fd == p->out[2])
                forward(j, p, 2);
            else if (pfd[i].fd == p->pmi)
                relay_pmi(j, p);
        }
    }
    for (uint32_t k = 0; k < j->nprocs && j->state == RUNNING; k++) {
        struct proc *p = &j->proc[k];
        if (!p->started || p->done)
            continue;
        if (!p->exited && (p->pidfd < 0 || n > 0))
            reap(p);
        if (p->exited)
            finish(j, p);
    }
}

static void kill_all(struct job *j, int sig)
{
    for (uint32_t k = 0; k < j->nprocs; k++) {
        struct proc *p = &j->proc[k];
        if (p->started && !p->exited && !p->done)
            kill(-p->pid, sig);
    }
}

void job_kill_now(struct job *j)
{
    if (j->state == RUNNING) {
        kill_all(j, SIGKILL);
        for (uint32_t k = 0; k < j->nprocs; k++)
            if (j->proc[k].started && !j->proc[k].exited && !j->proc[k].done)
                waitpid(j->proc[k].pid, NULL, 0);
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
    case LAT_NODE_PMI_REPLY:
        on_pmi_reply(j, m);
        break;
    case LAT_NODE_KILL: {
        struct lat_kill k;
        if (m->h.len < sizeof k)
            break;
        memcpy(&k, m->p, sizeof k);
        if (k.sig <= 0 || k.sig >= NSIG)
            break;
        if (j->state == RUNNING)
            kill_all(j, k.sig);
        else if (j->state == LOADING) {
            char text[64];
            snprintf(text, sizeof text, "killed by signal %d before it started", k.sig);
            for (uint32_t i = 0; i < j->nprocs && j->state != IDLE; i++)
                send_exit(j, &j->proc[i], LAT_EXIT_SIGNAL, k.sig, text);
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
