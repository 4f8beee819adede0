/*
 * holdmem MIB FILE: hold MIB MiB of memory for the test of
 * test_t0510_cnk_memory.py that starts and ends another machine's job
 * meanwhile.  Fills the memory with a pattern, prints
 *   holdmem: ready page_kb=K
 * (K: the page size of the mapping holding it), waits until FILE exists
 * (however long the test takes to get there on a loaded host: an hour is
 * only a hang guard), checks every page and prints "holdmem: intact", or
 * which page lost its contents (exit 1).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>

#include "smaps.h"

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: holdmem MIB FILE\n");
        return 2;
    }
    size_t bytes = strtoull(argv[1], NULL, 10) << 20, words = 4096 / sizeof(uint64_t);
    uint64_t *p = malloc(bytes);
    if (!p) {
        perror("holdmem: malloc");
        return 1;
    }
    size_t pages = bytes / 4096;
    for (size_t i = 0; i < pages; i++)
        p[i * words] = i * 2654435761u, p[i * words + words - 1] = ~i;
    struct mapping m;
    printf("holdmem: ready page_kb=%ld\n", smaps_find(p, &m) == 0 ? m.kernel_page_kb : -1L);
    fflush(stdout);
    struct stat st;
    struct timespec nap = { 0, 20 * 1000 * 1000 };
    for (int i = 0; stat(argv[2], &st) != 0; i++) {
        if (i == 180000) {              /* 20 ms naps: an hour */
            printf("holdmem: %s never appeared\n", argv[2]);
            return 2;
        }
        nanosleep(&nap, NULL);
    }
    for (size_t i = 0; i < pages; i++)
        if (p[i * words] != i * 2654435761u || p[i * words + words - 1] != ~i) {
            printf("holdmem: page %zu lost its contents\n", i);
            return 1;
        }
    printf("holdmem: intact\n");
    return 0;
}
