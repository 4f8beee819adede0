/*
 * topo.c - a communicator's layout on the torus and its hosts, learnt at its
 * first collective and cached as an attribute (torus.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lattice/personality.h"
#include "torus.h"

enum { F_HAS, F_X, F_Y, F_Z, F_T, F_TX, F_TY, F_TZ, F_HOST, F_LRANK, NF };

static int keyval = MPI_KEYVAL_INVALID;

static size_t env_size(const char *name, size_t dflt)
{
    const char *v = getenv(name);
    if (!v || !*v)
        return dflt;
    char *end;
    unsigned long long n = strtoull(v, &end, 10);
    if (*end == 'k' || *end == 'K')
        n <<= 10, end++;
    else if (*end == 'm' || *end == 'M')
        n <<= 20, end++;
    return *end ? dflt : (size_t)n;
}

const struct torus_tune *torus_tune(void)
{
    static struct torus_tune t;
    static int done;
    if (!done) {
        t.chunk = env_size("LATTICE_TORUS_CHUNK", 64 << 10);
        if (t.chunk < 1024)
            t.chunk = 1024;
        t.bcast_min = env_size("LATTICE_TORUS_BCAST_MIN", 16 << 10);     /* below, MPICH wins here (bench/RESULTS.md) */
        t.bcast_max = env_size("LATTICE_TORUS_BCAST_MAX", 0);
        t.reduce_max = env_size("LATTICE_TORUS_REDUCE_MAX", 0);
        t.allreduce_bcast = env_size("LATTICE_TORUS_ALLREDUCE_BCAST", 32 << 10);
        t.barrier = env_size("LATTICE_TORUS_BARRIER", 1) != 0;
        t.verbose = env_size("LATTICE_TORUS_VERBOSE", 0) != 0;
        done = 1;
    }
    return &t;
}

static void drop(struct torus_comm *t)
{
    if (t->leaders != MPI_COMM_NULL)
        PMPI_Comm_free(&t->leaders);
    if (t->local != MPI_COMM_NULL)
        PMPI_Comm_free(&t->local);
    if (t->dup != MPI_COMM_NULL)
        PMPI_Comm_free(&t->dup);
    free(t->index);
    free(t->rank_of);
    free(t->host);
    free(t->lrank);
    free(t);
}

static int delete_fn(MPI_Comm comm, int key, void *val, void *extra)
{
    (void)comm, (void)key, (void)extra;
    drop(val);
    return MPI_SUCCESS;
}

/* My fields: whether Lattice started me, my node's and core's coordinates. */
static void mine(int f[NF])
{
    static struct lattice_personality p;
    static int state = -1;
    if (state < 0)
        state = lattice_personality(&p) == 0;
    memset(f, 0, NF * sizeof f[0]);
    if (!state)
        return;
    f[F_HAS] = 1;
    f[F_X] = (int)p.x, f[F_Y] = (int)p.y, f[F_Z] = (int)p.z, f[F_T] = (int)p.t;
    f[F_TX] = (int)p.torus_x, f[F_TY] = (int)p.torus_y, f[F_TZ] = (int)p.torus_z;
}

/* Do the ranks fill a box of x, y, z, t exactly once?  Then t->box and the
 * index tables; else 0.  A dimension wraps when the box spans the machine's
 * whole torus in it (the core dimension never does). */
static int find_box(struct torus_comm *t, const int *all)
{
    int lo[4], hi[4], whole[4] = { 1, 1, 1, 0 };
    for (int d = 0; d < 4; d++)
        lo[d] = hi[d] = all[F_X + d];
    for (int r = 0; r < t->size; r++)
        for (int d = 0; d < 4; d++) {
            int v = all[r * NF + F_X + d];
            lo[d] = v < lo[d] ? v : lo[d];
            hi[d] = v > hi[d] ? v : hi[d];
        }
    long vol = 1;
    int dims[4];
    t->box.n = 0;
    t->box.wrap = 1;
    for (int d = 0; d < 4; d++) {
        int ext = hi[d] - lo[d] + 1;
        vol *= ext;
        if (ext > 1) {
            dims[t->box.n] = d;
            t->box.ext[t->box.n++] = ext;
            if (!whole[d] || ext != all[F_TX + d])
                t->box.wrap = 0;
        }
    }
    if (vol != t->size)
        return 0;
    t->index = malloc(t->size * sizeof(int));
    t->rank_of = malloc(t->size * sizeof(int));
    if (!t->index || !t->rank_of)
        return 0;
    for (int i = 0; i < t->size; i++)
        t->rank_of[i] = -1;
    for (int r = 0; r < t->size; r++) {
        int idx = 0;
        for (int i = t->box.n - 1; i >= 0; i--)
            idx = idx * t->box.ext[i] + all[r * NF + F_X + dims[i]] - lo[dims[i]];
        if (t->rank_of[idx] >= 0)
            return 0;           /* two ranks at one place: no box */
        t->rank_of[idx] = r;
        t->index[r] = idx;
    }
    return 1;
}

/* LATTICE_TORUS_VERBOSE=1: what the library makes of a communicator, once, from its rank 0 */
static void say(const struct torus_comm *t)
{
    int hosts = 0;
    for (int r = 0; r < t->size; r++)
        hosts = t->host[r] + 1 > hosts ? t->host[r] + 1 : hosts;
    char shape[64] = "";
    for (int i = 0, at = 0; i < t->box.n && at < (int)sizeof shape - 12; i++)
        at += snprintf(shape + at, sizeof shape - at, "%s%d", i ? "x" : "", t->box.ext[i]);
    if (!t->usable)
        fprintf(stderr, "libtorus: %d ranks: not all started by Lattice: MPICH's collectives\n", t->size);
    else if (!t->mesh)
        fprintf(stderr, "libtorus: %d ranks on %d hosts: no box of the torus: MPICH's broadcast, torus reductions\n",
                t->size, hosts);
    else
        fprintf(stderr, "libtorus: %d ranks on %d hosts: box %s %s, %d colours\n", t->size, hosts,
                t->box.n ? shape : "1", t->box.wrap && t->box.n ? "torus" : "mesh", torus_colours(&t->box));
}

/* The leaders' order: by the box index of each node's first rank when the
 * ranks fill a box (the between-node tree then pairs neighbours on the torus
 * first), else by rank.  Each rank's host number is its leader's place in it. */
static int leader_key(const struct torus_comm *t, int r)
{
    return t->mesh ? t->index[r] : r;
}

static struct torus_comm *learn(MPI_Comm comm)
{
    struct torus_comm *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->dup = t->local = t->leaders = MPI_COMM_NULL;
    PMPI_Comm_dup(comm, &t->dup);
    PMPI_Comm_size(t->dup, &t->size);
    PMPI_Comm_rank(t->dup, &t->rank);
    PMPI_Comm_split_type(t->dup, MPI_COMM_TYPE_SHARED, t->rank, MPI_INFO_NULL, &t->local);
    int lrank, leader = t->rank;
    PMPI_Comm_rank(t->local, &lrank);
    PMPI_Bcast(&leader, 1, MPI_INT, 0, t->local);
    int f[NF];
    mine(f);
    f[F_HOST] = leader;         /* for now the leader's rank; its host number below */
    f[F_LRANK] = lrank;
    int *all = malloc((size_t)t->size * NF * sizeof(int));
    t->host = malloc(t->size * sizeof(int));
    t->lrank = malloc(t->size * sizeof(int));
    if (!all || !t->host || !t->lrank) {      /* every rank must agree: a failure here is fatal */
        PMPI_Abort(comm, 1);
        return NULL;
    }
    PMPI_Allgather(f, NF, MPI_INT, all, NF, MPI_INT, t->dup);
    t->usable = 1;
    for (int r = 0; r < t->size; r++) {
        t->usable &= all[r * NF + F_HAS];
        t->lrank[r] = all[r * NF + F_LRANK];
    }
    if (t->usable)
        t->mesh = find_box(t, all);
    if (!t->mesh) {
        free(t->index), free(t->rank_of);
        t->index = t->rank_of = NULL;
    }
    PMPI_Comm_split(t->dup, lrank == 0 ? 0 : MPI_UNDEFINED, leader_key(t, t->rank), &t->leaders);
    /* host number = how many leaders come before mine in (key, rank) order, as split orders them */
    for (int r = 0; r < t->size; r++) {
        int l = all[r * NF + F_HOST], k = leader_key(t, l), h = 0;
        for (int q = 0; q < t->size; q++)
            if (all[q * NF + F_LRANK] == 0 && (leader_key(t, q) < k || (leader_key(t, q) == k && q < l)))
                h++;
        t->host[r] = h;
    }
    free(all);
    if (torus_tune()->verbose && t->rank == 0)
        say(t);
    return t;
}

struct torus_comm *torus_comm_of(MPI_Comm comm)
{
    int inter, found;
    void *val;
    if (comm == MPI_COMM_NULL || PMPI_Comm_test_inter(comm, &inter) != MPI_SUCCESS || inter)
        return NULL;
    if (keyval == MPI_KEYVAL_INVALID &&
        PMPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, delete_fn, &keyval, NULL) != MPI_SUCCESS)
        return NULL;
    if (PMPI_Comm_get_attr(comm, keyval, &val, &found) == MPI_SUCCESS && found)
        return ((struct torus_comm *)val)->usable ? val : NULL;
    struct torus_comm *t = learn(comm);
    if (t)
        PMPI_Comm_set_attr(comm, keyval, t);
    return t && t->usable ? t : NULL;
}
