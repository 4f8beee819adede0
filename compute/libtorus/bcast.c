/*
 * bcast.c - the pipelined rectangle broadcast (sched.h): the message split
 * evenly among the colours, each colour's part sent down its own spanning
 * tree of the box in chunks, every chunk forwarded as soon as it arrives.
 */
#include <stdlib.h>
#include <string.h>

#include "torus.h"

enum { TAG = 27 };          /* + colour, on the private communicator */

struct colour {
    size_t off, len;        /* the part of the message */
    int nchunks, parent, nkids, kids[TORUS_MAXKIDS];
    int next;               /* the next chunk to forward, in order */
};

static size_t chunk_len(const struct colour *c, size_t chunk, int k)
{
    size_t at = (size_t)k * chunk;
    return c->len - at < chunk ? c->len - at : chunk;
}

static int forward(struct torus_comm *t, char *buf, struct colour *c, int colour, int k, size_t chunk,
                   MPI_Request *sends, int *nsends)
{
    char *p = buf + c->off + (size_t)k * chunk;
    int len = (int)chunk_len(c, chunk, k);
    for (int i = 0; i < c->nkids; i++) {
        int rc = PMPI_Isend(p, len, MPI_BYTE, t->rank_of[c->kids[i]], TAG + colour, t->dup, &sends[(*nsends)++]);
        if (rc != MPI_SUCCESS)
            return rc;
    }
    return MPI_SUCCESS;
}

static int bcast_bytes(struct torus_comm *t, char *buf, size_t len, int root)
{
    int nc = torus_colours(&t->box);
    if (nc == 0 || len == 0)
        return MPI_SUCCESS;
    size_t chunk = torus_tune()->chunk;
    struct colour col[2 * TORUS_MAXDIM];
    int me = t->index[t->rank], rt = t->index[root], total = 0, maxsends = 0;
    for (int c = 0; c < nc; c++) {
        col[c].off = len * c / nc;
        col[c].len = len * (c + 1) / nc - col[c].off;
        col[c].nchunks = (int)((col[c].len + chunk - 1) / chunk);
        col[c].nkids = torus_links(&t->box, c, rt, me, &col[c].parent, col[c].kids);
        col[c].next = 0;
        total += col[c].nchunks;
        maxsends += col[c].nchunks * col[c].nkids;
    }
    MPI_Request *sends = malloc((maxsends + 1) * sizeof *sends);
    MPI_Request *recvs = malloc((total + 1) * sizeof *recvs);
    int *which = malloc((total + 1) * sizeof *which);       /* recv request -> colour */
    int *done = calloc(total + 1, sizeof *done);
    int *first = malloc((nc + 1) * sizeof *first);          /* colour -> its first recv request */
    int rc = MPI_SUCCESS, nsends = 0;
    if (!sends || !recvs || !which || !done || !first) {
        rc = MPI_ERR_NO_MEM;
        goto out;
    }
    if (me == rt) {
        /* every colour's chunks in turn, so that all dimensions start at once */
        int most = 0;
        for (int c = 0; c < nc; c++)
            most = col[c].nchunks > most ? col[c].nchunks : most;
        for (int k = 0; k < most && rc == MPI_SUCCESS; k++)
            for (int c = 0; c < nc && rc == MPI_SUCCESS; c++)
                if (k < col[c].nchunks)
                    rc = forward(t, buf, &col[c], c, k, chunk, sends, &nsends);
    } else {
        int n = 0;
        for (int c = 0; c < nc && rc == MPI_SUCCESS; c++) {
            first[c] = n;
            for (int k = 0; k < col[c].nchunks && rc == MPI_SUCCESS; k++, n++) {
                which[n] = c;
                rc = PMPI_Irecv(buf + col[c].off + (size_t)k * chunk, (int)chunk_len(&col[c], chunk, k), MPI_BYTE,
                                t->rank_of[col[c].parent], TAG + c, t->dup, &recvs[n]);
            }
        }
        int left = total, *idx = malloc((total + 1) * sizeof *idx), got;
        if (!idx)
            rc = MPI_ERR_NO_MEM;
        while (rc == MPI_SUCCESS && left > 0) {
            rc = PMPI_Waitsome(total, recvs, &got, idx, MPI_STATUSES_IGNORE);
            if (rc != MPI_SUCCESS || got == MPI_UNDEFINED)
                break;
            left -= got;
            for (int i = 0; i < got; i++)
                done[idx[i]] = 1;
            /* a colour's chunks go on in order: its children match them by order */
            for (int c = 0; c < nc && rc == MPI_SUCCESS; c++)
                while (col[c].next < col[c].nchunks && done[first[c] + col[c].next] && rc == MPI_SUCCESS)
                    rc = forward(t, buf, &col[c], c, col[c].next++, chunk, sends, &nsends);
        }
        free(idx);
    }
    if (nsends) {
        int rc2 = PMPI_Waitall(nsends, sends, MPI_STATUSES_IGNORE);
        rc = rc == MPI_SUCCESS ? rc2 : rc;
    }
out:
    free(sends), free(recvs), free(which), free(done), free(first);
    return rc;
}

/* Whether count elements of dt lie densely from the first one's true lower
 * bound: then the broadcast moves the user's bytes in place. */
static int dense(MPI_Datatype dt, MPI_Aint *tlb, MPI_Aint *size)
{
    int sz;
    MPI_Aint lb, ext, text;
    PMPI_Type_size(dt, &sz);
    PMPI_Type_get_extent(dt, &lb, &ext);
    PMPI_Type_get_true_extent(dt, tlb, &text);
    *size = sz;
    return sz == ext && sz == text;
}

int torus_bcast(struct torus_comm *t, void *buf, int count, MPI_Datatype dt, int root)
{
    MPI_Aint tlb, size;
    if (dense(dt, &tlb, &size))
        return bcast_bytes(t, (char *)buf + tlb, (size_t)count * size, root);
    /* a derived type with holes: packed (MPICH's native packing is the bare
     * bytes in type-map order, the same whichever type of this signature) */
    size_t len = (size_t)count * size;
    char *tmp = malloc(len ? len : 1);
    if (!tmp)
        return MPI_ERR_NO_MEM;
    int pos = 0, rc = MPI_SUCCESS;
    if (t->rank == root)
        rc = PMPI_Pack(buf, count, dt, tmp, (int)len, &pos, t->dup);
    if (rc == MPI_SUCCESS)
        rc = bcast_bytes(t, tmp, len, root);
    if (rc == MPI_SUCCESS && t->rank != root)
        rc = PMPI_Unpack(tmp, (int)len, &pos, buf, count, dt, t->dup);
    free(tmp);
    return rc;
}
