/* mpiio_nb.c - ROMIO's nonblocking I/O across ranks, as MPICH's io tests
 * async and i_aggregation do: each rank writes its part of one file with
 * MPI_File_iwrite_at (then collectively with MPI_File_iwrite_at_all), waits,
 * and reads back another rank's part with MPI_File_iread_at(_all), checking
 * every byte.  Prints "ok N" on rank 0 when all ranks verified. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#define COUNT (256 * 1024)       /* ints per rank and phase: 1 MiB */

static int value(int phase, int rank, int i)
{
    return phase * 0x1000000 + rank * 0x10000 + i;
}

static int check(int phase, int rank, const int *buf, int me)
{
    for (int i = 0; i < COUNT; i++)
        if (buf[i] != value(phase, rank, i)) {
            fprintf(stderr, "rank %d: phase %d: int %d of rank %d's part is %d, not %d\n", me, phase, i, rank,
                    buf[i], value(phase, rank, i));
            return 1;
        }
    return 0;
}

int main(int argc, char **argv)
{
    int me, n, bad = 0, all = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (argc != 2) {
        if (me == 0)
            fprintf(stderr, "usage: mpiio_nb FILE\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int *buf = malloc(COUNT * sizeof(int));
    if (!buf)
        MPI_Abort(MPI_COMM_WORLD, 1);
    MPI_File fh;
    MPI_Request req;
    MPI_Status st;
    MPI_File_open(MPI_COMM_WORLD, argv[1], MPI_MODE_CREATE | MPI_MODE_RDWR, MPI_INFO_NULL, &fh);
    MPI_File_set_errhandler(fh, MPI_ERRORS_ARE_FATAL);
    int peer = (me + 1) % n;
    for (int phase = 0; phase < 2; phase++) {       /* 0: independent (async), 1: collective (i_aggregation) */
        MPI_Offset base = (MPI_Offset)phase * n * COUNT * sizeof(int);
        for (int i = 0; i < COUNT; i++)
            buf[i] = value(phase, me, i);
        MPI_Offset mine = base + (MPI_Offset)me * COUNT * sizeof(int);
        if (phase == 0)
            MPI_File_iwrite_at(fh, mine, buf, COUNT, MPI_INT, &req);
        else
            MPI_File_iwrite_at_all(fh, mine, buf, COUNT, MPI_INT, &req);
        MPI_Wait(&req, &st);
        int got;
        MPI_Get_count(&st, MPI_INT, &got);
        if (got != COUNT) {
            fprintf(stderr, "rank %d: phase %d wrote %d ints, not %d\n", me, phase, got, COUNT);
            bad = 1;
        }
        MPI_File_sync(fh);
        MPI_Barrier(MPI_COMM_WORLD);
        MPI_File_sync(fh);
        MPI_Offset theirs = base + (MPI_Offset)peer * COUNT * sizeof(int);
        for (int i = 0; i < COUNT; i++)
            buf[i] = -1;
        if (phase == 0)
            MPI_File_iread_at(fh, theirs, buf, COUNT, MPI_INT, &req);
        else
            MPI_File_iread_at_all(fh, theirs, buf, COUNT, MPI_INT, &req);
        MPI_Wait(&req, &st);
        bad |= check(phase, peer, buf, me);
    }
    MPI_File_close(&fh);
    MPI_Allreduce(&bad, &all, 1, MPI_INT, MPI_LOR, MPI_COMM_WORLD);
    if (me == 0 && !all)
        printf("ok %d\n", n);
    free(buf);
    MPI_Finalize();
    return all;
}
