/*
 * launch_hello - the launch-time benchmark's job (bench/launch.py): MPI_Init,
 * one allreduce, MPI_Finalize, as examples/mpi/hello without the printing.
 * The one allreduce (MPI_MAX over 4 doubles) both checks the job and says
 * where the time went: each rank contributes its wall clock (CLOCK_REALTIME)
 * when main() started and when MPI_Init returned; rank 0 prints
 *   launch_hello: ranks=N first_main=T last_main=T last_init=T
 * in seconds since the epoch, and the driver subtracts its own start time.
 * Exit 1 if the allreduce is wrong.  Built with mpicc.mpich (bench/bench.mk),
 * the same dynamic executable for mpiexec.hydra and lattice run.
 */
#include <mpi.h>
#include <stdio.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    double t_main = now();
    int rank, size;

    MPI_Init(&argc, &argv);
    double t_init = now();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    double in[4] = { t_main, -t_main, t_init, (double)rank }, out[4];
    MPI_Allreduce(in, out, 4, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    int ok = out[3] == (double)(size - 1);
    if (rank == 0)
        printf("launch_hello: ranks=%d first_main=%.6f last_main=%.6f last_init=%.6f allreduce=%s\n",
               size, -out[1], out[0], out[2], ok ? "ok" : "wrong");
    MPI_Finalize();
    return ok ? 0 : 1;
}
