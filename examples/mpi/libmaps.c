/*
 * libmaps (MPI) - after MPI_Init (so UCX's modules are loaded too), where
 * this rank's libraries are mapped from (../libmaps.h), then one allreduce
 * of the ranks as a check that MPI works: "libmaps: allreduce ok (SUM)".
 */
#include <mpi.h>

#include "../libmaps.h"

int main(int argc, char **argv)
{
    int rank, size, sum = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    report_maps();
    int one = rank + 1;
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("libmaps: allreduce %s (%d)\n", sum == size * (size + 1) / 2 ? "ok" : "WRONG", sum);
    MPI_Finalize();
    return 0;
}
