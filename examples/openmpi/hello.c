/* Open MPI hello + allreduce of known values: each rank prints its rank
 * and host, then checks the sum of 1..size and a max across ranks. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    int rank, size, len;
    char host[MPI_MAX_PROCESSOR_NAME];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Get_processor_name(host, &len);
    printf("hello from rank %d of %d on %s\n", rank, size, host);

    long mine[2] = { rank + 1, 10L * rank }, sum[2];
    MPI_Allreduce(&mine[0], &sum[0], 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&mine[1], &sum[1], 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD);
    long want_sum = (long)size * (size + 1) / 2, want_max = 10L * (size - 1);
    int ok = sum[0] == want_sum && sum[1] == want_max;
    if (rank == 0)
        printf("allreduce sum=%ld (want %ld) max=%ld (want %ld): %s\n", sum[0], want_sum, sum[1], want_max,
               ok ? "ok" : "WRONG");
    MPI_Finalize();
    return ok ? 0 : 1;
}
