/*
 * lofar_test.c - a compute process of the LOFAR-style plug-in: takes its
 * share of the stream (argv[1] pieces), prints each piece, then gathers
 * {bytes received, rank + 1, pieces} on the I/O node, which sends the
 * pset's sum out.  Used by tests/e2e/test_t0700_plugins.py.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lofar.h"

int main(int argc, char **argv)
{
    static uint8_t buf[LOFAR_PIECE_MAX];
    const char *r = getenv("LATTICE_RANK");
    int rank = r ? atoi(r) : 0;
    long pieces = argc > 1 ? atol(argv[1]) : 1;
    int64_t v[3] = { 0, rank + 1, 0 };

    for (long j = 0; j < pieces; j++) {
        uint64_t seq;
        int32_t n = lofar_next(buf, sizeof(buf), &seq);
        if (n < 0) {
            printf("rank %d: lofar_next: %s\n", rank, strerror(errno));
            return 1;
        }
        printf("rank %d piece %llu: %.*s\n", rank, (unsigned long long)seq, (int)n, (const char *)buf);
        v[0] += n;
        v[2]++;
    }
    int64_t round = lofar_put(v, 3);
    if (round < 0) {
        printf("rank %d: lofar_put: %s\n", rank, strerror(errno));
        return 1;
    }
    printf("rank %d: gathered in round %lld\n", rank, (long long)round);
    return 0;
}
