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
 * Launching the processes is launch.c's; reading cnk's report page,
 * report.c's.  The types they share are in job.h.
 */
#include "job.h"

static void closefd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* Room for n processes in j->proc, the new entries empty; -1 if out of memory. */
static int proc_room(struct job *j, uint32_t n)
{
    if (n <= j->nroom)
        return 0;
    struct proc *p = realloc(j->proc, (size_t)n * sizeof *p);
    if (!p)
        return -1;
    for (uint32_t i = j->nroom; i < n; i++)
        p[i] = (struct proc){ .reportfd = -1, .pidfd = -1, .pmi = -1, .out = { -1, -1, -1 } };
    j->proc = p;
    j->nroom = n;
    return 0;
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
    j->box = (struct container)CONTAINER_NONE;
    j->sb = (struct sandbox)SANDBOX_NONE;
    j->fs = (struct fs)FS_NONE;
    if (proc_room(j, 1) < 0) {
        say("out of memory");
        exit(1);
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

void job_seal(struct job *j)
{
    sandbox_stop(&j->sb);       /* first: its end is seen sooner on its pidfd (sandbox.c) */
    char why[sizeof j->unsealed];
    if (j->box.procs >= 0 && container_seal(&j->box, why, sizeof why) < 0) {
        say("job %llu: %s", (unsigned long long)j->nj.job, why);
        memcpy(j->unsealed, why, sizeof why);
    }
    fs_stop(&j->fs);            /* killed with the container (its mount went with the holder): reaped */
}

static void reset(struct job *j)
{
    job_seal(j);        /* never needed on the normal paths: the last exit sealed it */
    j->unsealed[0] = '\0';
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
    for (uint32_t i = 0; i < j->nroom; i++) {
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
    char more[sizeof j->unsealed + 1024 + 16];
    if (!p->done && j->left == 1) {
        /* the last: the job's end is reported only once nothing of it runs here */
        job_seal(j);
        if (j->unsealed[0]) {   /* the service node records it and raises a RAS event */
            snprintf(more, sizeof more, "unsealed: %s\n%s", j->unsealed, text ? text : "");
            text = more;
        }
    }
    send_or_die(j, LAT_NODE_EXIT, &ex, sizeof ex, text, text ? strlen(text) : 0);
    if (!p->done) {
        p->done = 1;
        proc_close(p);
        j->left--;
    }
    if (j->left == 0)
        reset(j);
}

void proc_failed(struct job *j, struct proc *p, int err, const char *fmt, ...)
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
void launch_failed(struct job *j, int err, const char *fmt, ...)
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

int is_cnk(const struct job *j)
{
    return (j->nj.flags & LAT_JOB_CNK) != 0;
}

int sandboxed(const struct job *j)
{
    return (j->nj.flags & LAT_JOB_SANDBOX) != 0;
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
    if (proc_room(j, ext.nslots) < 0)
        return "out of memory";
    j->nprocs = j->left = ext.nslots;
    j->napps = ext.napps;
    j->ppn = ext.ppn;
    j->stdin_rank = ext.stdin_rank;
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
    if ((nj->flags & LAT_JOB_SANDBOX) && (nj->flags & LAT_JOB_CNK))
        return "flag SANDBOX with flag CNK";
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

/* ---- supervising ---- */

int job_pollfd_max(const struct job *j)
{
    return 4 * (int)j->nprocs + 2;     /* + the sandbox's holder and file client */
}

int job_pollfds(struct job *j, struct pollfd *pfd, int max)
{
    int n = 0;
    if (j->state != RUNNING)
        return 0;
    if (j->sb.pidfd >= 0 && n < max)
        pfd[n++] = (struct pollfd){ .fd = j->sb.pidfd, .events = POLLIN };
    if (j->fs.pidfd >= 0 && n < max)
        pfd[n++] = (struct pollfd){ .fd = j->fs.pidfd, .events = POLLIN };
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

static void node_lost_part(struct job *j, const char *why);
static const char *ended_how(int pidfd, const char *what, char *buf, size_t len);

/* In the sandbox: has what its processes need ended (or begun to)?  Then
 * why, else NULL. */
static const char *sandbox_broken(const struct job *j, char *buf, size_t len)
{
    /* the holder first: its end unmounts the file client's file system, which ends lattice-fs too */
    static const char *const what[2] = { "the node sandbox's holder died", "the node's file client (lattice-fs) died" };
    const int fd[2] = { j->sb.pidfd, j->fs.pidfd };
    const pid_t pid[2] = { j->sb.pid, j->fs.pid };
    for (int i = 0; i < 2; i++)
        if (sandbox_pid_ending(pid[i], fd[i])) {
            /* on its way out: its end (how) follows at once; bounded, as a guard */
            struct pollfd pfd = { .fd = fd[i], .events = POLLIN };
            while (poll(&pfd, 1, 5000) < 0 && errno == EINTR)
                ;
            return ended_how(fd[i], what[i], buf, len);
        }
    return NULL;
}

static void finish(struct job *j, struct proc *p)
{
    char broken[160];
    if (sandboxed(j) && sandbox_broken(j, broken, sizeof broken)) {
        node_lost_part(j, broken);      /* this process ended because of it: all of them go */
        return;
    }
    if (j->left == 1)
        job_seal(j);    /* the last process: what it left behind goes before its pipes are drained */
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
    if (is_cnk(j) && report_read(p, &rep) && rep.launch_err != 0) {
        /* cnk could not load the program: a launch failure, in cnk's words */
        rep.message[sizeof rep.message - 1] = '\0';
        proc_failed(j, p, rep.launch_err, "%s", rep.message[0] ? rep.message : strerror(rep.launch_err));
        return;
    }
    if (!is_cnk(j))
        snprintf(line, sizeof line, "kernel=linux");
    else if (!report_read(p, &rep))
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

static void kill_all(struct job *j, int sig)
{
    for (uint32_t k = 0; k < j->nprocs; k++) {
        struct proc *p = &j->proc[k];
        if (p->started && !p->exited && !p->done)
            kill(-p->pid, sig);
    }
}

/* "what: how the process of pidfd ended" (it has, and is not reaped yet). */
static const char *ended_how(int pidfd, const char *what, char *buf, size_t len)
{
    siginfo_t si = { 0 };
    if (waitid(P_PIDFD, (id_t)pidfd, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0)
        snprintf(buf, len, "%s", what);
    else if (si.si_code == CLD_EXITED)
        snprintf(buf, len, "%s: exited with status %d", what, si.si_status);
    else
        snprintf(buf, len, "%s: killed by signal %d (%s)", what, si.si_status, strsignal(si.si_status));
    return buf;
}

/* Something the node's processes need died under them (the sandbox's
 * holder): each process is killed and reported with why, the job ends. */
static void node_lost_part(struct job *j, const char *why)
{
    say("job %llu: %s; ending the job's processes here", (unsigned long long)j->nj.job, why);
    kill_all(j, SIGKILL);
    for (uint32_t k = 0; k < j->nprocs; k++) {
        struct proc *p = &j->proc[k];
        if (p->started && !p->exited && !p->done) {
            while (waitpid(p->pid, NULL, 0) < 0 && errno == EINTR)
                ;
            p->exited = 1;
        }
    }
    for (uint32_t k = 0; k < j->nprocs && j->state == RUNNING; k++)
        if (!j->proc[k].done)
            proc_failed(j, &j->proc[k], EIO, "%s", why);
}

void job_events(struct job *j, const struct pollfd *pfd, int n)
{
    if (j->state != RUNNING)
        return;
    for (int i = 0; i < n; i++) {
        char why[160];
        if (pfd[i].revents && (pfd[i].fd == j->sb.pidfd || pfd[i].fd == j->fs.pidfd) &&
            sandbox_broken(j, why, sizeof why)) {
            node_lost_part(j, why);
            return;
        }
    }
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

void job_kill_now(struct job *j)
{
    if (j->state == RUNNING) {
        kill_all(j, SIGKILL);
        for (uint32_t k = 0; k < j->nprocs; k++)
            if (j->proc[k].started && !j->proc[k].exited && !j->proc[k].done)
                waitpid(j->proc[k].pid, NULL, 0);
    }
    job_seal(j);        /* cnode is going: so is everything of the job */
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
        launch_start(j, m);
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
        if (j->state == IDLE || k.job != j->nj.job) {   /* never another job's processes */
            say("KILL (signal %d) for job %llu refused: %s %llu", k.sig, (unsigned long long)k.job,
                j->state == IDLE ? "no job here; the last was" : "this node runs job",
                (unsigned long long)j->nj.job);
            break;
        }
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
