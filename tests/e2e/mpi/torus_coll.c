/*
 * torus_coll - checks MPI_Bcast, MPI_Reduce, MPI_Allreduce and MPI_Barrier
 * results with values every rank can predict: several datatypes (int,
 * double, long long, a strided vector, an int+double struct, MPI_2INT with
 * MINLOC), ops (sum, max, prod, band, a commutative user op, a
 * non-commutative user op), message sizes from 0 to 4 MiB, every root, MPI_IN_PLACE,
 * sub-communicators (halves, every other rank, a duplicate, a reversed
 * order), every predefined type with every op defined for it, and an
 * intercommunicator (which the library leaves to MPICH).  Prints "torus_coll: N checks ok on SIZE ranks" from rank 0 and
 * exits 0, or a line per fault and exits 1.
 * argv[1] "quick": fewer sizes and roots (for large jobs); "which": rank 0
 * prints only which library MPI_Bcast comes from ("MPI_Bcast from libtorus.so").
 */
#include <dlfcn.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

static int wrank, errors, checks;

static void check(const char *what, int n, int root, int ok)
{
    checks++;
    if (!ok && errors++ < 20)
        fprintf(stderr, "torus_coll: rank %d: %s (n=%d root=%d) wrong\n", wrank, what, n, root);
}

/* a commutative user op: elementwise sum of ints */
static void usum(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    for (int i = 0; i < *len; i++)
        ((int *)inout)[i] += ((int *)in)[i];
}

/* a non-commutative one: 2x2 integer matrix product (inout = in * inout), mod 1009 */
static void matmul(void *in, void *inout, int *len, MPI_Datatype *dt)
{
    (void)dt;
    int *a = in, *b = inout;
    for (int i = 0; i < *len; i++, a += 4, b += 4) {
        int c[4] = { (a[0] * b[0] + a[1] * b[2]) % 1009, (a[0] * b[1] + a[1] * b[3]) % 1009,
                     (a[2] * b[0] + a[3] * b[2]) % 1009, (a[2] * b[1] + a[3] * b[3]) % 1009 };
        memcpy(b, c, sizeof c);
    }
}

static int val(int rank, int i) { return (rank * 131 + i * 7) % 1000 - 500; }

static void bcasts(MPI_Comm c, const int *sizes, int nsizes, int allroots)
{
    int rank, size;
    MPI_Comm_rank(c, &rank);
    MPI_Comm_size(c, &size);
    for (int s = 0; s < nsizes; s++) {
        int n = sizes[s];
        for (int root = 0; root < size; root += allroots ? 1 : (size > 3 ? size / 3 : 1)) {
            int *b = malloc((n + 1) * sizeof *b);
            for (int i = 0; i < n; i++)
                b[i] = rank == root ? val(root, i) : -1;
            MPI_Bcast(b, n, MPI_INT, root, c);
            int ok = 1;
            for (int i = 0; i < n; i++)
                ok &= b[i] == val(root, i);
            check("bcast int", n, root, ok);
            free(b);
            /* doubles, and a strided vector type of the same signature */
            double *d = malloc((2 * n + 1) * sizeof *d);
            for (int i = 0; i < 2 * n; i++)
                d[i] = rank == root || i % 2 ? i * 0.5 : -1;
            MPI_Datatype vec;
            MPI_Type_vector(n, 1, 2, MPI_DOUBLE, &vec);
            MPI_Type_commit(&vec);
            if (n)
                MPI_Bcast(d, 1, vec, root, c);
            ok = 1;
            for (int i = 0; i < 2 * n; i++)
                ok &= d[i] == i * 0.5;
            check("bcast vector", n, root, ok);
            MPI_Type_free(&vec);
            free(d);
        }
    }
    /* a struct type with a hole: int then double */
    struct pair { int i; double d; } p[3];
    MPI_Datatype st, types[2] = { MPI_INT, MPI_DOUBLE };
    int lens[2] = { 1, 1 };
    MPI_Aint disp[2] = { offsetof(struct pair, i), offsetof(struct pair, d) };
    MPI_Type_create_struct(2, lens, disp, types, &st);
    MPI_Type_commit(&st);
    for (int i = 0; i < 3; i++)
        p[i] = rank == size - 1 ? (struct pair){ i + 1, i * 1.5 } : (struct pair){ -1, -1 };
    MPI_Bcast(p, 3, st, size - 1, c);
    int ok = 1;
    for (int i = 0; i < 3; i++)
        ok &= p[i].i == i + 1 && p[i].d == i * 1.5;
    check("bcast struct", 3, size - 1, ok);
    MPI_Type_free(&st);
}

static void reductions(MPI_Comm c, const int *sizes, int nsizes, int allroots)
{
    int rank, size;
    MPI_Comm_rank(c, &rank);
    MPI_Comm_size(c, &size);
    MPI_Op uop, nc;
    MPI_Op_create(usum, 1, &uop);
    MPI_Op_create(matmul, 0, &nc);
    for (int s = 0; s < nsizes; s++) {
        int n = sizes[s];
        int *in = malloc((n + 1) * sizeof *in), *out = malloc((n + 1) * sizeof *out);
        long long *ll = malloc((n + 1) * sizeof *ll);
        double *din = malloc((n + 1) * sizeof *din), *dout = malloc((n + 1) * sizeof *dout);
        for (int i = 0; i < n; i++)
            in[i] = val(rank, i), din[i] = 1 << ((rank + i) % 3);    /* products of powers of two are exact */
        /* allreduce sum, max, band, user op; doubles; in place */
        MPI_Allreduce(in, out, n, MPI_INT, MPI_SUM, c);
        int ok = 1;
        for (int i = 0; i < n; i++) {
            long want = 0;
            for (int r = 0; r < size; r++)
                want += val(r, i);
            ok &= out[i] == want;
        }
        check("allreduce sum", n, -1, ok);
        MPI_Allreduce(in, out, n, MPI_INT, uop, c);
        int ok2 = 1;
        for (int i = 0; i < n; i++) {
            long want = 0;
            for (int r = 0; r < size; r++)
                want += val(r, i);
            ok2 &= out[i] == want;
        }
        check("allreduce user op", n, -1, ok2);
        MPI_Allreduce(in, out, n, MPI_INT, MPI_MAX, c);
        ok = 1;
        for (int i = 0; i < n; i++) {
            int want = val(0, i);
            for (int r = 1; r < size; r++)
                want = val(r, i) > want ? val(r, i) : want;
            ok &= out[i] == want;
        }
        check("allreduce max", n, -1, ok);
        for (int i = 0; i < n; i++)
            ll[i] = ~(1LL << ((rank + i) % 60));
        MPI_Allreduce(MPI_IN_PLACE, ll, n, MPI_LONG_LONG, MPI_BAND, c);
        ok = 1;
        for (int i = 0; i < n; i++) {
            long long want = -1;
            for (int r = 0; r < size; r++)
                want &= ~(1LL << ((r + i) % 60));
            ok &= ll[i] == want;
        }
        check("allreduce in place band", n, -1, ok);
        memcpy(dout, din, n * sizeof *din);
        MPI_Allreduce(MPI_IN_PLACE, dout, n, MPI_DOUBLE, MPI_SUM, c);
        ok = 1;
        for (int i = 0; i < n; i++) {
            double want = 0;
            for (int r = 0; r < size; r++)
                want += 1 << ((r + i) % 3);
            ok &= dout[i] == want;
        }
        check("allreduce in place double", n, -1, ok);
        /* reduce to roots, with and without MPI_IN_PLACE at the root */
        for (int root = 0; root < size; root += allroots ? 1 : (size > 3 ? size / 3 : 1)) {
            for (int i = 0; i < n; i++)
                out[i] = -7;
            MPI_Reduce(in, rank == root ? out : NULL, n, MPI_INT, MPI_SUM, root, c);
            if (rank == root) {
                ok = 1;
                for (int i = 0; i < n; i++) {
                    long want = 0;
                    for (int r = 0; r < size; r++)
                        want += val(r, i);
                    ok &= out[i] == want;
                }
                check("reduce sum", n, root, ok);
            }
            for (int i = 0; i < n; i++)
                dout[i] = din[i];
            MPI_Reduce(rank == root ? MPI_IN_PLACE : dout, rank == root ? dout : din, n, MPI_DOUBLE, MPI_PROD, root, c);
            if (rank == root) {
                ok = 1;
                for (int i = 0; i < n; i++) {
                    double want = 1;
                    for (int r = 0; r < size; r++)
                        want *= 1 << ((r + i) % 3);
                    ok &= dout[i] == want;
                }
                check("reduce in place prod", n, root, ok);
            }
        }
        free(in), free(out), free(ll), free(din), free(dout);
    }
    /* MINLOC on MPI_2INT: the smallest value and its lowest rank */
    int pair[2] = { (wrank * 7) % 5, rank }, res[2] = { -1, -1 };
    MPI_Allreduce(pair, res, 1, MPI_2INT, MPI_MINLOC, c);
    int ok = 1, best = 1 << 30, at = -1, ranks[4096];
    MPI_Group g, wg;
    MPI_Comm_group(c, &g);
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    for (int r = 0; r < size && r < 4096; r++)
        ranks[r] = r;
    int w[4096];
    MPI_Group_translate_ranks(g, size < 4096 ? size : 4096, ranks, wg, w);
    for (int r = 0; r < size; r++)
        if ((w[r] * 7) % 5 < best)
            best = (w[r] * 7) % 5, at = r;
    ok = res[0] == best && res[1] == at;
    check("allreduce minloc", 1, -1, ok);
    MPI_Group_free(&g), MPI_Group_free(&wg);
    /* a non-commutative op keeps MPI's order: the product M0 M1 ... in rank order */
    MPI_Datatype mat;
    MPI_Type_contiguous(4, MPI_INT, &mat);
    MPI_Type_commit(&mat);
    int m[4] = { 1 + w[rank] % 3, w[rank] % 7, 2, 1 + w[rank] % 2 }, mr[4] = { 0 }, want[4] = { 1, 0, 0, 1 };
    MPI_Allreduce(m, mr, 1, mat, nc, c);
    for (int r = size - 1; r >= 0; r--) {       /* want = M_r * want, from the right */
        int mm[4] = { 1 + w[r] % 3, w[r] % 7, 2, 1 + w[r] % 2 }, one = 1;
        matmul(mm, want, &one, &mat);
    }
    check("allreduce non-commutative", 1, -1, !memcmp(mr, want, sizeof want));
    for (int i = 0; i < 4; i++)
        mr[i] = -1;
    MPI_Reduce(m, mr, 1, mat, nc, size - 1, c);
    if (rank == size - 1)
        check("reduce non-commutative", 1, size - 1, !memcmp(mr, want, sizeof want));
    MPI_Type_free(&mat);
    MPI_Op_free(&uop), MPI_Op_free(&nc);
}

static void barriers(MPI_Comm c)
{
    /* a rank that leaves a barrier early would see the counter below its size */
    int rank, size;
    MPI_Comm_rank(c, &rank);
    MPI_Comm_size(c, &size);
    MPI_Win win;
    int *cnt;
    MPI_Win_allocate(sizeof(int), sizeof(int), MPI_INFO_NULL, c, &cnt, &win);
    *cnt = 0;
    MPI_Barrier(c);
    for (int round = 1; round <= 3; round++) {
        int one = 1, old;
        MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
        MPI_Fetch_and_op(&one, &old, MPI_INT, 0, 0, MPI_SUM, win);
        MPI_Win_unlock(0, win);
        MPI_Barrier(c);
        MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
        MPI_Fetch_and_op(&one, &old, MPI_INT, 0, 0, MPI_NO_OP, win);
        MPI_Win_unlock(0, win);
        check("barrier", size, 0, old >= round * size);
        MPI_Barrier(c);
    }
    MPI_Win_free(&win);
}


/* Every predefined integer and floating type with the ops MPI defines for it
 * (as MPICH's coll/allred does): in[i] = i + rank % 3, small enough to be exact. */
#define SWEEP_INT(T, MT)                                                                                   \
    do {                                                                                                   \
        T in[N_SW], out[N_SW];                                                                             \
        MPI_Op ops[] = { MPI_SUM, MPI_PROD, MPI_MAX, MPI_MIN, MPI_LAND, MPI_LOR, MPI_LXOR, MPI_BAND, MPI_BOR, \
                         MPI_BXOR };                                                                       \
        for (int o = 0; o < 10; o++) {                                                                     \
            for (int i = 0; i < N_SW; i++)                                                                 \
                in[i] = (T)(i % 4 + rank % 3);                                                             \
            MPI_Allreduce(in, out, N_SW, MT, ops[o], c);                                                   \
            int ok = 1;                                                                                    \
            for (int i = 0; i < N_SW; i++) {                                                               \
                long long w = i % 4 + 0 % 3;                                                               \
                for (int r = 1; r < size; r++) {                                                           \
                    long long v = i % 4 + r % 3;                                                           \
                    switch (o) {                                                                           \
                    case 0: w += v; break;                                                                 \
                    case 1: w = r < 6 ? w * v : w; break;                                                  \
                    case 2: w = v > w ? v : w; break;                                                      \
                    case 3: w = v < w ? v : w; break;                                                      \
                    case 4: w = w && v; break;                                                             \
                    case 5: w = w || v; break;                                                             \
                    case 6: w = !w != !v; break;                                                           \
                    case 7: w &= v; break;                                                                 \
                    case 8: w |= v; break;                                                                 \
                    case 9: w ^= v; break;                                                                 \
                    }                                                                                      \
                }                                                                                          \
                if (o != 1 || size <= 6)                                                                   \
                    ok &= (long long)out[i] == (long long)(T)w;                                            \
            }                                                                                              \
            check("allreduce " #MT, o, -1, ok);                                                            \
        }                                                                                                  \
    } while (0)

#define SWEEP_FLOAT(T, MT)                                                                                 \
    do {                                                                                                   \
        T in[N_SW], out[N_SW];                                                                             \
        MPI_Op ops[] = { MPI_SUM, MPI_MAX, MPI_MIN };                                                      \
        for (int o = 0; o < 3; o++) {                                                                      \
            for (int i = 0; i < N_SW; i++)                                                                 \
                in[i] = (T)(i + rank % 3);                                                                 \
            MPI_Allreduce(in, out, N_SW, MT, ops[o], c);                                                   \
            int ok = 1;                                                                                    \
            for (int i = 0; i < N_SW; i++) {                                                               \
                T w = (T)i;                                                                                \
                for (int r = 1; r < size; r++) {                                                           \
                    T v = (T)(i + r % 3);                                                                  \
                    w = o == 0 ? w + v : o == 1 ? (v > w ? v : w) : (v < w ? v : w);                       \
                }                                                                                          \
                ok &= out[i] == w;                                                                         \
            }                                                                                              \
            check("allreduce " #MT, o, -1, ok);                                                            \
        }                                                                                                  \
    } while (0)

enum { N_SW = 37 };

static void sweep(MPI_Comm c)
{
    int rank, size;
    MPI_Comm_rank(c, &rank);
    MPI_Comm_size(c, &size);
    SWEEP_INT(signed char, MPI_SIGNED_CHAR);
    SWEEP_INT(unsigned char, MPI_UNSIGNED_CHAR);
    SWEEP_INT(short, MPI_SHORT);
    SWEEP_INT(unsigned short, MPI_UNSIGNED_SHORT);
    SWEEP_INT(int, MPI_INT);
    SWEEP_INT(unsigned, MPI_UNSIGNED);
    SWEEP_INT(long, MPI_LONG);
    SWEEP_INT(unsigned long, MPI_UNSIGNED_LONG);
    SWEEP_INT(long long, MPI_LONG_LONG);
    SWEEP_FLOAT(float, MPI_FLOAT);
    SWEEP_FLOAT(double, MPI_DOUBLE);
    SWEEP_FLOAT(long double, MPI_LONG_DOUBLE);
    /* MAXLOC on MPI_DOUBLE_INT: the largest value, the lowest rank holding it */
    struct { double v; int r; } dv = { (double)(rank % 4), rank }, dres;
    MPI_Allreduce(&dv, &dres, 1, MPI_DOUBLE_INT, MPI_MAXLOC, c);
    int top = size >= 4 ? 3 : size - 1;
    check("allreduce maxloc", 1, -1, dres.v == top && dres.r == top);
}

/* An intercommunicator between the two halves: the library leaves it to MPICH. */
static void inter(void)
{
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2)
        return;
    MPI_Comm half, ic;
    int low = wrank < size / 2;
    MPI_Comm_split(MPI_COMM_WORLD, low, wrank, &half);
    MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, low ? size / 2 : 0, 99, &ic);
    int hr;
    MPI_Comm_rank(half, &hr);
    int v = low && hr == 0 ? 4242 : -1;
    MPI_Bcast(&v, 1, MPI_INT, low ? (hr == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0, ic);
    if (!low || hr == 0)
        check("intercomm bcast", 1, 0, low ? v == 4242 : v == 4242);
    int one = 1, sum = 0, remote;
    MPI_Comm_remote_size(ic, &remote);
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, ic);
    check("intercomm allreduce", 1, -1, sum == remote);
    MPI_Barrier(ic);
    MPI_Comm_free(&ic), MPI_Comm_free(&half);
}

static void all(MPI_Comm c, int quick)
{
    static const int full[] = { 0, 1, 3, 1000, 16384, 100003, 1 << 20 }, few[] = { 1, 1000, 100003 };
    const int *sizes = quick ? few : full;
    int nsizes = quick ? 3 : 7;
    bcasts(c, sizes, nsizes, !quick);
    reductions(c, sizes, quick ? 2 : 5, !quick);
    barriers(c);
    sweep(c);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int size, quick = argc > 1 && !strcmp(argv[1], "quick");
    if (argc > 1 && !strcmp(argv[1], "which")) {
        Dl_info info;
        MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
        if (wrank == 0 && dladdr((void *)MPI_Bcast, &info) && info.dli_fname)
            printf("MPI_Bcast from %s\n", strrchr(info.dli_fname, '/') ? strrchr(info.dli_fname, '/') + 1 : info.dli_fname);
        MPI_Finalize();
        return 0;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &wrank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    all(MPI_COMM_WORLD, quick);
    MPI_Comm half, odd, dup, rev;
    MPI_Comm_split(MPI_COMM_WORLD, wrank < size / 2, wrank, &half);
    all(half, 1);
    MPI_Comm_split(MPI_COMM_WORLD, wrank % 2, wrank, &odd);
    all(odd, 1);
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    all(dup, 1);
    MPI_Comm_split(MPI_COMM_WORLD, 0, size - wrank, &rev);
    all(rev, 1);
    MPI_Comm_free(&half), MPI_Comm_free(&odd), MPI_Comm_free(&dup), MPI_Comm_free(&rev);
    inter();
    int total = 0, bad = 0;
    MPI_Reduce(&checks, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Allreduce(&errors, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (wrank == 0 && !bad)
        printf("torus_coll: %d checks ok on %d ranks\n", total, size);
    MPI_Finalize();
    return bad ? 1 : 0;
}
