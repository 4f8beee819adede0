/*
 * libcache.c - the life of the library cache directories on the compute
 * host (compute/cnk/libcache.c fills and uses them).
 *
 * /dev/shm/lattice-libcache-PID-UID (PID: this ciod's monitor, which cnk
 * finds with SO_PEERCRED on its PROC connection; UID: the job's user) is
 * made by the job's I/O worker, as the owner, mode 0700, before the push,
 * and kept for that user's next job on this I/O node: a library fetched
 * once stays fetched (cnk names each file by its version, so a changed
 * file is fetched anew, never served stale).  It goes when a job of
 * another user starts here (one user's cache at a time: the host's memory
 * is the block's), when it grows past CAP (emptied by the next job), at
 * shutdown, and, for a ciod that died, when a new ciod starts.
 * /dev/shm is world-writable, so nothing found there is trusted: a path
 * that exists and is not a 0700 directory of the user is left alone and
 * the job runs without a cache (cnk copies, as before); removal never
 * follows a symbolic link.  Placement is local today (ciod and its compute
 * nodes on one host); docs/architecture.md says what other hosts need.
 * LATTICE_LIBCACHE=0 in ciod's environment turns the cache off.
 */
#include "ciod.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SHM_DIR     "/dev/shm"
#define PREFIX      "lattice-libcache-"
#define MAX_DEPTH   4                   /* deeper than cnk makes: left for the host's tmpfs */
#define CAP         (1ll << 30)         /* bytes kept between jobs: old versions pile up */

static pid_t monitor;                   /* 0 before libcache_init */

/* Empty the directory open on fd (closed here), never following links. */
static void empty(int fd, int depth)
{
    DIR *d = fdopendir(fd);
    struct dirent *e;

    if (!d) {
        close(fd);
        return;
    }
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        if (unlinkat(fd, e->d_name, 0) == 0 || (errno != EISDIR && errno != EPERM))
            continue;
        int sub = depth < MAX_DEPTH ? openat(fd, e->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
        if (sub >= 0) {
            empty(sub, depth + 1);
            unlinkat(fd, e->d_name, AT_REMOVEDIR);
        }
    }
    closedir(d);
}

/* Bytes of the regular files directly in the directory open on fd. */
static long long usage(int fd)
{
    DIR *d = fdopendir(dup(fd));
    struct dirent *e;
    struct stat st;
    long long n = 0;

    if (!d)
        return 0;
    while ((e = readdir(d)))
        if (fstatat(fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode))
            n += (long long)st.st_blocks * 512;
    closedir(d);
    return n;
}

/* Remove SHM_DIR/name if it is a directory (a link is not followed). */
static void remove_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

    if (fd < 0)
        return;
    empty(fd, 0);
    if (rmdir(path) < 0 && errno != ENOENT)
        logmsg("library cache %s: cannot remove: %s", path, strerror(errno));
}

static void dir_of(char *path, size_t len, uid_t uid)
{
    snprintf(path, len, SHM_DIR "/" PREFIX "%ld-%u", (long)monitor, (unsigned)uid);
}

/* The cache's ciod pid and user from its name; false: not one of ours. */
static bool parse(const char *name, long *pid, unsigned long *uid)
{
    char *end;

    if (strncmp(name, PREFIX, strlen(PREFIX)))
        return false;
    *pid = strtol(name + strlen(PREFIX), &end, 10);
    if (*end == '\0')
        *uid = (unsigned long)-1;       /* an older ciod's per-job name */
    else if (*end == '-')
        *uid = strtoul(end + 1, &end, 10);
    return *end == '\0' && *pid > 0;
}

/* Remove this ciod's caches but uid's (all of them: uid -1). */
static void remove_ours(uid_t keep)
{
    DIR *d = opendir(SHM_DIR);
    struct dirent *e;
    long pid;
    unsigned long uid;

    if (!d)
        return;
    while ((e = readdir(d))) {
        char path[300];
        if (!parse(e->d_name, &pid, &uid) || pid != (long)monitor || uid == (unsigned long)keep)
            continue;
        snprintf(path, sizeof(path), SHM_DIR "/%s", e->d_name);
        remove_dir(path);
    }
    closedir(d);
}

void libcache_job_user(uid_t uid)
{
    if (monitor)
        remove_ours(uid);
}

void libcache_job_start(uint64_t job)
{
    const char *sw = getenv("LATTICE_LIBCACHE");
    char dir[64];
    struct stat st;

    if ((sw && !strcmp(sw, "0")) || !monitor)
        return;
    dir_of(dir, sizeof(dir), getuid());
    /* in a sticky directory: made by the owner, nobody else can swap it */
    if (mkdir(dir, 0700) == 0)
        return;
    int e = errno;
    int fd = e == EEXIST ? open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_uid == getuid() && (st.st_mode & 07777) == 0700) {
        if (usage(fd) > CAP)            /* no job of ours runs: nothing maps it now */
            remove_dir(dir), mkdir(dir, 0700);
        close(fd);
        return;
    }
    if (fd >= 0)
        close(fd);
    ras_job_event(job, RAS_WARNING, cfg.location, "job %" PRIu64 ": library cache %s: %s%s; libraries are "
              "copied into each rank", job, dir, strerror(e),
              e == EEXIST ? " (not this user's: left alone)" : "");
}

/* At exit (shutdown): no locks, the process is going. */
static void at_exit(void)
{
    if (monitor && getpid() == monitor)
        remove_ours((uid_t)-1);
}

/* Is pid a live ciod?  Then its directory is its own business. */
static bool ciod_alive(long pid)
{
    char p[64], comm[32] = "";
    snprintf(p, sizeof(p), "/proc/%ld/comm", pid);
    FILE *f = fopen(p, "re");
    if (!f)
        return false;
    bool alive = fgets(comm, sizeof(comm), f) && !strncmp(comm, "ciod", 4);
    fclose(f);
    return alive;
}

void libcache_init(void)
{
    DIR *d = opendir(SHM_DIR);
    struct dirent *e;
    long pid;
    unsigned long uid;

    monitor = getpid();
    atexit(at_exit);
    if (!d)
        return;
    while ((e = readdir(d))) {
        char path[300];
        if (!parse(e->d_name, &pid, &uid) || (pid != (long)monitor && ciod_alive(pid)))   /* ours: not made in this life */
            continue;
        snprintf(path, sizeof(path), SHM_DIR "/%s", e->d_name);
        logmsg("removing the library cache %s of a ciod that is gone", path);
        remove_dir(path);
    }
    closedir(d);
}
