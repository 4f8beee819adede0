/*
 * hello - each rank prints its rank, the job size and where it runs (its
 * compute node's personality: torus coordinates x,y,z, t, pset, mode), then
 * the job does one allreduce and checks it.  Used by the tests and by the
 * launch-time benchmark (MPI_Init to MPI_Finalize).
 * t is the process's core on its node (0 in coprocessor mode, 0..cores-1 in
 * virtual node mode).  Without a personality (started by mpiexec) it prints
 * the rank's place among the ranks of its node instead.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <lattice/personality.h>

int main(int argc, char **argv)
{
    int rank, size, local;
    MPI_Comm node;
    struct lattice_personality p;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &local);
    MPI_Comm_free(&node);

    if (lattice_personality(&p) == 0)
        printf("hello from rank %d of %d: coords %u,%u,%u t %u pset %u mode %s node %s\n",
               rank, size, p.x, p.y, p.z, p.t, p.pset, p.mode, p.location);
    else
        printf("hello from rank %d of %d: coords ?,?,? t %d pset ? mode ? node ? (no personality)\n",
               rank, size, local);
    fflush(stdout);

    long one = rank + 1, sum = 0;
    MPI_Allreduce(&one, &sum, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
    long want = (long)size * (size + 1) / 2;
    if (sum != want) {
        fprintf(stderr, "hello: rank %d: allreduce sum %ld, expected %ld\n", rank, sum, want);
        MPI_Finalize();
        return 1;
    }
    if (rank == 0)
        printf("hello: allreduce ok (%ld)\n", sum);
    MPI_Finalize();
    return 0;
}
