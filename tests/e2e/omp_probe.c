/* omp_probe: an OpenMP parallel region of OMP_NUM_THREADS threads, their count printed (tests/e2e/test_t1060_cnk_threads.py). */
#include <omp.h>
#include <stdio.h>
int main(void) {
    int n = 0;
#pragma omp parallel
    {
#pragma omp atomic
        n++;
    }
    printf("threads=%d max=%d\n", n, omp_get_max_threads());
    return 0;
}
