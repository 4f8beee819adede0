/*
 * coll_bench - time MPI_Bcast or MPI_Allreduce over MPI_COMM_WORLD for
 * each message size given: `coll_bench bcast|allreduce BUDGET MAXITERS SIZE...`.
 * Each size runs iters = BUDGET / (size * ranks) times (1..MAXITERS, after one
 * warm-up call), between barriers; the time of a call is the slowest rank's
 * mean.  Rank 0 prints one line per size: "OP SIZE ITERS USEC".
 * Built with mpicc.mpich (compute/libtorus/libtorus.mk); bench/collectives.py
 * runs it under mpiexec.hydra and lattice run, with and without the torus
 * collectives.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc < 5 || (strcmp(argv[1], "bcast") && strcmp(argv[1], "allreduce"))) {
        if (rank == 0)
            fprintf(stderr, "usage: coll_bench bcast|allreduce BUDGET MAXITERS SIZE...\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int bcast = !strcmp(argv[1], "bcast");
    double budget = atof(argv[2]);
    int maxiters = atoi(argv[3]);
    size_t most = 0;
    for (int i = 4; i < argc; i++)
        most = strtoull(argv[i], NULL, 10) > most ? strtoull(argv[i], NULL, 10) : most;
    char *a = malloc(most + 8), *b = malloc(most + 8);
    if (!a || !b)
        MPI_Abort(MPI_COMM_WORLD, 3);
    memset(a, rank, most + 8);
    memset(b, 0, most + 8);
    for (int i = 4; i < argc; i++) {
        size_t n = strtoull(argv[i], NULL, 10);
        int iters = (int)(budget / ((double)n * size));
        iters = iters < 1 ? 1 : iters > maxiters ? maxiters : iters;
        int count = bcast ? (int)n : (int)(n / sizeof(double));
        for (int k = -1; k < iters; k++) {
            if (k == 0)
                MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            if (bcast)
                MPI_Bcast(a, count, MPI_BYTE, 0, MPI_COMM_WORLD);
            else
                MPI_Allreduce(a, b, count, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
            if (k == 0)
                b[most] = 0;
            static double total;
            total = k == 0 ? 0 : total;
            if (k >= 0)
                total += MPI_Wtime() - t0;
            if (k == iters - 1) {
                double mean = total / iters, worst;
                MPI_Reduce(&mean, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
                if (rank == 0)
                    printf("%s %zu %d %.2f\n", argv[1], n, iters, worst * 1e6);
                fflush(stdout);
            }
        }
    }
    free(a), free(b);
    MPI_Finalize();
    return 0;
}
