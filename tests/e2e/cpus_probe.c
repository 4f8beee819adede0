/*
 * cpus_probe: what a rank of tests/e2e/test_t0625_cores.py reports: its
 * LATTICE_RANK, the CPUs the kernel lets it run on (Cpus_allowed_list of
 * /proc/self/status), the CPUs sched_getaffinity shows it (cnk may show
 * fewer: at most its --cores), and MPIR_CVAR_ASYNC_PROGRESS ("-" if unset).
 * One line:
 *
 *   rank=0 allowed=0-1 affinity=0,1 async=1
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void)
{
    const char *rank = getenv("LATTICE_RANK"), *async = getenv("MPIR_CVAR_ASYNC_PROGRESS");
    char line[4096], allowed[4096] = "?", shown[4096] = "";
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "Cpus_allowed_list:", 18) && sscanf(line + 18, " %4095s", allowed) != 1)
            strcpy(allowed, "?");
    if (f)
        fclose(f);
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) < 0) {
        perror("cpus_probe: sched_getaffinity");
        return 1;
    }
    size_t at = 0;
    for (int i = 0; i < CPU_SETSIZE && at + 12 < sizeof shown; i++)
        if (CPU_ISSET(i, &set))
            at += (size_t)snprintf(shown + at, sizeof shown - at, "%s%d", at ? "," : "", i);
    printf("rank=%s allowed=%s affinity=%s async=%s\n", rank ? rank : "?", allowed, shown, async ? async : "-");
    return fflush(stdout) == 0 ? 0 : 1;
}
