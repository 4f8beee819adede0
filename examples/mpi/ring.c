/*
 * ring - rank 0 sends a token around the ring of all ranks, each rank adds
 * its rank + 1; rank 0 checks the sum after each of ROUNDS rounds.  A job of
 * one rank sends the token to itself.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define ROUNDS 10

int main(int argc, char **argv)
{
    int rank, size, bad = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    long want = (long)size * (size + 1) / 2;

    for (int r = 0; r < ROUNDS; r++) {
        long token, first = 1;     /* separate buffers: one rank sends to itself */
        if (rank == 0) {
            MPI_Request req;
            MPI_Isend(&first, 1, MPI_LONG, next, r, MPI_COMM_WORLD, &req);
            MPI_Recv(&token, 1, MPI_LONG, prev, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Wait(&req, MPI_STATUS_IGNORE);
            if (token != want) {
                fprintf(stderr, "ring: round %d: token %ld, expected %ld\n", r, token, want);
                bad = 1;
            }
        } else {
            MPI_Recv(&token, 1, MPI_LONG, prev, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            token += rank + 1;
            MPI_Send(&token, 1, MPI_LONG, next, r, MPI_COMM_WORLD);
        }
    }
    MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 0 && !bad)
        printf("ring: %d ranks, %d rounds, token %ld ok\n", size, ROUNDS, want);
    MPI_Finalize();
    return bad;
}
