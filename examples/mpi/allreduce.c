/*
 * allreduce - allreduce of known values on every rank: sum, max and min of
 * the ranks, product of (1 + rank % 2), a logical and, an element-wise sum of
 * a 1000-element double vector.  Prints the results on rank 0; any rank
 * exits 1 on a mismatch.
 */
#include <mpi.h>
#include <stdio.h>

#define N 1000

int main(int argc, char **argv)
{
    int rank, size, bad = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    long r = rank, sum, max, min;
    MPI_Allreduce(&r, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&r, &max, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(&r, &min, 1, MPI_LONG, MPI_MIN, MPI_COMM_WORLD);
    long f = 1 + rank % 2, prod, wprod = 1;
    MPI_Allreduce(&f, &prod, 1, MPI_LONG, MPI_PROD, MPI_COMM_WORLD);
    for (int i = 0; i < size; i++)
        wprod *= 1 + i % 2;
    int yes = 1, land;
    MPI_Allreduce(&yes, &land, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);

    static double v[N], vs[N];
    for (int i = 0; i < N; i++)
        v[i] = rank * 0.5 + i;
    MPI_Allreduce(v, vs, N, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    int vbad = 0;
    for (int i = 0; i < N; i++) {
        double w = 0.25 * size * (size - 1) + (double)i * size;   /* exact in binary */
        if (vs[i] != w)
            vbad = 1;
    }

    long wsum = (long)size * (size - 1) / 2;
    if (sum != wsum || max != size - 1 || min != 0 || prod != wprod || land != 1 || vbad) {
        fprintf(stderr, "allreduce: rank %d: sum %ld/%ld max %ld/%d min %ld/0 prod %ld/%ld land %d/1 vector %s\n",
                rank, sum, wsum, max, size - 1, min, prod, wprod, land, vbad ? "WRONG" : "ok");
        bad = 1;
    }
    if (rank == 0)
        printf("allreduce: size %d sum %ld max %ld min %ld prod %ld land %d vector %s\n",
               size, sum, max, min, prod, land, vbad ? "WRONG" : "ok");
    int anybad;
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        printf("allreduce: %s\n", anybad ? "FAILED" : "ok");
    MPI_Finalize();
    return bad;
}
