/*
 * torus.h - internals of libtorus.so, Lattice's torus collectives.
 *
 * The library is preloaded into an MPICH program (lattice run --collectives
 * torus) and interposes MPI_Bcast, MPI_Reduce, MPI_Allreduce and MPI_Barrier
 * through the PMPI profiling interface.  Each intracommunicator's layout is
 * learnt once, at its first collective, and kept as an attribute: every
 * rank's torus coordinates (LATTICE_PERSONALITY) and its host (the ranks
 * MPICH says share memory).  What the library cannot do better, or must
 * not do (intercommunicators, non-commutative operations, a communicator
 * that is no box of the torus, a program not started by Lattice), goes to
 * MPICH's own algorithm.
 */
#ifndef LATTICE_TORUS_H
#define LATTICE_TORUS_H

#include <mpi.h>
#include <stddef.h>

#include "sched.h"

struct torus_comm {
    int usable;             /* every rank was started by Lattice: the trees below exist */
    int mesh;               /* the ranks fill a box of the torus: the broadcast's colours exist */
    MPI_Comm dup;           /* private copies: our messages never meet the program's */
    MPI_Comm local;         /* the ranks of my host (shared memory) */
    MPI_Comm leaders;       /* local rank 0 of every host; MPI_COMM_NULL elsewhere */
    int size, rank;
    struct torus_box box;
    int *index;             /* comm rank -> linear index in the box */
    int *rank_of;           /* linear index in the box -> comm rank */
    int *host;              /* comm rank -> its host's rank in leaders */
    int *lrank;             /* comm rank -> its rank in its host's local comm */
};

/* The layout of comm, learnt at its first collective (collective itself);
 * NULL for an intercommunicator or when the library is off for it. */
struct torus_comm *torus_comm_of(MPI_Comm comm);

/* Tunables from the environment, read once (docs/architecture.md, "Collectives"). */
struct torus_tune {
    size_t chunk;           /* LATTICE_TORUS_CHUNK: pipeline chunk of the broadcast */
    size_t bcast_min;       /* LATTICE_TORUS_BCAST_MIN: smaller broadcasts go to MPICH */
    size_t bcast_max;       /* LATTICE_TORUS_BCAST_MAX: larger broadcasts go to MPICH (0: none) */
    size_t reduce_max;      /* LATTICE_TORUS_REDUCE_MAX: larger reductions go to MPICH (0: none) */
    size_t allreduce_bcast; /* LATTICE_TORUS_ALLREDUCE_BCAST: an allreduce result this large goes out by torus_bcast */
    int barrier;            /* LATTICE_TORUS_BARRIER=0: MPICH's barrier */
    int verbose;            /* LATTICE_TORUS_VERBOSE=1: one line per communicator learnt, from its rank 0 */
};
const struct torus_tune *torus_tune(void);

/* The collectives over a layout (comm ranks as in MPI). */
int torus_bcast(struct torus_comm *t, void *buf, int count, MPI_Datatype dt, int root);
int torus_reduce(struct torus_comm *t, const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt,
                 MPI_Op op, int root);
int torus_allreduce(struct torus_comm *t, const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt,
                    MPI_Op op);
int torus_barrier(struct torus_comm *t);

/* count elements of dt as bytes: the buffer to hold them (freed with free)
 * from which base points at the first element; NULL if out of memory. */
void *torus_tmp(int count, MPI_Datatype dt, void **base);

#endif
