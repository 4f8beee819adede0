/*
 * container.c - a job's processes on this node in one cgroup of their own,
 * killed whole at the job's end (container.h; docs/security.md, "Jobs are
 * sealed in time").
 *
 * Where: the cgroup v2 hierarchy if the host has one (pure v2 at
 * /sys/fs/cgroup, or hybrid at /sys/fs/cgroup/unified), else the v1 freezer
 * hierarchy; LATTICE_CGROUP=v1|v2 picks one, or names a v2 directory (a
 * subtree delegated to an unprivileged cnode).  The block's directory is
 * <root>/<personality "container">, the job's <that>/<job>-<location>.
 *
 * How a container ends: v2 writes cgroup.kill (the kernel kills every
 * process, and any forked meanwhile) and waits for "populated 0" in
 * cgroup.events (poll, POLLPRI); v1 (and v2 before cgroup.kill, Linux 5.14)
 * freezes it, SIGKILLs every pid in cgroup.procs, thaws it and waits for
 * those pids to end (pidfds), until cgroup.procs is empty.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#include "container.h"

enum kind { NONE, V2, V1 };

static enum kind kind = NONE;
static char base[400];          /* the block's directory */
static int required;            /* a job may not run without a container */
static char points[16][256];    /* every cgroup file system's mount point: read-only for a job of root */
static int npoints = -1;        /* -1: not looked for yet (container_note_points) */
static size_t root_len;         /* of the hierarchy's root, the start of base */

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

/* A mountinfo path field, its \ooo escapes undone, into out. */
static void unescape(const char *s, char *out, size_t len)
{
    size_t n = 0;
    while (*s && n + 1 < len) {
        if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' && s[3] >= '0' && s[3] <= '7') {
            out[n++] = (char)((s[1] - '0') << 6 | (s[2] - '0') << 3 | (s[3] - '0'));
            s += 4;
        } else
            out[n++] = *s++;
    }
    out[n] = '\0';
}

/* Is word one of the comma-separated words of list? */
static int has_word(const char *list, const char *word)
{
    size_t w = strlen(word);
    for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
        if (!strncmp(p, word, w) && (p[w] == ',' || p[w] == '\0' || p[w] == '\n'))
            return 1;
    return 0;
}

/* The mount point of the v2 hierarchy (v1: of the v1 freezer) in out: 0, or -1.
 * Notes every cgroup mount point on the way (points). */
static int find_mount(enum kind want, char *out, size_t len)
{
    npoints = 0;
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return -1;
    char line[4096];
    int found = -1;
    while (fgets(line, sizeof line, f)) {
        /* id parent maj:min root mountpoint options [optional...] - fstype source superoptions */
        char *fields[6], *save = NULL, *dash = strstr(line, " - ");
        if (!dash)
            continue;
        *dash = '\0';
        char *tail = dash + 3, *fstype = strtok_r(tail, " ", &save), *source = strtok_r(NULL, " ", &save);
        char *super = strtok_r(NULL, " \n", &save);
        save = NULL;
        int i = 0;
        for (char *t = strtok_r(line, " ", &save); t && i < 6; t = strtok_r(NULL, " ", &save))
            fields[i++] = t;
        if (i < 5 || !fstype || !source)
            continue;
        if ((!strcmp(fstype, "cgroup2") || !strcmp(fstype, "cgroup")) && npoints < 16)
            unescape(fields[4], points[npoints++], sizeof points[0]);
        if (found < 0 && ((want == V2 && !strcmp(fstype, "cgroup2")) ||
                          (want == V1 && !strcmp(fstype, "cgroup") && super && has_word(super, "freezer")))) {
            unescape(fields[4], out, len);
            found = 0;
        }
    }
    fclose(f);
    return found;
}

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif

/* The v2 hierarchy at its usual places, a statfs each, else find_mount.
 * mountinfo costs a line per mount, and a host running a block's network
 * has one per compute node (/run/netns): N cnodes each reading it at start
 * made a boot quadratic in N (docs/scaling.md, "Boot"). */
static int find_v2(char *out, size_t len)
{
    static const char *usual[] = { "/sys/fs/cgroup", "/sys/fs/cgroup/unified" };
    for (size_t i = 0; i < sizeof usual / sizeof *usual; i++) {
        struct statfs s;
        if (statfs(usual[i], &s) == 0 && s.f_type == CGROUP2_SUPER_MAGIC) {
            snprintf(out, len, "%s", usual[i]);
            return 0;
        }
    }
    return find_mount(V2, out, len);
}

void container_note_points(void)
{
    char unused[256];
    if (npoints < 0)
        find_mount(NONE, unused, sizeof unused);
}

static int exists(const char *dir, const char *file)
{
    char p[700];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    return access(p, F_OK) == 0;
}

/* NAME is safe: a relative path of [A-Za-z0-9._-] words, none starting with '.'. */
static int safe_name(const char *name)
{
    size_t n = strlen(name);
    if (n == 0 || n > 200 || name[0] == '/' || name[n - 1] == '/')
        return 0;
    for (const char *p = name; *p; p++) {
        if ((p == name || p[-1] == '/') && (*p == '.' || *p == '/'))
            return 0;
        if (!(*p == '/' || *p == '.' || *p == '_' || *p == '-' || (*p >= '0' && *p <= '9') ||
              (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z')))
            return 0;
    }
    return 1;
}

/* mkdir -p of base below root (which exists): every directory root's own (0755). */
static int make_base_once(size_t rootlen)
{
    char p[sizeof base];
    snprintf(p, sizeof p, "%s", base);
    for (char *s = p + rootlen + 1;; s++) {
        if (*s != '/' && *s != '\0')
            continue;
        char c = *s;
        *s = '\0';
        struct stat st;
        if (mkdir(p, 0755) < 0 && (errno != EEXIST || stat(p, &st) < 0 || !S_ISDIR(st.st_mode))) {
            if (errno == EEXIST)
                errno = ENOTDIR;
            return -1;
        }
        if (!c)
            return 0;
        *s = c;
    }
}

/* make_base_once again while a directory on the way vanishes: another cnode
 * of the block (leave) removes them whenever they are empty */
static int make_base(size_t rootlen)
{
    for (int tries = 0;; tries++) {
        if (make_base_once(rootlen) == 0)
            return 0;
        if (errno != ENOENT || tries == 1000)
            return -1;
    }
}

static char setup_why[256];     /* why container_setup failed, for each job it refuses */

/* The block's directory and those above it removed if empty (another cnode's
 * job may be there: then it stays, for the last one or the agent's sweep):
 * nothing is left of a cnode without a job, even one killed outright. */
static void leave(void)
{
    char p[sizeof base];
    snprintf(p, sizeof p, "%s", base);
    while (strlen(p) > root_len && rmdir(p) == 0) {
        char *slash = strrchr(p, '/');
        if (!slash)
            break;
        *slash = '\0';
    }
}

static int setup(const char *name, char *why, size_t len)
{
    const char *want = getenv("LATTICE_CGROUP");
    char root[256];
    required = geteuid() == 0;
    if (!safe_name(name)) {
        snprintf(why, len, "container name \"%s\" is not a relative path of [A-Za-z0-9._-] words", name);
        return -1;
    }
    if (want && want[0] == '/') {                       /* a delegated v2 subtree */
        snprintf(root, sizeof root, "%s", want);
        kind = V2;
        required = 1;                                   /* asked for: never run without it */
    } else if (want && *want && strcmp(want, "v1") && strcmp(want, "v2")) {
        snprintf(why, len, "LATTICE_CGROUP=%s: must be v1, v2 or an absolute path", want);
        return -1;
    } else if ((!want || strcmp(want, "v1")) && find_v2(root, sizeof root) == 0) {
        kind = V2;
    } else if ((!want || strcmp(want, "v2")) && find_mount(V1, root, sizeof root) == 0) {
        kind = V1;
    } else {
        snprintf(why, len, "no cgroup v2 hierarchy nor v1 freezer is mounted");
        return -1;
    }
    root_len = strlen(root);
    if ((size_t)snprintf(base, sizeof base, "%s/%s", root, name) >= sizeof base - 80) {
        kind = NONE;
        snprintf(why, len, "cgroup path %s/%s too long", root, name);
        return -1;
    }
    if (make_base(root_len) < 0) {     /* can we?  (made again for each job) */
        int e = errno;
        snprintf(why, len, "cannot make %s: %s", base, strerror(e));
        kind = NONE;
        return -1;
    }
    leave();
    return 0;
}

int container_setup(const char *name, char *why, size_t len)
{
    if (setup(name, why, len) == 0)
        return 0;
    snprintf(setup_why, sizeof setup_why, "%s", why);
    return -1;
}

int container_required(void)
{
    return required;
}

int container_open(struct container *c, uint64_t job, const char *location, char *why, size_t len)
{
    c->path[0] = '\0';
    c->procs = -1;
    if (kind == NONE) {
        snprintf(why, len, "%s", setup_why[0] ? setup_why : "no cgroup hierarchy to hold it");
        return -1;
    }
    char loc[64];
    size_t n = 0;
    for (const char *s = location; *s && n + 1 < sizeof loc; s++)
        loc[n++] = (*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
                   *s == '-' || *s == '.' ? *s : '_';
    loc[n] = '\0';
    char path[sizeof c->path];
    snprintf(path, sizeof path, "%s/%llu-%s", base, (unsigned long long)job, loc);
    /* the block's directory: removed whenever it is empty (leave), so maybe
     * by another cnode between our mkdirs */
    int made;
    for (int tries = 0;; tries++) {
        made = make_base(root_len) == 0 && mkdir(path, 0755) == 0 ? 0 : -1;
        if (made == 0 || errno != ENOENT || tries == 100)
            break;
    }
    if (made < 0) {
        int e = errno;
        snprintf(why, len, e == EEXIST ? "cgroup %s exists already (left by an earlier cnode?)" : "cannot make cgroup %s: %s",
                 path, strerror(e));
        return -1;
    }
    char procs[sizeof path + 16];
    snprintf(procs, sizeof procs, "%s/cgroup.procs", path);
    c->procs = open(procs, O_WRONLY | O_CLOEXEC);
    if (c->procs < 0) {
        int e = errno;
        rmdir(path);
        snprintf(why, len, "cannot open %s: %s", procs, strerror(e));
        return -1;
    }
    memcpy(c->path, path, sizeof path);
    return 0;
}

/* clone3's arguments, up to CLONE_ARGS_SIZE_VER2 (linux/sched.h clashes with sched.h) */
struct clone_args2 {
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
    uint64_t set_tid, set_tid_size, cgroup;
};
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

pid_t container_fork(const struct container *c, int *inside)
{
    int fd = container_clone_fd(c);
    *inside = 0;
    if (fd >= 0) {
        struct clone_args2 ca = { .flags = CLONE_INTO_CGROUP, .exit_signal = SIGCHLD, .cgroup = (uint64_t)fd };
        pid_t pid = (pid_t)syscall(SYS_clone3, &ca, sizeof ca);
        int e = errno;
        if (pid != 0)
            close(fd);
        if (pid >= 0) {
            *inside = 1;
            return pid;
        }
        errno = e;      /* a kernel without it: the child moves itself */
    }
    return fork();
}

int container_enter(const struct container *c, int root_job)
{
    if (c->procs >= 0 && write(c->procs, "0", 1) != 1)
        return -1;
    return container_entered(c, root_job);
}

int container_entered(const struct container *c, int root_job)
{
    if (c->procs < 0)
        return 0;
    if (!root_job)
        return 0;       /* the cgroup files are root's: the job's user cannot write them */
    /* root without capabilities still owns them: in a mount namespace of its
     * own every cgroup file system is read-only to it (EROFS) */
    if (npoints < 0) {         /* container_note_points was not called before the fork */
        errno = EINVAL;
        return -1;
    }
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL) < 0)
        return -1;
    for (int i = 0; i < npoints; i++)
        if (mount(NULL, points[i], NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
            return -1;
    return 0;
}

int container_clone_fd(const struct container *c)
{
    if (c->procs < 0 || kind != V2)
        return -1;
    return open(c->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

/* ---- ending ---- */

static int write_file(const char *dir, const char *file, const char *text)
{
    char p[700];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    int fd = open(p, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = write(fd, text, strlen(text));
    int e = errno;
    close(fd);
    errno = e;
    return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* The pids in the cgroup.procs of dir (or, with dir NULL, of the directory
 * open on dirfd), malloc'd, *n of them, or NULL and -1 in *n.  Read from a
 * pid namespace, a process outside it is 0. */
static pid_t *read_pids_at(int dirfd, const char *dir, size_t *n)
{
    char p[700];
    snprintf(p, sizeof p, "%s/cgroup.procs", dir ? dir : ".");
    *n = 0;
    int fd = openat(dirfd, p, O_RDONLY | O_CLOEXEC);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "re");
    if (!f) {
        if (fd >= 0)
            close(fd);
        *n = (size_t)-1;
        return NULL;
    }
    pid_t *v = NULL;
    size_t room = 0;
    long pid;
    while (fscanf(f, "%ld", &pid) == 1) {
        if (*n == room) {
            pid_t *more = realloc(v, (room = room ? 2 * room : 64) * sizeof *v);
            if (!more)
                break;
            v = more;
        }
        v[(*n)++] = (pid_t)pid;
    }
    fclose(f);
    return v;
}

/* v2: until cgroup.events says "populated 0" (its change is a POLLPRI event). */
static int wait_empty_v2(const char *dir, double deadline)
{
    char p[700], buf[256];
    snprintf(p, sizeof p, "%s/cgroup.events", dir);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int r = -1;
    for (;;) {
        ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
        if (n < 0)
            break;
        buf[n] = '\0';
        if (strstr(buf, "populated 0")) {
            r = 0;
            break;
        }
        double left = deadline - now();
        if (left <= 0)
            break;
        struct pollfd pfd = { .fd = fd, .events = POLLPRI };
        if (poll(&pfd, 1, (int)(left * 1000) + 1) < 0 && errno != EINTR)
            break;
    }
    close(fd);
    return r;
}

/* Until each of the pids has ended (its pidfd readable), or the deadline. */
static void wait_pids(const pid_t *pid, size_t n, double deadline)
{
    for (size_t i = 0; i < n; i++) {
        int fd = (int)syscall(SYS_pidfd_open, pid[i], 0);
        if (fd < 0)
            continue;                   /* gone already */
        double left = deadline - now();
        struct pollfd pfd = { .fd = fd, .events = POLLIN };
        while (left > 0 && poll(&pfd, 1, (int)(left * 1000) + 1) < 0 && errno == EINTR)
            left = deadline - now();
        close(fd);
    }
}

/* v1 (or v2 without cgroup.kill): freeze, SIGKILL every pid, thaw, wait; until none is left. */
static int kill_loop(const char *dir, double deadline)
{
    int v1 = kind == V1;
    const char *freeze = v1 ? "freezer.state" : "cgroup.freeze";
    for (;;) {
        if (write_file(dir, freeze, v1 ? "FROZEN" : "1") < 0)
            return -1;
        size_t n;
        pid_t *pid = read_pids_at(AT_FDCWD, dir, &n);
        if (n == (size_t)-1)
            return -1;
        for (size_t i = 0; i < n; i++)
            kill(pid[i], SIGKILL);
        /* a frozen process dies only once thawed */
        if (write_file(dir, freeze, v1 ? "THAWED" : "0") < 0) {
            free(pid);
            return -1;
        }
        wait_pids(pid, n, deadline);
        free(pid);
        if (n == 0)
            return 0;
        if (now() > deadline)
            return -1;
    }
}

int container_dir(const struct container *c)
{
    return c->path[0] ? open(c->path, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
}

void container_kill_others(int dir)
{
    pid_t self = getpid();
    for (int round = 0; round < 64; round++) {
        size_t n, others = 0;
        pid_t *pid = read_pids_at(dir, NULL, &n);
        if (n == (size_t)-1)
            return;
        for (size_t i = 0; i < n; i++)
            if (pid[i] > 0 && pid[i] != self && kill(pid[i], SIGKILL) == 0)
                pid[others++] = pid[i];
        wait_pids(pid, others, now() + 1.0);
        free(pid);
        if (!others)
            return;
    }
}

static double wait_limit(void)
{
    const char *s = getenv("LATTICE_CONTAINER_WAIT");
    char *end;
    double v = s ? strtod(s, &end) : 0;
    return s && end != s && !*end && v > 0 && v <= 3600 ? v : 30;
}

int container_seal(struct container *c, char *why, size_t len)
{
    if (c->procs < 0)
        return 0;
    close(c->procs);
    c->procs = -1;
    double limit = wait_limit(), deadline = now() + limit;
    int r;
    if (kind == V2 && exists(c->path, "cgroup.kill"))
        r = write_file(c->path, "cgroup.kill", "1") == 0 ? wait_empty_v2(c->path, deadline) : -1;
    else
        r = kill_loop(c->path, deadline);
    /* empty: rmdir may still see a process on its way out for a moment */
    while (r == 0 && rmdir(c->path) < 0) {
        if (errno != EBUSY || now() > deadline) {
            r = -1;
            break;
        }
        struct timespec ms = { 0, 1000000 };
        nanosleep(&ms, NULL);
    }
    if (r == 0) {
        c->path[0] = '\0';
        leave();
        return 0;
    }
    int e = errno;
    size_t n;
    pid_t *pid = read_pids_at(AT_FDCWD, c->path, &n);
    if (n == (size_t)-1 || n == 0)
        snprintf(why, len, "cannot end the job's container %s: %s", c->path, strerror(e));
    else {
        int at = snprintf(why, len, "%zu process(es) of the job still alive %.0f s after SIGKILL in %s (pids",
                          n, limit, c->path);
        for (size_t i = 0; i < n && i < 8 && at > 0 && (size_t)at < len; i++)
            at += snprintf(why + at, len - (size_t)at, " %d", (int)pid[i]);
        if (at > 0 && (size_t)at < len)
            snprintf(why + at, len - (size_t)at, "%s)", n > 8 ? " ..." : "");
    }
    free(pid);
    c->path[0] = '\0';
    return -1;
}
