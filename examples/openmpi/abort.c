/* Open MPI abort: the last rank calls MPI_Abort(..., 7); the others wait
 * in a barrier that never completes, so the job must be ended for them. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rank, size;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank == size - 1) {
        fprintf(stderr, "rank %d aborting with 7\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 7);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
