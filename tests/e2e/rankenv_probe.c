/* rankenv_probe: one line of the rank's place as its environment tells it
 * (tests/e2e/test_t1050_rank_env.py).  Built with -DWITH_MPI and Open MPI's
 * mpicc it also prints the rank MPI_Comm_rank gives. */
#include <stdio.h>
#include <stdlib.h>
#ifdef WITH_MPI
#include <mpi.h>
#endif

static const char *var(const char *name)
{
    const char *v = getenv(name);
    return v ? v : "unset";
}

int main(int argc, char **argv)
{
    int mpi_rank = -1;
#ifdef WITH_MPI
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
#else
    (void)argc;
    (void)argv;
#endif
    printf("rank=%s size=%s localid=%s nodeid=%s nnodes=%s mpi_localrankid=%s mpi_localnranks=%s "
           "ompi_rank=%s ompi_size=%s ompi_local_rank=%s ompi_local_size=%s ompi_node_rank=%s pmix_rank=%s "
           "mpi_rank=%d nodeids=%s\n",
           var("LATTICE_RANK"), var("LATTICE_SIZE"), var("LATTICE_LOCALID"), var("LATTICE_NODEID"),
           var("LATTICE_NNODES"), var("MPI_LOCALRANKID"), var("MPI_LOCALNRANKS"), var("OMPI_COMM_WORLD_RANK"),
           var("OMPI_COMM_WORLD_SIZE"), var("OMPI_COMM_WORLD_LOCAL_RANK"), var("OMPI_COMM_WORLD_LOCAL_SIZE"),
           var("OMPI_COMM_WORLD_NODE_RANK"), var("PMIX_RANK"), mpi_rank, var("LATTICE_PSET_NODEIDS"));
    fflush(stdout);
#ifdef WITH_MPI
    MPI_Finalize();
#endif
    return 0;
}
