/*
 * ft - 3-D FFT, after NPB FT: a random complex field u0 on N1 x N2 x N3
 * points is transformed forward once; then NITER times its spectrum is
 * evolved one time step of the heat equation (each mode multiplied by
 * exp(-4 pi^2 alpha |k|^2)) and transformed back, and 1024 fixed points of
 * the result are summed into a checksum.
 *
 *   ft [T|S|A|B]  T: 32^3 x 4 steps (tests), S: 128^3 x 25, A: 256 x 128 x 128 x 50,
 *                 B: 512 x 256 x 256 x 6 (big memory: four 512 MiB arrays in
 *                 all, 1 GiB a rank at 2 ranks; as NPB's B grid)
 *
 * Serial FFTW plans (FFTW_ESTIMATE, deterministic) do the 2-D transforms of
 * each z-plane a rank owns; one MPI_Alltoallv transposes the z-slabs into
 * y-slabs whose z lines are whole, for the 1-D transforms along z (and back
 * for the inverse).  Slabs may be uneven, so any rank count up to min(N2, N3)
 * works.
 *
 * Verified: (1) the forward transform equals a direct DFT at three
 * frequencies (sums over every point, reduced over the ranks); (2) Parseval,
 * sum |U|^2 = N sum |u|^2, for the forward transform and every inverse one;
 * (3) the inverse of the unevolved spectrum gives u0 back (max error); (4)
 * the last checksum equals the class's reference to 1e-10 (recorded once;
 * only the rounding of the reductions differs between rank counts).
 */
#include <complex.h>
#include <math.h>
#include <fftw3.h>

#include "apps.h"

#define ALPHA 1e-6
#define SEED 314159265ULL

typedef struct {
    int n1, n2, n3, niter;
    double re, im;      /* reference checksum of the last step */
} ft_class;

static const ft_class CLASSES[] = {
    ['T'] = {32, 32, 32, 4, 6.693387423520021e+02, 4.336029907130584e+02},
    ['S'] = {128, 128, 128, 25, 5.066361722553090e+02, 5.113748063037648e+02},
    ['A'] = {256, 128, 128, 50, 5.130950721856975e+02, 5.105087864766959e+02},
    ['B'] = {512, 256, 256, 6, 5.155987534443370e+02, 5.099446364982745e+02},
};

typedef struct {
    int n1, n2, n3, size, rank;
    int z0, nz, y0, ny;             /* my z-planes (layout A) and y-rows (layout B) */
    int *zlo, *zn, *ylo, *yn;       /* everyone's */
    int *cnt_ab, *dsp_ab, *cnt_ba, *dsp_ba;
} grid;

/* layout A: [z - z0][y][x]; layout B: [y - y0][x][z] */

static void transpose_ab(const grid *g, fftw_complex *a, fftw_complex *buf, fftw_complex *b)
{
    int n1 = g->n1;
    size_t o = 0;
    for (int d = 0; d < g->size; d++)
        for (int zl = 0; zl < g->nz; zl++)
            for (int y = g->ylo[d]; y < g->ylo[d] + g->yn[d]; y++, o += n1)
                memcpy(buf + o, a + ((size_t)zl * g->n2 + y) * n1, n1 * sizeof *buf);
    MPI_Alltoallv(buf, g->cnt_ab, g->dsp_ab, MPI_C_DOUBLE_COMPLEX, a, g->cnt_ba, g->dsp_ba, MPI_C_DOUBLE_COMPLEX,
                  MPI_COMM_WORLD);
    o = 0;
    for (int s = 0; s < g->size; s++)
        for (int zl = 0; zl < g->zn[s]; zl++)
            for (int yr = 0; yr < g->ny; yr++, o += n1) {
                fftw_complex *dst = b + (size_t)yr * n1 * g->n3 + g->zlo[s] + zl;
                for (int x = 0; x < n1; x++)
                    dst[(size_t)x * g->n3] = a[o + x];
            }
}

static void transpose_ba(const grid *g, fftw_complex *b, fftw_complex *buf, fftw_complex *a)
{
    int n1 = g->n1;
    size_t o = 0;
    for (int d = 0; d < g->size; d++)
        for (int zr = 0; zr < g->zn[d]; zr++)
            for (int yr = 0; yr < g->ny; yr++, o += n1) {
                const fftw_complex *src = b + (size_t)yr * n1 * g->n3 + g->zlo[d] + zr;
                for (int x = 0; x < n1; x++)
                    buf[o + x] = src[(size_t)x * g->n3];
            }
    MPI_Alltoallv(buf, g->cnt_ba, g->dsp_ba, MPI_C_DOUBLE_COMPLEX, b, g->cnt_ab, g->dsp_ab, MPI_C_DOUBLE_COMPLEX,
                  MPI_COMM_WORLD);
    o = 0;
    for (int s = 0; s < g->size; s++)
        for (int zl = 0; zl < g->nz; zl++)
            for (int y = g->ylo[s]; y < g->ylo[s] + g->yn[s]; y++, o += n1)
                memcpy(a + ((size_t)zl * g->n2 + y) * n1, b + o, n1 * sizeof *a);
}

/* e^(-2 pi i k j / n) */
static double complex twiddle(int k, int j, int n)
{
    double t = -2 * M_PI * (double)((int64_t)k * j % n) / n;
    return cos(t) + I * sin(t);
}

static int wrap(int k, int n)
{
    return k < n / 2 ? k : k - n;
}

static double sumsq(const fftw_complex *a, size_t n)
{
    double s = 0, g;
    for (size_t i = 0; i < n; i++)
        s += creal(a[i]) * creal(a[i]) + cimag(a[i]) * cimag(a[i]);
    MPI_Allreduce(&s, &g, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return g;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    grid g;
    MPI_Comm_rank(MPI_COMM_WORLD, &g.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g.size);
    char cls = app_class(argc, argv, "ft", "TSAB");
    const ft_class *c = &CLASSES[(int)cls];
    int size = g.size, rank = g.rank;
    g.n1 = c->n1, g.n2 = c->n2, g.n3 = c->n3;
    app_require(c->n2 >= size && c->n3 >= size, "ft: class %c is too small for %d ranks", cls, size);
    int n1 = g.n1, n2 = g.n2, n3 = g.n3;
    double ntot = (double)n1 * n2 * n3;

    g.zlo = xmalloc(size * sizeof(int)), g.zn = xmalloc(size * sizeof(int));
    g.ylo = xmalloc(size * sizeof(int)), g.yn = xmalloc(size * sizeof(int));
    g.cnt_ab = xmalloc(size * sizeof(int)), g.dsp_ab = xmalloc(size * sizeof(int));
    g.cnt_ba = xmalloc(size * sizeof(int)), g.dsp_ba = xmalloc(size * sizeof(int));
    for (int r = 0; r < size; r++) {
        int64_t lo, hi;
        block_range(n3, size, r, &lo, &hi);
        g.zlo[r] = (int)lo, g.zn[r] = (int)(hi - lo);
        block_range(n2, size, r, &lo, &hi);
        g.ylo[r] = (int)lo, g.yn[r] = (int)(hi - lo);
    }
    g.z0 = g.zlo[rank], g.nz = g.zn[rank], g.y0 = g.ylo[rank], g.ny = g.yn[rank];
    int da = 0, db = 0;
    for (int r = 0; r < size; r++) {
        g.cnt_ab[r] = g.nz * g.yn[r] * n1;     /* what I send to r in A -> B */
        g.dsp_ab[r] = da;
        da += g.cnt_ab[r];
        g.cnt_ba[r] = g.zn[r] * g.ny * n1;     /* what r sends me in A -> B */
        g.dsp_ba[r] = db;
        db += g.cnt_ba[r];
    }
    size_t na = (size_t)g.nz * n2 * n1, nb = (size_t)g.ny * n1 * n3, nmax = na > nb ? na : nb;
    fftw_complex *X = fftw_alloc_complex(nmax), *Y = fftw_alloc_complex(nmax);
    fftw_complex *U = fftw_alloc_complex(nmax), *W = fftw_alloc_complex(nmax);
    if (!X || !Y || !U || !W)
        app_require(0, "ft: out of memory");
    int n2d[2] = {n2, n1};
    fftw_plan p2f = fftw_plan_many_dft(2, n2d, g.nz, X, NULL, 1, n2 * n1, X, NULL, 1, n2 * n1, FFTW_FORWARD,
                                       FFTW_ESTIMATE);
    fftw_plan p2b = fftw_plan_many_dft(2, n2d, g.nz, X, NULL, 1, n2 * n1, X, NULL, 1, n2 * n1, FFTW_BACKWARD,
                                       FFTW_ESTIMATE);
    fftw_plan pzf = fftw_plan_many_dft(1, &n3, g.ny * n1, U, NULL, 1, n3, U, NULL, 1, n3, FFTW_FORWARD,
                                       FFTW_ESTIMATE);
    fftw_plan pzb = fftw_plan_many_dft(1, &n3, g.ny * n1, W, NULL, 1, n3, W, NULL, 1, n3, FFTW_BACKWARD,
                                       FFTW_ESTIMATE);

    /* u0, and the direct DFT of it at three frequencies */
    static const int K[3][3] = {{1, 2, 3}, {5, 7, 1}, {3, 1, 6}};  /* scaled to the class below */
    int kf[3][3];
    double complex direct[3] = {0}, dall[3];
    for (int f = 0; f < 3; f++) {
        kf[f][0] = K[f][0] * n1 / 16 + f;
        kf[f][1] = (K[f][1] * n2 / 8 + 1) % n2;
        kf[f][2] = (K[f][2] * n3 / 8 + 2 * f) % n3;
    }
    double complex *tx = xmalloc(3 * (size_t)n1 * sizeof *tx);
    for (int f = 0; f < 3; f++)
        for (int x = 0; x < n1; x++)
            tx[f * n1 + x] = twiddle(kf[f][0], x, n1);
    double l1 = 0, l1all;
    for (int zl = 0; zl < g.nz; zl++) {
        int z = g.z0 + zl;
        uint64_t s = lcg_skip(SEED, 2 * (uint64_t)z * n2 * n1);
        double complex tz[3];
        for (int f = 0; f < 3; f++)
            tz[f] = twiddle(kf[f][2], z, n3);
        for (int y = 0; y < n2; y++) {
            double complex row[3] = {0};
            for (int x = 0; x < n1; x++) {
                double re = lcg_unit(&s), im = lcg_unit(&s);
                double complex u = re + I * im;
                X[((size_t)zl * n2 + y) * n1 + x] = u;
                l1 += cabs(u);
                for (int f = 0; f < 3; f++)
                    row[f] += u * tx[f * n1 + x];
            }
            for (int f = 0; f < 3; f++)
                direct[f] += row[f] * twiddle(kf[f][1], y, n2) * tz[f];
        }
    }
    MPI_Allreduce(direct, dall, 3, MPI_C_DOUBLE_COMPLEX, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&l1, &l1all, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    double u0sq = sumsq(X, na);
    /* the evolution factor of one step, separable: ex[x] ey[y] ez[z] */
    double *ex = xmalloc(n1 * sizeof *ex), *ey = xmalloc(n2 * sizeof *ey), *ez = xmalloc(n3 * sizeof *ez);
    for (int i = 0; i < n1; i++)
        ex[i] = exp(-4 * M_PI * M_PI * ALPHA * wrap(i, n1) * wrap(i, n1));
    for (int i = 0; i < n2; i++)
        ey[i] = exp(-4 * M_PI * M_PI * ALPHA * wrap(i, n2) * wrap(i, n2));
    for (int i = 0; i < n3; i++)
        ez[i] = exp(-4 * M_PI * M_PI * ALPHA * wrap(i, n3) * wrap(i, n3));

    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    fftw_execute(p2f);
    transpose_ab(&g, X, Y, U);
    fftw_execute(pzf);
    double fwdsq = sumsq(U, nb);
    double complex fwdk[3] = {0}, fwdall[3];
    for (int f = 0; f < 3; f++)
        if (kf[f][1] >= g.y0 && kf[f][1] < g.y0 + g.ny)
            fwdk[f] = U[((size_t)(kf[f][1] - g.y0) * n1 + kf[f][0]) * n3 + kf[f][2]];
    MPI_Allreduce(fwdk, fwdall, 3, MPI_C_DOUBLE_COMPLEX, MPI_SUM, MPI_COMM_WORLD);
    double worst_parseval = rel_err(fwdsq, ntot * u0sq), roundtrip = 0;
    double complex sum = 0;
    for (int t = 0; t <= c->niter; t++) {
        if (t > 0)
            for (int yr = 0; yr < g.ny; yr++)
                for (int x = 0; x < n1; x++) {
                    double exy = ex[x] * ey[g.y0 + yr];
                    fftw_complex *u = U + ((size_t)yr * n1 + x) * n3, *w = W + ((size_t)yr * n1 + x) * n3;
                    for (int z = 0; z < n3; z++)
                        w[z] = u[z] *= exy * ez[z];
                }
        else
            memcpy(W, U, nb * sizeof *W);
        double wsq = sumsq(W, nb);
        fftw_execute(pzb);
        transpose_ba(&g, W, Y, X);
        fftw_execute(p2b);
        for (size_t i = 0; i < na; i++)
            X[i] /= ntot;
        double e = rel_err(sumsq(X, na), wsq / ntot);
        if (e > worst_parseval)
            worst_parseval = e;
        if (t == 0) {
            /* the round trip: u0 again, regenerated */
            double m = 0;
            for (int zl = 0; zl < g.nz; zl++) {
                uint64_t s = lcg_skip(SEED, 2 * (uint64_t)(g.z0 + zl) * n2 * n1);
                for (size_t i = 0; i < (size_t)n2 * n1; i++) {
                    double re = lcg_unit(&s), im = lcg_unit(&s);
                    double d = cabs(X[(size_t)zl * n2 * n1 + i] - (re + I * im));
                    if (d > m)
                        m = d;
                }
            }
            MPI_Allreduce(&m, &roundtrip, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
            continue;
        }
        double complex cs = 0;
        for (int j = 1; j <= 1024; j++) {
            int x = j % n1, y = 3 * j % n2, z = 5 * j % n3;
            if (z >= g.z0 && z < g.z0 + g.nz)
                cs += X[((size_t)(z - g.z0) * n2 + y) * n1 + x];
        }
        MPI_Allreduce(&cs, &sum, 1, MPI_C_DOUBLE_COMPLEX, MPI_SUM, MPI_COMM_WORLD);
    }
    double seconds = MPI_Wtime() - t0;

    verdict v = {1, ""};
    char details[384] = "";
    if (rank == 0) {
        for (int f = 0; f < 3; f++)
            check(&v, cabs(fwdall[f] - dall[f]) < 1e-11 * l1all,
                  "U(%d,%d,%d) = %.10g%+.10gi, direct DFT %.10g%+.10gi", kf[f][0], kf[f][1], kf[f][2],
                  creal(fwdall[f]), cimag(fwdall[f]), creal(dall[f]), cimag(dall[f]));
        check(&v, worst_parseval < 1e-10, "Parseval off by %.3e", worst_parseval);
        check(&v, roundtrip < 1e-12, "round trip off by %.3e", roundtrip);
        check(&v, rel_err(creal(sum), c->re) < 1e-10 && rel_err(cimag(sum), c->im) < 1e-10,
              "checksum %.15e%+.15ei, reference %.15e%+.15ei", creal(sum), cimag(sum), c->re, c->im);
        snprintf(details, sizeof details, "grid=%dx%dx%d steps=%d checksum=%.15e%+.15ei parseval=%.2e roundtrip=%.2e",
                 n1, n2, n3, c->niter, creal(sum), cimag(sum), worst_parseval, roundtrip);
    }
    int rc = app_finish("FT", cls, seconds, &v, details);
    fftw_destroy_plan(p2f);
    fftw_destroy_plan(p2b);
    fftw_destroy_plan(pzf);
    fftw_destroy_plan(pzb);
    MPI_Finalize();
    return rc;
}
