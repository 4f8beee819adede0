/*
 * pingpong [ITERS] - latency and bandwidth between ranks 0 and 1 for
 * messages of 8 B .. 4 MiB (powers of two).  Rank 0 prints one line per
 * size: bytes, iterations, half round-trip time in microseconds, MB/s
 * (10^6 bytes per second, one direction).  Every received message is
 * checked (first and last byte carry the iteration); exit 1 on a mismatch.
 * Ranks beyond 1 only take part in the barriers.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXB (4L << 20)

int main(int argc, char **argv)
{
    int rank, size, bad = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) {
        if (rank == 0)
            fprintf(stderr, "pingpong: needs 2 ranks\n");
        MPI_Finalize();
        return 2;
    }
    int base = argc > 1 ? atoi(argv[1]) : 1000;
    char *buf = malloc(MAXB);
    memset(buf, 0, MAXB);
    if (rank == 0)
        printf("%10s %8s %12s %12s\n", "bytes", "iters", "usec", "MB/s");

    for (long n = 8; n <= MAXB; n *= 2) {
        /* fewer iterations for large messages: about the same bytes each */
        int iters = n <= 65536 ? base : (int)(base * 65536 / n);
        if (iters < 10)
            iters = 10;
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = -2; i < iters; i++) {      /* two warm-up rounds */
            if (i == 0)
                t0 = MPI_Wtime();
            char tag = (char)(i + 3);
            if (rank == 0) {
                buf[0] = buf[n - 1] = tag;
                MPI_Send(buf, (int)n, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
                MPI_Recv(buf, (int)n, MPI_BYTE, 1, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                if (buf[0] != (char)(tag + 1) || buf[n - 1] != (char)(tag + 1))
                    bad = 1;
            } else if (rank == 1) {
                MPI_Recv(buf, (int)n, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                if (buf[0] != tag || buf[n - 1] != tag)
                    bad = 1;
                buf[0] = buf[n - 1] = (char)(tag + 1);
                MPI_Send(buf, (int)n, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
            }
        }
        double dt = MPI_Wtime() - t0;
        if (rank == 0)
            printf("%10ld %8d %12.2f %12.1f\n", n, iters, dt / iters / 2 * 1e6,
                   (double)n * iters * 2 / dt / 1e6);
    }
    fflush(stdout);
    int anybad;
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (anybad && rank == 0)
        fprintf(stderr, "pingpong: a message arrived wrong\n");
    free(buf);
    MPI_Finalize();
    return anybad;
}
