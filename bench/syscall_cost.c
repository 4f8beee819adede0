/*
 * syscall_cost: what one system call costs, in ns.
 *
 *   syscall_cost getppid COUNT    a call the compute node kernel does locally
 *                                 (under cnk: trapped and answered on the node)
 *   syscall_cost pwrite COUNT     pwrite64 of 8 bytes to a file in the working
 *                                 directory (under cnk and the preload client:
 *                                 shipped to the I/O node and back)
 * A tenth of COUNT warms up first.  Prints one line:
 *   call=getppid count=100000 ns_per_call=1520.3
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[1], "getppid") && strcmp(argv[1], "pwrite"))) {
        fprintf(stderr, "usage: syscall_cost getppid|pwrite COUNT\n");
        return 2;
    }
    long count = atol(argv[2]);
    if (count < 10) return 2;
    int pw = strcmp(argv[1], "pwrite") == 0;
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
    for (long i = -count / 10; i < count; i++) {
        if (i == 0) t0 = now();
        if (pw) {
            if (pwrite(fd, b, sizeof b, 0) != (ssize_t)sizeof b) { perror("pwrite"); return 1; }
        } else {
            syscall(SYS_getppid);     /* not the libc wrapper: no caching anywhere */
        }
    }
    double t = now() - t0;
    if (pw) {
        close(fd);
        unlink(name);
    }
    printf("call=%s count=%ld ns_per_call=%.1f\n", argv[1], count, t / (double)count * 1e9);
    return 0;
}
