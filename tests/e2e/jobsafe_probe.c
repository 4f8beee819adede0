/* jobsafe_probe MODE ...: a job for tests/e2e/test_t0420_jobsafe.py.
 *
 *   gate FILE N      print "rank R line 0", wait until FILE exists, print lines 1..N-1, exit 0
 *   flood N          print N lines at once
 *   die RANK SIG     every rank prints "rank R ready"; rank RANK then raises SIG, the others sleep
 *   cpu              CPU time at main, then after about 0.2 s of work, with the wall time between:
 *                    "cpu main=S end=S wall=S times=S rusage=S thread=S" (seconds)
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/times.h>
#include <time.h>
#include <unistd.h>

static double seconds(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static int rank(void)
{
    const char *r = getenv("LATTICE_RANK");
    return r ? atoi(r) : 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "gate")) {
        int n = atoi(argv[3]);
        struct stat st;
        printf("rank %d line 0\n", rank());
        fflush(stdout);
        while (stat(argv[2], &st) != 0)
            usleep(50000);
        for (int i = 1; i < n; i++)
            printf("rank %d line %d\n", rank(), i);
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "flood")) {
        for (int i = 0; i < atoi(argv[2]); i++)
            printf("rank %d line %d of a long output\n", rank(), i);
        return 0;
    }
    if (argc == 4 && !strcmp(argv[1], "die")) {
        printf("rank %d ready\n", rank());
        fflush(stdout);
        if (rank() == atoi(argv[2])) {
            usleep(300000);
            raise(atoi(argv[3]));
        }
        sleep(600);
        return 0;
    }
    if (argc == 2 && !strcmp(argv[1], "cpu")) {
        double main_cpu = seconds(CLOCK_PROCESS_CPUTIME_ID);
        double w0 = seconds(CLOCK_MONOTONIC);
        volatile unsigned long spin = 0;
        while (seconds(CLOCK_MONOTONIC) - w0 < 0.2)
            spin++;
        double end = seconds(CLOCK_PROCESS_CPUTIME_ID), wall = seconds(CLOCK_MONOTONIC) - w0;
        struct tms t;
        struct rusage ru;
        times(&t);
        getrusage(RUSAGE_SELF, &ru);
        double hz = (double)sysconf(_SC_CLK_TCK);
        printf("cpu main=%.4f end=%.4f wall=%.4f times=%.4f rusage=%.4f thread=%.4f\n", main_cpu, end, wall,
               (double)(t.tms_utime + t.tms_stime) / hz,
               (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6,
               seconds(CLOCK_THREAD_CPUTIME_ID));
        return 0;
    }
    fprintf(stderr, "usage: jobsafe_probe gate FILE N | flood N | die RANK SIG | cpu\n");
    return 2;
}
