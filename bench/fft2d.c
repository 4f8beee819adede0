/*
 * fft2d: a forward 2-D complex FFT of an N x N array with FFTW, the FFT
 * benchmark of the ZeptoOS big-memory paper (seeds/004, Table 5: 5000 x 5000,
 * about 763 MB, CNK 11.25 s vs Linux 4 KiB pages 21.43 s).
 *
 *   fft2d [--no-thp|--hugetlb-1g|--hugetlb-2m] [N [REPEAT]]
 *
 * Default N = 4096 (256 MiB of complex doubles), REPEAT = 3.  The plan is
 * made with FFTW_ESTIMATE (deterministic, no timing runs) for an in-place
 * transform; the array is filled before each transform and the fastest
 * transform is reported, with a checksum (DC term = sum of the inputs):
 *   n=4096 mib=256 best_s=1.234 median_s=1.250 dc=... alloc=malloc page=4K thp=0M
 */
#include <complex.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <fftw3.h>

#include "pages.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void fill(fftw_complex *a, size_t n)
{
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < n; j++)
            a[i * n + j] = sin((double)(i + 1) * 0.001) + I * cos((double)(j + 1) * 0.002);
}

static int cmp(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

int main(int argc, char **argv)
{
    int skip = pages_options(argc, argv);
    argc -= skip;
    argv += skip;
    size_t n = argc > 1 ? strtoull(argv[1], NULL, 10) : 4096;
    int repeat = argc > 2 ? atoi(argv[2]) : 3;
    if (n < 2 || repeat < 1 || repeat > 100) {
        fprintf(stderr, "usage: fft2d [--no-thp|--hugetlb-1g|--hugetlb-2m] [N [REPEAT]]\n");
        return 2;
    }
    size_t bytes = n * n * sizeof(fftw_complex);
    fftw_complex *a = pages_alloc(bytes);
    fill(a, n);
    char pages[64];
    pages_describe(a, pages, sizeof pages);
    fftw_plan p = fftw_plan_dft_2d((int)n, (int)n, a, a, FFTW_FORWARD, FFTW_ESTIMATE);
    if (!p) {
        fprintf(stderr, "fft2d: no plan\n");
        return 1;
    }
    double t[100], dc = 0;
    for (int r = 0; r < repeat; r++) {
        fill(a, n);
        double expect = 0;
        for (size_t i = 0; i < n; i++)
            expect += sin((double)(i + 1) * 0.001);
        expect *= (double)n;
        double t0 = now();
        fftw_execute(p);
        t[r] = now() - t0;
        dc = creal(a[0]);
        if (fabs(dc - expect) > 1e-6 * fabs(expect) + 1e-6) {
            fprintf(stderr, "fft2d: wrong DC term %g, expected %g\n", dc, expect);
            return 1;
        }
    }
    fftw_destroy_plan(p);
    qsort(t, (size_t)repeat, sizeof *t, cmp);
    printf("n=%zu mib=%zu best_s=%.4f median_s=%.4f dc=%.6g alloc=%s %s\n", n, bytes >> 20, t[0],
           t[repeat / 2], dc, pages_mode_name(), pages);
    return 0;
}
