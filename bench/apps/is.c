/*
 * is - integer sort, after NPB IS: N keys in [0, MAXKEY), each the mean of
 * four uniform deviates (a bell-shaped distribution), bucket sorted across
 * the ranks NITER times (before iteration i, key i is set to i and key
 * i + NITER to MAXKEY - i, as NPB does, so each sort differs).
 *
 *   is [T|S|A|B]  T: 2^16 keys (tests), S: 2^24 keys < 2^20, A: 2^25 keys < 2^22,
 *                 B: 2^26 keys < 2^29 (the big memory case: at 2 ranks each
 *                 counts its keys in a 1 GiB array, at random: TLB misses)
 *
 * One iteration: count the local keys per bucket (1024 buckets of the key
 * range), MPI_Allreduce the counts, give each rank a run of buckets holding
 * about N / P keys, move the local keys into bucket order, MPI_Alltoall the
 * counts and MPI_Alltoallv the keys, then a counting sort of the keys
 * received over the rank's key range.  Keys are drawn from one LCG stream
 * by global index, so every rank count sorts the same keys.
 *
 * Verified after the last iteration: every rank's keys are in order and in
 * its range, the ranks' ranges follow each other (rank 0 gathers first and
 * last keys), and the sorted keys are a permutation of the input: equal
 * count, sum, sum of squares and sum of a hash of each key (all exact
 * integer sums), computed over the input and over the output.
 *
 * The result line also says what pages back the count array (page=, from
 * /proc/self/smaps on rank 0, bench/pages.h): 4K on a plain process without
 * transparent huge pages, 2M or 1G in cnk's big memory.
 */
#include "apps.h"
#include "../pages.h"

#define LOG_BUCKETS 10
#define SEED 1220703125ULL

typedef struct {
    int log_n, log_max, niter;
} is_class;

static const is_class CLASSES[] = {
    ['T'] = {16, 12, 4},
    ['S'] = {24, 20, 10},
    ['A'] = {25, 22, 20},
    ['B'] = {26, 29, 3},
};

typedef struct {
    uint64_t n, sum, sq, hash;
} sums;

static void add(sums *s, uint32_t k)
{
    s->n++;
    s->sum += k;
    s->sq += (uint64_t)k * k;
    s->hash += mix64(k);
}

static void *grow(void *p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return p;
    free(p);
    *cap = need + need / 8;
    return xmalloc(*cap * elem);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    char cls = app_class(argc, argv, "is", "TSAB");
    const is_class *c = &CLASSES[(int)cls];
    int64_t n = (int64_t)1 << c->log_n, lo, hi;
    uint32_t maxkey = (uint32_t)1 << c->log_max;
    int nb = 1 << LOG_BUCKETS, shift = c->log_max - LOG_BUCKETS;
    app_require(size <= nb && n >= 2 * c->niter + size, "is: class %c is too small for %d ranks", cls, size);
    block_range(n, size, rank, &lo, &hi);
    size_t nloc = (size_t)(hi - lo);

    uint32_t *key = xmalloc(nloc * sizeof *key);
    uint64_t s = lcg_skip(SEED, 4 * (uint64_t)lo);
    for (size_t i = 0; i < nloc; i++) {
        double u = lcg_unit(&s) + lcg_unit(&s) + lcg_unit(&s) + lcg_unit(&s);
        key[i] = (uint32_t)(u / 4 * maxkey);
    }
    size_t scap = nloc, rcap = nloc, ccap = 0;
    uint32_t *sendbuf = xmalloc(scap * sizeof *sendbuf), *recv = xmalloc(rcap * sizeof *recv);
    uint32_t *cnt = NULL;
    int64_t *bcount = xmalloc(nb * sizeof *bcount), *gcount = xmalloc(nb * sizeof *gcount);
    int64_t *bstart = xmalloc(nb * sizeof *bstart);
    int *first = xmalloc((size + 1) * sizeof *first);   /* rank r holds buckets [first[r], first[r+1]) */
    int *scnt = xmalloc(size * sizeof *scnt), *sdsp = xmalloc(size * sizeof *sdsp);
    int *rcnt = xmalloc(size * sizeof *rcnt), *rdsp = xmalloc(size * sizeof *rdsp);
    size_t nrecv = 0;
    uint32_t klo = 0, khi = 0;

    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int it = 1; it <= c->niter; it++) {
        if (it >= lo && it < hi)
            key[it - lo] = (uint32_t)it;
        if (it + c->niter >= lo && it + c->niter < hi)
            key[it + c->niter - lo] = maxkey - (uint32_t)it;
        memset(bcount, 0, nb * sizeof *bcount);
        for (size_t i = 0; i < nloc; i++)
            bcount[key[i] >> shift]++;
        MPI_Allreduce(bcount, gcount, nb, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
        /* runs of buckets of about n / size keys each */
        int64_t cum = 0;
        int b = 0;
        first[0] = 0;
        for (int r = 0; r < size; r++) {
            int64_t target = n * (r + 1) / size;
            while (b < nb && (r == size - 1 || cum + gcount[b] / 2 < target))
                cum += gcount[b++];
            first[r + 1] = b;
        }
        /* local keys into bucket order, so each destination's keys are contiguous */
        int64_t o = 0;
        for (b = 0; b < nb; b++) {
            bstart[b] = o;
            o += bcount[b];
        }
        for (int r = 0; r < size; r++) {
            sdsp[r] = (int)bstart[first[r] < nb ? first[r] : nb - 1];
            if (first[r] >= nb)
                sdsp[r] = (int)nloc;
            scnt[r] = 0;
            for (b = first[r]; b < first[r + 1]; b++)
                scnt[r] += (int)bcount[b];
        }
        for (size_t i = 0; i < nloc; i++)
            sendbuf[bstart[key[i] >> shift]++] = key[i];
        MPI_Alltoall(scnt, 1, MPI_INT, rcnt, 1, MPI_INT, MPI_COMM_WORLD);
        nrecv = 0;
        for (int r = 0; r < size; r++) {
            rdsp[r] = (int)nrecv;
            nrecv += rcnt[r];
        }
        recv = grow(recv, &rcap, nrecv, sizeof *recv);
        MPI_Alltoallv(sendbuf, scnt, sdsp, MPI_UINT32_T, recv, rcnt, rdsp, MPI_UINT32_T, MPI_COMM_WORLD);
        /* counting sort over my key range, into sendbuf */
        klo = (uint32_t)first[rank] << shift;
        khi = (uint32_t)first[rank + 1] << shift;
        size_t range = khi - klo;
        if (range > ccap) {
            free(cnt);
            ccap = range;
            cnt = xmalloc(ccap * sizeof *cnt);
        }
        if (range)
            memset(cnt, 0, range * sizeof *cnt);
        for (size_t i = 0; i < nrecv; i++)
            cnt[recv[i] - klo]++;
        uint32_t pos = 0;
        for (size_t k = 0; k < range; k++) {
            uint32_t c1 = cnt[k];
            cnt[k] = pos;
            pos += c1;
        }
        sendbuf = grow(sendbuf, &scap, nrecv, sizeof *sendbuf);
        for (size_t i = 0; i < nrecv; i++)
            sendbuf[cnt[recv[i] - klo]++] = recv[i];
    }
    double seconds = MPI_Wtime() - t0;

    /* the checks: order and range on each rank, then across ranks, then the permutation */
    sums in = {0}, out = {0}, gin, gout;
    int64_t bad = 0;
    for (size_t i = 0; i < nloc; i++)
        add(&in, key[i]);
    for (size_t i = 0; i < nrecv; i++) {
        add(&out, sendbuf[i]);
        bad += sendbuf[i] < klo || sendbuf[i] >= khi || (i > 0 && sendbuf[i] < sendbuf[i - 1]);
    }
    MPI_Reduce(&in, &gin, 4, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(&out, &gout, 4, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    int64_t gbad;
    MPI_Reduce(&bad, &gbad, 1, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
    int64_t ends[3] = {(int64_t)nrecv, nrecv ? sendbuf[0] : 0, nrecv ? sendbuf[nrecv - 1] : 0};
    int64_t *all = rank == 0 ? xmalloc(3 * (size_t)size * sizeof *all) : NULL;
    MPI_Gather(ends, 3, MPI_INT64_T, all, 3, MPI_INT64_T, 0, MPI_COMM_WORLD);

    verdict v = {1, ""};
    char details[320] = "", pages[64];
    pages_describe(cnt, pages, sizeof pages);
    if (rank == 0) {
        check(&v, gbad == 0, "%lld keys out of order or out of their rank's range", (long long)gbad);
        int64_t prev = -1, maxload = 0;
        for (int r = 0; r < size; r++) {
            if (all[3 * r] == 0)
                continue;
            check(&v, all[3 * r + 1] >= prev, "rank %d starts at key %lld, below rank %d's last %lld", r,
                  (long long)all[3 * r + 1], r - 1, (long long)prev);
            prev = all[3 * r + 2];
            if (all[3 * r] > maxload)
                maxload = all[3 * r];
        }
        check(&v, gin.n == (uint64_t)n && gout.n == gin.n, "%llu keys in, %llu out, of %lld",
              (unsigned long long)gin.n, (unsigned long long)gout.n, (long long)n);
        check(&v, gin.sum == gout.sum && gin.sq == gout.sq && gin.hash == gout.hash,
              "the output is not a permutation of the input (checksums differ)");
        snprintf(details, sizeof details, "keys=%lld maxkey=%u iterations=%d max_keys_per_rank=%lld checksum=%016llx %s",
                 (long long)n, maxkey, c->niter, (long long)maxload, (unsigned long long)gin.hash, pages);
    }
    int rc = app_finish("IS", cls, seconds, &v, details);
    MPI_Finalize();
    return rc;
}
