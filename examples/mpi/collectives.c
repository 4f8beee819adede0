/*
 * collectives - one call of each common collective with values every rank
 * can predict, each checked: bcast, reduce, allgather, alltoall, scan,
 * gather, scatter, reduce_scatter_block, barrier.  Exits 1 on any mismatch.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

static int rank, size, errors;

static void check(const char *what, int ok)
{
    if (!ok) {
        fprintf(stderr, "collectives: rank %d: %s wrong\n", rank, what);
        errors++;
    }
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int *a = malloc(sizeof(int) * size * 4), *b = malloc(sizeof(int) * size * 4);
    int ok;

    /* bcast of 100000 ints from the last rank (large enough to be pipelined) */
    enum { BN = 100000 };
    int *big = malloc(sizeof(int) * BN);
    for (int i = 0; i < BN; i++)
        big[i] = rank == size - 1 ? i * 7 + 3 : -1;
    MPI_Bcast(big, BN, MPI_INT, size - 1, MPI_COMM_WORLD);
    ok = 1;
    for (int i = 0; i < BN; i++)
        ok &= big[i] == i * 7 + 3;
    check("bcast", ok);

    /* reduce to rank 0: sum of rank*rank */
    long sq = (long)rank * rank, sqs = -1, want = 0;
    for (int i = 0; i < size; i++)
        want += (long)i * i;
    MPI_Reduce(&sq, &sqs, 1, MPI_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0)
        check("reduce", sqs == want);

    /* allgather: a[i] = 10 * i + 1 */
    int mine = 10 * rank + 1;
    MPI_Allgather(&mine, 1, MPI_INT, a, 1, MPI_INT, MPI_COMM_WORLD);
    ok = 1;
    for (int i = 0; i < size; i++)
        ok &= a[i] == 10 * i + 1;
    check("allgather", ok);

    /* alltoall: rank r sends 1000*r + d to rank d */
    for (int d = 0; d < size; d++)
        a[d] = 1000 * rank + d;
    MPI_Alltoall(a, 1, MPI_INT, b, 1, MPI_INT, MPI_COMM_WORLD);
    ok = 1;
    for (int s = 0; s < size; s++)
        ok &= b[s] == 1000 * s + rank;
    check("alltoall", ok);

    /* scan (inclusive prefix sum of rank + 1) */
    long v = rank + 1, pre = 0;
    MPI_Scan(&v, &pre, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    check("scan", pre == (long)(rank + 1) * (rank + 2) / 2);

    /* gather to the last rank, scatter back from rank 0 */
    int g = rank * 3;
    MPI_Gather(&g, 1, MPI_INT, a, 1, MPI_INT, size - 1, MPI_COMM_WORLD);
    if (rank == size - 1) {
        ok = 1;
        for (int i = 0; i < size; i++)
            ok &= a[i] == i * 3;
        check("gather", ok);
    }
    for (int i = 0; i < size; i++)
        a[i] = i * i + 5;
    int sc = -1;
    MPI_Scatter(a, 1, MPI_INT, &sc, 1, MPI_INT, 0, MPI_COMM_WORLD);
    check("scatter", sc == rank * rank + 5);

    /* reduce_scatter_block: element i of every rank's vector is i + rank */
    for (int i = 0; i < size; i++)
        a[i] = i + rank;
    int rs = -1;
    MPI_Reduce_scatter_block(a, &rs, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    check("reduce_scatter", rs == size * rank + size * (size - 1) / 2);

    MPI_Barrier(MPI_COMM_WORLD);

    int all;
    MPI_Allreduce(&errors, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("collectives: %d ranks: bcast reduce allgather alltoall scan gather scatter "
               "reduce_scatter barrier: %s\n", size, all ? "FAILED" : "ok");
    free(a);
    free(b);
    free(big);
    MPI_Finalize();
    return errors ? 1 : 0;
}
