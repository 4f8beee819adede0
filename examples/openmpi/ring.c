/* Open MPI ring: a token goes around the ring `laps` times, each rank adding
 * its rank; rank 0 checks the total. Separate send and receive buffers,
 * so a one-rank ring (sending to itself) works too. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int rank, size, laps = argc > 1 ? atoi(argv[1]) : 3;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    long out = 0, in = 0;

    for (int lap = 0; lap < laps; lap++) {
        if (rank == 0) {
            out = in + rank;
            MPI_Sendrecv(&out, 1, MPI_LONG, next, lap, &in, 1, MPI_LONG, prev, lap, MPI_COMM_WORLD,
                         MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(&in, 1, MPI_LONG, prev, lap, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            out = in + rank;
            MPI_Send(&out, 1, MPI_LONG, next, lap, MPI_COMM_WORLD);
        }
    }
    int ok = 1;
    if (rank == 0) {
        long want = (long)laps * size * (size - 1) / 2;
        ok = in == want;
        printf("ring of %d ranks, %d laps: token %ld (want %ld): %s\n", size, laps, in, want, ok ? "ok" : "WRONG");
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Finalize();
    return ok ? 0 : 1;
}
