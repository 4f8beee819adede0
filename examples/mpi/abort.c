/*
 * abort [RANK] - rank RANK (default 0) prints a message and calls
 * MPI_Abort(MPI_COMM_WORLD, 7); the other ranks wait in a barrier that never
 * completes.  The launcher must end the whole job with exit code 7.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int rank, size;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int who = argc > 1 ? atoi(argv[1]) : 0;
    if (who < 0 || who >= size)
        who = 0;
    if (rank == who) {
        fprintf(stderr, "abort: rank %d of %d calls MPI_Abort(MPI_COMM_WORLD, 7)\n", rank, size);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 7);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    fprintf(stderr, "abort: rank %d passed the barrier: MPI_Abort did not end the job\n", rank);
    MPI_Finalize();
    return 1;
}
