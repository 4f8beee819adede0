/*
 * syscall_cost: what one system call costs, in ns.
 *
 *   syscall_cost getppid COUNT    a call run on the node as it is (under cnk
 *                                 the seccomp filter lets it through untrapped)
 *   syscall_cost getaffinity COUNT  sched_getaffinity: a local call cnk answers
 *                                 itself (its node's CPUs), so under cnk trapped
 *   syscall_cost pwrite COUNT     pwrite64 of 8 bytes to a file in the working
 *                                 directory (under cnk and the preload client:
 *                                 shipped to the I/O node and back)
 * A tenth of COUNT warms up first.  Prints one line:
 *   call=getppid count=100000 ns_per_call=1520.3 ns_p50=1490.2
 * ns_per_call is the total time over COUNT; ns_p50 the median of the calls
 * timed one by one (rdtsc around each, calibrated against the clock over
 * the run), which a few calls held up by another process on a busy
 * machine do not move.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_u64(const void *a, const void *b)
{
    unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[1], "getppid") && strcmp(argv[1], "getaffinity") && strcmp(argv[1], "pwrite"))) {
        fprintf(stderr, "usage: syscall_cost getppid|getaffinity|pwrite COUNT\n");
        return 2;
    }
    long count = atol(argv[2]);
    if (count < 10) return 2;
    int pw = strcmp(argv[1], "pwrite") == 0, aff = strcmp(argv[1], "getaffinity") == 0;
    unsigned long mask[16];
    int fd = -1;
    char name[64];
    if (pw) {
        const char *rank = getenv("LATTICE_RANK");
        snprintf(name, sizeof name, "syscall_cost-%s.tmp", rank ? rank : "x");
        fd = open(name, O_CREAT | O_TRUNC | O_RDWR, 0644);
        if (fd < 0) { perror(name); return 1; }
    }
    char b[8] = "lattice";
    double t0 = 0;
    unsigned long long *ticks = calloc((size_t)count, sizeof *ticks), c0 = 0;
    if (!ticks) { perror("calloc"); return 1; }
    for (long i = -count / 10; i < count; i++) {
        if (i == 0) { t0 = now(); c0 = __rdtsc(); }
        unsigned long long a = __rdtsc();
        if (pw) {
            if (pwrite(fd, b, sizeof b, 0) != (ssize_t)sizeof b) { perror("pwrite"); return 1; }
        } else if (aff) {
            if (syscall(SYS_sched_getaffinity, 0, sizeof mask, mask) <= 0) { perror("sched_getaffinity"); return 1; }
        } else {
            syscall(SYS_getppid);     /* not the libc wrapper: no caching anywhere */
        }
        if (i >= 0) ticks[i] = __rdtsc() - a;
    }
    double t = now() - t0, ns_per_tick = t * 1e9 / (double)(__rdtsc() - c0);
    qsort(ticks, (size_t)count, sizeof *ticks, cmp_u64);
    if (pw) {
        close(fd);
        unlink(name);
    }
    printf("call=%s count=%ld ns_per_call=%.1f ns_p50=%.1f\n", argv[1], count, t / (double)count * 1e9,
           (double)ticks[count / 2] * ns_per_tick);
    return 0;
}
