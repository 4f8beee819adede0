/* Each rank says where it runs, writes a file there through its I/O node,
 * and takes part in collectives across hosts; rank EXIT_RANK (argv[2]) exits
 * with status 3.  argv[1]: the directory for the files.  With argv[3] =
 * "spin" it loops on barriers for a minute after printing "started". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int rank, size, sum = 0;
    char host[256], path[4096];

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    gethostname(host, sizeof(host));
    if (argc > 3 && !strcmp(argv[3], "spin")) {
        printf("started rank %d on %s\n", rank, host);
        fflush(stdout);
        for (int i = 0; i < 1200; i++) {
            MPI_Barrier(MPI_COMM_WORLD);
            usleep(50000);
        }
    }
    MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    snprintf(path, sizeof(path), "%s/rank-%d.txt", argc > 1 ? argv[1] : ".", rank);
    FILE *f = fopen(path, "w");
    if (!f || fprintf(f, "%d %s\n", rank, host) < 0 || fclose(f) != 0) {
        perror(path);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    printf("rank %d of %d on %s sum %d\n", rank, size, host, sum);
    MPI_Finalize();
    return argc > 2 && rank == atoi(argv[2]) ? 3 : 0;
}
