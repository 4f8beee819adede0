/*
 * reduce.c - reductions and the barrier along a tree matched to the
 * mapping: the ranks of one host (shared memory) combine first, on a
 * binomial tree to the host's first rank; those leaders then combine on a
 * binomial tree between hosts (an allreduce by recursive doubling), so each
 * host's data crosses the network once.
 * Only commutative operations come here (mpi.c): the trees combine in
 * whatever order messages arrive in.
 */
#include <stdlib.h>
#include <string.h>

#include "torus.h"

enum { TAG_RED = 40, TAG_BC, TAG_BAR, TAG_ROOT };

void *torus_tmp(int count, MPI_Datatype dt, void **base)
{
    MPI_Aint lb, ext, tlb, text;
    PMPI_Type_get_extent(dt, &lb, &ext);
    PMPI_Type_get_true_extent(dt, &tlb, &text);
    size_t bytes = count > 0 ? (size_t)(count - 1) * (size_t)(ext > 0 ? ext : -ext) + (size_t)text : 1;
    char *p = malloc(bytes ? bytes : 1);
    *base = p ? p - tlb : NULL;
    return p;
}

/* dst = src, count elements of dt (two buffers of this process) */
static int copy(const void *src, void *dst, int count, MPI_Datatype dt)
{
    return PMPI_Sendrecv(src, count, dt, 0, 0, dst, count, dt, 0, 0, MPI_COMM_SELF, MPI_STATUS_IGNORE);
}

/* Binomial reduction on c to root: acc holds my contribution, and at the
 * root the result; tmp receives. */
static int reduce_tree(MPI_Comm c, void *acc, void *tmp, int count, MPI_Datatype dt, MPI_Op op, int root)
{
    int n, rank, rc = MPI_SUCCESS;
    PMPI_Comm_size(c, &n);
    PMPI_Comm_rank(c, &rank);
    int vr = (rank - root + n) % n;
    for (int mask = 1; mask < n && rc == MPI_SUCCESS; mask <<= 1) {
        if (vr & mask)
            return PMPI_Send(acc, count, dt, (vr - mask + root) % n, TAG_RED, c);
        if (vr + mask < n) {
            rc = PMPI_Recv(tmp, count, dt, (vr + mask + root) % n, TAG_RED, c, MPI_STATUS_IGNORE);
            if (rc == MPI_SUCCESS)
                rc = PMPI_Reduce_local(tmp, acc, count, dt, op);
        }
    }
    return rc;
}

/* Binomial broadcast on c from root (buf NULL, count 0: a wake-up). */
static int bcast_tree(MPI_Comm c, void *buf, int count, MPI_Datatype dt, int root, int tag)
{
    int n, rank, rc = MPI_SUCCESS, mask = 1;
    PMPI_Comm_size(c, &n);
    PMPI_Comm_rank(c, &rank);
    int vr = (rank - root + n) % n;
    for (; mask < n; mask <<= 1)
        if (vr & mask) {
            rc = PMPI_Recv(buf, count, dt, (vr - mask + root) % n, tag, c, MPI_STATUS_IGNORE);
            break;
        }
    for (mask >>= 1; mask > 0 && rc == MPI_SUCCESS; mask >>= 1)
        if (vr + mask < n)
            rc = PMPI_Send(buf, count, dt, (vr + mask + root) % n, tag, c);
    return rc;
}

/* Allreduce on c by recursive doubling (log2 steps rather than the trees'
 * 2 log2): with h not a power of two the first 2*(h - pof2) ranks pair off
 * first, the even one handing its data to the odd and getting the result
 * back at the end (as MPICH does it). */
static int doubling(MPI_Comm c, void *acc, void *tmp, int count, MPI_Datatype dt, MPI_Op op)
{
    int h, me, rc = MPI_SUCCESS, pof2 = 1;
    PMPI_Comm_size(c, &h);
    PMPI_Comm_rank(c, &me);
    while (pof2 * 2 <= h)
        pof2 *= 2;
    int rem = h - pof2, newrank;
    if (me < 2 * rem) {
        if (me % 2 == 0) {
            rc = PMPI_Send(acc, count, dt, me + 1, TAG_RED, c);
            newrank = -1;
        } else {
            rc = PMPI_Recv(tmp, count, dt, me - 1, TAG_RED, c, MPI_STATUS_IGNORE);
            if (rc == MPI_SUCCESS)
                rc = PMPI_Reduce_local(tmp, acc, count, dt, op);
            newrank = me / 2;
        }
    } else {
        newrank = me - rem;
    }
    for (int mask = 1; newrank >= 0 && mask < pof2 && rc == MPI_SUCCESS; mask <<= 1) {
        int np = newrank ^ mask, peer = np < rem ? np * 2 + 1 : np + rem;
        rc = PMPI_Sendrecv(acc, count, dt, peer, TAG_RED, tmp, count, dt, peer, TAG_RED, c, MPI_STATUS_IGNORE);
        if (rc == MPI_SUCCESS)
            rc = PMPI_Reduce_local(tmp, acc, count, dt, op);
    }
    if (rc == MPI_SUCCESS && me < 2 * rem)
        rc = me % 2 ? PMPI_Send(acc, count, dt, me - 1, TAG_BC, c)
                    : PMPI_Recv(acc, count, dt, me + 1, TAG_BC, c, MPI_STATUS_IGNORE);
    return rc;
}

/* acc (my contribution) combined over the whole communicator, the result
 * at rank `root` of it in out (root < 0: at every rank, in acc = out). */
static int combine(struct torus_comm *t, void *acc, void *out, int count, MPI_Datatype dt, MPI_Op op, int root)
{
    void *tbase, *tmp = torus_tmp(count, dt, &tbase);
    if (!tmp)
        return MPI_ERR_NO_MEM;
    int rc = reduce_tree(t->local, acc, tbase, count, dt, op, 0);
    if (rc == MPI_SUCCESS && t->leaders != MPI_COMM_NULL)
        rc = root < 0 ? doubling(t->leaders, acc, tbase, count, dt, op)
                      : reduce_tree(t->leaders, acc, tbase, count, dt, op, t->host[root]);
    if (root < 0) {
        if (rc == MPI_SUCCESS)
            rc = bcast_tree(t->local, acc, count, dt, 0, TAG_BC);
    } else if (rc == MPI_SUCCESS && t->lrank[root] != 0) {
        /* the root is not its host's leader: the leader hands it the result */
        int lroot = t->lrank[root], lr;
        PMPI_Comm_rank(t->local, &lr);
        if (lr == 0 && t->host[root] == t->host[t->rank])
            rc = PMPI_Send(acc, count, dt, lroot, TAG_ROOT, t->local);
        else if (t->rank == root)
            rc = PMPI_Recv(out, count, dt, 0, TAG_ROOT, t->local, MPI_STATUS_IGNORE);
    } else if (rc == MPI_SUCCESS && t->rank == root && acc != out) {
        rc = copy(acc, out, count, dt);
    }
    free(tmp);
    return rc;
}

int torus_allreduce(struct torus_comm *t, const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt,
                    MPI_Op op)
{
    if (sendbuf != MPI_IN_PLACE) {
        int rc = copy(sendbuf, recvbuf, count, dt);
        if (rc != MPI_SUCCESS)
            return rc;
    }
    /* a large result goes back down by the pipelined torus broadcast, not the binomial tree */
    int sz;
    PMPI_Type_size(dt, &sz);
    if (t->mesh && (size_t)count * (size_t)sz >= torus_tune()->allreduce_bcast) {
        int rc = combine(t, recvbuf, recvbuf, count, dt, op, 0);
        return rc == MPI_SUCCESS ? torus_bcast(t, recvbuf, count, dt, 0) : rc;
    }
    return combine(t, recvbuf, recvbuf, count, dt, op, -1);
}

int torus_reduce(struct torus_comm *t, const void *sendbuf, void *recvbuf, int count, MPI_Datatype dt,
                 MPI_Op op, int root)
{
    const void *mine = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;    /* IN_PLACE: the root's only */
    void *abase, *a = torus_tmp(count, dt, &abase);
    if (!a)
        return MPI_ERR_NO_MEM;
    int rc = copy(mine, abase, count, dt);
    if (rc == MPI_SUCCESS)
        rc = combine(t, abase, recvbuf, count, dt, op, root);
    free(a);
    return rc;
}

/* Fan in to each host's leader, a dissemination barrier between leaders,
 * fan out again. */
int torus_barrier(struct torus_comm *t)
{
    int n, rank, rc;
    PMPI_Comm_size(t->local, &n);
    PMPI_Comm_rank(t->local, &rank);
    for (int mask = 1; mask < n; mask <<= 1) {
        if (rank & mask) {
            if ((rc = PMPI_Send(NULL, 0, MPI_BYTE, rank - mask, TAG_BAR, t->local)) != MPI_SUCCESS)
                return rc;
            break;
        }
        if (rank + mask < n &&
            (rc = PMPI_Recv(NULL, 0, MPI_BYTE, rank + mask, TAG_BAR, t->local, MPI_STATUS_IGNORE)) != MPI_SUCCESS)
            return rc;
    }
    if (t->leaders != MPI_COMM_NULL) {
        int h, me;
        PMPI_Comm_size(t->leaders, &h);
        PMPI_Comm_rank(t->leaders, &me);
        for (int d = 1; d < h; d <<= 1) {
            rc = PMPI_Sendrecv(NULL, 0, MPI_BYTE, (me + d) % h, TAG_BAR, NULL, 0, MPI_BYTE, (me - d + h) % h, TAG_BAR,
                               t->leaders, MPI_STATUS_IGNORE);
            if (rc != MPI_SUCCESS)
                return rc;
        }
    }
    return bcast_tree(t->local, NULL, 0, MPI_BYTE, 0, TAG_BC);
}
