/*
 * apps.h - what the MPI application kernels of bench/apps/ share (bench/apps.py
 * runs them): the problem class from argv, a 64-bit LCG whose n-th value is
 * reachable in O(log n) (so any rank count draws the same global sequence),
 * a hash for values that depend on a global index, block distribution, and
 * the one result line.
 *
 * Every kernel prints one line on rank 0 and exits 0 only if it verified:
 *   KERNEL class=C ranks=P time_s=T key=value... VERIFIED
 *   KERNEL class=C ranks=P time_s=T key=value... FAILED: why
 * time_s is the kernel's own timed section (after set-up, before the checks).
 * Every rank returns the same exit status (1 on failure).
 */
#ifndef BENCH_APPS_H
#define BENCH_APPS_H

#include <mpi.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Knuth's MMIX LCG: x' = A x + C mod 2^64 */
#define LCG_A 6364136223846793005ULL
#define LCG_C 1442695040888963407ULL

static inline uint64_t lcg_next(uint64_t *x)
{
    *x = *x * LCG_A + LCG_C;
    return *x;
}

/* The state n steps after x: (A^n) x + C (A^(n-1) + ... + 1), by squaring. */
static inline uint64_t lcg_skip(uint64_t x, uint64_t n)
{
    uint64_t a = LCG_A, c = LCG_C, am = 1, cm = 0;
    while (n) {
        if (n & 1) {
            am *= a;
            cm = cm * a + c;
        }
        c *= a + 1;
        a *= a;
        n >>= 1;
    }
    return am * x + cm;
}

/* uniform in [0, 1) from the top 53 bits */
static inline double lcg_unit(uint64_t *x)
{
    return (double)(lcg_next(x) >> 11) * 0x1.0p-53;
}

/* splitmix64's finaliser: a value that depends only on v */
static inline uint64_t mix64(uint64_t v)
{
    v += 0x9e3779b97f4a7c15ULL;
    v = (v ^ (v >> 30)) * 0xbf58476d1ce4e5b9ULL;
    v = (v ^ (v >> 27)) * 0x94d049bb133111ebULL;
    return v ^ (v >> 31);
}

static inline double mix_unit(uint64_t v)
{
    return (double)(mix64(v) >> 11) * 0x1.0p-53;
}

/* rank r's share [*lo, *hi) of n items over p ranks (the first n % p get one more) */
static inline void block_range(int64_t n, int p, int r, int64_t *lo, int64_t *hi)
{
    int64_t q = n / p, m = n % p;
    *lo = r * q + (r < m ? r : m);
    *hi = *lo + q + (r < m ? 1 : 0);
}

static inline void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", n);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return p;
}

static inline void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    if (!p) {
        fprintf(stderr, "out of memory (%zu x %zu bytes)\n", n, size);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return p;
}

/* The class letter argv[1] (default 'S'), which must be in valid. */
static inline char app_class(int argc, char **argv, const char *name, const char *valid)
{
    const char *c = argc > 1 ? argv[1] : "S";
    if (strlen(c) != 1 || !strchr(valid, c[0])) {
        int rank;
        MPI_Comm_rank(MPI_COMM_WORLD, &rank);
        if (rank == 0)
            fprintf(stderr, "usage: %s [CLASS]: CLASS is one of %s, not '%s'\n", name, valid, c);
        MPI_Finalize();
        exit(2);
    }
    return c[0];
}

/* Stop every rank with a clear message when the problem cannot be split. */
static inline void app_require(int ok, const char *fmt, ...)
{
    if (ok)
        return;
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
        va_list ap;
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
        fputc('\n', stderr);
    }
    MPI_Finalize();
    exit(2);
}

/* Failure reasons are collected on rank 0 (checks run there after the reductions). */
typedef struct {
    int ok;
    char why[512];
} verdict;

static inline void check(verdict *v, int cond, const char *fmt, ...)
{
    if (cond)
        return;
    size_t len = strlen(v->why);
    if (!v->ok && len + 2 < sizeof v->why) {
        strcat(v->why, "; ");
        len += 2;
    }
    v->ok = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(v->why + len, sizeof v->why - len, fmt, ap);
    va_end(ap);
}

static inline double rel_err(double got, double want)
{
    double d = got - want;
    if (d < 0)
        d = -d;
    double w = want < 0 ? -want : want;
    return w > 0 ? d / w : d;
}

/*
 * Print the result line on rank 0 (details: further key=value pairs) and
 * return the exit status every rank should use: rank 0's verdict, broadcast.
 */
static inline int app_finish(const char *kernel, char cls, double seconds, const verdict *v,
                             const char *details)
{
    int rank, size, ok = v->ok;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        if (ok)
            printf("%s class=%c ranks=%d time_s=%.4f %s VERIFIED\n", kernel, cls, size, seconds, details);
        else
            printf("%s class=%c ranks=%d time_s=%.4f %s FAILED: %s\n", kernel, cls, size, seconds, details,
                   v->why);
        fflush(stdout);
    }
    return ok ? 0 : 1;
}

#endif
