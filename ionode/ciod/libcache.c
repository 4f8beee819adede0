/*
 * libcache.c - the life of the library cache directories on the compute
 * host (compute/cnk/libcache.c fills and uses them).
 *
 * /dev/shm/lattice-libcache-mKEY-UID (KEY: the machine's, from this ciod's
 * unix socket address, protocol/lattice/libcache_name.h, which cnk derives
 * from the same address with getpeername on its PROC connection; UID: the
 * job's user) is made by the job's I/O worker, as the owner, mode 0700,
 * before the push, and kept for that user's next job of this machine on
 * this host, in this block or a later one: a library fetched once stays
 * fetched (cnk names each file by its version, so a changed file is
 * fetched anew, never served stale).  The worker holds a shared flock on
 * it while its job runs: "in use".  It goes when a job of another user of
 * this machine starts here (one user's cache at a time: the host's memory
 * is the job's), unless a job of that other user still runs in it; when
 * it grows past CAP (emptied by the next job); and when a ciod of another
 * machine starts on this host and no job runs in it (the machine may be
 * gone; nothing else would remove it).  A cache of the older names
 * (PID-UID, PID) goes when a new ciod starts and its ciod is gone.
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
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <lattice/libcache_name.h>

#define SHM_DIR     "/dev/shm"
#define PREFIX      "lattice-libcache-"
#define MAX_DEPTH   4                   /* deeper than cnk makes: left for the host's tmpfs */
#define CAP         (1ll << 30)         /* bytes kept between jobs: old versions pile up */

static pid_t monitor;                   /* 0 before libcache_init */
static uint32_t key;                    /* this machine's (lat_libcache_key); 0: no cache */
static int held = -1;                   /* the worker: its job's cache, flocked shared */

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
    char name[LAT_LIBCACHE_MAX];
    lat_libcache_name(name, key, (uint32_t)uid);
    snprintf(path, len, "%s", name);
}

/* A cache's name: new (machine key, user) or old (ciod pid, user or none).
 * False: not one of ours. */
static bool parse(const char *name, uint64_t *k, long *pid, unsigned long *uid)
{
    const char *prefix = LAT_LIBCACHE_PREFIX + strlen(SHM_DIR "/");
    char *end;

    if (strncmp(name, prefix, strlen(prefix)))
        return false;
    name += strlen(prefix);
    *k = 0, *pid = 0, *uid = (unsigned long)-1;
    if (name[0] == 'm') {
        for (int i = 1; i <= 8; i++)
            if (!strchr("0123456789abcdef", name[i]) || !name[i])
                return false;
        *k = strtoull(name + 1, &end, 16);
        if (*end != '-' || end != name + 9)
            return false;
        *uid = strtoul(end + 1, &end, 10);
        return *end == '\0' && end[-1] != '-';
    }
    *pid = strtol(name, &end, 10);
    if (*end == '-')
        *uid = strtoul(end + 1, &end, 10);
    return *end == '\0' && *pid > 0;
}

/* Remove the directory unless a job runs in it (its worker's shared
 * flock), holding the lock meanwhile: a worker that opened it waits, then
 * finds it unlinked and makes a new one.  What is not a directory is not
 * ours: left alone. */
static void remove_unused(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return;
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
        int sub = dup(fd);
        if (sub >= 0)
            empty(sub, 0);
        if (rmdir(path) < 0 && errno != ENOENT)
            logmsg("library cache %s: cannot remove: %s", path, strerror(errno));
    }
    close(fd);                          /* the lock goes with it */
}

/* Remove this machine's caches but uid's, except those a job runs in. */
static void remove_others(uid_t keep)
{
    DIR *d = opendir(SHM_DIR);
    struct dirent *e;
    uint64_t k;
    long pid;
    unsigned long uid;

    if (!d)
        return;
    while ((e = readdir(d))) {
        char path[300];
        if (!parse(e->d_name, &k, &pid, &uid) || !k || k != key || uid == (unsigned long)keep)
            continue;
        snprintf(path, sizeof(path), SHM_DIR "/%s", e->d_name);
        remove_unused(path);
    }
    closedir(d);
}

void libcache_job_user(uid_t uid)
{
    if (monitor && key)
        remove_others(uid);
}

void libcache_job_start(uint64_t job)
{
    const char *sw = getenv("LATTICE_LIBCACHE");
    char dir[LAT_LIBCACHE_MAX];
    struct stat st;

    if ((sw && !strcmp(sw, "0")) || !monitor || !key)
        return;
    dir_of(dir, sizeof(dir), getuid());
    int e = 0, made = 0;
    for (int tries = 0; tries < 3; tries++) {
        /* in a sticky directory: made by the owner, nobody else can swap it */
        made = mkdir(dir, 0700) == 0;
        e = made ? 0 : errno;
        int fd = made || e == EEXIST ? open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : -1;
        if (fd < 0) {
            e = made ? errno : e;
            break;
        }
        if (fstat(fd, &st) < 0 || st.st_uid != getuid() || (st.st_mode & 07777) != 0700) {
            close(fd);
            e = EEXIST, made = 0;
            break;
        }
        /* shared while the job runs; a remover holds it exclusive until the
         * directory is gone (then make a new one).  Never blocking: the
         * user may hold it himself; after a second the job goes on
         * without the lock (a remover may then empty it: cnk copies). */
        int locked = 0;
        for (int i = 0; i < 200 && !(locked = flock(fd, LOCK_SH | LOCK_NB) == 0); i++)
            usleep(5000);
        if (fstat(fd, &st) < 0 || st.st_nlink == 0) {
            close(fd);
            continue;
        }
        if (!locked) {
            close(fd);
            return;
        }
        /* past CAP and no other job in it (ours is the only one on this I/O
         * node): emptied, as nothing maps it now.  A conversion drops the
         * shared lock first, even when it fails: taken again after. */
        if (!made && usage(fd) > CAP) {
            if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
                int sub = dup(fd);
                if (sub >= 0)
                    empty(sub, 0);
            }
            flock(fd, LOCK_SH | LOCK_NB);
        }
        held = fd;                      /* until the worker ends with its job */
        return;
    }
    ras_job_event(job, RAS_WARNING, cfg.location, "job %" PRIu64 ": library cache %s: %s%s; libraries are "
              "copied into each rank", job, dir, strerror(e ? e : EAGAIN),
              e == EEXIST ? " (not this user's: left alone)" : "");
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

/* This machine's key, from the unix address we listen on. */
static uint32_t our_key(void)
{
    const char *a[] = { cfg.listen, cfg.listen_also };
    for (size_t i = 0; i < 2; i++)
        if (a[i] && !strncmp(a[i], "unix:", 5))
            return lat_libcache_key(a[i] + 5);
    return 0;
}

void libcache_init(void)
{
    DIR *d = opendir(SHM_DIR);
    struct dirent *e;
    uint64_t k;
    long pid;
    unsigned long uid;

    monitor = getpid();
    key = our_key();
    if (!d)
        return;
    while ((e = readdir(d))) {
        char path[300];
        if (!parse(e->d_name, &k, &pid, &uid))
            continue;
        if (k ? k == key : ciod_alive(pid))     /* this machine's: kept for its next job */
            continue;
        snprintf(path, sizeof(path), SHM_DIR "/%s", e->d_name);
        if (k) {
            remove_unused(path);
            continue;
        }
        logmsg("removing the library cache %s of a ciod that is gone", path);
        remove_dir(path);
    }
    closedir(d);
}
