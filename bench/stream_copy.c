/*
 * stream_copy: the streaming copy benchmark of the ZeptoOS big-memory paper
 * (seeds/004, Table 3): allocate a buffer, split it in two halves, copy one
 * half to the other, over and over, for buffer sizes that fit in L1 (16 KiB),
 * in the last-level cache (4 MiB) and in neither (256 MiB).
 *
 *   stream_copy [--no-thp|--hugetlb-1g|--hugetlb-2m] [SIZE_KIB...]
 *
 * Default sizes 16 4096 262144.  For each size, the copy is repeated until
 * about 2 GB have moved, TRIALS times; the best trial is reported, as STREAM
 * does, counting bytes read plus bytes written.  One line per size:
 *   size_kib=16 gbps=41.20 alloc=malloc page=4K thp=0M
 * The buffers are all carved from one allocation (of the largest size), so
 * they share its pages.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pages.h"

#define TRIALS 5

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void copy(double *restrict dst, const double *restrict src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = src[i];
}

int main(int argc, char **argv)
{
    int skip = pages_options(argc, argv);
    argc -= skip;
    argv += skip;
    size_t sizes[16], nsizes = 0, largest = 0;
    for (int i = 1; i < argc && nsizes < 16; i++)
        sizes[nsizes++] = strtoull(argv[i], NULL, 10) << 10;
    if (nsizes == 0) {
        sizes[0] = 16 << 10;
        sizes[1] = 4 << 20;
        sizes[2] = 256 << 20;
        nsizes = 3;
    }
    for (size_t i = 0; i < nsizes; i++)
        if (sizes[i] > largest) largest = sizes[i];
    if (largest < 1024) {
        fprintf(stderr, "stream_copy: sizes are in KiB, at least 1\n");
        return 2;
    }
    double *buf = pages_alloc(largest);
    memset(buf, 0, largest);
    for (size_t i = 0; i < largest / sizeof *buf; i++)
        buf[i] = (double)i;
    char pages[64];
    pages_describe(buf, pages, sizeof pages);

    for (size_t s = 0; s < nsizes; s++) {
        size_t half = sizes[s] / 2 / sizeof(double);
        double *a = buf, *b = buf + half;
        size_t reps = (size_t)2e9 / (2 * half * sizeof(double));
        if (reps < 1) reps = 1;
        double best = 1e30;
        for (int trial = 0; trial < TRIALS; trial++) {
            double t0 = now();
            for (size_t r = 0; r < reps; r++) {
                if (r & 1) copy(a, b, half);
                else copy(b, a, half);
                __asm__ volatile("" ::: "memory");   /* keep every pass */
            }
            double t = now() - t0;
            if (t < best) best = t;
        }
        double bytes = 2.0 * (double)half * sizeof(double) * (double)reps;
        printf("size_kib=%zu gbps=%.3f alloc=%s %s\n", sizes[s] >> 10, bytes / best * 1e-9,
               pages_mode_name(), pages);
    }
    return 0;
}
