/*
 * cnk_ship_harness.c - drives cnk's shipping handlers (compute/cnk/entry.c
 * over the shipping core compute/shipc/, linked with lib.c) in an ordinary
 * hosted process against a real ciod.  tests/unit/test_cnk_ship.py builds and runs it.
 *
 *   cnk_ship_harness CONN_FD WORK_DIR PHASE
 *
 * CONN_FD is a PROC connection, hello done (as cnode leaves it); WORK_DIR is
 * the job's cwd on the I/O node.  The harness's own cwd is an empty local
 * directory: a call that wrongly runs locally leaves a trace there.  Each
 * check calls a sys_* handler with a struct cnk_call, compares the result,
 * errno and class, and looks at WORK_DIR with libc (the same machine plays
 * the I/O node).  Prints "FAIL ..." per failed check; exits 1 if any.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/close_range.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <termios.h>
#include <unistd.h>

#include <lattice/wire.h>
#include <lattice/zoid_nr.h>

#include "cnk.h"

struct cnk_config cnk;

/* cnk's parts the core's entry (entry.c) reaches that are not linked here:
 * one thread; the waits with a signal mask run as they are. */
unsigned thread_alive(void) { return 1; }
static long as_is(struct cnk_call *c)
{
    long r = syscall(c->nr, c->a[0], c->a[1], c->a[2], c->a[3], c->a[4], c->a[5]);
    return r < 0 ? -errno : r;
}
long sys_ppoll(struct cnk_call *c) { return as_is(c); }
long sys_pselect6(struct cnk_call *c) { return as_is(c); }
long sys_epoll_pwait(struct cnk_call *c) { return as_is(c); }

/* ---- dispatch: every file call's handler, by system call number ---- */

struct handler {
    long nr;
    const char *name;
    cnk_handler fn;                 /* NULL: refused at once, not a ship.c handler */
};
/* The list's SHIPPED and REFUSED lines, with cnk's handlers (syscalls.h). */
#define SYS_lattice_zoid LAT_NR_ZOID
#define sys_lattice_zoid NULL           /* plugin.c is not linked: test_cnk_core.py runs it */
#define ROW(n, fn) { SYS_##n, #n, fn },
#define ROW_LOCAL(n, op)
#define ROW_OWN(n, op)
#define ROW_SOCKET(n, op)
#define ROW_SHIPPED(n, op) ROW(n, CNK_FN_SHIPPED(op))
#define ROW_REFUSED(n, op) ROW(n, CNK_FN_REFUSED(op))
static const struct handler handlers[] = {
#define SYS(name, cls, op, wire, trace, lx) ROW_##cls(name, op)
#include <lattice/syscalls.def>
#undef SYS
};
#define NHANDLERS (sizeof handlers / sizeof handlers[0])

static size_t handlers_linked(void)
{
    size_t n = 0;
    for (size_t i = 0; i < NHANDLERS; i++)
        n += handlers[i].fn != NULL;
    return n;
}

static int last_cls = -1;

static long dispatch(long nr, const long a[6])
{
    for (size_t i = 0; i < NHANDLERS; i++) {
        if (handlers[i].nr != nr || !handlers[i].fn)
            continue;
        struct cnk_call c = { .nr = nr, .cls = (enum cnk_class)77 };
        memcpy(c.a, a, sizeof c.a);
        long r = handlers[i].fn(&c);
        last_cls = (int)c.cls;
        return r;
    }
    fprintf(stderr, "no handler for %ld\n", nr);
    exit(2);
}

#define P(x) ((long)(uintptr_t)(x))
#define S(name, ...) dispatch(SYS_##name, (const long[6]){ __VA_ARGS__ })

/* ---- checks ---- */

enum { ANY = -1, LOC = CNK_LOCAL, SHIP = CNK_SHIPPED, UNSUP = CNK_UNSUPPORTED };
static int checks, failures;
static const char *work;

static void expect(int line, const char *what, long got, long want, int cls)
{
    int c = last_cls;
    checks++;
    if (got == want && (cls == ANY || c == cls))
        return;
    failures++;
    printf("FAIL line %d: %s = %ld (%s), class %d; want %ld (%s), class %d\n", line, what, got,
           got < 0 && got > -4096 ? strerror((int)-got) : "", c, want,
           want < 0 && want > -4096 ? strerror((int)-want) : "", cls);
}

static void ok(int line, const char *what, int cond)
{
    checks++;
    if (!cond) {
        failures++;
        printf("FAIL line %d: %s\n", line, what);
    }
}

#define EXPECT(expr, want, cls) expect(__LINE__, #expr, (expr), (want), (cls))
#define OK(cond) ok(__LINE__, #cond, (cond))

/* A result that must be a new descriptor (>= 0), shipped. */
static long fd_ok(int line, const char *what, long fd, int cls)
{
    expect(line, what, fd >= 0 ? 0 : fd, 0, cls);
    return fd;
}
#define FD(expr, cls) fd_ok(__LINE__, #expr, (expr), (cls))

/* ---- the I/O node's view (libc on the work directory) ---- */

static const char *W(const char *name)
{
    static char buf[8][4200];
    static int i;
    char *b = buf[i++ % 8];
    snprintf(b, sizeof buf[0], "%s/%s", work, name);
    return b;
}

static int exists(const char *abs)
{
    struct stat st;
    return lstat(abs, &st) == 0;
}

static long size_of(const char *abs)
{
    struct stat st;
    return stat(abs, &st) == 0 ? (long)st.st_size : -1;
}

static int content_is(const char *abs, const void *want, size_t len)
{
    char *buf = malloc(len + 1);
    int fd = open(abs, O_RDONLY);
    ssize_t n = fd < 0 ? -1 : read(fd, buf, len + 1);
    int same = n == (ssize_t)len && memcmp(buf, want, len) == 0;
    if (fd >= 0)
        close(fd);
    free(buf);
    return same;
}

static int is_placeholder(int fd)
{
    char link[64], target[64], proc[64];
    snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(proc, target, sizeof target - 1);
    if (n < 0)
        return 0;
    target[n] = '\0';
    snprintf(link, sizeof link, "%s", target);
    return strcmp(link, "/dev/null") == 0 && (fcntl(fd, F_GETFL) & O_PATH) != 0;
}

static int local_open(int fd)
{
    return fcntl(fd, F_GETFD) >= 0;
}

static int remote_of(int fd)
{
    int r = -1;
    return shipc_fd_route(fd, &r) == SHIPC_SHIP ? r : -1;
}

/* names in a linux_dirent64 buffer */
static int dirent_has(const char *buf, long len, const char *name)
{
    for (long off = 0; off < len;) {
        unsigned short reclen;
        memcpy(&reclen, buf + off + 16, 2);
        if (strcmp(buf + off + 19, name) == 0)
            return 1;
        off += reclen;
    }
    return 0;
}

/* ---- phase: files (the breadth of shipped calls) ---- */

static void open_read_write(void)
{
    char buf[256];
    long fd = FD(S(open, P("f1"), O_CREAT | O_WRONLY | O_TRUNC, 0640), SHIP);
    OK(fd >= 3 && shipc_fd_is_shipped((int)fd) && is_placeholder((int)fd));
    OK(exists(W("f1")) && !exists("f1"));       /* on the I/O node, not here */
    EXPECT(S(write, fd, P("hello world\n"), 12), 12, SHIP);
    OK(content_is(W("f1"), "hello world\n", 12));
    EXPECT(S(lseek, fd, 0, SEEK_CUR), 12, SHIP);
    EXPECT(S(pwrite64, fd, P("HELLO"), 5, 0), 5, SHIP);
    EXPECT(S(pwrite64, fd, P("x"), 1, -1), -EINVAL, ANY);
    OK(content_is(W("f1"), "HELLO world\n", 12));
    EXPECT(S(read, fd, P(buf), 10), -EBADF, SHIP);         /* write-only, says the I/O node */
    EXPECT(S(close, fd), 0, SHIP);
    OK(!shipc_fd_is_shipped((int)fd) && !local_open((int)fd));
    EXPECT(S(close, fd), -EBADF, LOC);

    fd = FD(S(openat, AT_FDCWD, P("f1"), O_RDONLY | O_CLOEXEC), SHIP);
    EXPECT(S(fcntl, fd, F_GETFD), FD_CLOEXEC, LOC);
    memset(buf, 0, sizeof buf);
    EXPECT(S(read, fd, P(buf), 100), 12, SHIP);
    OK(memcmp(buf, "HELLO world\n", 12) == 0);
    EXPECT(S(read, fd, P(buf), 100), 0, SHIP);
    EXPECT(S(pread64, fd, P(buf), 5, 6), 5, SHIP);
    OK(memcmp(buf, "world", 5) == 0);
    EXPECT(S(lseek, fd, 2, SEEK_SET), 2, SHIP);
    EXPECT(S(read, fd, P(buf), 3), 3, SHIP);
    OK(memcmp(buf, "LLO", 3) == 0);
    EXPECT(S(read, fd, 0, 3), -EFAULT, SHIP);             /* bad buffer: drained, still in step */
    EXPECT(S(lseek, fd, 0, SEEK_CUR), 8, SHIP);
    EXPECT(S(close, fd), 0, SHIP);

    /* errors are the I/O node's, exactly */
    EXPECT(S(open, P("f1"), O_CREAT | O_EXCL | O_WRONLY, 0600), -EEXIST, SHIP);
    EXPECT(S(open, P("nope/x"), O_RDONLY), -ENOENT, SHIP);
    EXPECT(S(open, P("f1/x"), O_RDONLY), -ENOTDIR, SHIP);
    EXPECT(S(open, P("."), O_WRONLY), -EISDIR, SHIP);

    fd = FD(S(creat, P("c1"), 0644), SHIP);
    EXPECT(S(write, fd, P("c"), 1), 1, SHIP);
    EXPECT(S(close, fd), 0, SHIP);
    OK(content_is(W("c1"), "c", 1));
}

static void vectors(void)
{
    char a[8] = { 0 }, b[16] = { 0 };
    struct iovec w[3] = { { "ab", 2 }, { "", 0 }, { "cdef", 4 } };
    struct iovec r[2] = { { a, 2 }, { b, 10 } };
    long fd = FD(S(open, P("f2"), O_CREAT | O_RDWR | O_TRUNC, 0644), SHIP);

    EXPECT(S(writev, fd, P(w), 3), 6, SHIP);
    EXPECT(S(preadv, fd, P(r), 2, 1, 0), 5, SHIP);
    OK(memcmp(a, "bc", 2) == 0 && memcmp(b, "def", 3) == 0);
    EXPECT(S(pwritev, fd, P(w), 3, 10, 0), 6, SHIP);
    OK(size_of(W("f2")) == 16);
    EXPECT(S(lseek, fd, 0, SEEK_SET), 0, SHIP);
    EXPECT(S(preadv2, fd, P(r), 2, -1, 0, 0), 12, SHIP);  /* -1: the file position */
    EXPECT(S(lseek, fd, 0, SEEK_CUR), 12, SHIP);
    EXPECT(S(pwritev2, fd, P(w), 3, 16, 0, RWF_DSYNC), 6, SHIP);
    EXPECT(S(pwritev2, fd, P(w), 3, 16, 0, RWF_NOWAIT), -EOPNOTSUPP, LOC);
    EXPECT(S(preadv, fd, P(r), 2, -5, 0), -EINVAL, ANY);
    EXPECT(S(readv, fd, P(r), -1), -EINVAL, ANY);
    OK(size_of(W("f2")) == 22);
    EXPECT(S(close, fd), 0, SHIP);
}

static void stats(void)
{
    struct stat st, ref;
    struct statx stx;
    long fd = FD(S(open, P("f2"), O_RDONLY), SHIP);

    symlink("f2", W("lnk"));
    stat(W("f2"), &ref);
    memset(&st, 0, sizeof st);
    EXPECT(S(fstat, fd, P(&st)), 0, SHIP);
    OK(st.st_ino == ref.st_ino && st.st_dev == ref.st_dev && st.st_size == 22 &&
       st.st_mode == ref.st_mode && st.st_nlink == 1 && st.st_mtim.tv_nsec == ref.st_mtim.tv_nsec &&
       st.st_blksize == ref.st_blksize && st.st_blocks == ref.st_blocks);
    EXPECT(S(stat, P("f2"), P(&st)), 0, SHIP);
    OK(st.st_ino == ref.st_ino);
    EXPECT(S(stat, P("lnk"), P(&st)), 0, SHIP);
    OK(st.st_ino == ref.st_ino);
    EXPECT(S(lstat, P("lnk"), P(&st)), 0, SHIP);
    OK(S_ISLNK(st.st_mode));
    EXPECT(S(newfstatat, AT_FDCWD, P(W("f2")), P(&st), 0), 0, SHIP);
    OK(st.st_ino == ref.st_ino);
    EXPECT(S(newfstatat, fd, P(""), P(&st), AT_EMPTY_PATH), 0, SHIP);
    OK(st.st_ino == ref.st_ino);
    /* "" at AT_FDCWD is the working directory, which is the I/O node's */
    stat(work, &ref);
    EXPECT(S(newfstatat, AT_FDCWD, P(""), P(&st), AT_EMPTY_PATH), 0, SHIP);
    OK(st.st_ino == ref.st_ino && S_ISDIR(st.st_mode));
    EXPECT(S(stat, P("nope"), P(&st)), -ENOENT, SHIP);
    EXPECT(S(stat, P("f2/x"), P(&st)), -ENOTDIR, SHIP);

    stat(W("f2"), &ref);
    memset(&stx, 0, sizeof stx);
    EXPECT(S(statx, AT_FDCWD, P("f2"), 0, STATX_BASIC_STATS, P(&stx)), 0, SHIP);
    OK(stx.stx_ino == ref.st_ino && stx.stx_size == 22 && (stx.stx_mask & STATX_SIZE));
    memset(&stx, 0, sizeof stx);
    EXPECT(S(statx, fd, P(""), AT_EMPTY_PATH, STATX_BASIC_STATS, P(&stx)), 0, SHIP);
    OK(stx.stx_ino == ref.st_ino);
    EXPECT(S(statx, AT_FDCWD, P("nope"), 0, STATX_BASIC_STATS, P(&stx)), -ENOENT, SHIP);

    struct statfs sf, sref;
    statfs(work, &sref);
    memset(&sf, 0, sizeof sf);
    EXPECT(S(statfs, P("f2"), P(&sf)), 0, SHIP);
    OK(sf.f_type == sref.f_type && sf.f_bsize == sref.f_bsize && sf.f_blocks == sref.f_blocks &&
       memcmp(&sf.f_fsid, &sref.f_fsid, sizeof sf.f_fsid) == 0);
    memset(&sf, 0, sizeof sf);
    EXPECT(S(fstatfs, fd, P(&sf)), 0, SHIP);
    OK(sf.f_type == sref.f_type && sf.f_namelen == sref.f_namelen);
    EXPECT(S(statfs, P("nope"), P(&sf)), -ENOENT, SHIP);

    char buf[64] = { 0 };
    EXPECT(S(readlink, P("lnk"), P(buf), 64), 2, SHIP);
    OK(memcmp(buf, "f2", 2) == 0);
    EXPECT(S(readlinkat, AT_FDCWD, P("lnk"), P(buf), 1), 1, SHIP);
    EXPECT(S(readlink, P("f2"), P(buf), 64), -EINVAL, SHIP);
    EXPECT(S(readlink, P("lnk"), P(buf), 0), -EINVAL, ANY);

    EXPECT(S(access, P("f2"), R_OK), 0, SHIP);
    EXPECT(S(access, P("nope"), F_OK), -ENOENT, SHIP);
    EXPECT(S(faccessat, AT_FDCWD, P("f2"), W_OK), 0, SHIP);
    EXPECT(S(faccessat2, AT_FDCWD, P("lnk"), F_OK, AT_SYMLINK_NOFOLLOW), 0, SHIP);
    EXPECT(S(close, fd), 0, SHIP);
}

static void sizes_modes_times(void)
{
    struct stat st;
    long fd = FD(S(open, P("f2"), O_RDWR), SHIP);

    EXPECT(S(truncate, P("f2"), 3), 0, SHIP);
    OK(size_of(W("f2")) == 3);
    EXPECT(S(ftruncate, fd, 7), 0, SHIP);
    OK(size_of(W("f2")) == 7);
    EXPECT(S(truncate, P("nope"), 3), -ENOENT, SHIP);
    EXPECT(S(fsync, fd), 0, SHIP);
    EXPECT(S(fdatasync, fd), 0, SHIP);

    EXPECT(S(fchmod, fd, 0600), 0, SHIP);
    stat(W("f2"), &st);
    OK((st.st_mode & 07777) == 0600);
    EXPECT(S(chmod, P("f2"), 0644), 0, SHIP);
    stat(W("f2"), &st);
    OK((st.st_mode & 07777) == 0644);
    EXPECT(S(fchmodat, AT_FDCWD, P("f2"), 0640), 0, SHIP);
    stat(W("f2"), &st);
    OK((st.st_mode & 07777) == 0640);

    struct timespec ts[2] = { { 1000, 5 }, { 2000, 7 } };
    EXPECT(S(utimensat, AT_FDCWD, P("f2"), P(ts), 0), 0, SHIP);
    stat(W("f2"), &st);
    OK(st.st_atim.tv_sec == 1000 && st.st_mtim.tv_sec == 2000 && st.st_mtim.tv_nsec == 7);
    struct timespec ts2[2] = { { 0, UTIME_OMIT }, { 3000, 0 } };
    EXPECT(S(utimensat, fd, 0, P(ts2), 0), 0, SHIP);          /* NULL path: futimens */
    stat(W("f2"), &st);
    OK(st.st_atim.tv_sec == 1000 && st.st_mtim.tv_sec == 3000);
    EXPECT(S(utimensat, fd, 0, P(ts2), AT_SYMLINK_NOFOLLOW), -EINVAL, ANY);
    EXPECT(S(utimensat, AT_FDCWD, P("nope"), 0, 0), -ENOENT, SHIP);
    EXPECT(S(close, fd), 0, SHIP);
}

static void directories(void)
{
    char buf[4096];
    EXPECT(S(mkdir, P("d1"), 0755), 0, SHIP);
    OK(exists(W("d1")) && !exists("d1"));
    EXPECT(S(mkdir, P("d1"), 0755), -EEXIST, SHIP);
    EXPECT(S(mkdirat, AT_FDCWD, P("d1/sub"), 0700), 0, SHIP);
    long dfd = FD(S(open, P("d1"), O_RDONLY | O_DIRECTORY), SHIP);
    long fd = FD(S(openat, dfd, P("inner"), O_CREAT | O_WRONLY, 0644), SHIP);
    OK(exists(W("d1/inner")));
    EXPECT(S(close, fd), 0, SHIP);
    EXPECT(S(mkdirat, dfd, P("sub2"), 0700), 0, SHIP);
    OK(exists(W("d1/sub2")));
    EXPECT(S(getdents64, dfd, P(buf), 8), -EINVAL, SHIP);      /* too small for a record */
    long n = S(getdents64, dfd, P(buf), sizeof buf);
    EXPECT(last_cls, SHIP, ANY);
    OK(n > 0 && dirent_has(buf, n, ".") && dirent_has(buf, n, "..") && dirent_has(buf, n, "sub") &&
       dirent_has(buf, n, "sub2") && dirent_has(buf, n, "inner") && !dirent_has(buf, n, "f1"));
    EXPECT(S(getdents64, dfd, P(buf), sizeof buf), 0, SHIP);
    struct stat st;
    EXPECT(S(newfstatat, dfd, P("inner"), P(&st), 0), 0, SHIP);
    EXPECT(S(unlinkat, dfd, P("sub2"), AT_REMOVEDIR), 0, SHIP);
    OK(!exists(W("d1/sub2")));
    EXPECT(S(rmdir, P("d1")), -ENOTEMPTY, SHIP);

    /* renames */
    EXPECT(S(rename, P("f2"), P("f3")), 0, SHIP);
    OK(exists(W("f3")) && !exists(W("f2")));
    EXPECT(S(renameat, dfd, P("inner"), AT_FDCWD, P("moved")), 0, SHIP);
    OK(exists(W("moved")) && !exists(W("d1/inner")));
    EXPECT(S(renameat2, AT_FDCWD, P("moved"), AT_FDCWD, P("f3"), RENAME_NOREPLACE), -EEXIST, SHIP);
    EXPECT(S(rename, P("/proc/self/status"), P("x")), -EXDEV, LOC);
    EXPECT(S(rename, P("f3"), P("/dev/shm/x")), -EXDEV, LOC);

    /* unlinks */
    EXPECT(S(unlink, P("moved")), 0, SHIP);
    OK(!exists(W("moved")));
    EXPECT(S(unlink, P("moved")), -ENOENT, SHIP);
    EXPECT(S(unlinkat, AT_FDCWD, P("d1/sub"), AT_REMOVEDIR), 0, SHIP);
    EXPECT(S(close, dfd), 0, SHIP);
    EXPECT(S(rmdir, P("d1")), 0, SHIP);
    OK(!exists(W("d1")));
}

static void descriptors(void)
{
    long fd = FD(S(open, P("f3"), O_RDWR), SHIP);
    long nfd = FD(S(dup, fd), SHIP);
    OK(nfd != fd && shipc_fd_is_shipped((int)nfd) && remote_of((int)nfd) != remote_of((int)fd));
    EXPECT(S(lseek, nfd, 4, SEEK_SET), 4, SHIP);
    EXPECT(S(lseek, fd, 0, SEEK_CUR), 4, SHIP);             /* one open file, one offset */
    EXPECT(S(fcntl, nfd, F_GETFD), 0, LOC);
    EXPECT(S(fcntl, nfd, F_SETFD, FD_CLOEXEC), 0, LOC);
    EXPECT(S(fcntl, nfd, F_GETFD), FD_CLOEXEC, LOC);
    EXPECT(S(fcntl, fd, F_GETFD), 0, LOC);
    long d50 = S(fcntl, fd, F_DUPFD_CLOEXEC, 50);
    EXPECT(last_cls, SHIP, ANY);
    OK(d50 >= 50 && shipc_fd_is_shipped((int)d50) && is_placeholder((int)d50));
    EXPECT(S(fcntl, d50, F_GETFD), FD_CLOEXEC, LOC);
    EXPECT(S(fcntl, fd, F_DUPFD, -1), -EINVAL, ANY);
    EXPECT(S(fcntl, fd, F_GETFL) & O_ACCMODE, O_RDWR, SHIP);
    EXPECT(S(fcntl, fd, F_SETFL, O_APPEND), 0, SHIP);
    EXPECT(S(fcntl, nfd, F_GETFL) & O_APPEND, O_APPEND, SHIP);   /* shared status flags */
    /* record locks are held on the I/O node, on an open of the file of the
     * process's own: the descriptor's own open file (OFD) sees them conflict */
    struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
    EXPECT(S(fcntl, fd, F_SETLK, P(&fl)), 0, SHIP);
    EXPECT(S(fcntl, fd, F_OFD_GETLK, P(&fl)), 0, SHIP);
    OK(fl.l_type == F_WRLCK && fl.l_whence == SEEK_SET && fl.l_start == 0 && fl.l_len == 0 && fl.l_pid == -1);
    fl = (struct flock){ .l_type = F_WRLCK, .l_whence = SEEK_SET };
    EXPECT(S(fcntl, fd, F_GETLK, P(&fl)), 0, SHIP);
    OK(fl.l_type == F_UNLCK);                   /* the process's own lock */
    fl = (struct flock){ .l_type = F_UNLCK, .l_whence = SEEK_SET };
    EXPECT(S(fcntl, fd, F_SETLKW, P(&fl)), 0, SHIP);
    EXPECT(S(fcntl, fd, F_SETLK, NULL), -EFAULT, LOC);
    EXPECT(S(fcntl, fd, 9999), -EINVAL, ANY);

    EXPECT(S(dup2, fd, 60), 60, SHIP);
    int r60 = remote_of(60);
    OK(r60 >= 0 && is_placeholder(60));
    EXPECT(S(dup2, nfd, 60), 60, SHIP);                       /* shipped over shipped */
    OK(remote_of(60) >= 0);
    EXPECT(S(dup2, fd, fd), fd, ANY);
    EXPECT(S(dup3, fd, fd, 0), -EINVAL, ANY);
    EXPECT(S(dup3, fd, 61, O_CLOEXEC), 61, SHIP);
    EXPECT(S(fcntl, 61, F_GETFD), FD_CLOEXEC, LOC);
    EXPECT(S(dup3, fd, 62, 0x40), -EINVAL, ANY);
    long nul = FD(S(open, P("/dev/null"), O_RDONLY), LOC);
    EXPECT(S(dup2, nul, 60), 60, SHIP);                       /* local over shipped */
    OK(!shipc_fd_is_shipped(60) && local_open(60) && !is_placeholder(60));
    EXPECT(S(close, 60), 0, LOC);
    /* the replaced remote descriptor was closed on the I/O node: ciod hands
     * out its lowest free index, so the next open gets the same one back */
    long a = FD(S(open, P("f3"), O_RDONLY), SHIP);
    int ra = remote_of((int)a);
    EXPECT(S(dup2, nul, a), a, SHIP);
    long b = FD(S(open, P("f3"), O_RDONLY), SHIP);
    EXPECT(remote_of((int)b), ra, ANY);
    EXPECT(S(close, b), 0, SHIP);
    EXPECT(S(close, a), 0, LOC);
    /* the same when a shipped descriptor replaces a shipped one */
    a = FD(S(open, P("f3"), O_RDONLY), SHIP);
    ra = remote_of((int)a);
    b = FD(S(open, P("f3"), O_RDONLY), SHIP);
    EXPECT(S(dup2, b, a), a, SHIP);
    OK(remote_of((int)a) != ra && remote_of((int)a) != remote_of((int)b));
    long c2 = FD(S(open, P("f3"), O_RDONLY), SHIP);
    EXPECT(remote_of((int)c2), ra, ANY);
    EXPECT(S(close, c2), 0, SHIP);
    EXPECT(S(close, b), 0, SHIP);
    EXPECT(S(close, a), 0, SHIP);
    /* dup2/dup3 onto the lowest free number: the placeholder taken for it is
     * that very number (D5; once EINVAL in both kernels) */
    long lo = FD(S(open, P("f3"), O_RDONLY), SHIP);
    EXPECT(S(close, lo), 0, SHIP);
    EXPECT(S(dup2, fd, lo), lo, SHIP);
    OK(shipc_fd_is_shipped((int)lo) && is_placeholder((int)lo) && remote_of((int)lo) >= 0);
    EXPECT(S(lseek, lo, 0, SEEK_CUR), S(lseek, fd, 0, SEEK_CUR), SHIP);
    EXPECT(S(close, lo), 0, SHIP);
    EXPECT(S(dup3, fd, lo, O_CLOEXEC), lo, SHIP);
    EXPECT(S(fcntl, lo, F_GETFD), FD_CLOEXEC, LOC);
    EXPECT(S(close, lo), 0, SHIP);
    EXPECT(S(dup2, nul, lo), lo, LOC);                        /* local onto the lowest free */
    OK(!shipc_fd_is_shipped((int)lo) && local_open((int)lo));
    EXPECT(S(close, lo), 0, LOC);
    /* beyond RLIMIT_NOFILE, as the kernel (D12) */
    struct rlimit nofile;
    getrlimit(RLIMIT_NOFILE, &nofile);
    long lim = nofile.rlim_cur < 65536 ? (long)nofile.rlim_cur : 65536;
    EXPECT(S(dup2, fd, lim), -EBADF, ANY);
    EXPECT(S(fcntl, fd, F_DUPFD, lim), -EINVAL, ANY);

    EXPECT(S(ioctl, fd, TCGETS, P(&fl)), -ENOTTY, LOC);
    EXPECT(S(flock, fd, LOCK_EX), 0, SHIP);
    EXPECT(S(flock, fd, LOCK_UN), 0, SHIP);
    EXPECT(S(flock, fd, 0), -EINVAL, LOC);
    fl = (struct flock){ .l_type = F_RDLCK, .l_whence = SEEK_SET };
    EXPECT(S(fcntl, nul, F_GETLK, P(&fl)), 0, LOC);      /* a node-local descriptor: the node's locks */
    EXPECT(S(fadvise64, fd, 0, 0, POSIX_FADV_SEQUENTIAL), 0, LOC);
    EXPECT(S(fadvise64, fd, 0, 0, 99), -EINVAL, LOC);

    /* close_range marks or closes shipped descriptors */
    EXPECT(S(close_range, 61, 61, CLOSE_RANGE_CLOEXEC), 0, SHIP);
    EXPECT(S(fcntl, 61, F_GETFD), FD_CLOEXEC, LOC);
    EXPECT(S(close_range, 61, 61, 0), 0, SHIP);
    OK(!shipc_fd_is_shipped(61) && !local_open(61));
    EXPECT(S(close_range, 5, 4, 0), -EINVAL, LOC);

    /* the lowest free number, like the kernel: a freed shipped number is reused locally */
    EXPECT(S(close, nfd), 0, SHIP);
    long p = FD(S(open, P("/proc/self/status"), O_RDONLY), LOC);
    OK(p == nfd || p < nfd);
    EXPECT(S(close, p), 0, LOC);
    EXPECT(S(close, d50), 0, SHIP);
    EXPECT(S(close, fd), 0, SHIP);
    EXPECT(S(close, nul), 0, LOC);

    /* links, owners, nodes, space: made on the I/O node */
    EXPECT(S(link, P("f3"), P("f4")), 0, SHIP);
    EXPECT(S(linkat, AT_FDCWD, P("f3"), AT_FDCWD, P("/dev/shm/f4"), 0), -EXDEV, LOC);
    EXPECT(S(symlink, P("f3"), P("s4")), 0, SHIP);
    EXPECT(S(symlinkat, P("f3"), AT_FDCWD, P("s4")), -EEXIST, SHIP);
    EXPECT(S(chown, P("f3"), -1, -1), 0, SHIP);
    EXPECT(S(lchown, P("s4"), -1, -1), 0, SHIP);
    EXPECT(S(fchownat, AT_FDCWD, P("f3"), -1, -1, 0), 0, SHIP);
    EXPECT(S(mknod, P("p4"), S_IFIFO | 0600, 0), 0, SHIP);
    EXPECT(S(mknodat, AT_FDCWD, P("p4"), S_IFIFO | 0600, 0), -EEXIST, SHIP);
    fd = FD(S(open, P("f3"), O_RDWR), SHIP);
    EXPECT(S(fchown, fd, -1, -1), 0, SHIP);
    EXPECT(S(fallocate, fd, 0, 0, 4096), 0, SHIP);
    EXPECT(S(close, fd), 0, SHIP);
    OK(exists(W("f4")) && exists(W("s4")) && exists(W("p4")) && size_of(W("f3")) == 4096);
    struct stat lst;
    OK(lstat(W("s4"), &lst) == 0 && S_ISLNK(lst.st_mode) && lstat(W("p4"), &lst) == 0 && S_ISFIFO(lst.st_mode));
    EXPECT(S(unlink, P("f4")), 0, SHIP);
    EXPECT(S(unlink, P("s4")), 0, SHIP);
    EXPECT(S(unlink, P("p4")), 0, SHIP);
}

static void cwd_umask(void)
{
    char buf[4200];
    EXPECT(S(getcwd, P(buf), sizeof buf), (long)strlen(work) + 1, SHIP);
    OK(strcmp(buf, work) == 0);
    EXPECT(S(getcwd, P(buf), 3), -ERANGE, SHIP);
    EXPECT(S(mkdir, P("d2"), 0755), 0, SHIP);
    EXPECT(S(chdir, P("d2")), 0, SHIP);
    S(getcwd, P(buf), sizeof buf);
    OK(strcmp(buf, W("d2")) == 0);
    long fd = FD(S(open, P("rel"), O_CREAT | O_WRONLY, 0644), SHIP);
    OK(exists(W("d2/rel")));
    EXPECT(S(close, fd), 0, SHIP);
    EXPECT(S(chdir, P("..")), 0, SHIP);
    long dfd = FD(S(open, P("d2"), O_RDONLY | O_DIRECTORY), SHIP);
    EXPECT(S(fchdir, dfd), 0, SHIP);
    S(getcwd, P(buf), sizeof buf);
    OK(strcmp(buf, W("d2")) == 0);
    EXPECT(S(chdir, P("/proc")), 0, SHIP);                   /* always the I/O node's */
    S(getcwd, P(buf), sizeof buf);
    OK(strcmp(buf, "/proc") == 0);
    EXPECT(S(chdir, P(work)), 0, SHIP);
    EXPECT(S(chdir, P("nope")), -ENOENT, SHIP);
    EXPECT(S(close, dfd), 0, SHIP);

    long old = S(umask, 077);
    EXPECT(last_cls, SHIP, ANY);
    EXPECT(S(umask, 027), 077, SHIP);
    EXPECT(S(umask, 077), 027, SHIP);
    fd = FD(S(open, P("um"), O_CREAT | O_WRONLY, 0666), SHIP);
    struct stat st;
    stat(W("um"), &st);
    OK((st.st_mode & 0777) == 0600);                          /* the I/O node's umask applied */
    EXPECT(S(close, fd), 0, SHIP);
    S(umask, old);
}

/* The rule itself, on names the lexical normalisation must see through. */
static void path_rule(void)
{
    static const char *local[] = { "/proc", "/proc/", "/proc/self/status", "//proc",
        "/tmp/../proc/x", "/dev/shm", "/dev/shm/a/b", "/dev/null", "/dev//null", "/dev/./null",
        "/sys/devices", "/dev/fd/3", "/dev/stdout", "/a/b/c/../../../proc", "/../proc",
        "/x/aaaaaaaaaaaaaaaaaaaaaaaa/../../dev/urandom", "/dev/zero", "/dev/random",
        "/dev/stdout/x", "/dev/stdin/a/b" };
    static const char *shipped[] = { "proc", "/procx", "/dev/nullx", "/dev/null/x", "/dev", "/",
        "/dev/shmx", "/tmp/proc", "/dev/tty", "/proc/../etc/passwd", "./proc", "/dev/random/..",
        "/sysx", "", "/lib/x86_64-linux-gnu/libc.so.6" };
    for (size_t i = 0; i < sizeof local / sizeof *local; i++)
        ok(__LINE__, local[i], shipc_path_is_local(local[i]));
    for (size_t i = 0; i < sizeof shipped / sizeof *shipped; i++)
        ok(__LINE__, shipped[i], !shipc_path_is_local(shipped[i]));
}

static void local_names(void)
{
    char buf[4096];
    long fd = FD(S(open, P("/proc/self/status"), O_RDONLY), LOC);
    OK(!shipc_fd_is_shipped((int)fd));
    long n = S(read, fd, P(buf), sizeof buf - 1);
    EXPECT(last_cls, LOC, ANY);
    buf[n > 0 ? n : 0] = '\0';
    OK(strstr(buf, "Name:") != NULL);
    EXPECT(S(close, fd), 0, LOC);
    EXPECT(S(open, P("/tmp/../proc/self/status"), O_RDONLY) >= 0, 1, LOC);
    long pfd = FD(S(open, P("/proc/self"), O_RDONLY | O_DIRECTORY), LOC);
    fd = FD(S(openat, pfd, P("status"), O_RDONLY), LOC);      /* local dirfd + relative */
    long ents = S(getdents64, pfd, P(buf), sizeof buf);
    OK(ents > 0 && dirent_has(buf, ents, "status"));
    EXPECT(last_cls, LOC, ANY);

    fd = FD(S(open, P("/dev/null"), O_RDWR), LOC);
    EXPECT(S(write, fd, P("xyz"), 3), 3, LOC);
    EXPECT(S(read, fd, P(buf), 3), 0, LOC);
    fd = FD(S(open, P("/dev/zero"), O_RDONLY), LOC);
    buf[0] = 1;
    EXPECT(S(read, fd, P(buf), 8), 8, LOC);
    OK(buf[0] == 0);
    fd = FD(S(open, P("/dev/urandom"), O_RDONLY), LOC);
    EXPECT(S(read, fd, P(buf), 16), 16, LOC);

    struct stat st;
    EXPECT(S(stat, P("/proc/self"), P(&st)), 0, LOC);
    EXPECT(S(access, P("/sys"), F_OK), 0, LOC);
    struct statfs sf;
    EXPECT(S(statfs, P("/proc"), P(&sf)), 0, LOC);
    OK(sf.f_type == 0x9fa0);                                  /* PROC_SUPER_MAGIC: the node's */
    EXPECT(S(readlink, P("/proc/self/exe"), P(buf), sizeof buf) > 0, 1, LOC);

    char shm[64], shm2[64];
    snprintf(shm, sizeof shm, "/dev/shm/cnk-harness-%d", getpid());
    snprintf(shm2, sizeof shm2, "/dev/shm/cnk-harness-%d.b", getpid());
    fd = FD(S(open, P(shm), O_CREAT | O_RDWR | O_TRUNC, 0600), LOC);
    EXPECT(S(write, fd, P("shm"), 3), 3, LOC);
    EXPECT(S(fstat, fd, P(&st)), 0, LOC);
    OK(st.st_size == 3);
    EXPECT(S(rename, P(shm), P(shm2)), 0, LOC);
    EXPECT(S(symlink, P("x"), P(shm)), 0, LOC);
    EXPECT(S(unlink, P(shm)), 0, LOC);
    EXPECT(S(unlink, P(shm2)), 0, LOC);
    EXPECT(S(mkdir, P(shm), 0700), 0, LOC);
    EXPECT(S(rmdir, P(shm)), 0, LOC);
    EXPECT(S(flock, fd, LOCK_EX), 0, LOC);
    EXPECT(S(fcntl, fd, F_GETFD), 0, LOC);
    EXPECT(S(dup, fd) > fd, 1, LOC);

    static char longname[5000];
    memset(longname, 'a', sizeof longname - 1);
    longname[0] = '/';
    EXPECT(S(open, P(longname), O_RDONLY), -ENAMETOOLONG, LOC);
    EXPECT(S(stat, 0, P(&st)), -EFAULT, LOC);
    EXPECT(S(open, 0, O_RDONLY), -EFAULT, LOC);
    EXPECT(S(close_range, 3, ~0u, 0), 0, LOC);               /* nothing shipped was open */
}

/* ---- phase: hidden (cnk's own descriptors) ---- */

static int report_fd;

static void hidden_fds(void)
{
    int own[3] = { cnk.conn_fd, cnk.image_fd, report_fd };
    char buf[16];
    struct stat st;

    for (int i = 0; i < 3; i++) {
        long h = own[i];
        OK(h >= CNK_FD_FLOOR && shipc_fd_is_hidden((int)h) && !shipc_fd_is_shipped((int)h));
        EXPECT(S(read, h, P(buf), 1), -EBADF, LOC);
        EXPECT(S(write, h, P("x"), 1), -EBADF, LOC);
        EXPECT(S(pread64, h, P(buf), 1, 0), -EBADF, LOC);
        EXPECT(S(lseek, h, 0, SEEK_SET), -EBADF, LOC);
        EXPECT(S(fstat, h, P(&st)), -EBADF, LOC);
        EXPECT(S(fcntl, h, F_GETFD), -EBADF, LOC);
        EXPECT(S(dup, h), -EBADF, LOC);
        EXPECT(S(dup2, h, 50), -EBADF, LOC);
        EXPECT(S(dup2, 0, h), -EBADF, LOC);                  /* onto cnk's own */
        EXPECT(S(dup3, 1, h, 0), -EBADF, LOC);
        EXPECT(S(ioctl, h, TCGETS, P(buf)), -EBADF, LOC);
        EXPECT(S(getdents64, h, P(buf), sizeof buf), -EBADF, LOC);
        EXPECT(S(openat, h, P("x"), O_RDONLY), -EBADF, LOC);
        EXPECT(S(sendfile, 1, h, 0, 1), -EBADF, LOC);
        EXPECT(S(close, h), -EBADF, LOC);
        OK(local_open((int)h));
    }
    long fd = FD(S(open, P("hidden-test"), O_CREAT | O_WRONLY, 0644), SHIP);
    long nul = FD(S(open, P("/dev/null"), O_RDONLY), LOC);
    EXPECT(S(dup2, nul, CNK_FD_FLOOR + 90), CNK_FD_FLOOR + 90, LOC);  /* not cnk's: allowed */
    EXPECT(S(close_range, 3, ~0u, 0), 0, SHIP);
    OK(!shipc_fd_is_shipped((int)fd) && !local_open((int)fd) && !local_open((int)nul));
    OK(!local_open(CNK_FD_FLOOR + 90));
    for (int i = 0; i < 3; i++)
        OK(local_open(own[i]));
    char cwd[4200];
    EXPECT(S(getcwd, P(cwd), sizeof cwd), (long)strlen(work) + 1, SHIP);  /* still connected */
    EXPECT(S(write, fd, P("x"), 1), -EBADF, LOC);
}

/* ---- phase: big (chunking at LAT_MAX_IO) ---- */

static void big(void)
{
    size_t n = 3 * LAT_MAX_IO + 5;
    unsigned char *src = malloc(n), *dst = malloc(4 * LAT_MAX_IO);
    for (size_t i = 0; i < n; i++)
        src[i] = (unsigned char)(i * 7 + i / 4099);
    long fd = FD(S(open, P("big"), O_CREAT | O_RDWR | O_TRUNC, 0644), SHIP);
    EXPECT(S(write, fd, P(src), n), (long)n, SHIP);                  /* 4 WRITEs */
    OK(content_is(W("big"), src, n));
    EXPECT(S(lseek, fd, 0, SEEK_SET), 0, SHIP);
    EXPECT(S(read, fd, P(dst), 4 * LAT_MAX_IO), (long)n, SHIP);     /* 4 READs, the last short */
    OK(memcmp(dst, src, n) == 0);
    memset(dst, 0, n);
    EXPECT(S(pread64, fd, P(dst), 2 * LAT_MAX_IO, LAT_MAX_IO), 2 * LAT_MAX_IO, SHIP);  /* 2 */
    OK(memcmp(dst, src + LAT_MAX_IO, 2 * LAT_MAX_IO) == 0);
    EXPECT(S(pwrite64, fd, P(src), LAT_MAX_IO + LAT_MAX_IO / 2, 100), LAT_MAX_IO + LAT_MAX_IO / 2,
           SHIP);                                                     /* 2 PWRITEs */
    memcpy(dst, src, 100);
    memcpy(dst + 100, src, LAT_MAX_IO + LAT_MAX_IO / 2);
    memcpy(dst + 100 + LAT_MAX_IO + LAT_MAX_IO / 2, src + 100 + LAT_MAX_IO + LAT_MAX_IO / 2,
           n - 100 - LAT_MAX_IO - LAT_MAX_IO / 2);
    OK(content_is(W("big"), dst, n));

    /* 1000 vectors of 2000 bytes: two WRITEs, cut inside a vector */
    static struct iovec v[1000];
    for (int i = 0; i < 1000; i++)
        v[i] = (struct iovec){ src + 2000 * i, 2000 };
    long fd2 = FD(S(open, P("bigv"), O_CREAT | O_WRONLY | O_TRUNC, 0644), SHIP);
    EXPECT(S(writev, fd2, P(v), 1000), 2000000, SHIP);
    OK(content_is(W("bigv"), src, 2000000));
    EXPECT(S(close, fd2), 0, SHIP);
    EXPECT(S(close, fd), 0, SHIP);
    free(src);
    free(dst);
}

/* ---- phase: stdio (remote 0, 1, 2) ---- */

static void stdio(void)
{
    char buf[8];
    struct stat st;
    OK(shipc_fd_is_shipped(0) && shipc_fd_is_shipped(1) && shipc_fd_is_shipped(2));
    EXPECT(S(write, 1, P("out line\n"), 9), 9, SHIP);
    EXPECT(S(write, 2, P("err line\n"), 9), 9, SHIP);
    struct iovec v[2] = { { "two ", 4 }, { "parts\n", 6 } };
    EXPECT(S(writev, 1, P(v), 2), 10, SHIP);
    EXPECT(S(read, 0, P(buf), sizeof buf), 0, SHIP);        /* compute processes have no input */
    EXPECT(S(fstat, 1, P(&st)), 0, SHIP);
    OK(S_ISFIFO(st.st_mode));
    EXPECT(S(fstat, 0, P(&st)), 0, SHIP);
    OK(S_ISCHR(st.st_mode));
    EXPECT(S(ioctl, 1, TCGETS, P(buf)), -ENOTTY, LOC);
    EXPECT(S(lseek, 1, 0, SEEK_CUR), -ESPIPE, SHIP);
}

/* ---- phase: copy (sendfile, copy_file_range emulated) ---- */

static void copy(void)
{
    size_t n = 200 * 1000 + 17;
    char *src = malloc(n), *back = malloc(n);
    for (size_t i = 0; i < n; i++)
        src[i] = (char)('a' + i % 23);
    int lf = open(W("src"), O_CREAT | O_WRONLY | O_TRUNC, 0644);
    OK(write(lf, src, n) == (ssize_t)n);
    close(lf);

    long in = FD(S(open, P("src"), O_RDONLY), SHIP);
    long out = FD(S(open, P("dst"), O_CREAT | O_WRONLY | O_TRUNC, 0644), SHIP);
    long total = 0, r;
    while ((r = S(copy_file_range, in, 0, out, 0, 1L << 30, 0)) > 0)
        total += r;
    EXPECT(r, 0, SHIP);
    EXPECT(total, (long)n, ANY);
    OK(content_is(W("dst"), src, n));
    EXPECT(S(copy_file_range, in, 0, out, 0, 10, 1), -EINVAL, ANY);

    /* shipped -> local with an offset: the source position does not move */
    char shm[64];
    snprintf(shm, sizeof shm, "/dev/shm/cnk-harness-copy-%d", getpid());
    long loc = FD(S(open, P(shm), O_CREAT | O_RDWR | O_TRUNC, 0600), LOC);
    EXPECT(S(lseek, in, 5, SEEK_SET), 5, SHIP);
    int64_t off = 1000;
    EXPECT(S(sendfile, loc, in, P(&off), 5000), 5000, SHIP);
    EXPECT(off, 6000, ANY);
    EXPECT(S(lseek, in, 0, SEEK_CUR), 5, SHIP);
    OK(pread(open(shm, O_RDONLY), back, 5000, 0) == 5000 && memcmp(back, src + 1000, 5000) == 0);

    /* local -> shipped, the source's own position */
    EXPECT(S(lseek, loc, 0, SEEK_SET), 0, LOC);
    long out2 = FD(S(open, P("dst2"), O_CREAT | O_WRONLY | O_TRUNC, 0644), SHIP);
    EXPECT(S(sendfile, out2, loc, 0, 99999), 5000, SHIP);
    EXPECT(S(lseek, loc, 0, SEEK_CUR), 5000, LOC);
    OK(content_is(W("dst2"), src + 1000, 5000));

    /* both local: the kernel's own */
    char shm2[80];
    snprintf(shm2, sizeof shm2, "%s.b", shm);
    long loc2 = FD(S(open, P(shm2), O_CREAT | O_RDWR | O_TRUNC, 0600), LOC);
    off = 0;
    EXPECT(S(sendfile, loc2, loc, P(&off), 100), 100, LOC);
    unlink(shm);
    unlink(shm2);
    free(src);
    free(back);
}

/* ---- phase: threads (the connection lock) ---- */

static void *worker(void *arg)
{
    long id = (long)arg;
    char name[16], want[512], got[512];
    snprintf(name, sizeof name, "t%ld", id);
    long fd = S(open, P(name), O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (fd < 0)
        return (void *)1;
    for (int i = 0; i < 200; i++) {
        memset(want, 'A' + (int)((id + i) % 26), sizeof want);
        if (S(pwrite64, fd, P(want), sizeof want, (long)i * 512) != (long)sizeof want ||
            S(pread64, fd, P(got), sizeof got, (long)i * 512) != (long)sizeof got ||
            memcmp(want, got, sizeof got) != 0)
            return (void *)2;
    }
    return S(close, fd) == 0 ? NULL : (void *)3;
}

static void threads(void)
{
    pthread_t t[4];
    for (long i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, worker, (void *)i);
    for (int i = 0; i < 4; i++) {
        void *r;
        pthread_join(t[i], &r);
        EXPECT((long)r, 0, ANY);
        OK(size_of(W(i == 0 ? "t0" : i == 1 ? "t1" : i == 2 ? "t2" : "t3")) == 200 * 512);
    }
}

/* ---- phase: broken (the connection goes away) ---- */

static void broken(void)
{
    char buf[4200];
    EXPECT(S(getcwd, P(buf), sizeof buf), (long)strlen(work) + 1, SHIP);
    shutdown(cnk.conn_fd, SHUT_RDWR);
    EXPECT(S(getcwd, P(buf), sizeof buf), -EIO, SHIP);
    EXPECT(S(open, P("after"), O_CREAT | O_WRONLY, 0644), -EIO, SHIP);
    EXPECT(S(write, 1, P("lost\n"), 5), -EIO, SHIP);
    long fd = FD(S(open, P("/proc/self/status"), O_RDONLY), LOC);     /* local still works */
    EXPECT(S(read, fd, P(buf), 10), 10, LOC);
    OK(!exists(W("after")));
}

/* ---- set-up, as main.c leaves things ---- */

static int move_high(int fd)
{
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, CNK_FD_FLOOR);
    close(fd);
    return moved;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s CONN_FD WORK_DIR PHASE\n", argv[0]);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 2048 && rl.rlim_max >= 2048) {
        rl.rlim_cur = 2048;     /* room for cnk's descriptors above CNK_FD_FLOOR */
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    /* klock counts in the thread's block (%gs, lib.h); this harness's
     * threads share the main one (they inherit %gs and take no signals) */
    kthread_main();
    work = argv[2];
    cnk.rank = 0;
    cnk.conn_fd = move_high(atoi(argv[1]));
    cnk.image_fd = move_high(memfd_create("image", MFD_CLOEXEC));
    report_fd = move_high(memfd_create("report", MFD_CLOEXEC));
    ftruncate(report_fd, 4096);
    cnk.report = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, report_fd, 0);
    if (cnk.conn_fd < 0 || cnk.image_fd < 0 || report_fd < 0 || cnk.report == MAP_FAILED) {
        perror("set-up");
        return 2;
    }
    EXPECT(ship_init(cnk.conn_fd), 0, ANY);
    EXPECT(ship_init(0), -ENOTSOCK, ANY);       /* /dev/null or a pipe is not a connection */
    EXPECT(ship_init(cnk.conn_fd), 0, ANY);

    const char *phase = argv[3];
    if (!strcmp(phase, "files")) {
        open_read_write();
        vectors();
        stats();
        sizes_modes_times();
        directories();
        descriptors();
        cwd_umask();
    } else if (!strcmp(phase, "local")) {
        path_rule();
        local_names();
    } else if (!strcmp(phase, "hidden")) {
        hidden_fds();
    } else if (!strcmp(phase, "big")) {
        big();
    } else if (!strcmp(phase, "stdio")) {
        stdio();
    } else if (!strcmp(phase, "copy")) {
        copy();
    } else if (!strcmp(phase, "threads")) {
        threads();
    } else if (!strcmp(phase, "broken")) {
        broken();
    } else {
        fprintf(stderr, "unknown phase %s\n", phase);
        return 2;
    }
    printf("%s: %d checks, %d failed, %zu handlers\n", phase, checks, failures, handlers_linked());
    return failures ? 1 : 0;
}
