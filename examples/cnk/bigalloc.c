/*
 * bigalloc: allocate MIB mebibytes with malloc, touch every page, check it.
 *
 *   bigalloc MIB
 *
 * Prints
 *   bigalloc: touched MIB MiB ok check=C page_kb=K
 * (C = sum of the page numbers written, K = the page size of the mapping
 * holding the block, from /proc/self/smaps).  When malloc returns NULL the
 * program says so and exits 12 (ENOMEM):
 *   bigalloc: malloc(MIB MiB) failed: ENOMEM (Cannot allocate memory)
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "smaps.h"

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: bigalloc MIB\n");
        return 2;
    }
    size_t mib = strtoull(argv[1], NULL, 10);
    size_t bytes = mib << 20;
    errno = 0;
    uint64_t *p = malloc(bytes);
    if (!p) {
        int e = errno;
        printf("bigalloc: malloc(%zu MiB) failed: %s (%s)\n", mib, strerrorname_np(e) ? strerrorname_np(e) : "?",
               strerror(e));
        return e == ENOMEM ? 12 : 1;
    }
    const size_t page = 4096 / sizeof *p;
    size_t pages = bytes / sizeof *p / page;
    for (size_t i = 0; i < pages; i++)
        p[i * page] = i, p[i * page + page - 1] = ~(uint64_t)i;
    uint64_t check = 0;
    for (size_t i = 0; i < pages; i++) {
        if (p[i * page] != i || p[i * page + page - 1] != ~(uint64_t)i) {
            printf("bigalloc: page %zu lost its contents\n", i);
            return 1;
        }
        check += p[i * page];
    }
    struct mapping m;
    long page_kb = smaps_find(p, &m) == 0 ? m.kernel_page_kb : -1;
    printf("bigalloc: touched %zu MiB ok check=%llu page_kb=%ld\n", mib, (unsigned long long)check, page_kb);
    free(p);
    return 0;
}
