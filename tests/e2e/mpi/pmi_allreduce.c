/* An MPI job for the PMI tests: allreduce of known values; with argument
 * "abort", rank 1 calls MPI_Abort(MPI_COMM_WORLD, 7) after the allreduce;
 * with "vanish", rank 1 exits 0 without MPI_Finalize while the others wait
 * in a barrier. */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    int rank, size, appnum = -1, flag = 0;
    long mine, sum = 0, max = 0;
    int *app;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &app, &flag);
    if (flag)
        appnum = *app;
    mine = 1000 + rank;
    MPI_Allreduce(&mine, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&mine, &max, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
    printf("rank %d of %d app %d: sum %ld max %ld\n", rank, size, appnum, sum, max);
    fflush(stdout);
    if (argc > 1 && !strcmp(argv[1], "abort") && rank == 1)
        MPI_Abort(MPI_COMM_WORLD, 7);
    if (argc > 1 && !strcmp(argv[1], "vanish") && rank == 1)
        return 0;
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
