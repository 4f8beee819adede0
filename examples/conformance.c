/*
 * conformance DIR: one line per system call check, in the scratch directory
 * DIR (tests/e2e/test_t0800_conformance.py runs it natively, under cnk and in
 * Linux mode and compares the three outputs line by line).
 *
 * Each line is `call = result` or `call = -1 ENAME`. Nothing that legitimately
 * differs between runs is printed: descriptors are shown as B+n, relative to
 * the first one the program opens (printed once, as a number); paths under
 * DIR as <dir>/...; no addresses, pids, inode numbers, ports or clock times.
 *
 * DIR must hold what the test makes (symbolic links cannot be made under
 * cnk): pre/file.txt ("pre-made\n"), pre/link -> file.txt,
 * pre/dangling -> missing, pre/dirlink -> dir, pre/deeplink -> dir/deep,
 * pre/dir/inner (empty), pre/dir/deep/.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "conformance.h"
#include "conformance_proc.h"

static char top[4096];             /* getcwd() in DIR */

static const char *type_of(mode_t m)
{
    return S_ISREG(m) ? "reg" : S_ISDIR(m) ? "dir" : S_ISLNK(m) ? "lnk" : S_ISFIFO(m) ? "fifo"
         : S_ISSOCK(m) ? "sock" : S_ISCHR(m) ? "chr" : "other";
}

static void show_stat(const char *what, int rc, const struct stat *st)
{
    if (rc < 0) {
        printf("%s = -1 %s\n", what, strerrorname_np(errno));
        return;
    }
    printf("%s = 0 type=%s mode=%04o", what, type_of(st->st_mode), (unsigned)(st->st_mode & 07777));
    if (!S_ISDIR(st->st_mode))      /* a directory's size and links depend on the file system */
        printf(" size=%lld nlink=%lu", (long long)st->st_size, (unsigned long)st->st_nlink);
    printf("\n");
}

struct stat_case {
    int lstat;              /* lstat, else stat */
    const char *path;
};

static void stat_all(const struct stat_case *c, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        char label[256];
        snprintf(label, sizeof label, "%s(%s)", c[i].lstat ? "lstat" : "stat", c[i].path);
        show_stat(label, (c[i].lstat ? lstat : stat)(c[i].path, &st), &st);
    }
}

#define STAT_ALL(...) do { static const struct stat_case c_[] = { __VA_ARGS__ }; \
    stat_all(c_, sizeof c_ / sizeof *c_); } while (0)

#define STAT(fn, arg, label) do { struct stat st_; int r_ = fn(arg, &st_); show_stat(label, r_, &st_); } while (0)

/* what read() got, printable */
static void show_bytes(const char *what, const char *buf, long n)
{
    printf("%s = %ld \"", what, n);
    for (long i = 0; i < n; i++)
        printf(buf[i] >= 32 && buf[i] < 127 && buf[i] != '"' ? "%c" : "\\x%02x", (unsigned char)buf[i]);
    printf("\"\n");
}

static void files(void)
{
    char buf[64];
    printf("# files\n");
    int fd = open("a.txt", O_CREAT | O_EXCL | O_WRONLY, 0666);
    base = fd;
    printf("open(a.txt, O_CREAT|O_EXCL|O_WRONLY) = %d (the first descriptor, B)\n", fd);
    SAY(write(fd, "hello world\n", 12), "write(a.txt, 12)");
    SAY(read(fd, buf, sizeof buf), "read(O_WRONLY fd)");
    SAY(close(fd), "close(a.txt)");
    SAYFD(open("a.txt", O_CREAT | O_EXCL | O_WRONLY, 0666), "open(a.txt, O_EXCL) again");
    SAYFD(open("missing", O_RDONLY), "open(missing)");
    SAYFD(open("missing/x", O_RDONLY), "open(missing/x)");
    SAYFD(open("a.txt/x", O_RDONLY), "open(a.txt/x)");
    SAYFD(open("a.txt", O_RDONLY | O_DIRECTORY), "open(a.txt, O_DIRECTORY)");
    SAYFD(open("pre", O_WRONLY), "open(pre, O_WRONLY)");
    SAYFD(open("pre/link", O_RDONLY | O_NOFOLLOW), "open(pre/link, O_NOFOLLOW)");
    SAYFD(open("pre/dangling", O_RDONLY), "open(pre/dangling)");
    SAYFD(open("", O_RDONLY), "open(\"\")");

    fd = SAYFD(open("a.txt", O_RDONLY), "open(a.txt, O_RDONLY)");
    show_bytes("read(a.txt, 5)", buf, read(fd, buf, 5));
    show_bytes("read(a.txt, 64)", buf, read(fd, buf, sizeof buf));
    SAY(read(fd, buf, sizeof buf), "read(a.txt) at EOF");
    SAY(write(fd, "x", 1), "write(O_RDONLY fd)");
    SAY(ftruncate(fd, 1), "ftruncate(O_RDONLY fd)");
    close(fd);

    fd = SAYFD(open("a.txt", O_WRONLY | O_APPEND), "open(a.txt, O_WRONLY|O_APPEND)");
    SAY(lseek(fd, 0, SEEK_SET), "lseek(0, SEEK_SET)");
    SAY(write(fd, "more\n", 5), "write(appending)");
    SAY(lseek(fd, 0, SEEK_CUR), "lseek(0, SEEK_CUR) after an append");
    SAY(pwrite(fd, "P", 1, 0), "pwrite(O_APPEND fd, offset 0)");
    close(fd);
    STAT(stat, "a.txt", "stat(a.txt)");

    fd = SAYFD(creat("b.txt", 0600), "creat(b.txt, 0600)");
    SAY(write(fd, "bbbb", 4), "write(b.txt, 4)");
    close(fd);
    fd = SAYFD(open("b.txt", O_WRONLY | O_TRUNC), "open(b.txt, O_TRUNC)");
    close(fd);
    STAT(stat, "b.txt", "stat(b.txt)");
    SAY(truncate("b.txt", 3), "truncate(b.txt, 3)");
    STAT(stat, "b.txt", "stat(b.txt)");
    SAY(truncate("missing", 3), "truncate(missing)");
}

static void seeks(void)
{
    char buf[16];
    printf("# read, write, seek\n");
    int fd = SAYFD(open("s.dat", O_CREAT | O_RDWR, 0644), "open(s.dat, O_CREAT|O_RDWR)");
    SAY(write(fd, "0123456789", 10), "write(s.dat, 10)");
    SAY(lseek(fd, 0, SEEK_END), "lseek(0, SEEK_END)");
    SAY(lseek(fd, -3, SEEK_END), "lseek(-3, SEEK_END)");
    show_bytes("read(s.dat, 16)", buf, read(fd, buf, sizeof buf));
    SAY(lseek(fd, -1, SEEK_SET), "lseek(-1, SEEK_SET)");
    SAY(lseek(fd, 0, 42), "lseek(0, whence 42)");
    SAY(pwrite(fd, "AB", 2, 4), "pwrite(AB, 2, offset 4)");
    show_bytes("pread(s.dat, 4, offset 3)", buf, pread(fd, buf, 4, 3));
    SAY(lseek(fd, 0, SEEK_CUR), "lseek(0, SEEK_CUR) after pread/pwrite");
    SAY(pread(fd, buf, 4, -1), "pread(offset -1)");
    /* a hole: past the end, then one byte */
    SAY(lseek(fd, 8192, SEEK_SET), "lseek(8192, SEEK_SET)");
    SAY(write(fd, "Z", 1), "write(Z) at 8192");
    show_bytes("pread(hole, 4, offset 100)", buf, pread(fd, buf, 4, 100));
    show_bytes("pread(end, 4, offset 8191)", buf, pread(fd, buf, 4, 8191));
    struct iovec wv[2] = { { "vec", 3 }, { "tor", 3 } };
    SAY(lseek(fd, 0, SEEK_SET), "lseek(0, SEEK_SET)");
    SAY(writev(fd, wv, 2), "writev(vec+tor)");
    char r1[2], r2[3];
    struct iovec rv[2] = { { r1, 2 }, { r2, 3 } };
    SAY(lseek(fd, 1, SEEK_SET), "lseek(1, SEEK_SET)");
    SAY(readv(fd, rv, 2), "readv(2+3)");
    show_bytes("readv parts", r1, 2);
    show_bytes("readv parts", r2, 3);
    SAY(ftruncate(fd, 5), "ftruncate(s.dat, 5)");
    struct stat st;
    show_stat("fstat(s.dat)", fstat(fd, &st), &st);
    SAY(fsync(fd), "fsync(s.dat)");
    close(fd);
}

static void streams(void)
{
    char line[32];
    printf("# stdio\n");
    FILE *f = fopen("st.txt", "w+");
    printf("fopen(st.txt, w+) = %s, fileno B%+d\n", f ? "ok" : strerrorname_np(errno), f ? fileno(f) - base : 0);
    if (!f)
        return;
    printf("fprintf = %d\n", fprintf(f, "line one\nline %d\n", 2));
    int rc = fseek(f, 0, SEEK_SET);
    printf("fseek(0) = %d, ftell = %ld\n", rc, ftell(f));
    printf("fgets = %s", fgets(line, sizeof line, f) ? line : "NULL\n");
    printf("fgets = %s", fgets(line, sizeof line, f) ? line : "NULL\n");
    const char *got = fgets(line, sizeof line, f) ? line : "NULL";
    printf("fgets at EOF = %s, feof %d\n", got, feof(f) != 0);
    rc = fseek(f, 0, SEEK_END);
    printf("fseek(0, SEEK_END) = %d, ftell = %ld\n", rc, ftell(f));
    printf("fclose = %d\n", fclose(f));
    f = fopen("missing/x", "r");
    printf("fopen(missing/x, r) = %s\n", f ? "ok" : strerrorname_np(errno));
    f = fopen("st.txt", "a");
    printf("fopen(st.txt, a) then fputs, fclose = %d\n", f ? fputs("three\n", f) >= 0 && fclose(f) == 0 : -1);
    STAT(stat, "st.txt", "stat(st.txt)");
}

static void stats(void)
{
    struct stat a, b;
    printf("# stat\n");
    STAT_ALL({ 0, "pre/file.txt" }, { 0, "pre/link" }, { 1, "pre/link" }, { 0, "pre/dangling" },
             { 1, "pre/dangling" }, { 0, "pre/dir" }, { 0, "missing" }, { 0, "a.txt/x" });
    int fd = open("pre/file.txt", O_RDONLY);
    if (fstat(fd, &a) == 0 && stat("pre/link", &b) == 0)
        printf("fstat(pre/file.txt) and stat(pre/link) = same dev and inode: %s\n",
               a.st_dev == b.st_dev && a.st_ino == b.st_ino ? "yes" : "no");
    close(fd);
    SAY(fstat(fd, &a), "fstat(closed fd)");
    SAY(chmod("b.txt", 0640), "chmod(b.txt, 0640)");
    STAT(stat, "b.txt", "stat(b.txt)");
    fd = open("b.txt", O_RDONLY);
    SAY(fchmod(fd, 0604), "fchmod(b.txt, 0604)");
    show_stat("fstat(b.txt)", fstat(fd, &a), &a);
    close(fd);
    struct timespec t[2] = { { 1000000000, 0 }, { 1234567890, 500 } };
    SAY(utimensat(AT_FDCWD, "b.txt", t, 0), "utimensat(b.txt, 1000000000, 1234567890.000000500)");
    if (stat("b.txt", &a) == 0)
        printf("stat(b.txt) times = atime %lld mtime %lld.%09ld\n", (long long)a.st_atim.tv_sec,
               (long long)a.st_mtim.tv_sec, a.st_mtim.tv_nsec);
    SAY(access("b.txt", R_OK | W_OK), "access(b.txt, R_OK|W_OK)");
    SAY(access("missing", F_OK), "access(missing)");
    char buf[64];
    long n = readlink("pre/link", buf, sizeof buf);
    show_bytes("readlink(pre/link)", buf, n);
    SAY(readlink("pre/file.txt", buf, sizeof buf), "readlink(pre/file.txt)");
    SAY(readlink("missing", buf, sizeof buf), "readlink(missing)");
    n = readlink("pre/link", buf, 3);
    show_bytes("readlink(pre/link, 3 bytes)", buf, n);
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* the sorted names of a directory, with their d_type */
static void listing(const char *path)
{
    DIR *d = opendir(path);
    if (!d) {
        printf("opendir(%s) = NULL %s\n", path, strerrorname_np(errno));
        return;
    }
    char *names[64];
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) && n < 64;) {
        const char *t = e->d_type == DT_DIR ? "/" : e->d_type == DT_LNK ? "@" : e->d_type == DT_REG ? ""
                      : e->d_type == DT_FIFO ? "|" : "?";
        if (asprintf(&names[n], "%s%s", e->d_name, t) > 0)
            n++;
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, by_name);
    printf("listing(%s) =", path);
    for (int i = 0; i < n; i++) {
        printf(" %s", names[i]);
        free(names[i]);
    }
    printf("\n");
}

/* the same through getdents64 itself */
static void raw_listing(const char *path)
{
    char buf[4096], *names[64];
    int n = 0, fd = open(path, O_RDONLY | O_DIRECTORY);
    long got;
    while (fd >= 0 && (got = getdents64(fd, buf, sizeof buf)) > 0)
        for (long at = 0; at < got && n < 64;) {
            struct dirent64 *e = (struct dirent64 *)(buf + at);
            if (asprintf(&names[n], "%s%s", e->d_name, e->d_type == DT_DIR ? "/" : "") > 0)
                n++;
            at += e->d_reclen;
        }
    printf("getdents64(%s) =", path);
    if (fd < 0)
        printf(" -1 %s", strerrorname_np(errno));
    qsort(names, (size_t)n, sizeof *names, by_name);
    for (int i = 0; i < n; i++) {
        printf(" %s", names[i]);
        free(names[i]);
    }
    printf("\n");
    close(fd);
}

static void dirs(void)
{
    printf("# directories\n");
    SAY(mkdir("d", 0777), "mkdir(d, 0777)");
    STAT(stat, "d", "stat(d)");
    SAY(mkdir("d", 0777), "mkdir(d) again");
    SAY(mkdir("missing/d", 0777), "mkdir(missing/d)");
    SAY(mkdir("a.txt/d", 0777), "mkdir(a.txt/d)");
    SAY(mkdir("d/sub", 0700), "mkdir(d/sub, 0700)");
    int fd = SAYFD(open("d/f", O_CREAT | O_WRONLY, 0644), "open(d/f, O_CREAT)");
    close(fd);
    SAY(rmdir("d"), "rmdir(d) not empty");
    SAY(rmdir("a.txt"), "rmdir(a.txt)");
    SAY(rmdir("missing"), "rmdir(missing)");
    SAY(rmdir("."), "rmdir(.)");
    SAY(unlink("d"), "unlink(d)");
    SAY(unlink("missing"), "unlink(missing)");
    SAY(rmdir("d/sub"), "rmdir(d/sub)");
    SAY(rename("d/f", "d/g"), "rename(d/f, d/g)");
    SAY(rename("missing", "d/h"), "rename(missing, d/h)");
    SAY(rename("b.txt", "d/g"), "rename(b.txt, d/g) over a file");
    SAY(rename("a.txt", "d"), "rename(a.txt, d) onto a directory");
    SAY(rename("d", "s.dat"), "rename(d, s.dat) onto a file");
    SAY(mkdir("e", 0755), "mkdir(e)");
    SAY(rename("e", "d"), "rename(e, d) onto a non-empty directory");
    SAY(rename("d", "d/sub2"), "rename(d, d/sub2) into itself");
    SAY(mkdir("e/x", 0755), "mkdir(e/x)");
    SAY(mkdir("empty", 0755), "mkdir(empty)");
    SAY(rename("empty", "e/x"), "rename(empty, e/x) onto an empty directory");
    listing(".");
    listing("d");
    listing("pre");
    listing("missing");
    listing("a.txt");
    raw_listing("e");
    raw_listing("missing");
    int dfd = SAYFD(open("pre/dir", O_RDONLY | O_DIRECTORY), "open(pre/dir, O_DIRECTORY)");
    char buf[8];
    SAY(read(dfd, buf, sizeof buf), "read(directory fd)");
    struct stat st;
    show_stat("fstatat(dir fd, inner)", fstatat(dfd, "inner", &st, 0), &st);
    SAY(mkdirat(dfd, "made", 0755), "mkdirat(dir fd, made)");
    fd = SAYFD(openat(dfd, "at.txt", O_CREAT | O_WRONLY, 0644), "openat(dir fd, at.txt, O_CREAT)");
    close(fd);
    SAY(unlinkat(dfd, "made", AT_REMOVEDIR), "unlinkat(dir fd, made, AT_REMOVEDIR)");
    SAY(unlinkat(dfd, "at.txt", 0), "unlinkat(dir fd, at.txt)");
    SAY(unlinkat(dfd, "inner", AT_REMOVEDIR), "unlinkat(dir fd, inner (a file), AT_REMOVEDIR)");
    SAYFD(openat(fd, "x", O_RDONLY), "openat(closed fd, x)");
    close(dfd);
}

/* getcwd() shown relative to DIR */
static void show_cwd(void)
{
    char cwd[4096];
    size_t n = strlen(top);
    if (!getcwd(cwd, sizeof cwd))
        printf("getcwd = NULL %s\n", strerrorname_np(errno));
    else if (strncmp(cwd, top, n) == 0)
        printf("getcwd = <dir>%s\n", cwd + n);
    else
        printf("getcwd = outside <dir>\n");
}

static void cwds(void)
{
    printf("# working directory\n");
    show_cwd();
    SAY(chdir("d"), "chdir(d)");
    show_cwd();
    int fd = SAYFD(open("../s.dat", O_RDONLY), "open(../s.dat)");
    close(fd);
    STAT(stat, "g", "stat(g) relative to d");
    SAY(chdir("../pre/dir"), "chdir(../pre/dir)");
    show_cwd();
    SAY(chdir("../../missing"), "chdir(../../missing)");
    SAY(chdir("../../a.txt"), "chdir(../../a.txt)");
    show_cwd();
    int dfd = open("../..", O_RDONLY | O_DIRECTORY);
    SAY(fchdir(dfd), "fchdir(fd of ../..)");
    close(dfd);
    show_cwd();
    SAY(fchdir(dfd), "fchdir(closed fd)");
    SAY(chdir("pre/link"), "chdir(pre/link) to a file");
    char small[4];
    SAY(getcwd(small, sizeof small) ? 0 : -1, "getcwd(4-byte buffer)");
}

static void fds(void)
{
    printf("# descriptors\n");
    int a = SAYFD(open("s.dat", O_RDONLY), "open(s.dat) a");
    int b = SAYFD(open("s.dat", O_RDONLY), "open(s.dat) b");
    int c = SAYFD(open("s.dat", O_RDONLY), "open(s.dat) c");
    SAY(close(b), "close(b)");
    b = SAYFD(open("s.dat", O_RDONLY), "open(s.dat) takes the lowest free");
    SAY(close(a), "close(a)");
    int d = SAYFD(dup(c), "dup(c) takes the lowest free");
    SAY(lseek(c, 2, SEEK_SET), "lseek(c, 2)");
    SAY(lseek(d, 0, SEEK_CUR), "lseek(dup of c, 0, SEEK_CUR) shares the offset");
    SAY(fcntl(d, F_GETFD), "fcntl(dup, F_GETFD)");
    /* the lowest free number is now c+1 */
    if (SAYFD(dup2(b, c + 1), "dup2(b, lowest free)") >= 0)
        close(c + 1);
    if (SAYFD(dup3(b, c + 1, 0), "dup3(b, lowest free, 0)") >= 0)
        close(c + 1);
    SAY(dup2(b, 100), "dup2(b, 100)");
    SAY(lseek(100, 0, SEEK_CUR), "lseek(100, 0, SEEK_CUR)");
    SAYFD(dup2(b, b), "dup2(b, b)");
    SAYFD(dup2(100, d), "dup2(100, an open fd)");
    SAY(lseek(d, 0, SEEK_CUR), "lseek(d, 0, SEEK_CUR) now b's offset");
    SAY(dup2(999, 101), "dup2(closed, 101)");
    SAYFD(dup2(b, -1), "dup2(b, -1)");
    SAYFD(dup3(b, b, 0), "dup3(b, b, 0)");
    SAY(dup3(b, 102, 0x4000), "dup3(b, 102, bad flags)");
    SAY(dup3(b, 102, O_CLOEXEC), "dup3(b, 102, O_CLOEXEC)");
    SAY(fcntl(102, F_GETFD), "fcntl(102, F_GETFD)");
    SAY(fcntl(102, F_SETFD, 0), "fcntl(102, F_SETFD, 0)");
    SAY(fcntl(102, F_GETFD), "fcntl(102, F_GETFD)");
    SAY(fcntl(b, F_DUPFD, 50), "fcntl(b, F_DUPFD, 50)");
    SAY(fcntl(b, F_DUPFD, 50), "fcntl(b, F_DUPFD, 50) again");
    SAY(fcntl(b, F_DUPFD_CLOEXEC, 60), "fcntl(b, F_DUPFD_CLOEXEC, 60)");
    SAY(fcntl(60, F_GETFD), "fcntl(60, F_GETFD)");
    SAY(fcntl(b, F_DUPFD, -1), "fcntl(b, F_DUPFD, -1)");
    SAY(fcntl(999, F_GETFD), "fcntl(999, F_GETFD)");
    int e = SAYFD(open("s.dat", O_RDONLY | O_CLOEXEC), "open(s.dat, O_CLOEXEC)");
    SAY(fcntl(e, F_GETFD), "fcntl(O_CLOEXEC fd, F_GETFD)");
    close(e);
    int w = SAYFD(open("s.dat", O_RDWR | O_APPEND), "open(s.dat, O_RDWR|O_APPEND)");
    long fl = fcntl(w, F_GETFL);
    printf("fcntl(F_GETFL) = accmode %s append %d nonblock %d\n",
           (fl & O_ACCMODE) == O_RDWR ? "O_RDWR" : "other", !!(fl & O_APPEND), !!(fl & O_NONBLOCK));
    SAY(fcntl(w, F_SETFL, O_NONBLOCK), "fcntl(F_SETFL, O_NONBLOCK)");
    fl = fcntl(w, F_GETFL);
    printf("fcntl(F_GETFL) = accmode %s append %d nonblock %d\n",
           (fl & O_ACCMODE) == O_RDWR ? "O_RDWR" : "other", !!(fl & O_APPEND), !!(fl & O_NONBLOCK));
    fl = fcntl(b, F_GETFL);
    printf("fcntl(O_RDONLY fd, F_GETFL) = accmode %s\n", (fl & O_ACCMODE) == O_RDONLY ? "O_RDONLY" : "other");
    int fds[] = { b, c, d, w, 50, 51, 60, 100, 102 };
    for (size_t i = 0; i < sizeof fds / sizeof *fds; i++)
        close(fds[i]);
    SAY(close(-1), "close(-1)");
    SAY(close(c), "close(c) twice");
    SAY(close(1000), "close(1000)");
    SAY(close(100000), "close(100000)");
    SAYFD(open("s.dat", O_RDONLY), "open(s.dat) after closing all: B");
    close(base);
}

static void pipes(void)
{
    int p[2], s[2];
    char buf[16];
    struct stat st;
    printf("# pipes and socket pairs\n");
    SAY(pipe(p), "pipe");
    printf("pipe fds = B%+d B%+d\n", p[0] - base, p[1] - base);
    SAY(write(p[1], "through", 7), "write(pipe)");
    show_bytes("read(pipe)", buf, read(p[0], buf, sizeof buf));
    SAY(lseek(p[0], 0, SEEK_SET), "lseek(pipe)");
    show_stat("fstat(pipe)", fstat(p[0], &st), &st);
    SAY(write(p[0], "x", 1), "write(read end)");
    close(p[1]);
    SAY(read(p[0], buf, sizeof buf), "read(pipe) after the writer closed");
    close(p[0]);
    SAY(pipe(p), "pipe");
    close(p[0]);
    SAY(write(p[1], "x", 1), "write(pipe) after the reader closed");
    close(p[1]);
    SAY(pipe2(p, O_CLOEXEC | O_NONBLOCK), "pipe2(O_CLOEXEC|O_NONBLOCK)");
    SAY(fcntl(p[0], F_GETFD), "fcntl(pipe2 fd, F_GETFD)");
    SAY(read(p[0], buf, sizeof buf), "read(empty non-blocking pipe)");
    close(p[0]);
    close(p[1]);

    SAY(socketpair(AF_UNIX, SOCK_STREAM, 0, s), "socketpair(AF_UNIX, SOCK_STREAM)");
    SAY(send(s[0], "ping", 4, 0), "send(pair)");
    show_bytes("recv(pair)", buf, recv(s[1], buf, sizeof buf, 0));
    SAY(write(s[1], "pong", 4), "write(pair)");
    show_bytes("read(pair)", buf, read(s[0], buf, sizeof buf));
    show_stat("fstat(pair)", fstat(s[0], &st), &st);
    SAY(shutdown(s[0], SHUT_WR), "shutdown(pair, SHUT_WR)");
    SAY(recv(s[1], buf, sizeof buf, 0), "recv(pair) after shutdown");
    SAY(lseek(s[0], 0, SEEK_SET), "lseek(pair)");
    close(s[0]);
    close(s[1]);
}

static struct sockaddr_in loopback(in_port_t port)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = port };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
}

static void tcp(void)
{
    char buf[16];
    printf("# TCP on 127.0.0.1\n");
    int l = SAYFD(socket(AF_INET, SOCK_STREAM, 0), "socket(AF_INET, SOCK_STREAM) listener");
    struct sockaddr_in a = loopback(0);
    socklen_t len = sizeof a;
    SAY(bind(l, (struct sockaddr *)&a, sizeof a), "bind(127.0.0.1:0)");
    SAY(listen(l, 4), "listen");
    SAY(getsockname(l, (struct sockaddr *)&a, &len), "getsockname");
    printf("bound port nonzero = %d\n", a.sin_port != 0);
    int c = SAYFD(socket(AF_INET, SOCK_STREAM, 0), "socket(AF_INET, SOCK_STREAM) client");
    SAY(connect(c, (struct sockaddr *)&a, sizeof a), "connect(127.0.0.1:port)");
    SAY(connect(c, (struct sockaddr *)&a, sizeof a), "connect again");
    int s = SAYFD(accept(l, NULL, NULL), "accept");
    SAY(send(c, "hello", 5, 0), "send(client, 5)");
    show_bytes("recv(server, 5, MSG_WAITALL)", buf, recv(s, buf, 5, MSG_WAITALL));
    SAY(write(s, "back", 4), "write(server, 4)");
    show_bytes("recv(client, 4, MSG_WAITALL)", buf, recv(c, buf, 4, MSG_WAITALL));
    struct sockaddr_in peer;
    len = sizeof peer;
    SAY(getpeername(c, (struct sockaddr *)&peer, &len), "getpeername(client)");
    printf("client's peer is the listener = %d\n", peer.sin_port == a.sin_port);
    int one = 1;
    SAY(setsockopt(c, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one), "setsockopt(SO_KEEPALIVE)");
    int v = 0;
    len = sizeof v;
    SAY(getsockopt(c, SOL_SOCKET, SO_KEEPALIVE, &v, &len), "getsockopt(SO_KEEPALIVE)");
    printf("SO_KEEPALIVE = %d\n", v != 0);
    SAY(shutdown(c, SHUT_WR), "shutdown(client, SHUT_WR)");
    SAY(recv(s, buf, sizeof buf, 0), "recv(server) after the client's shutdown");
    close(s);
    SAY(recv(c, buf, sizeof buf, 0), "recv(client) after the server closed");
    close(c);
    close(l);
    /* a port nobody listens on: the one just closed */
    c = socket(AF_INET, SOCK_STREAM, 0);
    SAY(connect(c, (struct sockaddr *)&a, sizeof a), "connect(closed port)");
    close(c);
    SAY(send(999, "x", 1, 0), "send(999)");
    int f = open("s.dat", O_RDONLY);
    SAY(listen(f, 1), "listen(a file)");
    close(f);
}

/* readiness over a shipped file, a pipe and a shipped socket; UDP through the I/O node */
static void readiness(void)
{
    char buf[16];
    int p[2];
    printf("# poll, select, UDP\n");
    int f = open("s.dat", O_RDONLY);
    int u = socket(AF_INET, SOCK_DGRAM, 0), v = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in a = loopback(0);
    socklen_t len = sizeof a;
    SAY(bind(u, (struct sockaddr *)&a, sizeof a), "bind(UDP, 127.0.0.1:0)");
    getsockname(u, (struct sockaddr *)&a, &len);
    SAY(sendto(v, "dgram", 5, 0, (struct sockaddr *)&a, sizeof a), "sendto(127.0.0.1:port, 5)");
    SAY(pipe(p), "pipe");
    struct pollfd pf[3] = { { f, POLLIN, 0 }, { p[0], POLLIN, 0 }, { v, POLLOUT, 0 } };
    SAY(poll(pf, 3, 1000), "poll(file, empty pipe, UDP socket for POLLOUT)");
    printf("revents = file %#x pipe %#x socket %#x\n", pf[0].revents, pf[1].revents, pf[2].revents);
    fd_set rd;
    FD_ZERO(&rd);
    FD_SET(f, &rd);
    FD_SET(p[0], &rd);
    struct timeval tv = { 0, 0 };
    SAY(select((f > p[0] ? f : p[0]) + 1, &rd, NULL, NULL, &tv), "select(file, empty pipe)");
    printf("select ready = file %d pipe %d\n", FD_ISSET(f, &rd) != 0, FD_ISSET(p[0], &rd) != 0);
    show_bytes("recv(UDP, 16)", buf, recv(u, buf, sizeof buf, 0));
    SAY(recv(u, buf, sizeof buf, MSG_DONTWAIT), "recv(UDP) with nothing queued");
    struct sockaddr_in from;
    len = sizeof from;
    SAY(sendto(u, "back", 4, 0, (struct sockaddr *)&a, sizeof a), "sendto(itself)");
    SAY(recvfrom(u, buf, sizeof buf, 0, (struct sockaddr *)&from, &len), "recvfrom(UDP)");
    printf("recvfrom's sender is itself = %d\n", from.sin_port == a.sin_port);
    int tiny = open(".", O_RDONLY | O_DIRECTORY);
    SAY(getdents64(tiny, buf, 8), "getdents64(., 8-byte buffer)");
    close(tiny);
    DIR *d = opendir(".");
    int n = 0, m = 0;
    while (d && readdir(d))
        n++;
    close(open("new.txt", O_CREAT | O_WRONLY, 0644));
    rewinddir(d);
    while (d && readdir(d))
        m++;
    printf("readdir after rewinddir and a new file = %d more\n", m - n);
    if (d)
        closedir(d);
    unlink("new.txt");
    int fds[] = { f, u, v, p[0], p[1] };
    for (size_t i = 0; i < sizeof fds / sizeof *fds; i++)
        close(fds[i]);
}

/* chown, link, symlink, mknod (issue 14: each has its own wire message now) */
static void unshipped(void)
{
    printf("# links, owners, nodes\n");
    SAY(symlink("s.dat", "sym"), "symlink(s.dat, sym)");
    STAT(lstat, "sym", "lstat(sym)");
    SAY(link("s.dat", "hard"), "link(s.dat, hard)");
    STAT(stat, "s.dat", "stat(s.dat)");
    SAY(chown("s.dat", (uid_t)-1, (gid_t)-1), "chown(s.dat, -1, -1)");
    char fifo[4200];
    snprintf(fifo, sizeof fifo, "%s/fifo", top);
    SAY(mkfifo(fifo, 0644), "mkfifo(<dir>/fifo)");
    STAT(lstat, "fifo", "lstat(fifo)");
    SAY(symlinkat("s.dat", AT_FDCWD, "sym"), "symlinkat(s.dat, sym) again");
    SAY(linkat(AT_FDCWD, "sym", AT_FDCWD, "hard2", 0), "linkat(sym, hard2) links the link");
    STAT(lstat, "hard2", "lstat(hard2)");
    SAY(lchown("sym", (uid_t)-1, (gid_t)-1), "lchown(sym, -1, -1)");
    SAY(fchownat(AT_FDCWD, "missing", (uid_t)-1, (gid_t)-1, 0), "fchownat(missing)");
    int f = open("s.dat", O_RDONLY);
    SAY(fchown(f, (uid_t)-1, getgid()), "fchown(s.dat, -1, own group)");
    close(f);
    SAY(mknod("node", S_IFREG | 0600, 0), "mknod(node, S_IFREG)");
    STAT(lstat, "node", "lstat(node)");
    SAY(mknodat(AT_FDCWD, "node", S_IFIFO | 0600, 0), "mknodat(node) exists");
    unlink("node");
    unlink("hard2");
    unlink("sym");
    unlink("hard");
    unlink("fifo");
}

/* how names are resolved: dots, slashes, symbolic links, lengths, node-local paths */
static void paths(void)
{
    char name[5000];
    struct stat st;
    printf("# paths\n");
    /* pre/deeplink/..: the parent of the link's target (pre/dir), not pre */
    STAT_ALL({ 0, "./s.dat" }, { 0, "pre/../s.dat" }, { 0, "pre//file.txt" }, { 0, "pre/dir/" },
             { 0, "s.dat/" }, { 0, "pre/dirlink/inner" }, { 0, "pre/deeplink/../inner" },
             { 1, "pre/dirlink/" }, { 0, "missing/.." });
    SAY(mkdir("newdir/", 0755), "mkdir(newdir/)");
    SAY(rmdir("newdir/."), "rmdir(newdir/.)");
    SAY(rmdir("newdir/"), "rmdir(newdir/)");
    SAY(chdir("pre/deeplink"), "chdir(pre/deeplink)");
    show_cwd();
    STAT(stat, "../inner", "stat(../inner) from pre/deeplink");
    SAY(chdir(top), "chdir(<dir>)");
    memset(name, 'n', 300);
    name[300] = 0;
    STAT(stat, name, "stat(a 300-byte name)");
    for (int i = 0; i < 2100; i++)
        memcpy(name + 2 * i, "./", 2);
    strcpy(name + 4200, "s.dat");
    STAT(stat, name, "stat(./ 2100 times, then s.dat)");
    int fd = open("s.dat", O_RDONLY);
    snprintf(name, sizeof name, "/dev/fd/%d", fd);
    show_stat("stat(/dev/fd/N of s.dat)", stat(name, &st), &st);
    close(fd);
    STAT(stat, "/dev/null", "stat(/dev/null)");
    fd = SAYFD(open("/dev/null", O_WRONLY), "open(/dev/null, O_WRONLY)");
    SAY(write(fd, "gone", 4), "write(/dev/null)");
    close(fd);
}

/* less common file calls */
static void more(void)
{
    char buf[8];
    struct stat st;
    printf("# more file calls\n");
    int fd = SAYFD(open("h.dat", O_CREAT | O_RDWR, 0644), "open(h.dat)");
    SAY(pwrite(fd, "D", 1, 1 << 20), "pwrite(D, offset 1 MiB)");
    SAY(lseek(fd, 0, SEEK_DATA), "lseek(0, SEEK_DATA) in a file that starts with a hole");
    SAY(lseek(fd, 0, SEEK_HOLE), "lseek(0, SEEK_HOLE)");
    SAY(lseek(fd, (1 << 20) + 1, SEEK_DATA), "lseek(end, SEEK_DATA)");
    SAY(ftruncate(fd, -1), "ftruncate(-1)");
    SAY(unlink("h.dat"), "unlink(h.dat) while open");
    show_stat("fstat(unlinked h.dat)", fstat(fd, &st), &st);
    show_bytes("pread(unlinked h.dat, 1, offset 1 MiB)", buf, pread(fd, buf, 1, 1 << 20));
    close(fd);
    fd = SAYFD(open("pre/file.txt", O_PATH), "open(pre/file.txt, O_PATH)");
    show_stat("fstat(O_PATH fd)", fstat(fd, &st), &st);
    SAY(read(fd, buf, 1), "read(O_PATH fd)");
    close(fd);
    SAYFD(open("x", O_CREAT | O_DIRECTORY | O_WRONLY, 0644), "open(x, O_CREAT|O_DIRECTORY|O_WRONLY)");
    SAY(renameat2(AT_FDCWD, "st.txt", AT_FDCWD, "s.dat", RENAME_NOREPLACE), "renameat2(st.txt, s.dat, RENAME_NOREPLACE)");
    SAY(faccessat(AT_FDCWD, "pre/dangling", F_OK, AT_SYMLINK_NOFOLLOW), "faccessat(pre/dangling, AT_SYMLINK_NOFOLLOW)");
    fd = open("s.dat", O_RDWR);
    SAY(fcntl(fd, F_SETFL, O_APPEND), "fcntl(s.dat, F_SETFL, O_APPEND)");
    SAY(write(fd, "!", 1), "write(!) now appends");
    SAY(lseek(fd, 0, SEEK_CUR), "lseek(0, SEEK_CUR)");
    SAY(ftruncate(fd, 5), "ftruncate(s.dat, 5)");
    int p[2];
    if (pipe(p) == 0) {
        SAYFD(dup2(p[0], fd), "dup2(pipe, s.dat's fd)");
        SAY(lseek(fd, 0, SEEK_CUR), "lseek(it) now a pipe");
        close(p[0]);
        close(p[1]);
    }
    close(fd);
    SAY(umask(077), "umask(077) returns the old mask");
    fd = open("u.txt", O_CREAT | O_WRONLY, 0666);
    close(fd);
    STAT(stat, "u.txt", "stat(u.txt) made under umask 077");
    umask(022);
    unlink("u.txt");
}

static void show_lock(const char *what, long r, const struct flock *lk, int pid_too)
{
    if (r < 0) {
        printf("%s = -1 %s\n", what, strerrorname_np(errno));
        return;
    }
    printf("%s = %s", what, lk->l_type == F_UNLCK ? "F_UNLCK" : lk->l_type == F_RDLCK ? "F_RDLCK" : "F_WRLCK");
    if (lk->l_type != F_UNLCK)
        printf(" whence %d start %lld len %lld", lk->l_whence, (long long)lk->l_start, (long long)lk->l_len);
    if (pid_too && lk->l_type != F_UNLCK)
        printf(" pid %d", lk->l_pid);
    printf("\n");
}

/* Locks between the program's descriptors: a process's record locks never
 * conflict with each other and go with any close of the file; OFD locks
 * and flock belong to the open file, so a second open conflicts. */
static void other_locks(int fd)
{
    int b = open("s.dat", O_RDWR), c = open("s.dat", O_RDWR), w = open("s.dat", O_WRONLY);
    struct flock lk = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };

    SAY(fcntl(fd, F_SETLKW, &lk), "fcntl(s.dat, F_SETLKW, write lock [0,1))");
    lk = (struct flock){ .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };
    show_lock("fcntl(other descriptor, F_GETLK)", fcntl(b, F_GETLK, &lk), &lk, 1);
    lk = (struct flock){ .l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 4 };
    show_lock("fcntl(other descriptor, F_OFD_GETLK) sees the record lock", fcntl(c, F_OFD_GETLK, &lk), &lk, 0);
    lk = (struct flock){ .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };
    SAY(fcntl(b, F_OFD_SETLK, &lk), "fcntl(other descriptor, F_OFD_SETLK, same range)");
    close(b);
    lk = (struct flock){ .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };
    show_lock("after closing the other descriptor, F_OFD_GETLK", fcntl(c, F_OFD_GETLK, &lk), &lk, 0);

    lk = (struct flock){ .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 10, .l_len = 10 };
    SAY(fcntl(c, F_OFD_SETLK, &lk), "fcntl(c, F_OFD_SETLK, write lock [10,20))");
    lk = (struct flock){ .l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 15, .l_len = 1 };
    SAY(fcntl(fd, F_SETLK, &lk), "fcntl(s.dat, F_SETLK, read lock at 15)");
    lk = (struct flock){ .l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0 };
    show_lock("fcntl(s.dat, F_GETLK) the OFD lock", fcntl(fd, F_GETLK, &lk), &lk, 1);
    lk = (struct flock){ .l_type = F_UNLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0, .l_pid = 1 };
    SAY(fcntl(c, F_OFD_SETLK, &lk), "fcntl(c, F_OFD_SETLK, l_pid 1)");
    lk.l_pid = 0;
    SAY(fcntl(c, F_OFD_SETLK, &lk), "fcntl(c, F_OFD_SETLK, unlock)");
    lk = (struct flock){ .l_type = F_RDLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };
    SAY(fcntl(w, F_SETLK, &lk), "fcntl(write-only, F_SETLK, read lock)");
    lk.l_type = 7;
    SAY(fcntl(fd, F_SETLK, &lk), "fcntl(s.dat, F_SETLK, bad type)");

    SAY(flock(fd, LOCK_EX), "flock(s.dat, LOCK_EX) again");
    SAY(flock(c, LOCK_SH | LOCK_NB), "flock(other open, LOCK_SH|LOCK_NB)");
    SAY(flock(fd, LOCK_SH), "flock(s.dat, LOCK_SH) converts");
    SAY(flock(c, LOCK_SH | LOCK_NB), "flock(other open, LOCK_SH|LOCK_NB) shares");
    SAY(flock(fd, 0), "flock(s.dat, 0)");
    close(c);
    close(w);
    SAY(flock(fd, LOCK_UN), "flock(s.dat, LOCK_UN) again");
}

/* calls programs and tools make beyond open/read/write: locks, copies, mappings, terminals */
/* open path as oflags, map it so, say what happened (errors in Linux's order) */
static void map_case(const char *path, int oflags, int prot, int flags, const char *label)
{
    int fd = open(path, oflags);
    char *m = mmap(NULL, 4096, prot, flags, fd, 0);
    if (m == MAP_FAILED)
        printf("mmap(%s) = MAP_FAILED %s\n", label, strerrorname_np(errno));
    else {
        char what[96];
        snprintf(what, sizeof what, "mmap(%s) maps", label);
        show_bytes(what, m, 5);
        munmap(m, 4096);
    }
    close(fd);
}

static void beyond(void)
{
    char buf[16];
    printf("# locks, copies, mappings\n");
    int fd = open("s.dat", O_RDWR);
    SAY(flock(fd, LOCK_EX), "flock(s.dat, LOCK_EX)");
    SAY(flock(fd, LOCK_UN), "flock(s.dat, LOCK_UN)");
    struct flock lk = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 1 };
    SAY(fcntl(fd, F_SETLK, &lk), "fcntl(s.dat, F_SETLK, write lock)");
    lk.l_type = F_WRLCK;
    SAY(fcntl(fd, F_GETLK, &lk), "fcntl(s.dat, F_GETLK)");
    printf("F_GETLK's own lock shows as = %s\n", lk.l_type == F_UNLCK ? "F_UNLCK" : "locked");
    lk.l_type = F_UNLCK;
    SAY(fcntl(fd, F_SETLK, &lk), "fcntl(s.dat, F_SETLK, unlock)");
    other_locks(fd);
    int out = open("copy.dat", O_CREAT | O_RDWR | O_TRUNC, 0644);
    loff_t from = 0;
    SAY(copy_file_range(fd, &from, out, NULL, 5, 0), "copy_file_range(s.dat -> copy.dat, 5)");
    off_t at = 1;
    SAY(sendfile(out, fd, &at, 2), "sendfile(s.dat offset 1 -> copy.dat, 2)");
    show_bytes("pread(copy.dat)", buf, pread(out, buf, sizeof buf, 0));
    SAY(fallocate(out, 0, 0, 100), "fallocate(copy.dat, 0, 100)");
    int pf = posix_fallocate(out, 0, 200);      /* returns the error number */
    say_(pf ? -1 : 0, pf, 0, "posix_fallocate(copy.dat, 0, 200)");
    struct stat st;
    show_stat("fstat(copy.dat)", fstat(out, &st), &st);
    close(out);
    unlink("copy.dat");
    char *m = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED)
        printf("mmap(s.dat, PROT_READ, MAP_PRIVATE) = MAP_FAILED %s\n", strerrorname_np(errno));
    else {
        show_bytes("mmap(s.dat, PROT_READ, MAP_PRIVATE) maps", m, 5);
        munmap(m, 4096);
    }
    map_case("s.dat", O_WRONLY, PROT_READ, MAP_PRIVATE, "O_WRONLY, PROT_READ, MAP_PRIVATE");
    map_case("s.dat", O_RDONLY, PROT_READ | PROT_WRITE, MAP_SHARED, "O_RDONLY, PROT_WRITE, MAP_SHARED");
    map_case("s.dat", O_WRONLY, PROT_READ | PROT_WRITE, MAP_SHARED, "O_WRONLY, PROT_WRITE, MAP_SHARED");
    map_case("s.dat", O_PATH, PROT_READ, MAP_PRIVATE, "O_PATH, PROT_READ, MAP_PRIVATE");
    map_case("pre", O_RDONLY, PROT_READ, MAP_PRIVATE, "directory, PROT_READ, MAP_PRIVATE");
    map_case("s.dat", O_RDWR, PROT_READ, MAP_SHARED, "O_RDWR, PROT_READ, MAP_SHARED");
    map_case("s.dat", O_RDWR, PROT_READ | PROT_WRITE, MAP_SHARED, "O_RDWR, PROT_WRITE, MAP_SHARED");
    errno = 0;
    printf("isatty(s.dat) = %d %s\n", isatty(fd), strerrorname_np(errno) ? strerrorname_np(errno) : "");
    int avail = -1;
    SAY(ioctl(fd, FIONREAD, &avail), "ioctl(s.dat, FIONREAD)");
    SAY(fsync(1000), "fsync(1000)");
    SAY(fdatasync(fd), "fdatasync(s.dat)");
    SAY(pread(open("pre", O_RDONLY | O_DIRECTORY), buf, 1, 0), "pread(directory)");
    SAY(truncate("pre", 0), "truncate(directory)");
    SAY(chmod("missing", 0644), "chmod(missing)");
    SAY(getdents64(fd, buf, sizeof buf), "getdents64(a file)");
    close(fd);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: conformance DIR\n");
        return 64;
    }
    signal(SIGPIPE, SIG_IGN);
    umask(022);
    if (chdir(argv[1]) != 0 || !getcwd(top, sizeof top)) {
        printf("conformance: %s: %s\n", argv[1], strerror(errno));
        return 1;
    }
    files();
    seeks();
    streams();
    stats();
    dirs();
    cwds();
    fds();
    pipes();
    tcp();
    readiness();
    paths();
    more();
    beyond();
    unshipped();
    processes();
    signals();
    emfile();
    printf("# done\n");
    return 0;
}
