/*
 * libcache.c - the life of the running job's library cache directory on
 * the compute host (compute/cnk/libcache.c fills and uses it).
 *
 * /dev/shm/lattice-libcache-PID (PID: this ciod; cnk finds it with
 * SO_PEERCRED on its PROC connection) exists exactly while a job runs:
 * made at registration with mode 0700 for the job's user, emptied and
 * removed when the job ends, however it ends, and at shutdown; a new ciod
 * removes those of ciods that are gone.  /dev/shm is world-writable, so
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

static char dir[64];                    /* the current job's, "" if none */
static pthread_mutex_t dir_lock = PTHREAD_MUTEX_INITIALIZER;

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

void libcache_job_start(uint64_t job, uint32_t uid, uint32_t gid)
{
    const char *sw = getenv("LATTICE_LIBCACHE");
    char path[sizeof(dir)];
    int fd;

    if (sw && !strcmp(sw, "0"))
        return;
    snprintf(path, sizeof(path), SHM_DIR "/" PREFIX "%ld", (long)getpid());
    if (mkdir(path, 0700) < 0) {
        ras_event(RAS_WARNING, cfg.location, "job %" PRIu64 ": library cache %s: %s%s; libraries are "
                  "copied into each rank", job, path, strerror(errno),
                  errno == EEXIST ? " (not made by this I/O node: left alone)" : "");
        return;
    }
    /* ours now: made by us, and in a sticky directory nobody else can swap it */
    fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fchown(fd, uid, gid) < 0 || fchmod(fd, 0700) < 0) {
        logmsg("job %" PRIu64 ": library cache %s: %s; libraries are copied into each rank", job, path,
               strerror(errno));
        if (fd >= 0)
            close(fd);
        rmdir(path);
        return;
    }
    close(fd);
    pthread_mutex_lock(&dir_lock);
    memcpy(dir, path, sizeof(dir));
    pthread_mutex_unlock(&dir_lock);
}

void libcache_job_end(void)
{
    char path[sizeof(dir)];

    pthread_mutex_lock(&dir_lock);
    memcpy(path, dir, sizeof(dir));
    dir[0] = '\0';
    pthread_mutex_unlock(&dir_lock);
    if (path[0])
        remove_dir(path);
}

/* At exit (shutdown): no locks, the process is going. */
static void at_exit(void)
{
    if (dir[0])
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
