/*
 * container_cost - what a job's container (compute/cnode/container.c) adds
 * per job and node: N jobs of one fork + exec of /bin/true, without (0) or
 * with (1) a cgroup made, entered, killed, waited for and removed.  Root only.
 *
 *   make build/bench/container_cost   (links compute/cnode/container.c)
 *   build/bench/container_cost 500 0; build/bench/container_cost 500 1
 *   LATTICE_CGROUP=v1 build/bench/container_cost 500 1
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "container.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: container_cost JOBS 0|1\n");
        return 2;
    }
    int n = atoi(argv[1]), boxed = atoi(argv[2]);
    char why[512];
    if (boxed && container_setup("lattice/bench-container-cost", why, sizeof why) < 0) {
        fprintf(stderr, "container_cost: %s\n", why);
        return 1;
    }
    double t0 = now();
    for (int i = 0; i < n; i++) {
        struct container c = CONTAINER_NONE;
        if (boxed && container_open(&c, (uint64_t)i, "bench", why, sizeof why) < 0) {
            fprintf(stderr, "container_cost: %s\n", why);
            return 1;
        }
        pid_t p = fork();
        if (p == 0) {
            if (container_enter(&c, 0) < 0)
                _exit(2);
            execl("/bin/true", "true", (char *)NULL);
            _exit(127);
        }
        waitpid(p, NULL, 0);
        if (boxed && container_seal(&c, why, sizeof why) < 0) {
            fprintf(stderr, "container_cost: %s\n", why);
            return 1;
        }
    }
    printf("%s: %.0f us per job\n", boxed ? (getenv("LATTICE_CGROUP") ? getenv("LATTICE_CGROUP") : "container") : "none",
           (now() - t0) / n * 1e6);
    return 0;
}
