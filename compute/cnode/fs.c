/*
 * fs.c - the job's file client on this node (fs.h): lattice-fs
 * (compute/cnfs/) started with its own PROC connection, and its FUSE file
 * system mounted in the sandbox with the job's trees bound at their own
 * paths (docs/architecture.md, "The FUSE file client").
 *
 * fs_start forks a child that says the PROC hello for slot LAT_PROC_FS
 * with its own pid (as launch.c's proc_hello does for a compute process),
 * enters the job's container, takes the owner's identity (a root job's
 * client without capabilities) and execs lattice-fs, which waits on a
 * socketpair for the /dev/fuse descriptor.  fs_mount, in the holder,
 * mounts /dev/fuse at a hidden directory, sends the descriptor, binds each
 * tree from there at root + tree and detaches the hidden mount: only the
 * trees stay reachable.
 */
#include <limits.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include "fs.h"
#include "job.h"

/* descriptors of the child at exec (argv names them) */
enum { FS_CONN_FD = 3, FS_CTL_FD = 4, FS_ERR_FD = 5 };
/* child_fail codes: from here up the hello failed, below it exec or identity */
#define FS_HELLO_FAILED 0x10000
#define FS_SEAL_FAILED 0x20000

static int fail(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *why, size_t len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
    return -1;
}

static void free_trees(struct fs *fs)
{
    for (char **t = fs->trees; t && *t; t++)
        free(*t);
    free(fs->trees);
    fs->trees = NULL;
}

/* A tree must be an absolute, plain path: no ".", "..", or empty
 * component (it is bound at that very path in the sandbox), not "/". */
static int tree_ok(const char *t)
{
    if (t[0] != '/' || !t[1] || strlen(t) >= PATH_MAX / 2)
        return 0;
    for (const char *c = t; *c;) {
        const char *e = strchrnul(c + 1, '/');
        size_t n = (size_t)(e - c - 1);
        if ((n == 0 && *e) || (n == 1 && c[1] == '.') || (n == 2 && c[1] == '.' && c[2] == '.'))
            return 0;
        c = e;
    }
    return 1;
}

/* LATTICE_FS_TREES from the job's environment into fs->trees. */
/* LATTICE_FS_WRITES in the job's environment: "cached" (the default: a
 * write-only open writes through the node's page cache, so the file is
 * read back from it) or "direct" (it bypasses the cache: faster writes,
 * the file read back from the I/O node). */
static int parse_writes(struct fs *fs, const struct job *j, char *why, size_t len)
{
    const char *v = NULL;
    for (char **e = j->env; e && *e; e++)
        if (!strncmp(*e, "LATTICE_FS_WRITES=", 18))
            v = *e + 18;
    if (v && strcmp(v, "cached") && strcmp(v, "direct"))
        return fail(why, len, "LATTICE_FS_WRITES=%.64s: not \"cached\" or \"direct\"", v);
    fs->direct_writes = v && !strcmp(v, "direct");
    return 0;
}

static int parse_trees(struct fs *fs, const struct job *j, char *why, size_t len)
{
    const char *v = NULL;
    for (char **e = j->env; e && *e; e++)
        if (!strncmp(*e, "LATTICE_FS_TREES=", 17))
            v = *e + 17;
    if (!v || !*v)
        return fail(why, len, "the job has no file trees (LATTICE_FS_TREES is not set by the service node)");
    size_t n = 1;
    for (const char *c = v; *c; c++)
        n += *c == ':';
    if (!(fs->trees = calloc(n + 1, sizeof *fs->trees)))
        return fail(why, len, "out of memory");
    size_t k = 0;
    for (const char *c = v;; c++) {
        const char *e = strchrnul(c, ':');
        char *t = strndup(c, (size_t)(e - c));
        if (!t)
            return fail(why, len, "out of memory");
        while (strlen(t) > 1 && t[strlen(t) - 1] == '/')
            t[strlen(t) - 1] = '\0';
        fs->trees[k++] = t;
        if (!tree_ok(t))
            return fail(why, len, "file tree \"%s\" (LATTICE_FS_TREES) is not an absolute path without "
                        ". or .. (nor /)", t);
        if (!*e)
            break;
        c = e;
    }
    return 0;
}

/* lattice-fs next to cnode itself (build/bin/, or where both are installed) */
static int client_path(char *out, size_t len)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n <= 0)
        return -1;
    self[n] = '\0';
    char *slash = strrchr(self, '/');
    if (!slash)
        return -1;
    *slash = '\0';
    return snprintf(out, len, "%s/lattice-fs", self) < (int)len ? 0 : -1;
}

static void child_fail(int errfd, int err) __attribute__((noreturn));
static void child_fail(int errfd, int err)
{
    (void)!write(errfd, &err, sizeof err);
    _exit(127);
}

/* Decimal v into buf (at least 24 bytes): async-signal-safe. */
static char *utoa(char *buf, unsigned long v)
{
    char *p = buf + 23;
    *p = '\0';
    do
        *--p = (char)('0' + v % 10);
    while (v /= 10);
    return p;
}

/* In the child, between fork and exec: only async-signal-safe calls. */
static void child(const struct job *j, int procfd, int ctl, int errw, const char *path, char *label, pid_t parent,
                  int inside, int direct_writes)
{
    int p = fcntl(procfd, F_DUPFD_CLOEXEC, 10), c = fcntl(ctl, F_DUPFD_CLOEXEC, 10);
    int f = fcntl(errw, F_DUPFD_CLOEXEC, 10);
    if (f < 0)
        _exit(127);
    if (p < 0 || c < 0)
        child_fail(f, errno);
    /* the hello first, as a compute process's (launch.c): nothing slow before it */
    struct lat_hello_proc hp = { .pid = (uint32_t)getpid(), .flags = LAT_DP_VM };
    struct lat_datapath dp;
    if (net_hello_proc(p, LAT_ROLE_PROC, j->pers->node | LAT_PROC_FS << 16, j->nj.job, j->pers->key, 0, &hp,
                       &dp) < 0)
        child_fail(f, FS_HELLO_FAILED + errno);
    if ((inside ? container_entered : container_enter)(&j->box, j->nj.uid == 0) < 0)
        child_fail(f, FS_SEAL_FAILED + errno);
    if (dup2(p, FS_CONN_FD) < 0 || dup2(c, FS_CTL_FD) < 0 || dup3(f, FS_ERR_FD, O_CLOEXEC) < 0)
        child_fail(f, errno);
    f = FS_ERR_FD;
    int nul = open("/dev/null", O_RDONLY);
    if (nul < 0 || dup2(nul, 0) < 0)
        child_fail(f, errno);
    if (syscall(SYS_close_range, FS_ERR_FD + 1, ~0u, 0) < 0)
        for (int fd = FS_ERR_FD + 1; fd < 1024; fd++)
            close(fd);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    if (geteuid() == 0) {
        gid_t groups[1024];
        size_t ng = j->nj.ngroups < 1024 ? j->nj.ngroups : 1024;
        for (size_t i = 0; i < ng; i++)
            groups[i] = j->groups[i];
        if (setgroups(ng, groups) < 0 || setgid(j->nj.gid) < 0 || setuid(j->nj.uid) < 0)
            child_fail(f, -errno);
        if (j->nj.uid == 0 && drop_capabilities() < 0)
            child_fail(f, -errno);
    }
    prctl(PR_SET_PDEATHSIG, SIGKILL);   /* after the identity change, which clears it */
    if (getppid() != parent)
        _exit(127);
    char dpbuf[80], n[3][24];
    char *w = dpbuf;
    const char *parts[] = { utoa(n[0], dp.eager_max), ",", utoa(n[1], dp.rdv_min), ",", utoa(n[2], dp.flags) };
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++)
        for (const char *s = parts[i]; *s; s++)
            *w++ = *s;
    *w = '\0';
    char *argv[] = { "lattice-fs", "--conn", "3", "--ctl", "4", "--dp", dpbuf, "--label", label,
                     "--writes", direct_writes ? "direct" : "cached", NULL };
    char *envp[] = { NULL };
    execve(path, argv, envp);
    child_fail(f, errno);
}

int fs_start(struct fs *fs, const struct job *j, char *why, size_t len)
{
    *fs = (struct fs){ .pid = 0, .pidfd = -1, .ctl = -1, .trees = NULL };
    char path[PATH_MAX];
    if (parse_trees(fs, j, why, len) < 0 || parse_writes(fs, j, why, len) < 0) {
        free_trees(fs);
        return -1;
    }
    if (client_path(path, sizeof path) < 0 || access(path, X_OK) < 0) {
        free_trees(fs);
        return fail(why, len, "no file client next to cnode (lattice-fs): %s", strerror(errno ? errno : ENOENT));
    }
    fs->uid = j->nj.uid;
    fs->gid = j->nj.gid;
    int procfd = relay_connect(j->pers->ciod, j->pers->key, 2.0);
    if (procfd < 0) {
        free_trees(fs);
        return fail(why, len, "the file client cannot connect to the I/O node: %s", strerror(errno));
    }
    int sv[2], failp[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
        int e = errno;
        close(procfd);
        free_trees(fs);
        return fail(why, len, "socketpair: %s", strerror(e));
    }
    if (pipe2(failp, O_CLOEXEC) < 0) {
        int e = errno;
        close(procfd), close(sv[0]), close(sv[1]);
        free_trees(fs);
        return fail(why, len, "pipe: %s", strerror(e));
    }
    static char label[96];
    snprintf(label, sizeof label, "job %llu %s", (unsigned long long)j->nj.job, j->pers->location);
    pid_t parent = getpid();
    int inside;         /* born in the job's container: no ~10 ms move (container_fork) */
    pid_t pid = container_fork(&j->box, &inside);
    if (pid == 0)
        child(j, procfd, sv[1], failp[1], path, label, parent, inside, fs->direct_writes);
    int forkerr = errno;
    close(procfd);
    close(sv[1]);
    close(failp[1]);
    if (pid < 0) {
        close(sv[0]);
        close(failp[0]);
        free_trees(fs);
        return fail(why, len, "cannot create the file client: %s", strerror(forkerr));
    }
    int err = 0;
    ssize_t n;
    while ((n = read(failp[0], &err, sizeof err)) < 0 && errno == EINTR)
        ;
    close(failp[0]);
    fs->pid = pid;
    fs->ctl = sv[0];
    if (n == (ssize_t)sizeof err) {
        waitpid(pid, NULL, 0);
        fs->pid = 0;
        fs_stop(fs);
        if (err >= FS_SEAL_FAILED)
            return fail(why, len, "the file client cannot enter the job's container %s: %s", j->box.path,
                        strerror(err - FS_SEAL_FAILED));
        if (err >= FS_HELLO_FAILED)
            return fail(why, len, "the I/O node refused the file client's connection: %s",
                        strerror(err - FS_HELLO_FAILED));
        if (err < 0)
            return fail(why, len, "the file client cannot take the job's identity (uid %u gid %u): %s",
                        j->nj.uid, j->nj.gid, strerror(-err));
        return fail(why, len, "cannot execute the file client %s: %s", path, strerror(err));
    }
    fs->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (fs->pidfd < 0) {
        int e = errno;
        fs_stop(fs);
        return fail(why, len, "pidfd_open of the file client: %s", strerror(e));
    }
    return 0;
}

/* mkdir -p of path (each component made 0755 if missing); 0 or -1 with errno */
static int make_dirs(char *path)
{
    for (char *c = path + 1;; c++) {
        if (*c != '/' && *c)
            continue;
        char keep = *c;
        *c = '\0';
        int r = mkdir(path, 0755);
        *c = keep;
        if (r < 0 && errno != EEXIST)
            return -1;
        if (!keep)
            return 0;
    }
}

static int send_fd(int sock, int fd)
{
    char byte = 0, cbuf[CMSG_SPACE(sizeof(int))];
    memset(cbuf, 0, sizeof cbuf);
    struct iovec v = { &byte, 1 };
    struct msghdr mh = { .msg_iov = &v, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf };
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof fd);
    ssize_t n;
    while ((n = sendmsg(sock, &mh, MSG_NOSIGNAL)) < 0 && errno == EINTR)
        ;
    return n == 1 ? 0 : -1;
}

/* Trees bound parents first, so a tree inside another lands on top of it. */
static int by_length(const void *a, const void *b)
{
    size_t x = strlen(*(char *const *)a), y = strlen(*(char *const *)b);
    return x < y ? -1 : x > y;
}

static int bind_trees(struct fs *fs, const char *root, const char *hidden, char *why, size_t len)
{
    size_t n = 0;
    while (fs->trees[n])
        n++;
    char **order = malloc(n * sizeof *order);
    if (!order)
        return fail(why, len, "out of memory");
    memcpy(order, fs->trees, n * sizeof *order);
    qsort(order, n, sizeof *order, by_length);
    int r = 0;
    for (size_t i = 0; i < n && r == 0; i++) {
        char src[PATH_MAX], dst[PATH_MAX];
        struct stat st;
        snprintf(src, sizeof src, "%s%s", hidden, order[i]);
        snprintf(dst, sizeof dst, "%s%s", root, order[i]);
        /* through lattice-fs: what the I/O node says, as the job owner */
        if (stat(src, &st) < 0)
            r = fail(why, len, "file tree %s: %s on the I/O node", order[i],
                     errno == ENOENT ? "no such directory" : strerror(errno));
        else if (!S_ISDIR(st.st_mode))
            r = fail(why, len, "file tree %s is not a directory on the I/O node", order[i]);
        else if (make_dirs(dst) < 0)
            r = fail(why, len, "cannot make the place of file tree %s in the sandbox: %s", order[i], strerror(errno));
        else if (mount(src, dst, NULL, MS_BIND, NULL) < 0 ||
                 mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV, NULL) < 0)
            r = fail(why, len, "cannot bind file tree %s in the sandbox: %s", order[i], strerror(errno));
    }
    free(order);
    return r;
}

/* The kernel caps a FUSE mount's readahead at its default (128 KiB), so a
 * sequential read would go to the I/O node in 128 KiB requests: raised to
 * one whole request (1 MiB) on the mount's bdi.  Best effort: without it
 * reads are only slower. */
static void readahead_1m(const char *mnt)
{
    struct stat st;
    char path[96];
    if (stat(mnt, &st) < 0)
        return;
    snprintf(path, sizeof path, "/sys/class/bdi/%u:%u/read_ahead_kb", major(st.st_dev), minor(st.st_dev));
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        (void)!write(fd, "1024", 4);
        close(fd);
    }
}

int fs_mount(struct fs *fs, const char *root, char *why, size_t len)
{
    if (fs->ctl < 0 || !fs->trees)
        return fail(why, len, "the file client is not running");
    /* the whole remote root, reachable only until the trees are bound */
    char hidden[PATH_MAX];
    snprintf(hidden, sizeof hidden, "%s/.lattice-fs-XXXXXX", *root ? root : "/tmp");
    if (!mkdtemp(hidden))
        return fail(why, len, "cannot make the file client's mount point %s: %s", hidden, strerror(errno));
    int dev = open("/dev/fuse", O_RDWR | O_CLOEXEC);
    if (dev < 0) {
        int e = errno;
        rmdir(hidden);
        return fail(why, len, "cannot open /dev/fuse: %s", strerror(e));
    }
    /* No default_permissions: the I/O worker, the owner, checks every call
     * on the I/O node, and the only caller here is the owner too, so the
     * kernel's own check of the mode bits would add nothing but a GETATTR
     * of the directory after each create or unlink in it (its attributes
     * are dropped then): two round trips of a small file's five. */
    char opts[160];
    snprintf(opts, sizeof opts, "fd=%d,rootmode=40000,user_id=%u,group_id=%u,allow_other", dev, fs->uid, fs->gid);
    if (mount("lattice-fs", hidden, "fuse.lattice-fs", MS_NOSUID | MS_NODEV, opts) < 0) {
        int e = errno;
        close(dev);
        rmdir(hidden);
        return fail(why, len, "cannot mount the job's file system (FUSE): %s", strerror(e));
    }
    int r = 0;
    if (send_fd(fs->ctl, dev) < 0)
        r = fail(why, len, "cannot hand /dev/fuse to the file client: %s", strerror(errno));
    close(dev);         /* lattice-fs holds the connection now: its end ends the mount's */
    if (r == 0) {
        readahead_1m(hidden);
        r = bind_trees(fs, root, hidden, why, len);
    }
    if (umount2(hidden, MNT_DETACH) < 0 && r == 0)
        r = fail(why, len, "cannot detach the file client's root: %s", strerror(errno));
    rmdir(hidden);
    return r;
}

const char *fs_cwd(const struct fs *fs)
{
    return fs->trees ? fs->trees[0] : NULL;
}

void fs_stop(struct fs *fs)
{
    if (fs->pid > 0) {
        if (fs->pidfd < 0 || syscall(SYS_pidfd_send_signal, fs->pidfd, SIGKILL, NULL, 0) < 0)
            kill(fs->pid, SIGKILL);
        while (waitpid(fs->pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    fs->pid = 0;
    if (fs->pidfd >= 0)
        close(fs->pidfd);
    if (fs->ctl >= 0)
        close(fs->ctl);
    fs->pidfd = fs->ctl = -1;
    free_trees(fs);
}
