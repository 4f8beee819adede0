/* Open MPI shared memory between ranks [PINGPONGS]:
 * 1. MPI_COMM_TYPE_SHARED groups the ranks that share memory; prints its size.
 * 2. A shared window (MPI_Win_allocate_shared) over that group: each rank
 *    stores a value in its own slot with a plain store, and rank 0 of the
 *    group reads every slot with plain loads, no MPI call between: only
 *    memory the processes really share passes that.
 * 3. PINGPONGS (default 1000) small-message round trips between the first
 *    and the last rank, each message checked.
 * 4. One 4 MiB message each way between them (Open MPI's vader sends large
 *    messages by single copy: process_vm_readv), every byte checked.
 * Prints one line per step ending in "ok", exit 1 on any mismatch. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    int rank, size, srank, ssize, bad = 0;
    long pingpongs = argc > 1 ? atol(argv[1]) : 1000;
    MPI_Comm shared;
    MPI_Win win;
    long *mine;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared);
    MPI_Comm_rank(shared, &srank);
    MPI_Comm_size(shared, &ssize);
    if (rank == 0)
        printf("shared-memory group of rank 0: %d of %d ranks: ok\n", ssize, size);

    MPI_Win_allocate_shared(sizeof(long), sizeof(long), MPI_INFO_NULL, shared, &mine, &win);
    MPI_Win_lock_all(MPI_MODE_NOCHECK, win);
    *mine = 1000L * rank + 7;                  /* a plain store */
    MPI_Win_sync(win);
    MPI_Barrier(shared);
    MPI_Win_sync(win);
    if (srank == 0) {
        int seen = 0;
        for (int r = 0; r < ssize; r++) {
            MPI_Aint len;
            int disp;
            long *slot;
            int world;
            MPI_Group g, wg;
            MPI_Win_shared_query(win, r, &len, &disp, &slot);
            MPI_Comm_group(shared, &g);
            MPI_Comm_group(MPI_COMM_WORLD, &wg);
            MPI_Group_translate_ranks(g, 1, &r, wg, &world);
            MPI_Group_free(&g);
            MPI_Group_free(&wg);
            seen += *slot == 1000L * world + 7;   /* a plain load of another process's store */
        }
        bad |= seen != ssize;
        if (rank == 0)
            printf("shared window: %d of %d stores seen by plain loads: %s\n", seen, ssize,
                   seen == ssize ? "ok" : "WRONG");
    }
    MPI_Win_unlock_all(win);
    MPI_Win_free(&win);

    int peer = size - 1, wrong = 0;
    for (long i = 0; i < pingpongs && size > 1; i++) {
        long v = i;
        if (rank == 0) {
            MPI_Send(&v, 1, MPI_LONG, peer, 0, MPI_COMM_WORLD);
            MPI_Recv(&v, 1, MPI_LONG, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            wrong += v != 2 * i + 1;
        } else if (rank == peer) {
            MPI_Recv(&v, 1, MPI_LONG, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            wrong += v != i;
            v = 2 * i + 1;
            MPI_Send(&v, 1, MPI_LONG, 0, 0, MPI_COMM_WORLD);
        }
    }
    bad |= wrong != 0;

    enum { BIG = 4 << 20 };
    unsigned char *buf = malloc(BIG);
    long bigwrong = 0;
    if (size > 1 && (rank == 0 || rank == peer)) {
        for (long i = 0; i < BIG; i++)
            buf[i] = (unsigned char)(rank == 0 ? i * 7 : 0);
        if (rank == 0) {
            MPI_Send(buf, BIG, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
            MPI_Recv(buf, BIG, MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (long i = 0; i < BIG; i++)
                bigwrong += buf[i] != (unsigned char)(i * 7 + 1);
        } else {
            MPI_Recv(buf, BIG, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            for (long i = 0; i < BIG; i++) {
                bigwrong += buf[i] != (unsigned char)(i * 7);
                buf[i]++;
            }
            MPI_Send(buf, BIG, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
        }
    }
    free(buf);
    if (rank == 0 && size > 1)
        printf("4 MiB each way 0<->%d: %ld bytes wrong: %s\n", peer, bigwrong, bigwrong ? "WRONG" : "ok");
    bad |= bigwrong != 0;
    int anybad;
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        printf("pingpong 0<->%d: %ld round trips: %s\n", peer, pingpongs, anybad ? "WRONG" : "ok");
    MPI_Comm_free(&shared);
    MPI_Finalize();
    return anybad ? 1 : 0;
}
