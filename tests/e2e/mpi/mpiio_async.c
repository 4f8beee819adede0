/*
 * mpiio_async: MPI-IO's nonblocking calls (ROMIO builds them on POSIX
 * AIO), for tests/e2e/test_t0850_preload_children.py.  Each rank writes
 * its block of FILE with MPI_File_iwrite_at and waits, then reads its
 * neighbour's with MPI_File_iread_at and checks every byte; rank 0 prints
 * "mpiio async ok N" (N ranks).
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define BLOCK (1 << 20)

int main(int argc, char **argv)
{
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 2) {
        if (rank == 0)
            fprintf(stderr, "usage: mpiio_async FILE\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    char *mine = malloc(BLOCK), *theirs = malloc(BLOCK);
    for (int i = 0; i < BLOCK; i++)
        mine[i] = (char)(rank * 31 + i % 251);
    MPI_File fh;
    MPI_Request rq;
    MPI_Status st;
    int n;
    if (MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh))
        MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_File_iwrite_at(fh, (MPI_Offset)rank * BLOCK, mine, BLOCK, MPI_BYTE, &rq);
    MPI_Wait(&rq, &st);
    MPI_Get_count(&st, MPI_BYTE, &n);
    if (n != BLOCK) {
        fprintf(stderr, "rank %d: iwrite wrote %d\n", rank, n);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    MPI_File_sync(fh);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_File_sync(fh);
    int peer = (rank + 1) % size;
    MPI_File_iread_at(fh, (MPI_Offset)peer * BLOCK, theirs, BLOCK, MPI_BYTE, &rq);
    MPI_Wait(&rq, &st);
    MPI_Get_count(&st, MPI_BYTE, &n);
    int bad = n != BLOCK;
    for (int i = 0; i < BLOCK && !bad; i++)
        bad = theirs[i] != (char)(peer * 31 + i % 251);
    int anybad;
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_File_close(&fh);
    if (rank == 0)
        printf(anybad ? "mpiio async BAD\n" : "mpiio async ok %d\n", size);
    MPI_Finalize();
    return anybad;
}
