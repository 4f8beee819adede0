/*
 * ep - embarrassingly parallel, after NPB EP: 2^M pairs of uniform deviates
 * in (-1, 1), Marsaglia's polar method turns the pairs inside the unit circle
 * into pairs of Gaussian deviates (X, Y); count them in square annuli
 * l <= max(|X|, |Y|) < l + 1 (l = 0..9) and sum X and Y.
 *
 *   ep [T|S|A]    T: 2^20 pairs (tests), S: 2^26 pairs, A: 2^28 pairs
 *
 * The sequence is split into blocks of 2^16 pairs; block b starts 2^17 b
 * steps into one LCG stream (apps.h lcg_skip), and the blocks are dealt out
 * to the ranks in contiguous ranges.  Each block's sums are computed the same
 * way whichever rank owns it, gathered to rank 0 and added in block order, so
 * every rank count gives bit-identical counts and sums.  The only
 * communication is that gather and one reduction of the counts.
 *
 * Verified: the counts equal the class's reference counts exactly and the
 * sums its reference sums to 1e-12 (the references are rank-count
 * independent by construction: bit-identical at 1, 2, 3, 4 and 16 ranks);
 * and, independently of any stored value, the accepted fraction is pi/4 and
 * the mean of X and Y is 0 within 6 standard deviations.
 */
#include <math.h>

#include "apps.h"

#define MK 16                       /* log2 pairs per block */
#define NQ 10

typedef struct {
    int m;                          /* log2 pairs */
    int64_t q[NQ];                  /* reference counts */
    double sx, sy;                  /* reference sums */
} ep_class;

static const ep_class CLASSES[] = {
    ['T'] = {20, {383775, 366514, 68847, 4317, 119, 1, 0, 0, 0, 0},
             -8.903691800424530e+02, -1.048331240148204e+03},
    ['S'] = {26, {24567952, 23454461, 4404312, 277225, 6575, 75, 0, 0, 0, 0},
             -6.133078615353703e+03, -9.162597977485872e+03},
    ['A'] = {28, {98265683, 93808806, 17611807, 1108908, 26317, 245, 2, 0, 0, 0},
             -1.895149438155600e+04, -1.993026828416175e+04},
};

static void block(int64_t b, int64_t q[NQ], double *sx, double *sy)
{
    uint64_t x = lcg_skip(271828183ULL, (uint64_t)b << (MK + 1));
    double bx = 0, by = 0;
    for (int i = 0; i < 1 << MK; i++) {
        double u = 2 * lcg_unit(&x) - 1, v = 2 * lcg_unit(&x) - 1;
        double t = u * u + v * v;
        if (t > 1 || t == 0)
            continue;
        double f = sqrt(-2 * log(t) / t);
        double gx = u * f, gy = v * f;
        double ax = fabs(gx), ay = fabs(gy);
        int l = (int)(ax > ay ? ax : ay);
        if (l < NQ)
            q[l]++;
        bx += gx;
        by += gy;
    }
    *sx = bx;
    *sy = by;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char cls = app_class(argc, argv, "ep", "TSA");
    const ep_class *c = &CLASSES[(int)cls];
    int64_t nblocks = (int64_t)1 << (c->m - MK);
    app_require(nblocks >= size, "ep: class %c has %lld blocks, fewer than %d ranks", cls,
                (long long)nblocks, size);

    int64_t lo, hi;
    block_range(nblocks, size, rank, &lo, &hi);
    int nmine = (int)(hi - lo);
    double *mine = xmalloc(2 * (size_t)nmine * sizeof *mine);
    int64_t q[NQ] = {0}, qall[NQ];

    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int64_t b = lo; b < hi; b++)
        block(b, q, &mine[2 * (b - lo)], &mine[2 * (b - lo) + 1]);
    MPI_Reduce(q, qall, NQ, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    int *counts = xmalloc(size * sizeof *counts), *displs = xmalloc(size * sizeof *displs);
    for (int r = 0; r < size; r++) {
        int64_t rl, rh;
        block_range(nblocks, size, r, &rl, &rh);
        counts[r] = (int)(2 * (rh - rl));
        displs[r] = (int)(2 * rl);
    }
    double *all = rank == 0 ? xmalloc(2 * (size_t)nblocks * sizeof *all) : NULL;
    MPI_Gatherv(mine, 2 * nmine, MPI_DOUBLE, all, counts, displs, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    double sx = 0, sy = 0;
    if (rank == 0)
        for (int64_t b = 0; b < nblocks; b++) {
            sx += all[2 * b];
            sy += all[2 * b + 1];
        }
    double seconds = MPI_Wtime() - t0;

    verdict v = {1, ""};
    char details[512] = "";
    if (rank == 0) {
        int64_t pairs = (int64_t)1 << c->m, accepted = 0;
        for (int l = 0; l < NQ; l++)
            accepted += qall[l];
        /* the fraction of the square inside the circle is pi/4 */
        double p = M_PI / 4, sd = sqrt(pairs * p * (1 - p));
        check(&v, fabs(accepted - pairs * p) < 6 * sd, "accepted %lld pairs, expected %.0f +- %.0f",
              (long long)accepted, pairs * p, 6 * sd);
        /* X and Y are standard normal: their sums are 0 +- 6 sqrt(n) */
        check(&v, fabs(sx) < 6 * sqrt((double)accepted) && fabs(sy) < 6 * sqrt((double)accepted),
              "sums %.6g %.6g too far from 0 for %lld deviates", sx, sy, (long long)accepted);
        for (int l = 0; l < NQ; l++)
            check(&v, qall[l] == c->q[l], "q[%d]=%lld, reference %lld", l, (long long)qall[l],
                  (long long)c->q[l]);
        check(&v, rel_err(sx, c->sx) < 1e-12, "sx=%.15e, reference %.15e", sx, c->sx);
        check(&v, rel_err(sy, c->sy) < 1e-12, "sy=%.15e, reference %.15e", sy, c->sy);
        int n = snprintf(details, sizeof details, "pairs=%lld sx=%.15e sy=%.15e q=", (long long)pairs, sx, sy);
        for (int l = 0; l < NQ && n < (int)sizeof details; l++)
            n += snprintf(details + n, sizeof details - n, "%s%lld", l ? "," : "", (long long)qall[l]);
    }
    int rc = app_finish("EP", cls, seconds, &v, details);
    MPI_Finalize();
    return rc;
}
