/*
 * sandbox.c - the node sandbox of a Linux-mode job (sandbox.h;
 * docs/architecture.md, "Linux nodes: the sandbox").
 *
 * The holder is cloned by cnode with new mount and UTS namespaces, into the
 * block's pid namespace on this host ("sandbox"."pidns", whose pid 1 is the
 * host agent's lattice-pidns-init: the ranks of the block's nodes here see
 * each other's pids, as single-copy transfers between them need) or, without
 * one, a new pid namespace of the node's whose pid 1 it is; it joins the
 * block's IPC namespace on this host ("sandbox"."ipcns": UCX's shared memory
 * reaches only peers in its own) or gets a new one, and the node's network
 * namespace ("sandbox"."netns", made by the host agent) or, without one, a
 * new one with only loopback.  It builds the node's file view:
 *
 *   /                  a tmpfs, read-only once built
 *   /usr /bin /sbin /lib* /etc /opt   the host's, bound read-only, nosuid,
 *                      nodev (symlinks such as /bin -> usr/bin kept as links)
 *   /proc              its own, of its pid namespace; /proc/sys and the
 *                      other files a root job could write, read-only
 *   /sys               a new sysfs, read-only (this network namespace's devices)
 *   /dev               a read-only tmpfs: null zero full random urandom tty
 *                      bound from the host, fd/std* links, its own devpts
 *   /dev/shm           the job's directory of the block's shared one on this
 *                      host (personality "sandbox"."shm"; job_shm) or else a
 *                      tmpfs of the job's
 *   /tmp               a tmpfs of the node and job (1777)
 *   /run/lattice-hwloc.xml  the host's topology for hwloc (topology.c), if any
 *   Lattice's libraries     the preload client's directory (libpmi.so for Open
 *                      MPI's pmix/flux), read-only at its host path
 *   the job's trees    mounted by the file client's fs_mount (fs.h)
 *
 * assembled on a tmpfs mounted over /tmp of the holder's own (private) mount
 * namespace, then pivot_root into it with the old root detached: nothing
 * else of the host's files, no socket, key or machine directory remains
 * reachable.  Every mount is private: nothing propagates to the host, and
 * everything goes with the namespace when its last process ends.
 *
 * The holder then waits until it is killed with the job's container.  In
 * a pid namespace of its own it is pid 1: it reaps the processes orphaned
 * there, and when it ends the kernel kills every other process in it.  In
 * the block's it watches cnode instead (a pidfd): if cnode dies it kills
 * the job's other processes of the node (the job's container) and ends.
 */
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "job.h"
#include "sandbox.h"
#include "fs.h"

#define NS_FLAGS (CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS)
#define HOLD_CNODE 3    /* the holder's descriptors in the block's pid namespace: cnode's pidfd, */
#define HOLD_BOX   4    /* and the job's container's directory */
#define STAGE "/tmp"    /* where the new root is assembled, in the holder's own mount namespace */

/* clone3's arguments, up to CLONE_ARGS_SIZE_VER2 (linux/sched.h clashes with sched.h) */
struct clone_args2 {
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
    uint64_t set_tid, set_tid_size, cgroup;
};
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

/* The system trees bound read-only; those the host lacks are skipped. */
static const char *const system_dirs[] = { "usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "opt" };
/* Device nodes bound from the host. */
static const char *const devices[] = { "null", "zero", "full", "random", "urandom", "tty" };
/* In /proc, what a root job (root without capabilities, launch.c) could still
 * write as the files' owner: the sysctls (kernel.core_pattern runs a program
 * as the host's root), the sysrq trigger, IRQ affinities, buses. */
static const char *const proc_readonly[] = { "sys", "sysrq-trigger", "irq", "bus", "fs" };

/* ---- in the holder ---- */

/* The step that failed and its errno, for the line cnode reports. */
static void fail(int status, const char *what, const char *path) __attribute__((noreturn));
static void fail(int status, const char *what, const char *path)
{
    char msg[512];
    int e = errno;
    int n = snprintf(msg, sizeof msg, "%s%s%s: %s", what, path ? " " : "", path ? path : "", strerror(e));
    if (n > 0)
        (void)!write(status, msg, (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1);
    _exit(1);
}

static void at(char *out, size_t len, const char *dir, const char *name)
{
    snprintf(out, len, "%s/%s", dir, name);
}

/* A mount point for a file (a bind of a file needs a file there). */
static int touch(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return -1;
    close(fd);
    return 0;
}

/* mount_setattr on path and everything below it; MS_REMOUNT where the kernel lacks it. */
static int restrict_tree(const char *path, uint64_t attr, unsigned long msflags)
{
    struct mount_attr a = { .attr_set = attr };
    if (mount_setattr(AT_FDCWD, path, AT_RECURSIVE, &a, sizeof a) == 0)
        return 0;
    if (errno != ENOSYS)
        return -1;
    return mount(NULL, path, NULL, MS_REMOUNT | MS_BIND | msflags, NULL);
}

static void bind_system(int status, const char *root)
{
    char src[64], dst[256], link[256];
    for (size_t i = 0; i < sizeof system_dirs / sizeof system_dirs[0]; i++) {
        struct stat st;
        snprintf(src, sizeof src, "/%s", system_dirs[i]);
        at(dst, sizeof dst, root, system_dirs[i]);
        if (lstat(src, &st) < 0)
            continue;
        if (S_ISLNK(st.st_mode)) {      /* /bin -> usr/bin: the same link */
            ssize_t n = readlink(src, link, sizeof link - 1);
            if (n < 0)
                fail(status, "readlink", src);
            link[n] = '\0';
            if (symlink(link, dst) < 0)
                fail(status, "symlink", dst);
            continue;
        }
        if (!S_ISDIR(st.st_mode))
            continue;
        if (mkdir(dst, 0755) < 0 || mount(src, dst, NULL, MS_BIND | MS_REC, NULL) < 0 ||
            restrict_tree(dst, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                          MS_RDONLY | MS_NOSUID | MS_NODEV) < 0)
            fail(status, "cannot bind read-only", src);
    }
}

/* A bind of src (a path or /proc/self/fd/N) at dst, read-only unless rw. */
static void bind_one(int status, const char *src, const char *dst, int rw)
{
    if (mount(src, dst, NULL, MS_BIND, NULL) < 0)
        fail(status, "cannot bind", dst);
    if (!rw && mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
        fail(status, "cannot make read-only", dst);
}

static void make_dev(int status, const char *root, int shmfd)
{
    char dev[256], p[320];
    at(dev, sizeof dev, root, "dev");
    if (mkdir(dev, 0755) < 0 ||
        mount("lattice-dev", dev, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k") < 0)
        fail(status, "cannot mount a tmpfs on", "/dev");
    for (size_t i = 0; i < sizeof devices / sizeof devices[0]; i++) {
        char src[32];
        snprintf(src, sizeof src, "/dev/%s", devices[i]);
        at(p, sizeof p, dev, devices[i]);
        if (access(src, F_OK) < 0)
            continue;
        if (touch(p) < 0 || mount(src, p, NULL, MS_BIND, NULL) < 0)
            fail(status, "cannot bind", src);
    }
    static const char *const links[][2] = { { "fd", "/proc/self/fd" }, { "stdin", "/proc/self/fd/0" },
                                            { "stdout", "/proc/self/fd/1" }, { "stderr", "/proc/self/fd/2" },
                                            { "ptmx", "pts/ptmx" } };
    for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
        at(p, sizeof p, dev, links[i][0]);
        if (symlink(links[i][1], p) < 0)
            fail(status, "symlink", p);
    }
    at(p, sizeof p, dev, "pts");    /* a devpts of its own: the host's terminals stay out */
    if (mkdir(p, 0755) < 0 || mount("devpts", p, "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620") < 0)
        fail(status, "cannot mount devpts on", "/dev/pts");
    at(p, sizeof p, dev, "shm");
    if (mkdir(p, 01777) < 0)
        fail(status, "mkdir", p);
    if (shmfd >= 0) {               /* the block's, shared by its nodes on this host */
        char src[64];
        snprintf(src, sizeof src, "/proc/self/fd/%d", shmfd);
        if (mount(src, p, NULL, MS_BIND, NULL) < 0 ||
            mount(NULL, p, NULL, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV, NULL) < 0)
            fail(status, "cannot bind the block's shared memory directory on", "/dev/shm");
    } else if (mount("lattice-shm", p, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777") < 0)
        fail(status, "cannot mount a tmpfs on", "/dev/shm");
    /* nothing more is made in /dev: read-only (the binds below keep their own flags) */
    if (mount(NULL, dev, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NOEXEC, NULL) < 0)
        fail(status, "cannot make read-only", "/dev");
}

static void make_proc_sys(int status, const char *root)
{
    char p[256], q[320];
    at(p, sizeof p, root, "proc");
    if (mkdir(p, 0555) < 0 || mount("proc", p, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
        fail(status, "cannot mount", "/proc");
    for (size_t i = 0; i < sizeof proc_readonly / sizeof proc_readonly[0]; i++) {
        at(q, sizeof q, p, proc_readonly[i]);
        if (access(q, F_OK) == 0)
            bind_one(status, q, q, 0);
    }
    at(p, sizeof p, root, "sys");
    if (mkdir(p, 0555) < 0 || mount("sysfs", p, "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
        fail(status, "cannot mount", "/sys");
}

static void make_tmp_run(int status, const char *root, uint64_t memory, int topofd)
{
    char p[256], opts[64];
    at(p, sizeof p, root, "tmp");
    snprintf(opts, sizeof opts, "mode=1777,size=%llu", (unsigned long long)memory);
    if (mkdir(p, 01777) < 0 || mount("lattice-tmp", p, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
        fail(status, "cannot mount a tmpfs on", "/tmp");
    at(p, sizeof p, root, "run");
    if (mkdir(p, 0755) < 0)
        fail(status, "mkdir", p);
    if (topofd >= 0) {
        char src[64];
        snprintf(src, sizeof src, "/proc/self/fd/%d", topofd);
        at(p, sizeof p, root, SANDBOX_TOPOLOGY + 1);
        if (touch(p) < 0)
            fail(status, "cannot make", p);
        bind_one(status, src, p, 0);
    }
}

/* Lattice's own libraries (the directory of the preload client: libpmi.so,
 * which Open MPI's pmix/flux loads, liblatpers) at their host path,
 * read-only, unless the system tree shows them already. */
/* The client's directory (Lattice's libraries), opened before the root's
 * tmpfs covers STAGE: it may be below /tmp (a checkout there).  -1 if none. */
static int open_lattice_libs(int status, const char *client)
{
    char dir[512];
    snprintf(dir, sizeof dir, "%s", client);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return -1;
    *slash = '\0';
    int fd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        fail(status, "cannot open Lattice's library directory", dir);
    return fd;
}

static void bind_lattice_libs(int status, const char *root, const char *client, int libfd)
{
    char dir[512], dst[1024], src[64];
    snprintf(dir, sizeof dir, "%s", client);
    char *slash = strrchr(dir, '/');
    if (libfd < 0 || !slash || slash == dir)
        return;
    *slash = '\0';
    snprintf(src, sizeof src, "/proc/self/fd/%d", libfd);
    snprintf(dst, sizeof dst, "%s%s", root, dir);
    if (access(dst, F_OK) == 0)
        return;
    for (char *c = dst + strlen(root) + 1;; c++) {      /* mkdir -p in the root tmpfs */
        if (*c != '/' && *c)
            continue;
        char keep = *c;
        *c = '\0';
        if (mkdir(dst, 0755) < 0 && errno != EEXIST)
            fail(status, "mkdir", dst);
        *c = keep;
        if (!keep)
            break;
    }
    if (mount(src, dst, NULL, MS_BIND, NULL) < 0 ||
        mount(NULL, dst, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
        fail(status, "cannot bind read-only", dir);
}

/* Loopback up in a network namespace of our own (the host agent configured
 * a node's link itself). */
static void loopback_up(int status)
{
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct ifreq ifr = { 0 };
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "lo");
    if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
        fail(status, "cannot reach the loopback device", NULL);
    ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
    if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
        fail(status, "cannot bring up the loopback device", NULL);
    close(s);
}

/* The node's pid 1 as its processes see it, not cnode's command line (it
 * names the machine directory): our copy of the arguments' memory, which
 * /proc/PID/cmdline shows (/proc/self/stat fields 48-49), overwritten. */
static void rename_self(void)
{
    static const char name[] = "lattice-node-holder";
    prctl(PR_SET_NAME, name);
    char buf[1024];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    unsigned long start = 0, end = 0;
    for (int field = 2; p && field < 49; field++) {     /* p at the end of field `field` */
        p = strchr(p + 1, ' ');
        if (p && field + 1 == 48)
            start = strtoul(p + 1, NULL, 10);
        if (p && field + 1 == 49)
            end = strtoul(p + 1, NULL, 10);
    }
    if (start && end > start + sizeof name) {
        memset((void *)start, 0, end - start);
        memcpy((void *)start, name, sizeof name);
    }
}

/* In the block's pid namespace: until cnode ends (its pidfd readable), then
 * the node's processes with it, as pid 1 of a node's own namespace would
 * take them (cnode's children die by their parent-death signal, what they
 * forked would not). */
static void watch_cnode(void) __attribute__((noreturn));
static void watch_cnode(void)
{
    struct pollfd pfd = { .fd = HOLD_CNODE, .events = POLLIN };
    while (poll(&pfd, 1, -1) < 0 && errno == EINTR)
        ;
    container_kill_others(HOLD_BOX);
    _exit(0);
}

/* pid 1 of the job's pid namespace: reap whoever ends in it, until killed. */
static void hold(void) __attribute__((noreturn));
static void hold(void)
{
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    for (;;) {
        while (waitpid(-1, NULL, WNOHANG) > 0)
            ;
        sigwaitinfo(&chld, NULL);
    }
}

struct holder_args {
    const struct job *j;
    struct fs *fs;      /* the job's file client, or NULL */
    int status;         /* the pipe's write end: an error line on it, or closed when the view is ready */
    int netns;          /* the node's network namespace, or -1 (a new one of loopback alone) */
    int ipcns;          /* the block's IPC namespace, or -1 (cloned with a new one) */
    const char *shmjob; /* the job's directory in the block's shared memory directory, or NULL */
    int cnode;          /* cnode's pidfd: whether it died before our parent-death signal was set */
    int in_box;         /* born in the job's container (CLONE_INTO_CGROUP) */
    int block_pids;     /* in the block's pid namespace (not its pid 1) */
};

static void holder(const struct holder_args *a) __attribute__((noreturn));
static void holder(const struct holder_args *a)
{
    int status = a->status;
    if (!a->block_pids)         /* in the block's, we watch cnode (watch_cnode) */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
    /* cnode gone before that took effect: nobody would kill us */
    struct pollfd pfd = { .fd = a->cnode, .events = POLLIN };
    if (poll(&pfd, 1, 0) != 0)
        _exit(1);
    prctl(PR_SET_DUMPABLE, 0);
    /* a copy of cnode's memory: not the block key */
    explicit_bzero((void *)a->j->pers->key, sizeof a->j->pers->key);
    if ((a->in_box ? container_entered : container_enter)(&a->j->box, 0) < 0)
        fail(status, "cannot enter the job's container", a->j->box.path);
    if (a->netns >= 0 && setns(a->netns, CLONE_NEWNET) < 0)
        fail(status, "cannot enter the node's network namespace", a->j->pers->sandbox.netns);
    if (a->netns < 0)
        loopback_up(status);
    if (a->ipcns >= 0 && setns(a->ipcns, CLONE_NEWIPC) < 0)
        fail(status, "cannot enter the block's IPC namespace", a->j->pers->sandbox.ipcns);
    const char *host = a->j->pers->location;
    if (sethostname(host, strlen(host)) < 0)
        fail(status, "sethostname", host);
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        fail(status, "cannot make the mounts private", NULL);
    /* sources that may be under STAGE: held before it is covered (opened in
     * this mount namespace: a bind's source must be in the caller's) */
    int shm = -1, topo = -1;
    char shm_dir[4200];
    if (a->shmjob) {    /* the job's directory of the block's, made by cnode (job_shm) */
        snprintf(shm_dir, sizeof shm_dir, "%s/%s", a->j->pers->sandbox.shm, a->shmjob);
        if ((shm = open(shm_dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
            fail(status, "cannot open the job's shared memory directory", shm_dir);
    }
    char tp[64];
    if (topology_file(tp, sizeof tp))
        topo = open(tp, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    int lib = open_lattice_libs(status, a->j->k->client);
    /* the container's directory, while the host's cgroup file system is in view (none
     * without cgroups: then cnode's death ends only its children, by their parent-death signal) */
    int box = a->block_pids ? container_dir(&a->j->box) : -1;
    if (a->block_pids && box < 0 && a->j->box.path[0])
        fail(status, "cannot open the job's container", a->j->box.path);
    if (mount("lattice-node", STAGE, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") < 0)
        fail(status, "cannot mount the node's root tmpfs on", STAGE);
    bind_system(status, STAGE);
    make_dev(status, STAGE, shm);
    make_proc_sys(status, STAGE);
    make_tmp_run(status, STAGE, a->j->pers->memory, topo);
    bind_lattice_libs(status, STAGE, a->j->k->client, lib);
    char why[512];      /* the job's trees at their own paths, over the node's /tmp too */
    if (a->fs && fs_mount(a->fs, STAGE, why, sizeof why) < 0) {
        (void)!write(status, why, strnlen(why, sizeof why));
        _exit(1);
    }
    /* into it; the old root stacked over it and then detached */
    if (chdir(STAGE) < 0 || syscall(SYS_pivot_root, ".", ".") < 0)
        fail(status, "pivot_root", STAGE);
    if (umount2(".", MNT_DETACH) < 0)
        fail(status, "cannot detach the host's root", NULL);
    if (chdir("/") < 0 || mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV, NULL) < 0)
        fail(status, "cannot make read-only", "/");
    rename_self();      /* last: cnode's arguments (the client's path) are needed until here */
    /* nothing of cnode's: its connection, the job's descriptors, the status
     * pipe last (in the block's pid namespace, cnode's pidfd kept) */
    if (a->block_pids) {
        /* out of the way of the two slots first: either may hold the other */
        int c = fcntl(a->cnode, F_DUPFD, HOLD_BOX + 1), b = box < 0 ? -1 : fcntl(box, F_DUPFD, HOLD_BOX + 1);
        if (c < 0 || (box >= 0 && b < 0) || dup2(c, HOLD_CNODE) < 0 || (b >= 0 && dup2(b, HOLD_BOX) < 0) ||
            (b < 0 && close(HOLD_BOX) < 0 && errno != EBADF) ||
            syscall(SYS_close_range, 0, HOLD_CNODE - 1, 0) < 0 || syscall(SYS_close_range, HOLD_BOX + 1, ~0u, 0) < 0)
            fail(status, "cannot keep cnode's pidfd and the job's container", NULL);
        watch_cnode();
    }
    syscall(SYS_close_range, 0, ~0u, 0);
    hold();
}

/* ---- in cnode ---- */

/* The holder's error line, or "" once it closed the pipe ready. */
static int read_status(int fd, char *buf, size_t len)
{
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd, buf + n, len - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
        if (n == len - 1)
            break;
    }
    buf[n] = '\0';
    return (int)n;
}

static void closefd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* The job's /dev/shm: a directory "job-ID" of the block's shared memory
 * directory, the owner's (0700), made by the first of the job's nodes on
 * this host; each node holds "job-ID.lock" shared while the job runs here,
 * and the last to leave (job_shm_release) removes the directory, so no
 * job's segments (UCX's, MPI's, the program's) outlive it or reach the next
 * job.  The lock files stay until the block's tmpfs goes at `lattice free`. */
static int job_shm(struct sandbox *sb, const struct job *j)
{
    char lock[48];
    struct stat st;
    snprintf(sb->shmjob, sizeof sb->shmjob, "job-%llu", (unsigned long long)j->nj.job);
    snprintf(lock, sizeof lock, "%s.lock", sb->shmjob);
    if ((sb->shm = open(j->pers->sandbox.shm, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        return -1;
    sb->shmlock = openat(sb->shm, lock, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (sb->shmlock < 0 || flock(sb->shmlock, LOCK_SH) < 0)
        return -1;
    /* made under a name of this node's, owned, then renamed into place: a
     * node of the same job never sees it still root's (half made) */
    char made[64];
    snprintf(made, sizeof made, "%s.new-%ld", sb->shmjob, (long)getpid());
    if (mkdirat(sb->shm, made, 0700) < 0)
        return -1;
    if (fchownat(sb->shm, made, j->nj.uid, j->nj.gid, AT_SYMLINK_NOFOLLOW) < 0 ||
        renameat2(sb->shm, made, sb->shm, sb->shmjob, RENAME_NOREPLACE) < 0) {
        int e = errno;
        unlinkat(sb->shm, made, AT_REMOVEDIR);
        if (e != EEXIST) {
            errno = e;
            return -1;
        }
    }
    /* another node's of this job: a directory of the owner's, nothing else */
    if (fstatat(sb->shm, sb->shmjob, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return -1;
    if (!S_ISDIR(st.st_mode) || st.st_uid != j->nj.uid) {
        errno = EEXIST;
        return -1;
    }
    return 0;
}

/* Everything below dirfd's entry name, and it, removed without following a
 * link; depth bounded (a deeper tree goes with the block's tmpfs). */
static void remove_tree(int dirfd, const char *name, int depth)
{
    if (unlinkat(dirfd, name, 0) == 0 || errno == ENOENT)
        return;
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 && depth < 32 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            remove_tree(fd, e->d_name, depth + 1);
    closedir(d);
    unlinkat(dirfd, name, AT_REMOVEDIR);
}

/* System V objects the job left in the block's IPC namespace, removed in a
 * child that enters it (cnode keeps its own). */
static void clear_ipc(int ipcns)
{
    pid_t pid = fork();
    if (pid == 0) {
        if (setns(ipcns, CLONE_NEWIPC) < 0)
            _exit(1);
        struct shm_info si;
        int max = shmctl(0, SHM_INFO, (struct shmid_ds *)&si);
        for (int i = 0; i <= max; i++) {
            struct shmid_ds ds;
            int id = shmctl(i, SHM_STAT, &ds);
            if (id >= 0)
                shmctl(id, IPC_RMID, NULL);
        }
        struct seminfo mi;
        union { int val; struct semid_ds *buf; unsigned short *array; struct seminfo *__buf; } arg = { .__buf = &mi };
        max = semctl(0, 0, SEM_INFO, arg);
        for (int i = 0; i <= max; i++) {
            struct semid_ds ds;
            arg.buf = &ds;
            int id = semctl(i, 0, SEM_STAT, arg);
            if (id >= 0)
                semctl(id, 0, IPC_RMID);
        }
        struct msginfo qi;
        max = msgctl(0, MSG_INFO, (struct msqid_ds *)&qi);
        for (int i = 0; i <= max; i++) {
            struct msqid_ds ds;
            int id = msgctl(i, MSG_STAT, &ds);
            if (id >= 0)
                msgctl(id, IPC_RMID, NULL);
        }
        _exit(0);
    }
    if (pid > 0)
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
}

/* This node leaves the job's /dev/shm; the last node of the job here (the
 * lock taken exclusively at once) removes it and the job's System V objects. */
static void job_shm_release(struct sandbox *sb)
{
    if (sb->shmlock >= 0 && flock(sb->shmlock, LOCK_EX | LOCK_NB) == 0) {
        if (sb->shm >= 0 && sb->shmjob[0])
            remove_tree(sb->shm, sb->shmjob, 0);
        if (sb->ipcns >= 0)
            clear_ipc(sb->ipcns);
    }
    closefd(&sb->shmlock);
    closefd(&sb->shm);
}

int sandbox_start(struct sandbox *sb, const struct job *j, struct fs *fs, char *why, size_t len)
{
    const struct personality *pers = j->pers;
    struct holder_args a = { .j = j, .fs = fs, .status = -1, .netns = -1, .ipcns = -1, .cnode = -1 };
    int pipefd[2] = { -1, -1 }, pidns = -1, ownpids = -1;
    *sb = (struct sandbox)SANDBOX_NONE;
    if (geteuid() != 0) {
        snprintf(why, len, "cannot make the node sandbox: cnode runs as uid %u, not root (namespaces and mounts "
                 "need CAP_SYS_ADMIN); run the job with --no-sandbox", (unsigned)geteuid());
        return -1;
    }
    const char *what = NULL, *path = NULL;
    if (pers->sandbox.netns && (a.netns = open(pers->sandbox.netns, O_RDONLY | O_CLOEXEC)) < 0)
        what = "cannot open the node's network namespace", path = pers->sandbox.netns;
    else if (pers->sandbox.ipcns && (sb->ipcns = open(pers->sandbox.ipcns, O_RDONLY | O_CLOEXEC)) < 0)
        what = "cannot open the block's IPC namespace", path = pers->sandbox.ipcns;
    else if (pers->sandbox.pidns && (pidns = open(pers->sandbox.pidns, O_RDONLY | O_CLOEXEC)) < 0)
        what = "cannot open the block's pid namespace", path = pers->sandbox.pidns;
    else if (pidns >= 0 && (ownpids = open("/proc/thread-self/ns/pid", O_RDONLY | O_CLOEXEC)) < 0)
        what = "cannot open our own pid namespace", path = "/proc/thread-self/ns/pid";
    else if (pers->sandbox.shm && job_shm(sb, j) < 0)
        what = "cannot make the job's shared memory directory in", path = pers->sandbox.shm;
    else if ((a.cnode = (int)syscall(SYS_pidfd_open, getpid(), 0)) < 0)
        what = "pidfd_open";
    else if (pipe2(pipefd, O_CLOEXEC) < 0)
        what = "pipe";
    pid_t pid = -1;
    int pidfd = -1;
    if (!what) {
        a.status = pipefd[1];
        a.ipcns = sb->ipcns;
        a.shmjob = sb->shm >= 0 ? sb->shmjob : NULL;
        a.block_pids = pidns >= 0;
        struct clone_args2 ca = { .flags = (NS_FLAGS & ~(a.ipcns >= 0 ? CLONE_NEWIPC : 0) &
                                            ~(a.block_pids ? CLONE_NEWPID : 0)) |
                                           (a.netns < 0 ? CLONE_NEWNET : 0) | CLONE_PIDFD,
                                  .pidfd = (uint64_t)(uintptr_t)&pidfd, .exit_signal = SIGCHLD };
        int box = container_clone_fd(&j->box);
        if (box >= 0) {         /* born in the job's container; else it moves itself there */
            ca.flags |= CLONE_INTO_CGROUP;
            ca.cgroup = (uint64_t)box;
        }
        a.in_box = box >= 0;
        /* this thread's children in the block's pid namespace, for this clone alone */
        if (a.block_pids && setns(pidns, CLONE_NEWPID) < 0)
            what = "cannot enter the block's pid namespace", path = pers->sandbox.pidns;
        else {
            pid = (pid_t)syscall(SYS_clone3, &ca, sizeof ca);
            if (pid < 0 && box >= 0 && errno != ENOMEM) {
                ca.flags &= ~CLONE_INTO_CGROUP;
                a.in_box = 0;
                pid = (pid_t)syscall(SYS_clone3, &ca, sizeof ca);
            }
            if (pid == 0)
                holder(&a);
            int e = errno;
            if (a.block_pids && setns(ownpids, CLONE_NEWPID) < 0) {
                say("fatal: cannot return to our own pid namespace after the holder's clone: %s", strerror(errno));
                _exit(1);       /* every later child would be born in the block's */
            }
            errno = e;
            /* a pid namespace whose pid 1 ended takes no process: ENOMEM */
            if (pid < 0 && a.block_pids && errno == ENOMEM)
                what = "the block's pid namespace has no pid 1 any more (the host agent's lattice-pidns-init "
                       "ended): free and boot the block again";
            else if (pid < 0)
                what = "cannot create the holder (clone3 with new namespaces)";
        }
        if (box >= 0)
            close(box);
    }
    int e = errno;
    closefd(&pidns);
    closefd(&ownpids);
    closefd(&a.netns);
    closefd(&a.cnode);
    closefd(&pipefd[1]);
    if (what) {
        closefd(&pipefd[0]);
        job_shm_release(sb);
        closefd(&sb->ipcns);
        snprintf(why, len, "cannot make the node sandbox: %s%s%s: %s; run the job with --no-sandbox", what,
                 path ? " " : "", path ? path : "", strerror(e));
        return -1;
    }
    char msg[512];
    int n = read_status(pipefd[0], msg, sizeof msg);
    closefd(&pipefd[0]);
    sb->pid = pid;
    sb->pidfd = pidfd;
    if (n > 0) {
        sandbox_stop(sb);
        snprintf(why, len, "cannot make the node sandbox: %s; run the job with --no-sandbox", msg);
        return -1;
    }
    /* the pipe closed without a word: ready, or dead before it said why */
    siginfo_t si = { 0 };
    if (waitid(P_PIDFD, (id_t)pidfd, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid != 0) {
        sandbox_stop(sb);
        snprintf(why, len, "cannot make the node sandbox: its holder ended while it was being made; "
                 "run the job with --no-sandbox");
        return -1;
    }
    return 0;
}

int sandbox_pid_ending(pid_t pid, int pidfd)
{
    struct pollfd pfd = { .fd = pidfd, .events = POLLIN };
    if (pid <= 0 || pidfd < 0 || poll(&pfd, 1, 0) != 0)
        return pid > 0 && pidfd >= 0;
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof buf - 1);
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return 1;
    buf[n] = '\0';
    /* "pid (comm) state ppid pgrp session tty tpgid flags ...": flags is the 7th after the comm */
    char *p = strrchr(buf, ')');
    for (int field = 0; p && field < 7; field++)
        p = strchr(p + 1, ' ');
    return p && (strtoul(p + 1, NULL, 10) & 0x4) != 0;     /* PF_EXITING */
}

int sandbox_enter(const struct sandbox *sb, const char *cwd)
{
    if (setns(sb->pidfd, NS_FLAGS | CLONE_NEWNET) < 0)
        return -1;
    return chdir(cwd && *cwd ? cwd : "/");
}

void sandbox_stop(struct sandbox *sb)
{
    if (sb->pid > 0 && sb->pidfd >= 0) {
        /* its end is waited for here, on its pidfd, not by the container's
         * "populated 0" event (the kernel sends those 10 ms apart at most);
         * bounded, in case it is stuck where SIGKILL waits (then the
         * container's seal reports it) */
        syscall(SYS_pidfd_send_signal, sb->pidfd, SIGKILL, NULL, 0);
        struct pollfd pfd = { .fd = sb->pidfd, .events = POLLIN };
        while (poll(&pfd, 1, 30000) < 0 && errno == EINTR)
            ;
    }
    if (sb->pid > 0 && waitpid(sb->pid, NULL, WNOHANG) == 0)
        say("warning: the node sandbox's holder (pid %d) did not end on SIGKILL", (int)sb->pid);
    closefd(&sb->pidfd);
    sb->pid = 0;
    job_shm_release(sb);        /* after the holder: the job's processes here are gone */
    closefd(&sb->ipcns);
}
