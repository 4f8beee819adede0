/*
 * dir.c - directory streams on the I/O node.
 *
 * glibc's opendir/readdir use its internal __open/__getdents64, which
 * LD_PRELOAD cannot catch, so shipped directories get our own DIR: a
 * struct starting with a magic number (glibc's DIR starts with a small fd
 * and a lock word, which can never equal it), filled by shipped getdents64.
 * Local directories (/proc...) stay glibc's.  On x86-64 struct dirent and
 * struct dirent64 are the same layout, and the kernel's linux_dirent64 too.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "client.h"

_Static_assert(sizeof(struct dirent) == sizeof(struct dirent64), "x86-64 dirent layout");

#define DIR_MAGIC 0x314449525454414cull  /* "LATTDIR1" */
#define DIRENT_HEAD offsetof(struct dirent64, d_name)  /* 19: ino, off, reclen, type */

struct lat_dir {
    uint64_t magic;
    int fd;                     /* app-visible descriptor, owned by the stream */
    pthread_mutex_t lock;
    size_t pos, len;            /* unread records in buf */
    long last_off;              /* d_off of the last entry returned (telldir) */
    struct dirent64 ent;        /* what readdir returns */
    _Alignas(8) char buf[32768];
};

static struct lat_dir *ours(DIR *d)
{
    struct lat_dir *ld = (struct lat_dir *)d;
    return ld && ld->magic == DIR_MAGIC ? ld : NULL;
}

static DIR *make_dir(int fd)
{
    struct lat_dir *ld = calloc(1, sizeof *ld);
    if (!ld) {
        close(fd);
        lat_fail(ENOMEM);
        return NULL;
    }
    ld->magic = DIR_MAGIC;
    ld->fd = fd;
    pthread_mutex_init(&ld->lock, NULL);
    return (DIR *)ld;
}

DIR *opendir(const char *path)
{
    int rd;
    switch (lat_path_route(AT_FDCWD, path, &rd)) {
    case LAT_SHIP: {
        int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        return fd < 0 ? NULL : make_dir(fd);
    }
    case LAT_LOCAL:
        return REAL(opendir)(path);
    default:
        return NULL;
    }
}

DIR *fdopendir(int fd)
{
    int r;
    switch (lat_fd_route(fd, &r)) {
    case LAT_SHIP: {
        struct stat st;
        if (fstat(fd, &st) < 0)
            return NULL;
        if (!S_ISDIR(st.st_mode)) {
            lat_fail(ENOTDIR);
            return NULL;
        }
        return make_dir(fd);
    }
    case LAT_HIDE:
        lat_fail(EBADF);
        return NULL;
    case LAT_LOCAL:
        break;
    }
    return REAL(fdopendir)(fd);
}

/* Next record, or NULL at the end (errno unchanged) or on error. */
static struct dirent64 *next_entry(struct lat_dir *ld)
{
    if (ld->pos >= ld->len) {
        long n = lat_sys(SYS_getdents64, ld->fd, (long)ld->buf, sizeof ld->buf, 0, 0, 0);
        if (n <= 0)
            return NULL;
        ld->pos = 0;
        ld->len = (size_t)n;
    }
    const char *rec = ld->buf + ld->pos;
    struct dirent64 head;
    memcpy(&head, rec, DIRENT_HEAD);
    if (head.d_reclen <= DIRENT_HEAD || head.d_reclen > ld->len - ld->pos) {
        ld->pos = ld->len;
        lat_fail(EIO);  /* malformed reply */
        return NULL;
    }
    size_t namelen = strnlen(rec + DIRENT_HEAD, head.d_reclen - DIRENT_HEAD);
    if (namelen >= sizeof ld->ent.d_name)
        namelen = sizeof ld->ent.d_name - 1;
    memset(&ld->ent, 0, sizeof ld->ent);
    memcpy(&ld->ent, &head, DIRENT_HEAD);
    ld->ent.d_reclen = sizeof ld->ent;
    memcpy(ld->ent.d_name, rec + DIRENT_HEAD, namelen);
    ld->pos += head.d_reclen;
    ld->last_off = (long)head.d_off;
    return &ld->ent;
}

struct dirent64 *readdir64(DIR *d)
{
    struct lat_dir *ld = ours(d);
    if (!ld)
        return REAL(readdir64)(d);
    pthread_mutex_lock(&ld->lock);
    struct dirent64 *e = next_entry(ld);
    pthread_mutex_unlock(&ld->lock);
    return e;
}

struct dirent *readdir(DIR *d)
{
    if (!ours(d))
        return REAL(readdir)(d);
    return (struct dirent *)readdir64(d);
}

/* deprecated, but still called by old code */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

int readdir64_r(DIR *d, struct dirent64 *entry, struct dirent64 **result)
{
    struct lat_dir *ld = ours(d);
    if (!ld)
        return REAL(readdir64_r)(d, entry, result);
    int saved = errno, err = 0;
    errno = 0;
    pthread_mutex_lock(&ld->lock);
    struct dirent64 *e = next_entry(ld);
    if (e)
        memcpy(entry, e, DIRENT_HEAD + strlen(e->d_name) + 1);
    else
        err = errno;
    pthread_mutex_unlock(&ld->lock);
    *result = e ? entry : NULL;
    errno = saved;
    return err;
}

int readdir_r(DIR *d, struct dirent *entry, struct dirent **result)
{
    if (!ours(d))
        return REAL(readdir_r)(d, entry, result);
    return readdir64_r(d, (struct dirent64 *)entry, (struct dirent64 **)result);
}

int closedir(DIR *d)
{
    struct lat_dir *ld = ours(d);
    if (!ld)
        return REAL(closedir)(d);
    int fd = ld->fd;
    ld->magic = 0;
    pthread_mutex_destroy(&ld->lock);
    free(ld);
    return close(fd);
}

void rewinddir(DIR *d)
{
    struct lat_dir *ld = ours(d);
    if (!ld) {
        REAL(rewinddir)(d);
        return;
    }
    pthread_mutex_lock(&ld->lock);
    lseek(ld->fd, 0, SEEK_SET);
    ld->pos = ld->len = 0;
    ld->last_off = 0;
    pthread_mutex_unlock(&ld->lock);
}

void seekdir(DIR *d, long off)
{
    struct lat_dir *ld = ours(d);
    if (!ld) {
        REAL(seekdir)(d, off);
        return;
    }
    pthread_mutex_lock(&ld->lock);
    lseek(ld->fd, off, SEEK_SET);
    ld->pos = ld->len = 0;
    ld->last_off = off;
    pthread_mutex_unlock(&ld->lock);
}

long telldir(DIR *d)
{
    struct lat_dir *ld = ours(d);
    if (!ld)
        return REAL(telldir)(d);
    pthread_mutex_lock(&ld->lock);
    long off = ld->last_off;
    pthread_mutex_unlock(&ld->lock);
    return off;
}

int dirfd(DIR *d)
{
    struct lat_dir *ld = ours(d);
    return ld ? ld->fd : REAL(dirfd)(d);
}

/* scandir: glibc's reads the directory with its internal calls, so shipped
 * directories get this one, built on the stream above. */
struct sort_ctx {
    int (*cmp)(const struct dirent64 **, const struct dirent64 **);
};

static int sort_tramp(const void *a, const void *b, void *ctx)
{
    return ((struct sort_ctx *)ctx)->cmp((const struct dirent64 **)a, (const struct dirent64 **)b);
}

static int scan(const char *path, struct dirent64 ***list, int (*filter)(const struct dirent64 *),
                int (*cmp)(const struct dirent64 **, const struct dirent64 **))
{
    DIR *d = opendir(path);
    if (!d)
        return -1;
    struct dirent64 **v = NULL;
    size_t n = 0, cap = 0;
    int saved = errno;
    errno = 0;
    for (struct dirent64 *e; (e = readdir64(d)) != NULL;) {
        if (filter && !filter(e))
            continue;
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            struct dirent64 **nv = realloc(v, cap * sizeof *v);
            if (!nv)
                goto fail;
            v = nv;
        }
        size_t sz = DIRENT_HEAD + strlen(e->d_name) + 1;
        if (!(v[n] = malloc(sz)))
            goto fail;
        memcpy(v[n++], e, sz);
        errno = 0;
    }
    if (errno)
        goto fail;
    closedir(d);
    if (cmp && n > 1) {
        struct sort_ctx ctx = { cmp };
        qsort_r(v, n, sizeof *v, sort_tramp, &ctx);
    }
    *list = v;
    errno = saved;
    return (int)n;
fail:;
    int e = errno ? errno : ENOMEM;
    while (n)
        free(v[--n]);
    free(v);
    closedir(d);
    return lat_fail(e);
}

int scandir64(const char *path, struct dirent64 ***list, int (*filter)(const struct dirent64 *),
              int (*cmp)(const struct dirent64 **, const struct dirent64 **))
{
    int rd;
    switch (lat_path_route(AT_FDCWD, path, &rd)) {
    case LAT_SHIP:
        return scan(path, list, filter, cmp);
    case LAT_LOCAL:
        return REAL(scandir64)(path, list, filter, cmp);
    default:
        return -1;
    }
}

/* The identical layouts let scandir reuse the 64-bit version; its callbacks
 * go through thread-local trampolines (no function pointer casts). */
static __thread int (*tl_filter)(const struct dirent *);
static __thread int (*tl_cmp)(const struct dirent **, const struct dirent **);

static int filter_tramp(const struct dirent64 *e) { return tl_filter((const struct dirent *)e); }
static int cmp_tramp(const struct dirent64 **a, const struct dirent64 **b)
{
    return tl_cmp((const struct dirent **)a, (const struct dirent **)b);
}

int scandir(const char *path, struct dirent ***list, int (*filter)(const struct dirent *),
            int (*cmp)(const struct dirent **, const struct dirent **))
{
    int rd;
    switch (lat_path_route(AT_FDCWD, path, &rd)) {
    case LAT_SHIP:
        tl_filter = filter;
        tl_cmp = cmp;
        return scan(path, (struct dirent64 ***)list, filter ? filter_tramp : NULL, cmp ? cmp_tramp : NULL);
    case LAT_LOCAL:
        return REAL(scandir)(path, list, filter, cmp);
    default:
        return -1;
    }
}
