/*
 * noise: the selfish detour benchmark (Beckman/Iskra; netgauge ptrn_noise):
 * spin reading the time-stamp counter and record every gap between two
 * reads that is longer than THRESHOLD times the shortest loop.  Such a gap
 * is a detour: the kernel (or anything else) took the CPU.  Makes no system
 * call while it spins.
 *
 *   noise [SECONDS [THRESHOLD]]        default 5 s, 10x
 *
 * Prints
 *   seconds=5.00 tsc_mhz=2500.0 min_loop_ns=10.4 detours=1234 lost_pct=0.0312
 *       max_us=45.1 p99_us=12.3 per_s=246.8
 *   top_us=45.1,40.2,...   (the ten largest detours)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <x86intrin.h>

#define MAXDET (1 << 20)

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_desc(const void *x, const void *y)
{
    uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;
    return (a < b) - (a > b);
}

int main(int argc, char **argv)
{
    double seconds = argc > 1 ? atof(argv[1]) : 5.0;
    double threshold = argc > 2 ? atof(argv[2]) : 10.0;
    if (seconds <= 0 || threshold <= 1) {
        fprintf(stderr, "usage: noise [SECONDS [THRESHOLD>1]]\n");
        return 2;
    }
    uint64_t *len = calloc(MAXDET, sizeof *len);
    if (!len) return 1;
    for (size_t i = 0; i < MAXDET; i++)   /* touch every page before measuring */
        len[i] = 0;

    /* TSC frequency, against the monotonic clock (vDSO: no system call) */
    double w0 = now();
    uint64_t c0 = __rdtsc();
    while (now() - w0 < 0.2) {}
    double hz = (double)(__rdtsc() - c0) / (now() - w0);

    /* shortest loop over a short calibration spin */
    uint64_t minloop = UINT64_MAX, prev = __rdtsc();
    for (int i = 0; i < 1000000; i++) {
        uint64_t t = __rdtsc();
        if (t - prev < minloop) minloop = t - prev;
        prev = t;
    }
    uint64_t limit = (uint64_t)((double)minloop * threshold);
    if (limit < minloop + 1) limit = minloop + 1;

    uint64_t end = __rdtsc() + (uint64_t)(seconds * hz);
    uint64_t start = __rdtsc(), n = 0, lost = 0;
    prev = start;
    for (;;) {
        uint64_t t = __rdtsc();
        uint64_t d = t - prev;
        if (d > limit) {
            if (n < MAXDET) len[n] = d;
            n++;
            lost += d - minloop;
        }
        prev = t;
        if (t >= end) break;
    }
    uint64_t total = prev - start;
    size_t kept = n < MAXDET ? n : MAXDET;
    qsort(len, kept, sizeof *len, cmp_desc);
    double us = 1e6 / hz;
    printf("seconds=%.2f tsc_mhz=%.1f min_loop_ns=%.1f detours=%llu lost_pct=%.4f max_us=%.1f p99_us=%.1f per_s=%.1f\n",
           (double)total / hz, hz * 1e-6, (double)minloop / hz * 1e9, (unsigned long long)n,
           100.0 * (double)lost / (double)total, kept ? (double)len[0] * us : 0.0,
           kept ? (double)len[kept / 100] * us : 0.0, (double)n / ((double)total / hz));
    printf("top_us=");
    for (size_t i = 0; i < kept && i < 10; i++)
        printf("%s%.1f", i ? "," : "", (double)len[i] * us);
    printf("\n");
    return 0;
}
