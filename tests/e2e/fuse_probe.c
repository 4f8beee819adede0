/*
 * fuse_probe: what tests/e2e/test_t0820_fuse.py runs as a sandboxed job,
 * in its working directory (a tree served by lattice-fs).  Every command
 * first prints fs=fuse, or fs=other when the directory is not on FUSE.
 *
 *   fuse_probe ops              write, read, rename, stat, list, link, chmod,
 *                               truncate, utimens, symlink, unlink, fsync,
 *                               fallocate, a lock: "ops ok"
 *   fuse_probe pair FILE MIB    rank 0 writes FILE (MIB MiB and 123 bytes of a
 *                               known pattern), fsyncs, then makes FILE.done;
 *                               rank 1 waits for FILE.done, reads FILE back:
 *                               "read ok BYTES" if every byte is right
 *   fuse_probe cat FILE         FILE's bytes, or "open FILE: <error>"
 *   fuse_probe poll FILE        stat FILE every 20 ms until it fails: "stat: <error>"
 *   fuse_probe late FILE        stat FILE ("absent" or "present"), wait for
 *                               SIGUSR1, stat it again
 *   fuse_probe reread FILE      rank 0 reads FILE whole three times, waiting
 *                               for SIGUSR1 before the 2nd and 3rd: "readN
 *                               BYTES C" (C its first byte); rank 1 waits for
 *                               SIGUSR1, rewrites FILE with as many 'b's and
 *                               100000 more (write-only, O_TRUNC): "rewrote BYTES"
 *   fuse_probe resync FILE      rank 0 opens FILE read-only, reads it ("read C":
 *                               C its first byte), then after each SIGUSR1
 *                               on the same descriptor: fsync and read
 *                               ("synced C"), then a read lock and read
 *                               ("locked C"); rank 1 rewrites FILE whole
 *                               with 'b's, then 'c's, one SIGUSR1 each:
 *                               "rewrote C"
 *   fuse_probe wback FILE MIB   writes FILE (MIB MiB, write-only), fsyncs,
 *                               closes, reads it back: "wback ok BYTES"
 *   fuse_probe fill MIB         writes fill.dat (MIB MiB in 1 MiB writes, write-only)
 *                               until a write fails, then closes it:
 *                               "wrote BYTES", "write: <error>" if one failed,
 *                               "close: ok" or "close: <error>"
 *   fuse_probe small COUNT      COUNT times: create, write 4 KiB, close, stat,
 *                               unlink one file (bench/fuse_io.c's): "small ok"
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

#define FUSE_MAGIC 0x65735546

#define CHECK(what, cond)                                                                    \
    do {                                                                                     \
        if (!(cond)) {                                                                       \
            printf("FAIL %s: %s\n", what, strerror(errno));                                  \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

static void nap(long ms)
{
    struct timespec t = { ms / 1000, (ms % 1000) * 1000000 };
    nanosleep(&t, NULL);
}

static int cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int ops(void)
{
    struct stat st;
    char buf[64];
    int fd = open("a.txt", O_WRONLY | O_CREAT | O_EXCL, 0644);
    CHECK("create a.txt", fd >= 0);
    CHECK("write", write(fd, "hello fuse\n", 11) == 11);
    CHECK("close", close(fd) == 0);
    fd = open("a.txt", O_RDONLY);
    CHECK("open a.txt", fd >= 0);
    CHECK("read back", read(fd, buf, sizeof buf) == 11 && !memcmp(buf, "hello fuse\n", 11));
    close(fd);
    CHECK("mkdir d", mkdir("d", 0755) == 0);
    CHECK("rename", rename("a.txt", "d/b.txt") == 0);
    CHECK("old name gone", stat("a.txt", &st) < 0 && errno == ENOENT);
    CHECK("stat d/b.txt", stat("d/b.txt", &st) == 0 && st.st_size == 11 && S_ISREG(st.st_mode));
    CHECK("symlink", symlink("b.txt", "d/link") == 0);
    ssize_t n = readlink("d/link", buf, sizeof buf);
    CHECK("readlink", n == 5 && !memcmp(buf, "b.txt", 5));
    fd = open("d/link", O_RDONLY);
    CHECK("read through the link", fd >= 0 && read(fd, buf, sizeof buf) == 11);
    close(fd);
    CHECK("chmod", chmod("d/b.txt", 0600) == 0 && stat("d/b.txt", &st) == 0 && (st.st_mode & 07777) == 0600);
    CHECK("truncate", truncate("d/b.txt", 5) == 0 && stat("d/b.txt", &st) == 0 && st.st_size == 5);
    struct timespec ts[2] = { { 1000000, 0 }, { 2000000, 0 } };
    CHECK("utimens", utimensat(AT_FDCWD, "d/b.txt", ts, 0) == 0 && stat("d/b.txt", &st) == 0 &&
                         st.st_mtim.tv_sec == 2000000);
    CHECK("link", link("d/b.txt", "d/hard") == 0 && stat("d/b.txt", &st) == 0 && st.st_nlink == 2);
    DIR *d = opendir("d");
    CHECK("opendir", d != NULL);
    char *names[8];
    int k = 0;
    for (struct dirent *e; (e = readdir(d)) && k < 8;)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            names[k++] = strdup(e->d_name);
    closedir(d);
    qsort(names, (size_t)k, sizeof names[0], cmp);
    printf("listed:");
    for (int i = 0; i < k; i++)
        printf(" %s", names[i]);
    printf("\n");
    CHECK("unlink", unlink("d/hard") == 0 && unlink("d/link") == 0);
    fd = open("d/b.txt", O_RDWR);
    CHECK("fsync", fd >= 0 && fsync(fd) == 0);
    CHECK("fallocate", fallocate(fd, 0, 0, 8192) == 0 && fstat(fd, &st) == 0 && st.st_size == 8192);
    CHECK("ftruncate", ftruncate(fd, 5) == 0);
    struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 5 };
    CHECK("lock", fcntl(fd, F_SETLK, &fl) == 0);
    close(fd);
    printf("ops ok\n");
    return 0;
}

/* The pattern: byte i of the file. */
static unsigned char pat(uint64_t i)
{
    uint64_t x = (i / 8 + 1) * 0x9e3779b97f4a7c15ull;
    x ^= x >> 29;
    return (unsigned char)(x >> (8 * (i % 8)));
}

static int pair(const char *file, long mib)
{
    const char *r = getenv("LATTICE_RANK");
    size_t total = (size_t)mib << 20 | 123, bs = 1 << 20;
    unsigned char *buf = malloc(bs);
    char done[4200];
    snprintf(done, sizeof done, "%s.done", file);
    CHECK("malloc", buf != NULL);
    if (r && !strcmp(r, "0")) {
        int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        CHECK("create", fd >= 0);
        for (size_t at = 0; at < total;) {
            size_t len = total - at < bs ? total - at : bs;
            for (size_t i = 0; i < len; i++)
                buf[i] = pat(at + i);
            CHECK("write", write(fd, buf, len) == (ssize_t)len);
            at += len;
        }
        CHECK("fsync", fsync(fd) == 0 && close(fd) == 0);
        fd = open(done, O_WRONLY | O_CREAT, 0644);
        CHECK("create done", fd >= 0 && close(fd) == 0);
        printf("wrote %zu\n", total);
        return 0;
    }
    struct stat st;
    for (int i = 0; stat(done, &st) < 0; i++) {     /* the writer's word, on another node */
        CHECK("wait for the writer", errno == ENOENT && i < 30000);
        nap(20);
    }
    int fd = open(file, O_RDONLY);
    CHECK("open", fd >= 0);
    size_t at = 0;
    ssize_t n;
    while ((n = read(fd, buf, bs)) > 0) {
        for (ssize_t i = 0; i < n; i++)
            if (buf[i] != pat(at + (size_t)i)) {
                printf("MISMATCH at byte %zu\n", at + (size_t)i);
                return 1;
            }
        at += (size_t)n;
    }
    CHECK("read", n == 0);
    printf(at == total ? "read ok %zu\n" : "SHORT %zu\n", at);
    return at == total ? 0 : 1;
}

static int cat(const char *file)
{
    char buf[4096];
    int fd = open(file, O_RDONLY);
    if (fd < 0) {
        printf("open %s: %s\n", file, strerror(errno));
        return 1;
    }
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0)
        fwrite(buf, 1, (size_t)n, stdout);
    close(fd);
    return 0;
}

static int poll_file(const char *file)
{
    struct stat st;
    printf("polling\n");
    fflush(stdout);
    while (stat(file, &st) == 0)
        nap(20);
    printf("stat: %s\n", strerror(errno));
    return 2;
}

/* A name another node (or the I/O node's host) makes is seen at once. */
static int late(const char *file)
{
    struct stat st;
    sigset_t usr1;
    int sig;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, NULL);
    printf("%s\n", stat(file, &st) == 0 ? "present" : "absent");
    sigwait(&usr1, &sig);
    printf("%s\n", stat(file, &st) == 0 ? "present" : "absent");
    return 0;
}

static void wait_usr1(void)
{
    sigset_t usr1;
    int sig;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigwait(&usr1, &sig);
}

/* FILE's bytes: their count, *first the first; exits on an error. */
static size_t slurp(const char *file, int *first)
{
    static char buf[1 << 16];
    int fd = open(file, O_RDONLY);
    CHECK("open", fd >= 0);
    size_t total = 0;
    ssize_t n;
    *first = -1;
    while ((n = read(fd, buf, sizeof buf)) > 0) {
        if (!total)
            *first = (unsigned char)buf[0];
        total += (size_t)n;
    }
    CHECK("read", n == 0 && close(fd) == 0);
    return total;
}

/* Node 0 caches FILE; node 1 rewrites it; node 0 opens it again. */
static int reread(const char *file)
{
    const char *r = getenv("LATTICE_RANK");
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, NULL);
    int first;
    if (r && !strcmp(r, "1")) {
        struct stat st;
        wait_usr1();
        CHECK("stat", stat(file, &st) == 0);
        size_t n = (size_t)st.st_size + 100000;
        char *b = malloc(n);
        CHECK("malloc", b != NULL);
        memset(b, 'b', n);
        int fd = open(file, O_WRONLY | O_TRUNC);
        CHECK("open for writing", fd >= 0);
        CHECK("write", write(fd, b, n) == (ssize_t)n && close(fd) == 0);
        printf("rewrote %zu\n", n);
        return 0;
    }
    for (int i = 1; i <= 3; i++) {
        if (i > 1)
            wait_usr1();
        size_t n = slurp(file, &first);
        printf("read%d %zu %c\n", i, n, first);
    }
    return 0;
}

/* Node 0 holds FILE open and cached; node 1 rewrites it; node 0's fsync,
 * then its lock, make its next read see the new bytes. */
static int resync(const char *file)
{
    const char *r = getenv("LATTICE_RANK");
    sigset_t usr1;
    sigemptyset(&usr1);
    sigaddset(&usr1, SIGUSR1);
    sigprocmask(SIG_BLOCK, &usr1, NULL);
    char buf[4096];
    if (r && !strcmp(r, "1")) {
        for (char c = 'b'; c <= 'c'; c++) {
            struct stat st;
            wait_usr1();
            CHECK("stat", stat(file, &st) == 0);
            size_t n = (size_t)st.st_size;
            char *b = malloc(n);
            CHECK("malloc", b != NULL);
            memset(b, c, n);
            int fd = open(file, O_WRONLY | O_TRUNC);
            CHECK("rewrite", fd >= 0 && write(fd, b, n) == (ssize_t)n && close(fd) == 0);
            free(b);
            printf("rewrote %c\n", c);
        }
        return 0;
    }
    int fd = open(file, O_RDONLY);
    CHECK("open", fd >= 0);
    CHECK("read", pread(fd, buf, sizeof buf, 0) == (ssize_t)sizeof buf);
    printf("read %c\n", buf[0]);
    wait_usr1();
    CHECK("fsync", fsync(fd) == 0);
    CHECK("read", pread(fd, buf, sizeof buf, 0) == (ssize_t)sizeof buf);
    printf("synced %c\n", buf[0]);
    wait_usr1();
    struct flock fl = { .l_type = F_RDLCK, .l_whence = SEEK_SET };
    CHECK("lock", fcntl(fd, F_SETLKW, &fl) == 0);
    CHECK("read", pread(fd, buf, sizeof buf, 0) == (ssize_t)sizeof buf);
    printf("locked %c\n", buf[0]);
    return 0;
}

/* A file system that fills up: its error is said by a write or by close. */
static int fill(long mib)
{
    size_t bs = 1 << 20, total = 0;
    char *buf = malloc(bs);
    CHECK("malloc", buf != NULL);
    memset(buf, 'f', bs);
    int fd = open("fill.dat", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK("create", fd >= 0);
    for (long i = 0; i < mib; i++) {
        ssize_t n = write(fd, buf, bs);
        if (n < 0) {
            printf("wrote %zu\nwrite: %s\n", total, strerror(errno));
            break;
        }
        total += (size_t)n;
    }
    if (total == (size_t)mib << 20)
        printf("wrote %zu\n", total);
    printf("close: %s\n", close(fd) == 0 ? "ok" : strerror(errno));
    return 0;
}

static int wback(const char *file, long mib)
{
    size_t bs = 1 << 20;
    char *buf = malloc(bs);
    CHECK("malloc", buf != NULL);
    memset(buf, 'w', bs);
    int fd = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK("create", fd >= 0);
    for (long i = 0; i < mib; i++)
        CHECK("write", write(fd, buf, bs) == (ssize_t)bs);
    CHECK("fsync", fsync(fd) == 0 && close(fd) == 0);
    int first;
    size_t n = slurp(file, &first);
    printf(n == (size_t)mib << 20 && first == 'w' ? "wback ok %zu\n" : "SHORT %zu\n", n);
    return 0;
}

static int small(long count)
{
    char buf[4096], name[64];
    struct stat st;
    memset(buf, 's', sizeof buf);
    for (long i = 0; i < count; i++) {
        snprintf(name, sizeof name, "small.%ld", i);
        int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        CHECK(name, fd >= 0 && write(fd, buf, sizeof buf) == (ssize_t)sizeof buf && close(fd) == 0);
        CHECK(name, stat(name, &st) == 0 && st.st_size == (off_t)sizeof buf && unlink(name) == 0);
    }
    printf("small ok\n");
    return 0;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct statfs sf;       /* first, always: where the working directory is */
    printf("fs=%s\n", statfs(".", &sf) == 0 && sf.f_type == FUSE_MAGIC ? "fuse" : "other");
    if (argc == 2 && !strcmp(argv[1], "ops"))
        return ops();
    if (argc == 4 && !strcmp(argv[1], "pair"))
        return pair(argv[2], atol(argv[3]));
    if (argc == 3 && !strcmp(argv[1], "cat"))
        return cat(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "poll"))
        return poll_file(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "late"))
        return late(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "reread"))
        return reread(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "resync"))
        return resync(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "fill"))
        return fill(atol(argv[2]));
    if (argc == 3 && !strcmp(argv[1], "small"))
        return small(atol(argv[2]));
    if (argc == 4 && !strcmp(argv[1], "wback"))
        return wback(argv[2], atol(argv[3]));
    fprintf(stderr, "usage: fuse_probe ops | pair FILE MIB | cat FILE | poll FILE | late FILE | reread FILE | resync FILE | "
            "wback FILE MIB | fill MIB | small COUNT\n");
    return 2;
}
