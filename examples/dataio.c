/*
 * dataio: the data path test program (tests/e2e/test_t0720_datapath.py).
 *
 *   dataio big PATH MIB      write MIB (>= 8) MiB + 12345 bytes of the pattern with
 *                            writev and pwrite at odd sizes and offsets, read
 *                            them back with pread, readv, one big read and
 *                            small reads, then again through a read-only open
 *   dataio hash PATH         read a file in 1 MiB reads: "size=N hash=H"
 *   dataio twice PATH        hash, wait for a line on standard input (the caller has
 *                            changed the file by then), hash again (reopened)
 *   dataio put PATH OFF LEN  one pwrite of LEN pattern bytes at OFF (no truncation):
 *                            "ret=N" or "ret=-1 errno=E" (short writes, full disks)
 *   dataio spin PATH         pwrite 16 MiB at 0 over and over; "go" after the first
 *   dataio slow PATH MIB     one write of MIB MiB of the pattern to PATH (a FIFO read late):
 *                            "ok fd=F wrote=N wall_ms=W cpu_ms=C", C the process's CPU time
 *
 * The pattern: byte i is R[i % 65521], R from a fixed LCG, so a piece put at
 * the wrong offset never matches.  Prints "ok ..." or why not, exit 0/1.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define PERIOD 65521u

static unsigned char R[PERIOD];

static void pattern_init(void)
{
    uint32_t x = 12345;
    for (unsigned i = 0; i < PERIOD; i++) {
        x = x * 1103515245u + 12345u;
        R[i] = (unsigned char)(x >> 16);
    }
}

static void fill(unsigned char *b, size_t off, size_t n)
{
    for (size_t i = 0; i < n; i++)
        b[i] = R[(off + i) % PERIOD];
}

static int check(const unsigned char *b, size_t off, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        if (b[i] != R[(off + i) % PERIOD]) {
            printf("%s: byte %zu (file offset %zu) differs\n", what, i, off + i);
            return 1;
        }
    return 0;
}

static int fail(const char *what)
{
    printf("%s: %s\n", what, strerror(errno));
    return 1;
}

static int big(const char *path, size_t mib)
{
    size_t size = (mib << 20) + 12345;
    if (mib < 8) {                      /* the odd pieces below need room */
        printf("dataio big: MIB must be at least 8\n");
        return 64;
    }
    unsigned char *buf = malloc(size), *back = malloc(size);
    if (!buf || !back)
        return fail("malloc");
    fill(buf, 0, size);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        return fail("open");
    /* writev of three odd pieces, then pwrite of odd-sized pieces at their offsets */
    size_t a = 7, b = (1u << 20) + 3, c = (5u << 20) + 1;
    struct iovec wv[3] = { { buf, a }, { buf + a, b }, { buf + a + b, c } };
    if (writev(fd, wv, 3) != (ssize_t)(a + b + c))
        return fail("writev");
    for (size_t off = a + b + c; off < size;) {
        size_t n = size - off < (3u << 20) + 17 ? size - off : (3u << 20) + 17;
        if (pwrite(fd, buf + off, n, (off_t)off) != (ssize_t)n)
            return fail("pwrite");
        off += n;
    }
    /* pread of a large odd range */
    size_t po = (1u << 20) + 5, pn = size - po - 1001;
    memset(back, 0, size);
    if (pread(fd, back, pn, (off_t)po) != (ssize_t)pn)
        return fail("pread");
    if (check(back, po, pn, "pread"))
        return 1;
    /* readv from the start into three segments, then one big read of the rest */
    if (lseek(fd, 0, SEEK_SET) != 0)
        return fail("lseek");
    memset(back, 0, size);
    struct iovec rv[3] = { { back, 4099 }, { back + 4099, (2u << 20) + 1 }, { back + 4099 + (2u << 20) + 1, 333 } };
    size_t rvn = 4099 + (2u << 20) + 1 + 333;
    if (readv(fd, rv, 3) != (ssize_t)rvn)
        return fail("readv");
    if (read(fd, back + rvn, size) != (ssize_t)(size - rvn))
        return fail("read");
    if (check(back, 0, size, "readv+read"))
        return 1;
    /* small reads: the eager path */
    for (size_t off = 17; off < size; off += size / 7) {
        unsigned char small[100];
        ssize_t n = pread(fd, small, sizeof small, (off_t)off);
        if (n < 0)
            return fail("small pread");
        if (check(small, off, (size_t)n, "small pread"))
            return 1;
    }
    close(fd);
    /* again through a read-only open (collective I/O on the I/O node) */
    fd = open(path, O_RDONLY);
    if (fd < 0)
        return fail("open O_RDONLY");
    memset(back, 0, size);
    size_t got = 0;
    while (got < size) {
        ssize_t n = read(fd, back + got, size - got > (7u << 20) + 11 ? (7u << 20) + 11 : size - got);
        if (n <= 0)
            return n < 0 ? fail("read O_RDONLY") : (printf("short file: %zu of %zu\n", got, size), 1);
        got += (size_t)n;
    }
    if (check(back, 0, size, "read-only read"))
        return 1;
    close(fd);
    printf("ok size=%zu\n", size);
    return 0;
}

static int hash(const char *path, uint64_t *h, size_t *size)
{
    static unsigned char b[1u << 20];
    int fd = open(path, O_RDONLY);
    ssize_t n;
    if (fd < 0)
        return fail(path);
    *h = 1469598103934665603ull;
    *size = 0;
    while ((n = read(fd, b, sizeof b)) > 0) {
        for (ssize_t i = 0; i < n; i++)
            *h = (*h ^ b[i]) * 1099511628211ull;
        *size += (size_t)n;
    }
    close(fd);
    return n < 0 ? fail("read") : 0;
}

static int put(const char *path, size_t off, size_t len)
{
    unsigned char *buf = malloc(len ? len : 1);
    if (!buf)
        return fail("malloc");
    fill(buf, off, len);
    int fd = open(path, O_RDWR | O_CREAT, 0644);
    if (fd < 0)
        return fail("open");
    ssize_t r = pwrite(fd, buf, len, (off_t)off);
    if (r < 0)
        printf("ret=-1 errno=%d\n", errno);
    else
        printf("ret=%zd\n", r);
    return close(fd) < 0 ? fail("close") : 0;
}

static int spin(const char *path)
{
    size_t len = 16u << 20;
    unsigned char *buf = malloc(len);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (!buf || fd < 0)
        return fail("spin");
    fill(buf, 0, len);
    for (int i = 0;; i++) {
        if (pwrite(fd, buf, len, 0) != (ssize_t)len)
            return fail("pwrite");
        if (i == 0)
            printf("go\n");
    }
}

static double ms(struct timeval t)
{
    return (double)t.tv_sec * 1e3 + (double)t.tv_usec / 1e3;
}

static int slow(const char *path, size_t mib)
{
    size_t len = mib << 20;
    unsigned char *buf = malloc(len);
    struct timespec t0, t1;
    struct rusage r0, r1;

    if (!buf)
        return fail("malloc");
    fill(buf, 0, len);
    int fd = open(path, O_WRONLY);
    if (fd < 0)
        return fail("open");
    clock_gettime(CLOCK_MONOTONIC, &t0);
    getrusage(RUSAGE_SELF, &r0);
    ssize_t n = write(fd, buf, len);
    getrusage(RUSAGE_SELF, &r1);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (n < 0)
        return fail("write");
    double wall = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    double cpu = ms(r1.ru_utime) + ms(r1.ru_stime) - ms(r0.ru_utime) - ms(r0.ru_stime);
    printf("ok fd=%d wrote=%zd wall_ms=%.0f cpu_ms=%.0f\n", fd, n, wall, cpu);
    return close(fd) < 0 ? fail("close") : 0;
}

int main(int argc, char **argv)
{
    uint64_t h;
    size_t size;

    pattern_init();
    setvbuf(stdout, NULL, _IONBF, 0);
    if (argc == 4 && !strcmp(argv[1], "big"))
        return big(argv[2], strtoul(argv[3], NULL, 10));
    if (argc == 3 && !strcmp(argv[1], "hash")) {
        if (hash(argv[2], &h, &size))
            return 1;
        printf("size=%zu hash=%016llx\n", size, (unsigned long long)h);
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "twice")) {
        for (int i = 0; i < 2; i++) {
            if (hash(argv[2], &h, &size))
                return 1;
            printf("size=%zu hash=%016llx\n", size, (unsigned long long)h);
            if (i == 0) {               /* the go: an event, not a time the caller must beat */
                char go[64];
                if (!fgets(go, sizeof(go), stdin)) {
                    printf("twice: standard input ended before the go line\n");
                    return 1;
                }
            }
        }
        return 0;
    }
    if (argc == 5 && !strcmp(argv[1], "put"))
        return put(argv[2], strtoul(argv[3], NULL, 10), strtoul(argv[4], NULL, 10));
    if (argc == 3 && !strcmp(argv[1], "spin"))
        return spin(argv[2]);
    if (argc == 4 && !strcmp(argv[1], "slow"))
        return slow(argv[2], strtoul(argv[3], NULL, 10));
    fprintf(stderr, "usage: dataio big PATH MIB | hash PATH | twice PATH | put PATH OFF LEN | spin PATH"
                    " | slow PATH MIB\n");
    return 64;
}
