/*
 * cg - conjugate gradient, after NPB CG: the inverse power method estimates
 * the smallest eigenvalue of a random sparse symmetric positive definite
 * matrix A; each of NITER outer iterations solves A z = x with 25 CG
 * iterations from z = 0, then zeta = 1 / (x . z) and x = z / ||z||.
 *
 *   cg [T|S|A]    T: n = 20,000, 11 nonzeros a row, 5 solves (tests);
 *                 S: n = 150,000, 17 a row, 15 solves; A: n = 600,000, 25 a row, 15 solves
 *
 * A: row i has nonzeros at columns i and i +- o_k (mod n) for M random
 * offsets o_k < n/2 (one global set, so the pattern is symmetric), each
 * off-diagonal value a random +-[0.1, 1]/(2M) that depends only on the pair
 * {i, j}, and the diagonal the sum of the row's off-diagonal magnitudes plus
 * SIGMA: strictly diagonally dominant, so SPD with every eigenvalue in
 * [SIGMA, 2 max_i S_i + SIGMA] (Gershgorin).  Rows are distributed in
 * contiguous blocks; each matrix-vector product gathers the whole vector
 * (MPI_Allgatherv), each dot product is an MPI_Allreduce.
 *
 * Verified: after every solve the true residual ||x - A z|| / ||x|| (a fresh
 * product, not CG's recurrence) is below CG's bound 2 sqrt(k) r^25 with
 * r = (sqrt(k) - 1) / (sqrt(k) + 1), k the Gershgorin condition number; and
 * the final zeta equals the class's reference value to 1e-10 (recorded
 * once; only the rounding of the reductions differs between rank counts).
 */
#include <math.h>

#include "apps.h"

#define CGIT 25
#define SIGMA 0.1

typedef struct {
    int64_t n;
    int m;          /* offsets: 2m + 1 nonzeros a row */
    int niter;
    double zeta;    /* reference */
} cg_class;

static const cg_class CLASSES[] = {
    ['T'] = {20000, 5, 5, 3.483730660185145e-01},
    ['S'] = {150000, 8, 15, 3.734291247761840e-01},
    ['A'] = {600000, 12, 15, 4.238922795276380e-01},
};

typedef struct {
    int64_t lo, nloc, n;
    int64_t *rowptr;
    int32_t *col;
    double *val;
    int *counts, *displs;           /* Allgatherv of a row-distributed vector */
    double *full;                   /* the gathered vector */
} matrix;

static double dot(const double *a, const double *b, int64_t n)
{
    double s = 0, g;
    for (int64_t i = 0; i < n; i++)
        s += a[i] * b[i];
    MPI_Allreduce(&s, &g, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return g;
}

/* y = A p (p and y distributed) */
static void spmv(matrix *A, const double *p, double *y)
{
    MPI_Allgatherv(p, (int)A->nloc, MPI_DOUBLE, A->full, A->counts, A->displs, MPI_DOUBLE, MPI_COMM_WORLD);
    const double *x = A->full;
    for (int64_t i = 0; i < A->nloc; i++) {
        double s = 0;
        for (int64_t k = A->rowptr[i]; k < A->rowptr[i + 1]; k++)
            s += A->val[k] * x[A->col[k]];
        y[i] = s;
    }
}

/* the off-diagonal value of the pair {i, j}: +-[0.1, 1] / (2m) */
static double offdiag(int64_t i, int64_t j, int m)
{
    uint64_t a = (uint64_t)(i < j ? i : j), b = (uint64_t)(i < j ? j : i);
    uint64_t h = mix64(a * 0x100000001b3ULL ^ mix64(b));
    double mag = 0.1 + 0.9 * (double)(h >> 11) * 0x1.0p-53;
    return (h & 1 ? -mag : mag) / (2 * m);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Build this rank's rows; returns the Gershgorin bound of the largest eigenvalue. */
static double build(matrix *A, const cg_class *c, int rank, int size)
{
    int64_t n = c->n, hi;
    int m = c->m;
    A->n = n;
    block_range(n, size, rank, &A->lo, &hi);
    A->nloc = hi - A->lo;
    /* the global offsets: distinct, in [1, n/2) */
    int64_t *off = xmalloc(m * sizeof *off);
    uint64_t x = 314159265ULL;
    for (int k = 0; k < m;) {
        int64_t o = 1 + (int64_t)(lcg_unit(&x) * (double)(n / 2 - 1));
        int dup = 0;
        for (int j = 0; j < k; j++)
            dup |= off[j] == o;
        if (!dup)
            off[k++] = o;
    }
    qsort(off, m, sizeof *off, cmp_i64);
    int64_t w = 2 * m + 1;
    A->rowptr = xmalloc((A->nloc + 1) * sizeof *A->rowptr);
    A->col = xmalloc(A->nloc * w * sizeof *A->col);
    A->val = xmalloc(A->nloc * w * sizeof *A->val);
    double lmax = 0;
    for (int64_t r = 0; r < A->nloc; r++) {
        int64_t i = A->lo + r, base = r * w;
        double s = 0;
        A->rowptr[r] = base;
        for (int k = 0; k < m; k++) {
            int64_t jm = ((i - off[m - 1 - k]) % n + n) % n, jp = (i + off[k]) % n;
            double vm = offdiag(i, jm, m), vp = offdiag(i, jp, m);
            A->col[base + k] = (int32_t)jm;
            A->val[base + k] = vm;
            A->col[base + m + 1 + k] = (int32_t)jp;
            A->val[base + m + 1 + k] = vp;
            s += fabs(vm) + fabs(vp);
        }
        A->col[base + m] = (int32_t)i;
        A->val[base + m] = s + SIGMA;
        if (2 * s + SIGMA > lmax)
            lmax = 2 * s + SIGMA;
    }
    A->rowptr[A->nloc] = A->nloc * w;
    free(off);
    A->counts = xmalloc(size * sizeof *A->counts);
    A->displs = xmalloc(size * sizeof *A->displs);
    for (int r = 0; r < size; r++) {
        int64_t rl, rh;
        block_range(n, size, r, &rl, &rh);
        A->counts[r] = (int)(rh - rl);
        A->displs[r] = (int)rl;
    }
    A->full = xmalloc(n * sizeof *A->full);
    double g;
    MPI_Allreduce(&lmax, &g, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return g;
}

/* z = A^-1 x by CGIT CG iterations from 0; returns ||x - A z||. */
static double conj_grad(matrix *A, const double *x, double *z, double *r, double *p, double *q)
{
    int64_t n = A->nloc;
    for (int64_t i = 0; i < n; i++) {
        z[i] = 0;
        r[i] = p[i] = x[i];
    }
    double rho = dot(r, r, n);
    for (int it = 0; it < CGIT; it++) {
        spmv(A, p, q);
        double alpha = rho / dot(p, q, n);
        for (int64_t i = 0; i < n; i++) {
            z[i] += alpha * p[i];
            r[i] -= alpha * q[i];
        }
        double rho1 = dot(r, r, n), beta = rho1 / rho;
        rho = rho1;
        for (int64_t i = 0; i < n; i++)
            p[i] = r[i] + beta * p[i];
    }
    spmv(A, z, q);
    for (int64_t i = 0; i < n; i++)
        r[i] = x[i] - q[i];
    return sqrt(dot(r, r, n));
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char cls = app_class(argc, argv, "cg", "TSA");
    const cg_class *c = &CLASSES[(int)cls];
    app_require(c->n >= size, "cg: class %c has %lld rows, fewer than %d ranks", cls, (long long)c->n, size);

    matrix A;
    double lmax = build(&A, c, rank, size);
    double kappa = lmax / SIGMA, sk = sqrt(kappa);
    double bound = 2 * sk * pow((sk - 1) / (sk + 1), CGIT);
    int64_t n = A.nloc;
    double *x = xmalloc(n * sizeof *x), *z = xmalloc(n * sizeof *z), *r = xmalloc(n * sizeof *r);
    double *p = xmalloc(n * sizeof *p), *q = xmalloc(n * sizeof *q);
    for (int64_t i = 0; i < n; i++)
        x[i] = 1 / sqrt((double)c->n);

    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime(), zeta = 0, worst = 0;
    for (int it = 0; it < c->niter; it++) {
        double rnorm = conj_grad(&A, x, z, r, p, q);   /* ||x|| = 1 */
        if (rnorm > worst || rnorm != rnorm)
            worst = rnorm;
        zeta = 1 / dot(x, z, n);
        double zn = 1 / sqrt(dot(z, z, n));
        for (int64_t i = 0; i < n; i++)
            x[i] = z[i] * zn;
    }
    double seconds = MPI_Wtime() - t0;

    verdict v = {1, ""};
    char details[256] = "";
    if (rank == 0) {
        check(&v, worst <= bound, "residual %.3e above CG's bound %.3e (kappa <= %.1f)", worst, bound, kappa);
        check(&v, rel_err(zeta, c->zeta) < 1e-10, "zeta=%.15e, reference %.15e", zeta, c->zeta);
        snprintf(details, sizeof details, "n=%lld nnz=%lld iterations=%d zeta=%.15e residual=%.3e bound=%.3e",
                 (long long)c->n, (long long)c->n * (2 * c->m + 1), c->niter * CGIT, zeta, worst, bound);
    }
    int rc = app_finish("CG", cls, seconds, &v, details);
    MPI_Finalize();
    return rc;
}
