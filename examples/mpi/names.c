/*
 * names: MPI name publishing through the PMI server.  Rank 0 publishes a
 * service, every rank looks it up (ranks on other I/O nodes too), a second
 * publish of the same name and a lookup after unpublish fail with MPI's
 * error classes, and each rank says what it saw.
 */
#include <mpi.h>
#include <stdio.h>
#include <string.h>

static const char *class_name(int err)
{
    int cls;

    MPI_Error_class(err, &cls);
    return cls == MPI_SUCCESS ? "ok" : cls == MPI_ERR_NAME ? "MPI_ERR_NAME"
         : cls == MPI_ERR_SERVICE ? "MPI_ERR_SERVICE" : "other error";
}

int main(int argc, char **argv)
{
    char port[MPI_MAX_PORT_NAME] = "", want[64];
    int rank, size, err;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    snprintf(want, sizeof(want), "port-of-rank-0-of-%d", size);

    if (rank == 0) {
        printf("publish: %s\n", class_name(MPI_Publish_name("lattice-ocean", MPI_INFO_NULL, want)));
        printf("publish again: %s\n", class_name(MPI_Publish_name("lattice-ocean", MPI_INFO_NULL, "other")));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    err = MPI_Lookup_name("lattice-ocean", MPI_INFO_NULL, port);
    printf("lookup: %s %s\n", class_name(err), strcmp(port, want) ? "wrong port" : "same port");
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0)
        printf("unpublish: %s\n", class_name(MPI_Unpublish_name("lattice-ocean", MPI_INFO_NULL, want)));
    MPI_Barrier(MPI_COMM_WORLD);
    err = MPI_Lookup_name("lattice-ocean", MPI_INFO_NULL, port);
    printf("lookup after unpublish: %s\n", class_name(err));
    MPI_Finalize();
    return 0;
}
