/*
 * libcache.c - the life of the running job's library cache directory on
 * the compute host (compute/cnk/libcache.c fills and uses it).
 *
 * /dev/shm/lattice-libcache-PID (PID: this ciod's monitor; cnk finds it
 * with SO_PEERCRED on its PROC connection) exists exactly while a job runs:
 * made by the job's I/O worker, as the owner, mode 0700, before the push;
 * emptied and removed by the worker when the job ends and again by the
 * monitor once the worker is reaped (however it ended), and at shutdown; a
 * new ciod removes those of ciods that are gone.  /dev/shm is world-writable, so
 * nothing found there is trusted: a path that already exists is left alone
 * and the job runs without a cache (cnk copies, as before); removal never
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

static char dir[64];                    /* the monitor's, "" before libcache_init */
static pid_t monitor;

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

void libcache_job_start(uint64_t job)
{
    const char *sw = getenv("LATTICE_LIBCACHE");

    if ((sw && !strcmp(sw, "0")) || !dir[0])
        return;
    /* in a sticky directory: made by the owner, nobody else can swap it */
    if (mkdir(dir, 0700) < 0)
        ras_event(RAS_WARNING, cfg.location, "job %" PRIu64 ": library cache %s: %s%s; libraries are "
                  "copied into each rank", job, dir, strerror(errno),
                  errno == EEXIST ? " (not made by this I/O node: left alone)" : "");
}

void libcache_job_end(void)
{
    if (dir[0])
        remove_dir(dir);
}

/* At exit (shutdown): no locks, the process is going. */
static void at_exit(void)
{
    if (dir[0] && getpid() == monitor)
        remove_dir(dir);
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

    monitor = getpid();
    snprintf(dir, sizeof(dir), SHM_DIR "/" PREFIX "%ld", (long)monitor);
    atexit(at_exit);
    if (!d)
        return;
    while ((e = readdir(d))) {
        char *end, path[sizeof(dir) + 256];
        if (strncmp(e->d_name, PREFIX, strlen(PREFIX)))
            continue;
        long pid = strtol(e->d_name + strlen(PREFIX), &end, 10);
        if (*end || pid <= 0 || (pid != (long)getpid() && ciod_alive(pid)))   /* ours: not made in this life */
            continue;
        snprintf(path, sizeof(path), SHM_DIR "/%s", e->d_name);
        logmsg("removing the library cache %s of a ciod that is gone", path);
        remove_dir(path);
    }
    closedir(d);
}
