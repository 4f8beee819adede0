/*
 * fwd_io: the I/O a forwarding benchmark times, done with plain POSIX calls
 * so the same binary runs directly on Linux (the baseline) and as a Lattice
 * job (calls shipped to the I/O node).  Prints one `key=value` line.
 *
 *   fwd_io rtt COUNT          8-byte pwrites at offset 0 of rtt.dat in the working
 *                             directory (a shipped file): ns per call
 *   fwd_io seq PATH MIB       write then read MIB MiB in 1 MiB blocks: MB/s
 *   fwd_io sweep write|read PATH MIB [BARRIER_DIR [MIN_BUF]]
 *                             for buffers of MIN_BUF (4 KiB) .. 4 MiB (x4): MIB MiB moved
 *                             with write/read calls of that size, one line
 *                             "buf=N MBps=X" each.  PATH: a device (/dev/null,
 *                             /dev/zero) or a directory, where the process uses
 *                             its own file fwd.RANK (LATTICE_RANK); a file to
 *                             read is written first, untimed (page cache warm).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A file, not /dev/null: the node's devices stay on the compute node (the
 * path rule), so only a file's write makes the round trip to the I/O node. */
static int rtt(long count)
{
    int fd = open("rtt.dat", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) { perror("open rtt.dat"); return 1; }
    char b[8] = "lattice";
    for (long i = 0; i < count / 10; i++)          /* warm up */
        if (pwrite(fd, b, sizeof b, 0) != sizeof b) { perror("pwrite"); return 1; }
    double t0 = now();
    for (long i = 0; i < count; i++)
        if (pwrite(fd, b, sizeof b, 0) != sizeof b) { perror("pwrite"); return 1; }
    double t = now() - t0;
    close(fd);
    unlink("rtt.dat");
    printf("rtt_ns=%.1f\n", t / (double)count * 1e9);
    return 0;
}

static int seq(const char *path, long mib)
{
    const size_t block = 1 << 20;
    char *buf = malloc(block);
    if (!buf) return 1;
    memset(buf, 0x5a, block);
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
    if (fd < 0) { perror(path); return 1; }
    double t0 = now();
    for (long i = 0; i < mib; i++)
        if (write(fd, buf, block) != (ssize_t)block) { perror("write"); return 1; }
    if (fsync(fd) != 0 || close(fd) != 0) { perror("close"); return 1; }
    double tw = now() - t0;

    fd = open(path, O_RDONLY);
    if (fd < 0) { perror(path); return 1; }
    t0 = now();
    long got = 0;
    ssize_t n;
    while ((n = read(fd, buf, block)) > 0)
        got += n;
    double tr = now() - t0;
    close(fd);
    unlink(path);
    if (got != mib * (long)block) { fprintf(stderr, "short read %ld\n", got); return 1; }
    printf("write_MBps=%.1f read_MBps=%.1f\n", (double)got / tw / 1e6, (double)got / tr / 1e6);
    return 0;
}

/* A barrier of the job's processes before each buffer size, so that they
 * move data together (each phase takes milliseconds, while launches and the
 * 4 KiB phase put seconds between processes): every process creates
 * DIR/PHASE.RANK and waits until all LATTICE_SIZE of them exist.  DIR is
 * on a file system every process sees (shipped calls under cnk). */
static int barrier(const char *dir, size_t phase)
{
    const char *rank = getenv("LATTICE_RANK"), *size = getenv("LATTICE_SIZE");
    int n = size ? atoi(size) : 1;
    char path[4096];
    struct stat st;

    snprintf(path, sizeof path, "%s/%zu.%s", dir, phase, rank ? rank : "0");
    int fd = open(path, O_WRONLY | O_CREAT, 0644);
    if (fd < 0) { perror(path); return -1; }
    close(fd);
    for (int r = 0; r < n; r++) {
        snprintf(path, sizeof path, "%s/%zu.%d", dir, phase, r);
        while (stat(path, &st) != 0)
            nanosleep(&(struct timespec){ 0, 100000 }, NULL);
    }
    return 0;
}

static int sweep(int wr, const char *where, long mib, const char *bar, size_t min)
{
    char path[4096];
    const char *rank = getenv("LATTICE_RANK");
    struct stat st;
    int is_dir = stat(where, &st) == 0 && S_ISDIR(st.st_mode);
    size_t total = (size_t)mib << 20, max = 4u << 20;
    if (min < 1 || min > max) { fprintf(stderr, "MIN_BUF must be 1 .. %zu\n", max); return 2; }
    char *buf = malloc(max);
    if (!buf) return 1;
    memset(buf, 0x5a, max);
    if (is_dir)
        snprintf(path, sizeof path, "%s/fwd.%s", where, rank ? rank : "0");
    else
        snprintf(path, sizeof path, "%s", where);
    int fd = open(path, wr ? (O_WRONLY | (is_dir ? O_CREAT | O_TRUNC : 0)) : O_RDWR * is_dir | O_CREAT * is_dir, 0644);
    if (fd < 0) { perror(path); return 1; }
    if (is_dir)     /* untimed: the data to read, or the pages to overwrite (no phase pays for allocating them) */
        for (size_t off = 0; off < total; off += max)
            if (write(fd, buf, max) != (ssize_t)max) { perror("write"); return 1; }
    for (size_t b = min; b <= max; b *= 4) {
        if (is_dir && lseek(fd, 0, SEEK_SET) != 0) { perror("lseek"); return 1; }
        if (bar && barrier(bar, b) != 0) return 1;
        double t0 = now();
        for (size_t done = 0; done < total; done += b) {
            ssize_t n = wr ? write(fd, buf, b) : read(fd, buf, b);
            if (n != (ssize_t)b) { perror(wr ? "write" : "read"); return 1; }
        }
        double t = now() - t0;
        /* t0/t1 let the driver take the span of all processes, not a sum of own rates */
        printf("buf=%zu MBps=%.1f t0=%.9f t1=%.9f\n", b, (double)total / t / 1e6, t0, t0 + t);
    }
    close(fd);
    if (is_dir)
        unlink(path);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 5 && argc <= 7 && !strcmp(argv[1], "sweep"))
        return sweep(!strcmp(argv[2], "write"), argv[3], atol(argv[4]), argc >= 6 ? argv[5] : NULL,
                     argc == 7 ? strtoul(argv[6], NULL, 0) : 4096);
    if (argc == 3 && !strcmp(argv[1], "rtt"))
        return rtt(atol(argv[2]));
    if (argc == 4 && !strcmp(argv[1], "seq"))
        return seq(argv[2], atol(argv[3]));
    fprintf(stderr, "usage: fwd_io rtt COUNT | fwd_io seq PATH MIB | fwd_io sweep write|read PATH MIB [BARRIER_DIR [MIN_BUF]]\n");
    return 64;
}
