/*
 * mpi.c - the interposed MPI entry points: each takes the torus path when
 * it may (torus.h says when not) and MPICH's PMPI_ function otherwise.
 */
#include "torus.h"

#define API __attribute__((visibility("default")))

/* Commutative ops only: the trees combine in arrival order, and MPI fixes
 * the order of a non-commutative one (MPICH's algorithms keep it). */
static int commutes(MPI_Op op)
{
    int c = 0;
    return PMPI_Op_commutative(op, &c) == MPI_SUCCESS && c;
}

static size_t bytes(int count, MPI_Datatype dt)
{
    int sz = 0;
    PMPI_Type_size(dt, &sz);
    return (size_t)count * (size_t)sz;
}

API int MPI_Bcast(void *buf, int count, MPI_Datatype dt, int root, MPI_Comm comm)
{
    const struct torus_tune *tu = torus_tune();
    struct torus_comm *t = torus_comm_of(comm);
    size_t n = bytes(count, dt);
    if (!t || !t->mesh || root < 0 || root >= t->size || n < tu->bcast_min || (tu->bcast_max && n > tu->bcast_max))
        return PMPI_Bcast(buf, count, dt, root, comm);
    return torus_bcast(t, buf, count, dt, root);
}

API int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt, MPI_Op op, int root, MPI_Comm comm)
{
    const struct torus_tune *tu = torus_tune();
    struct torus_comm *t = torus_comm_of(comm);
    if (!t || root < 0 || root >= t->size || !commutes(op) || (tu->reduce_max && bytes(count, dt) > tu->reduce_max))
        return PMPI_Reduce(sendbuf, recvbuf, count, dt, op, root, comm);
    return torus_reduce(t, sendbuf, recvbuf, count, dt, op, root);
}

API int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt, MPI_Op op, MPI_Comm comm)
{
    const struct torus_tune *tu = torus_tune();
    struct torus_comm *t = torus_comm_of(comm);
    if (!t || !commutes(op) || (tu->reduce_max && bytes(count, dt) > tu->reduce_max))
        return PMPI_Allreduce(sendbuf, recvbuf, count, dt, op, comm);
    return torus_allreduce(t, sendbuf, recvbuf, count, dt, op);
}

API int MPI_Barrier(MPI_Comm comm)
{
    struct torus_comm *t = torus_tune()->barrier ? torus_comm_of(comm) : NULL;
    return t ? torus_barrier(t) : PMPI_Barrier(comm);
}
