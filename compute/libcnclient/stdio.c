/*
 * stdio.c - FILE streams over shipped descriptors.
 *
 * glibc's FILE functions do their I/O with internal __open/__read/__write
 * that LD_PRELOAD cannot catch.  So fopen/fdopen/freopen of a shipped file
 * build the FILE with fopencookie() whose callbacks are our own read/write/
 * lseek/close on the app-visible descriptor, and at start-up stdin, stdout
 * and stderr are replaced by such streams on app descriptors 0, 1, 2 (which
 * stand for remote 0, 1, 2).  stdout is fully buffered (it is never a
 * terminal), stderr unbuffered; exit() flushes all streams.
 *
 * fileno(): a cookie FILE has _fileno == -2, so glibc's fileno() would fail.
 * We store the app descriptor in _fileno (a public field of struct _IO_FILE);
 * glibc does I/O on cookie streams only through the callbacks, and treats
 * any _fileno other than -1 as "open", so this is safe.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client.h"

/* glibc libio flag bits (stable ABI, not in public headers) */
#define IO_NO_READS      0x0004
#define IO_NO_WRITES     0x0008
#define IO_IS_APPENDING  0x1000

struct cookie {
    int fd;
    FILE *fp;
    struct cookie *next;    /* registry: which FILEs are ours (freopen) */
};

static struct cookie *streams;
static pthread_mutex_t slock = PTHREAD_MUTEX_INITIALIZER;

static ssize_t ck_read(void *c, char *buf, size_t n)
{
    return read(((struct cookie *)c)->fd, buf, n);
}

/* must write everything or report an error with 0 (never negative) */
static ssize_t ck_write(void *c, const char *buf, size_t n)
{
    size_t done = 0;
    while (done < n) {
        ssize_t r = write(((struct cookie *)c)->fd, buf + done, n - done);
        if (r <= 0)
            break;
        done += (size_t)r;
    }
    return (ssize_t)done;
}

static int ck_seek(void *c, off64_t *off, int whence)
{
    off_t r = lseek(((struct cookie *)c)->fd, *off, whence);
    if (r < 0)
        return -1;
    *off = r;
    return 0;
}

static int ck_close(void *c)
{
    struct cookie *ck = c;
    pthread_mutex_lock(&slock);
    for (struct cookie **p = &streams; *p; p = &(*p)->next)
        if (*p == ck) {
            *p = ck->next;
            break;
        }
    pthread_mutex_unlock(&slock);
    int r = close(ck->fd);
    free(ck);
    return r;
}

static struct cookie *find(FILE *fp)
{
    pthread_mutex_lock(&slock);
    struct cookie *c = streams;
    while (c && c->fp != fp)
        c = c->next;
    pthread_mutex_unlock(&slock);
    return c;
}

/* fopen mode -> open flags and the plain mode fopencookie understands */
static int parse_mode(const char *mode, int *flags, char plain[3])
{
    int acc, f;
    switch (mode[0]) {
    case 'r': acc = O_RDONLY; f = 0; break;
    case 'w': acc = O_WRONLY; f = O_CREAT | O_TRUNC; break;
    case 'a': acc = O_WRONLY; f = O_CREAT | O_APPEND; break;
    default: return lat_fail(EINVAL);
    }
    int plus = 0;
    for (const char *p = mode + 1; *p && *p != ','; p++) {  /* ",ccs=" is ignored */
        switch (*p) {
        case '+': plus = 1; acc = O_RDWR; break;
        case 'x': f |= O_EXCL; break;
        case 'e': f |= O_CLOEXEC; break;
        default: break;  /* b, t, m, c: no meaning here */
        }
    }
    *flags = acc | f;
    plain[0] = mode[0];
    plain[1] = plus ? '+' : '\0';
    plain[2] = '\0';
    return 0;
}

static FILE *make_stream(int fd, const char *plain)
{
    struct cookie *c = malloc(sizeof *c);
    if (!c) {
        lat_fail(ENOMEM);
        return NULL;
    }
    cookie_io_functions_t io = { ck_read, ck_write, ck_seek, ck_close };
    FILE *fp = fopencookie(c, plain, io);
    if (!fp) {
        free(c);
        return NULL;
    }
    fp->_fileno = fd;
    c->fd = fd;
    c->fp = fp;
    pthread_mutex_lock(&slock);
    c->next = streams;
    streams = c;
    pthread_mutex_unlock(&slock);
    return fp;
}

static FILE *do_fopen(const char *path, const char *mode)
{
    int rd;
    switch (lat_path_route(AT_FDCWD, path, &rd)) {
    case LAT_SHIP:
        break;
    case LAT_LOCAL:
        return REAL(fopen)(path, mode);
    default:
        return NULL;
    }
    int flags;
    char plain[3];
    if (parse_mode(mode, &flags, plain) < 0)
        return NULL;
    int fd = open(path, flags, 0666);
    if (fd < 0)
        return NULL;
    FILE *fp = make_stream(fd, plain);
    if (!fp) {
        int e = errno;
        close(fd);
        errno = e;
    }
    return fp;
}

FILE *fopen(const char *path, const char *mode) { return do_fopen(path, mode); }
FILE *fopen64(const char *path, const char *mode) { return do_fopen(path, mode); }

FILE *fdopen(int fd, const char *mode)
{
    int r;
    switch (lat_fd_route(fd, &r)) {
    case LAT_SHIP:
        break;
    case LAT_HIDE:
        lat_fail(EBADF);
        return NULL;
    case LAT_LOCAL:
        return REAL(fdopen)(fd, mode);
    }
    int flags;
    char plain[3];
    if (parse_mode(mode, &flags, plain) < 0)
        return NULL;
    /* as glibc: the mode must fit the descriptor; "a" turns on O_APPEND */
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0)
        return NULL;
    int want = flags & O_ACCMODE, have = fl & O_ACCMODE;
    if (have != O_RDWR && have != want) {
        lat_fail(EINVAL);
        return NULL;
    }
    if ((flags & O_APPEND) && !(fl & O_APPEND) && fcntl(fd, F_SETFL, fl | O_APPEND) < 0)
        return NULL;
    if (flags & O_CLOEXEC)
        shipc_fd_set_cloexec(fd, 1);
    return make_stream(fd, plain);
}

/* freopen on one of our streams keeps the FILE and its descriptor number
 * (glibc does the same: freopen(..., stdout) still writes to fd 1). */
static FILE *reopen_ours(struct cookie *c, const char *path, const char *mode, FILE *fp)
{
    int flags;
    char plain[3];
    if (parse_mode(mode, &flags, plain) < 0)
        return NULL;
    fflush(fp);
    if (path) {
        int nfd = open(path, flags, 0666);
        if (nfd < 0)
            return NULL;
        if (nfd != c->fd) {
            if (dup3(nfd, c->fd, flags & O_CLOEXEC) < 0) {
                int e = errno;
                close(nfd);
                errno = e;
                return NULL;
            }
            close(nfd);
        }
    }
    flockfile(fp);
    fp->_flags &= ~(IO_NO_READS | IO_NO_WRITES | IO_IS_APPENDING);
    if (plain[1] != '+')
        fp->_flags |= plain[0] == 'r' ? IO_NO_WRITES : IO_NO_READS;
    if (plain[0] == 'a')
        fp->_flags |= IO_IS_APPENDING;
    clearerr_unlocked(fp);
    funlockfile(fp);
    return fp;
}

static FILE *do_freopen(const char *path, const char *mode, FILE *fp)
{
    if (!lat_active())
        return REAL(freopen)(path, mode, fp);
    struct cookie *c = find(fp);
    if (c)
        return reopen_ours(c, path, mode, fp);
    int rd;
    switch (path ? lat_path_route(AT_FDCWD, path, &rd) : LAT_LOCAL) {
    case LAT_LOCAL:
        return REAL(freopen)(path, mode, fp);
    case LAT_SHIP:
        /* a glibc stream cannot be turned into a cookie stream in place */
        lat_fail(ENOTSUP);
        return NULL;
    default:
        return NULL;
    }
}

FILE *freopen(const char *path, const char *mode, FILE *fp) { return do_freopen(path, mode, fp); }
FILE *freopen64(const char *path, const char *mode, FILE *fp) { return do_freopen(path, mode, fp); }

void lat_stdio_init(void)
{
    /* anything a constructor printed before us goes out the old way first */
    fflush(stdout);
    fflush(stderr);
    /* only those that stand for the rank's (startfds.c) */
    FILE *in = shipc_fd_is_shipped(0) ? make_stream(0, "r") : NULL;
    FILE *out = shipc_fd_is_shipped(1) ? make_stream(1, "w") : NULL;
    FILE *err = shipc_fd_is_shipped(2) ? make_stream(2, "w") : NULL;
    if (in)
        stdin = in;
    if (out)
        stdout = out;
    if (err) {
        setvbuf(err, NULL, _IONBF, 0);
        stderr = err;
    }
}
