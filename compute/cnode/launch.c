/*
 * launch.c - starting the job's compute processes on this node (job.c
 * decides when).
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
 * With LAT_JOB_SANDBOX (Linux mode in the node sandbox, sandbox.c) there is
 * no preload and no PROC connection: the child enters the holder's
 * namespaces and forks once more, so that the program runs inside the job's
 * pid namespace; the child stays as its relay (relay_end) and ends as the
 * program ended, so job.c sees the same ends.
 *
 * Either way the exit message's text ends in a report line, "kernel=..."
 * (see report_line), that the service node records per rank.
 *
 * With LAT_JOB_CPUS each process is bound to its slot's real CPUs between
 * fork and exec (so the binding holds under cnk and in Linux mode) and gets
 * the MPIR_CVAR_ASYNC_PROGRESS its slot says, unless the job's environment
 * sets it (docs/architecture.md, "Nodes on cores").
 */
#include <sys/resource.h>

#include "job.h"

/* The service node's table of this pset's nodes' indices in the job
 * (lattice.jobs.jobenv.NODEIDS: "I,I,-,..." by pset-local node), read here
 * and never passed on. */
#define NODEIDS_VAR "LATTICE_PSET_NODEIDS="

/* Is s one of the variables the node sets itself (or, LATTICE_FS_TREES,
 * reads and keeps from the program)?  preload: Linux mode with the client
 * library, whose LD_PRELOAD is ours too. */
static int ours_var(const char *s, int preload)
{
    static const char *const names[] = { "LATTICE_IO_FD=", "LATTICE_IO_SEQ_FD=", "LATTICE_IO_DP=", "LATTICE_IO_PID=", "LATTICE_RANK=", "LATTICE_SIZE=", "LATTICE_NODE=",
                                         "LATTICE_PERSONALITY=", "PMI_FD=", "PMI_RANK=", "PMI_SIZE=",
                                         "PMI_JOBID=", "PMI_PORT=", "PMI_ID=", "LATTICE_FS_TREES=",
                                         /* the rank's place (rank_place_env), and the service node's table of it */
                                         "LATTICE_LOCALID=", "LATTICE_NODEID=", "MPI_LOCALRANKID=",
                                         "MPI_LOCALNRANKS=", "OMPI_COMM_WORLD_RANK=", "OMPI_COMM_WORLD_LOCAL_RANK=",
                                         "OMPI_COMM_WORLD_LOCAL_SIZE=", "OMPI_COMM_WORLD_NODE_RANK=", "PMIX_RANK=",
                                         NODEIDS_VAR };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strncmp(s, names[i], strlen(names[i])))
            return 1;
    return preload && !strncmp(s, "LD_PRELOAD=", 11);
}

/* Linux mode with the client library preloaded (not cnk, not the sandbox). */
static int preloaded(const struct job *j)
{
    return !is_cnk(j) && !sandboxed(j);
}

/* A variable by which the job chooses hwloc's topology itself: then cnode names
 * none (lattice.jobs.mpienv.TOPOLOGY_VARS, for `lattice run -v`, lists the same). */
static int names_topology(const char *s)
{
    static const char *const names[] = { "HWLOC_XMLFILE=", "HWLOC_SYNTHETIC=", "HWLOC_FSROOT=",
                                         "HWLOC_THISSYSTEM=", "HWLOC_THISSYSTEM_ALLOWED_RESOURCES=",
                                         "HWLOC_COMPONENTS=" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strncmp(s, names[i], strlen(names[i])))
            return 1;
    return 0;
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

/* This node's index among the job's nodes, from the job's NODEIDS_VAR; -1 if none says it. */
static long node_index(const struct job *j)
{
    for (size_t i = 0; j->env[i]; i++) {
        if (strncmp(j->env[i], NODEIDS_VAR, strlen(NODEIDS_VAR)))
            continue;
        const char *v = j->env[i] + strlen(NODEIDS_VAR);
        for (uint32_t n = 0; n < j->pers->node && v; n++)
            v = (v = strchr(v, ',')) ? v + 1 : NULL;
        char *end;
        long id = v && *v >= '0' && *v <= '9' ? strtol(v, &end, 10) : -1;
        return id >= 0 && (!v || *end == ',' || *end == '\0') ? id : -1;
    }
    return -1;
}

/* A process's place as Slurm, MPICH's Hydra and Open MPI's mpirun tell it:
 * its index among the job's processes on this node (in rank order), their
 * count, the node's index in the job (the job's node count, LATTICE_NNODES,
 * is the same for all: the service node sets it); Open MPI's names only for
 * an Open MPI program (the service node set OMPI_COMM_WORLD_SIZE for it). */
static int rank_place_env(const struct job *j, const struct proc *p, char buf[][4200], int m)
{
    uint32_t local = 0;
    for (uint32_t i = 0; i < j->nprocs; i++)
        local += j->proc[i].rank < p->rank;
    long node = node_index(j);
    int ompi = 0;
    for (size_t i = 0; j->env[i]; i++)
        ompi |= !strncmp(j->env[i], "OMPI_COMM_WORLD_SIZE=", 21);
    snprintf(buf[m++], 4200, "LATTICE_LOCALID=%u", local);
    snprintf(buf[m++], 4200, "MPI_LOCALRANKID=%u", local);
    snprintf(buf[m++], 4200, "MPI_LOCALNRANKS=%u", j->nprocs);
    if (node >= 0)
        snprintf(buf[m++], 4200, "LATTICE_NODEID=%ld", node);
    if (ompi) {
        snprintf(buf[m++], 4200, "OMPI_COMM_WORLD_RANK=%u", p->rank);
        snprintf(buf[m++], 4200, "OMPI_COMM_WORLD_LOCAL_RANK=%u", local);
        snprintf(buf[m++], 4200, "OMPI_COMM_WORLD_LOCAL_SIZE=%u", j->nprocs);
        if (node >= 0)
            snprintf(buf[m++], 4200, "OMPI_COMM_WORLD_NODE_RANK=%ld", node);
        snprintf(buf[m++], 4200, "PMIX_RANK=%u", p->rank);
    }
    return m;
}

/* env for a compute process: the job's, with ours set; in Linux mode the
 * client library preloaded first (under cnk and in the sandbox the
 * program's LD_PRELOAD is its own) */
static char **make_env(struct job *j, const struct proc *p, int procfd_num)
{
    enum { OURS = 26 };
    int preload = preloaded(j), sbx = sandboxed(j);
    size_t n = 0;
    while (j->env[n])
        n++;
    char **e = calloc(n + OURS + 4, sizeof *e);     /* + progress below; LATTICE_IO_DP and _PID, set by the child */
    if (!e)
        return NULL;
    size_t k = 0;
    const char *user_preload = NULL;
    int progress = p->cpu ? p->progress : LAT_PROGRESS_UNSET;   /* the job's own (the user's --env) wins */
    int ucx_devices = 0, hwloc_own = 0;
    for (size_t i = 0; i < n; i++) {
        const char *s = j->env[i];
        if (preload && !strncmp(s, "LD_PRELOAD=", 11))
            user_preload = s + 11;
        if (!strncmp(s, "MPIR_CVAR_ASYNC_PROGRESS=", 25))
            progress = LAT_PROGRESS_UNSET;
        ucx_devices |= !strncmp(s, "UCX_NET_DEVICES=", 16);
        hwloc_own |= names_topology(s);
        if (!ours_var(s, preload))
            e[k++] = (char *)s;
    }
    static char buf[OURS][4200];
    int m = 0;
    if (preload) {
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
    m = rank_place_env(j, p, buf, m);
    /* whether its node has a core of its own for MPICH's progress thread:
     * static, not one of ours_var's (launch frees those after the fork) */
    static char async0[] = "MPIR_CVAR_ASYNC_PROGRESS=0", async1[] = "MPIR_CVAR_ASYNC_PROGRESS=1";
    if (progress != LAT_PROGRESS_UNSET)
        e[k++] = progress ? async1 : async0;
    if (!ucx_devices && sbx) {      /* in the sandbox: the node's one link, if the agent made one */
        if (j->pers->sandbox.ifname)
            snprintf(buf[m++], sizeof buf[0], "UCX_NET_DEVICES=%s", j->pers->sandbox.ifname);
    } else if (!ucx_devices) {  /* the job's own choice wins; else only the host's routed interfaces (netdev.c) */
        char dev[256];
        netdev_default_routes(dev, sizeof dev);
        if (dev[0])
            snprintf(buf[m++], sizeof buf[0], "UCX_NET_DEVICES=%s", dev);
    }
    char topo[64];
    if (!hwloc_own && topology_file(topo, sizeof topo)) {     /* topology.c; bound into the sandbox */
        snprintf(buf[m++], sizeof buf[0], "HWLOC_XMLFILE=%s", sbx ? SANDBOX_TOPOLOGY : topo);
        snprintf(buf[m++], sizeof buf[0], "HWLOC_THISSYSTEM=1");      /* binding works as on the host */
        /* the CPUs and memory this process may use: from the kernel, not the file */
        snprintf(buf[m++], sizeof buf[0], "HWLOC_THISSYSTEM_ALLOWED_RESOURCES=1");
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

/* PROC hellos a process tries while ciod evicts its connection (~1 min) */
#define HELLO_TRIES 64
/* child_fail codes from here up: the PROC hello failed with code - this */
#define CHILD_HELLO_FAILED 0x10000
/* and from here up: binding to its CPUs failed */
#define CHILD_BIND_FAILED 0x20000
/* and from here up: entering the job's container failed */
#define CHILD_SEAL_FAILED 0x30000
/* and from here up: entering the node sandbox failed */
#define CHILD_SANDBOX_FAILED 0x40000
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

    /* seq 0: the process numbers its messages from 1 (cnk, libcnclient).
     * A connection closed before the hello was evicted by ciod for newer
     * silent ones (a flood, ionode/ciod/admit.c): a new one, again while the
     * flood lasts (backing off to a second a try), as an honest peer does */
    struct timespec pause = { 0, 10 * 1000 * 1000 };
    for (int tries = 1;; tries++) {
        if (net_hello_proc(procfd, LAT_ROLE_PROC, j->pers->node | pr->t << 16, j->nj.job, j->pers->key, 0, &hp,
                           &dp) == 0)
            break;
        int e = errno, fd;
        if ((e != EPIPE && e != ECONNRESET) || tries >= HELLO_TRIES)
            child_fail(errfd, CHILD_HELLO_FAILED + e);
        nanosleep(&pause, NULL);
        if (pause.tv_sec == 0 && (pause.tv_nsec *= 2) >= 1000 * 1000 * 1000)
            pause = (struct timespec){ 1, 0 };
        if ((fd = relay_connect(j->pers->ciod, j->pers->key, 2.0)) < 0 || dup3(fd, procfd, O_CLOEXEC) < 0)
            child_fail(errfd, CHILD_HELLO_FAILED + errno);
        close(fd);
    }
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
int drop_capabilities(void)
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

/* The sandbox's middle process, once the program's process is forked: it
 * ignores every signal it can, so that what reaches the process group
 * (cnode's kill, a cancel) decides the program's end alone, and ends as the
 * program ended: killed by the same signal (default action, no core), or
 * with its exit code.  Async-signal-safe. */
static void relay_end(pid_t kid) __attribute__((noreturn));
static void relay_end(pid_t kid)
{
    syscall(SYS_close_range, 0, ~0u, 0);        /* the program's descriptors are the program's */
    struct sigaction ign = { .sa_handler = SIG_IGN }, dfl = { .sa_handler = SIG_DFL };
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP && sig != SIGCHLD)
            sigaction(sig, &ign, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    int st;
    while (waitpid(kid, &st, 0) < 0)
        if (errno != EINTR)
            _exit(127);
    if (!WIFSIGNALED(st))
        _exit(WEXITSTATUS(st));
    int sig = WTERMSIG(st);
    struct rlimit none_core = { 0, 0 };
    setrlimit(RLIMIT_CORE, &none_core);
    sigaction(sig, &dfl, NULL);
    kill(getpid(), sig);
    _exit(128 + sig);
}

/* In the child: runs between fork and exec, so only async-signal-safe calls. */
static void child(struct job *j, struct proc *pr, int procfd, int pmifd, int inr, int outw, int errw, int failw,
                  char **argv, char **envp, pid_t parent, const cpu_set_t *cpus, size_t cpus_size, int inside)
{
    int cnk = is_cnk(j), sbx = sandboxed(j);
    /* move what we keep above the slots we are about to fill */
    int p = sbx ? 0 : fcntl(procfd, F_DUPFD_CLOEXEC, 10), m = fcntl(j->memfd[pr->app], F_DUPFD_CLOEXEC, 10);
    int o = fcntl(outw, F_DUPFD_CLOEXEC, 10), e = fcntl(errw, F_DUPFD_CLOEXEC, 10);
    int f = fcntl(failw, F_DUPFD_CLOEXEC, 10), q = fcntl(pmifd, F_DUPFD_CLOEXEC, 10);
    int r = cnk ? fcntl(pr->reportfd, F_DUPFD_CLOEXEC, 10) : sbx ? 0 : seq_page();
    int kfd = cnk ? fcntl(j->k->cnk_fd, F_DUPFD_CLOEXEC, 10) : 0;
    int in = inr >= 0 ? fcntl(inr, F_DUPFD_CLOEXEC, 10) : 0;
    if (f < 0)
        _exit(127);
    if (p < 0 || m < 0 || o < 0 || e < 0 || q < 0 || r < 0 || kfd < 0 || in < 0)
        child_fail(f, errno);
    /* the hello at once: ciod evicts the oldest connection still waiting for
     * one when silent peers flood it, so nothing slow goes before it */
    if (!sbx)
        proc_hello(j, pr, p, f, envp);
    /* then, before anything of the job's runs, its container (container.c):
     * joining a cgroup can take a while on a loaded host.  The sandbox
     * mounts no cgroup file system at all: a job of root has none to write */
    if ((inside ? container_entered : container_enter)(&j->box, j->nj.uid == 0 && !sbx) < 0)
        child_fail(f, CHILD_SEAL_FAILED + errno);
    /* the node's namespaces, its file view, the working directory there */
    if (sbx && sandbox_enter(&j->sb, fs_cwd(&j->fs)) < 0)
        child_fail(f, CHILD_SANDBOX_FAILED + errno);
    /* descriptor 0: the pipe of its standard input's pump (stdin_pump.c), else
     * /dev/null (the others read their input through their connection) */
    int nul = inr >= 0 ? in : open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (nul < 0 || dup2(nul, 0) < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0 || (!sbx && dup2(p, CHILD_PROC_FD) < 0) ||
        dup2(m, CHILD_IMAGE_FD) < 0 || dup3(f, CHILD_ERR_FD, O_CLOEXEC) < 0 || dup2(q, CHILD_PMI_FD) < 0)
        child_fail(f, errno);
    f = CHILD_ERR_FD;
    /* cnk: the report page (inherited), and cnk itself (close-on-exec) */
    if (cnk && (dup2(r, CHILD_REPORT_FD) < 0 || dup3(kfd, CHILD_KERNEL_FD, O_CLOEXEC) < 0))
        child_fail(f, errno);
    if (preloaded(j) && dup2(r, CHILD_SEQ_FD) < 0)     /* Linux mode: the seq page (seq_page) */
        child_fail(f, errno);
    if (sbx) {      /* the slots of the connection and the seq page stay empty */
        close(CHILD_PROC_FD);
        close(CHILD_SEQ_FD);
        close(CHILD_KERNEL_FD);
    }
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
    if (sbx) {      /* into the job's pid namespace: the program is our child */
        sigset_t all;
        sigfillset(&all);
        sigprocmask(SIG_SETMASK, &all, NULL);   /* until each side has its dispositions */
        pid_t kid = fork();
        if (kid < 0)
            child_fail(f, errno);
        if (kid > 0)
            relay_end(kid);
        sigprocmask(SIG_SETMASK, &none, NULL);
        prctl(PR_SET_PDEATHSIG, SIGKILL);       /* dies with its relay */
        if (getppid() != 0)     /* the relay, outside the namespace, reads as 0; an orphan's parent is the holder */
            _exit(127);
    }
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
    if ((relay && !strcmp(relay, "1")) || !strncmp(j->pers->ciod, "tcp:", 4))
        return -1;                      /* between hosts PMI rides the sealed node connection */
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
    /* sealed for it between hosts; none in the sandbox (its files go through the file client) */
    int procfd = sandboxed(j) ? -2 : relay_connect(j->pers->ciod, j->pers->key, 2.0);
    if (procfd == -1) {
        if (direct >= 0)
            close(direct);
        proc_failed(j, pr, errno, "cannot connect to the I/O node: %s", strerror(errno));
        return;
    }
    /* the hello is the child's: it names the process (its pid) for the data path */
    int outp[2], errp[2], failp[2], pmip[2];
    if (pipe2(outp, O_CLOEXEC) < 0) {
        int e = errno;
        if (procfd >= 0)
            close(procfd);
        if (direct >= 0)
            close(direct);
        proc_failed(j, pr, e, "pipe: %s", strerror(e));
        return;
    }
    /* in the sandbox the job's input comes through a pump (stdin_pump.c) */
    char why[256];
    int inr = stdin_reads(j, pr) ? stdin_pump(j, pr, why, sizeof why) : -2;
    if (inr == -1) {
        if (direct >= 0)
            close(direct);
        close(outp[0]);
        close(outp[1]);
        proc_failed(j, pr, EIO, "%s", why);
        return;
    }
    if (pipe2(errp, O_CLOEXEC) < 0 || pipe2(failp, O_CLOEXEC) < 0 ||
        socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pmip) < 0) {
        int e = errno;
        if (procfd >= 0)
            close(procfd);
        if (direct >= 0)
            close(direct);
        if (inr >= 0)
            close(inr);
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
    int inside = 0;     /* born in the job's container (container_fork) */
    pid_t pid = envp && argv && (cpus || !pr->cpu) ? container_fork(&j->box, &inside) : -1;
    if (pid == 0)
        child(j, pr, procfd, pmip[1], inr, outp[1], errp[1], failp[1], argv, envp, parent, cpus, cpus_size, inside);
    int forkerr = errno;
    if (cpus)
        CPU_FREE(cpus);
    if (cnk)
        free(argv);
    if (procfd >= 0)
        close(procfd);  /* the child has it; ciod sees EOF when the process ends */
    if (inr >= 0)
        close(inr);     /* the child's: the pump ends when nobody reads it any more */
    close(outp[1]);
    close(errp[1]);
    close(failp[1]);
    close(pmip[1]);
    for (char **e = envp; e && *e; e++)
        if (ours_var(*e, preloaded(j)))
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
        if (err >= CHILD_SANDBOX_FAILED)
            proc_failed(j, pr, err - CHILD_SANDBOX_FAILED, "cannot enter the node sandbox: %s; run the job with --no-sandbox",
                        strerror(err - CHILD_SANDBOX_FAILED));
        else if (err >= CHILD_SEAL_FAILED)
            proc_failed(j, pr, err - CHILD_SEAL_FAILED, "cannot enter the job's container %s: %s", j->box.path,
                        strerror(err - CHILD_SEAL_FAILED));
        else if (err >= CHILD_BIND_FAILED) {
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

/* Does the service node name the job's file trees (LATTICE_FS_TREES)?  A
 * sandboxed job without (from a bare control client) has none: no file
 * client, its processes start in /. */
static int has_trees(const struct job *j)
{
    for (char **e = j->env; e && *e; e++)
        if (!strncmp(*e, "LATTICE_FS_TREES=", 17))
            return 1;
    return 0;
}

void launch_start(struct job *j, const struct msg *m)
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
    char why[512];
    if (container_open(&j->box, j->nj.job, j->pers->location, why, sizeof why) < 0 && container_required()) {
        launch_failed(j, EPERM, "cannot seal the job in a container: %s", why);
        return;
    }
    if (j->nj.uid == 0)         /* its processes make the cgroup file systems read-only (container_enter) */
        container_note_points();
    /* the node sandbox: its file client first (fs.c), then its holder */
    if (sandboxed(j) && has_trees(j) && fs_start(&j->fs, j, why, sizeof why) < 0) {
        launch_failed(j, EIO, "cannot give the job its files: %s", why);
        return;
    }
    if (sandboxed(j) && sandbox_start(&j->sb, j, j->fs.pid > 0 ? &j->fs : NULL, why, sizeof why) < 0) {
        launch_failed(j, EPERM, "%s", why);
        return;
    }
    j->state = RUNNING;
    uint32_t n = j->nprocs;
    for (uint32_t i = 0; i < n && j->state == RUNNING; i++)
        launch(j, &j->proc[i]);
}

