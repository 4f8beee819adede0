/*
 * rma_bench - MPI one-sided atomics, all to one: rank 0 holds the window and
 * waits in MPI_Barrier (so an active-message atomic needs its progress, as
 * a real target's would), every other rank is an origin.
 *
 *   rma_bench BUDGET_S [OP...]      OP: fop cas gacc (default all three)
 *
 * For each op, two phases between barriers, each run for about BUDGET_S
 * seconds (the iteration count is agreed from a short timed try):
 *   lat   one op, then MPI_Win_flush: the time of one complete op;
 *   rate  ops back to back, BATCH at a time, each batch ended by one
 *         MPI_Win_flush (MPICH keeps a request per outstanding op: two
 *         million outstanding exhaust its request pool).
 * fop is MPI_Fetch_and_op(MPI_SUM) of one int64, cas MPI_Compare_and_swap of
 * one int64, gacc MPI_Get_accumulate(MPI_SUM) of 4 int64.  Rank 0 checks
 * that the window ends with every origin's additions and prints one line
 * per op and phase:
 *   OP PHASE ranks=N iters=I us=U rate=R
 * us: the origins' mean time of one op (the slowest origin's); rate: ops of
 * all origins per second.  Built with mpicc.mpich (bench/bench.mk); run by
 * bench/rma.py under mpiexec.hydra and lattice run.
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GACC_N 4
#define BATCH 1000

enum { FOP, CAS, GACC, NOPS };
static const char *const names[NOPS] = { "fop", "cas", "gacc" };

/* iters ops of kind op from this origin to rank 0; flush after each if lat */
static void ops(MPI_Win win, int op, long iters, int lat, int64_t *sum)
{
    int64_t one[GACC_N] = { 1, 1, 1, 1 }, res[GACC_N], cmp = -1;
    for (long i = 0; i < iters; i++) {
        switch (op) {
        case FOP:
            MPI_Fetch_and_op(one, res, MPI_INT64_T, 0, 0, MPI_SUM, win);
            *sum += 1;
            break;
        case CAS:       /* never matches: cell 1 only grows from 0 */
            MPI_Compare_and_swap(one, &cmp, res, MPI_INT64_T, 0, 1, win);
            break;
        case GACC:
            MPI_Get_accumulate(one, GACC_N, MPI_INT64_T, res, GACC_N, MPI_INT64_T,
                               0, 2, GACC_N, MPI_INT64_T, MPI_SUM, win);
            *sum += 1;
            break;
        }
        if (lat || (i + 1) % BATCH == 0)
            MPI_Win_flush(0, win);
    }
    MPI_Win_flush(0, win);
}

/* the slowest origin's seconds for iters ops (0 on rank 0) */
static double timed(MPI_Win win, int rank, int op, long iters, int lat, int64_t *sum)
{
    double t = 0, worst;
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank) {
        double t0 = MPI_Wtime();
        ops(win, op, iters, lat, sum);
        t = MPI_Wtime() - t0;
    }
    MPI_Allreduce(&t, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return worst;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double budget = argc > 1 ? atof(argv[1]) : 0;
    if (size < 2 || budget <= 0) {
        if (rank == 0)
            fprintf(stderr, "usage: rma_bench BUDGET_S [fop|cas|gacc]... (2 ranks or more)\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    int want[NOPS] = { argc <= 2, argc <= 2, argc <= 2 };
    for (int i = 2; i < argc; i++) {
        int k = 0;
        while (k < NOPS && strcmp(argv[i], names[k]))
            k++;
        if (k == NOPS) {
            if (rank == 0)
                fprintf(stderr, "rma_bench: unknown op %s (fop, cas, gacc)\n", argv[i]);
            MPI_Abort(MPI_COMM_WORLD, 2);
        }
        want[k] = 1;
    }

    int64_t *base;
    MPI_Win win;
    MPI_Win_allocate((2 + GACC_N) * sizeof(int64_t), sizeof(int64_t), MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    memset(base, 0, (2 + GACC_N) * sizeof(int64_t));
    MPI_Win_lock_all(0, win);
    int64_t fop_sum = 0, gacc_sum = 0;
    for (int op = 0; op < NOPS; op++) {
        if (!want[op])
            continue;
        int64_t *sum = op == GACC ? &gacc_sum : &fop_sum;
        for (int lat = 1; lat >= 0; lat--) {
            /* a warm-up, then a try of 100 ops sizes the run to the budget */
            timed(win, rank, op, 20, lat, sum);
            double t = timed(win, rank, op, 100, lat, sum);
            long iters = t > 0 ? (long)(budget / (t / 100)) : 100000;
            iters = iters < 100 ? 100 : iters > 2000000 ? 2000000 : iters;
            t = timed(win, rank, op, iters, lat, sum);
            if (rank == 0)
                printf("%s %s ranks=%d iters=%ld us=%.3f rate=%.0f\n", names[op], lat ? "lat" : "rate", size,
                       iters, t / iters * 1e6, (double)iters * (size - 1) / t);
        }
    }
    MPI_Win_unlock_all(win);
    /* every origin's additions reached the window */
    int64_t fops = 0, gaccs = 0;
    MPI_Reduce(&fop_sum, &fops, 1, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&gacc_sum, &gaccs, 1, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    int bad = 0;
    if (rank == 0) {
        MPI_Win_lock(MPI_LOCK_SHARED, 0, 0, win);
        bad = base[0] != fops || base[1] != 0;
        for (int k = 0; k < GACC_N; k++)
            bad |= base[2 + k] != gaccs;
        MPI_Win_unlock(0, win);
        if (bad)
            printf("rma_bench: wrong window: fop %lld of %lld, cas cell %lld, gacc %lld of %lld\n",
                   (long long)base[0], (long long)fops, (long long)base[1], (long long)base[2], (long long)gaccs);
    }
    MPI_Win_free(&win);
    MPI_Finalize();
    return bad;
}
