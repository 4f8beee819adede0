/*
 * thp_probe - what backs a program's big malloc: allocates 64 MiB, touches
 * every byte, and prints "thp_kb=N page_kb=M" from the AnonHugePages and
 * KernelPageSize lines of /proc/self/smaps for the mapping holding it
 * (tests/e2e/test_t0516_linux_thp.py: Linux mode's malloc on huge pages).
 */
#define _GNU_SOURCE
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void)
{
    size_t len = (size_t)64 << 20;
    volatile char *p = malloc(len);
    if (!p) {
        perror("malloc");
        return 1;
    }
    memset((char *)p, 1, len);
    uintptr_t a = (uintptr_t)p + len / 2;
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) {
        perror("/proc/self/smaps");
        return 1;
    }
    char line[512];
    int in = 0;
    long thp = -1, page = -1;
    while (fgets(line, sizeof line, f)) {
        uintptr_t s, e;
        char perms[8];
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s", &s, &e, perms) == 3) {
            if (in)
                break;
            in = a >= s && a < e;
        } else if (in) {
            sscanf(line, "AnonHugePages: %ld kB", &thp);
            sscanf(line, "KernelPageSize: %ld kB", &page);
        }
    }
    fclose(f);
    printf("thp_kb=%ld page_kb=%ld first=%d\n", thp, page, p[0]);
    return thp < 0 ? 1 : 0;
}
