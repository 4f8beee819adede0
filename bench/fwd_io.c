/*
 * fwd_io: the I/O a forwarding benchmark times, done with plain POSIX calls
 * so the same binary runs directly on Linux (the baseline) and as a Lattice
 * job (calls shipped to the I/O node).  Prints one `key=value` line.
 *
 *   fwd_io rtt COUNT          8-byte writes to /dev/null: ns per call
 *   fwd_io seq PATH MIB       write then read MIB MiB in 1 MiB blocks: MB/s
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int rtt(long count)
{
    int fd = open("/dev/null", O_WRONLY);
    if (fd < 0) { perror("open /dev/null"); return 1; }
    char b[8] = "lattice";
    for (long i = 0; i < count / 10; i++)          /* warm up */
        if (write(fd, b, sizeof b) != sizeof b) { perror("write"); return 1; }
    double t0 = now();
    for (long i = 0; i < count; i++)
        if (write(fd, b, sizeof b) != sizeof b) { perror("write"); return 1; }
    double t = now() - t0;
    close(fd);
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

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "rtt"))
        return rtt(atol(argv[2]));
    if (argc == 4 && !strcmp(argv[1], "seq"))
        return seq(argv[2], atol(argv[3]));
    fprintf(stderr, "usage: fwd_io rtt COUNT | fwd_io seq PATH MIB\n");
    return 64;
}
