/*
 * lofar_gap.c - a LOFAR job that leaves pieces behind (tests/e2e/
 * test_t0705_plugin_caller.py): rank 0 takes argv[1] pieces (its own,
 * every other one of the stream) and rank 1 none, so rank 1's pieces stay
 * in the ring between ones that were taken.  No gather.
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

    for (long j = 0; rank == 0 && j < pieces; j++) {
        uint64_t seq;
        int32_t n = lofar_next(buf, sizeof(buf), &seq);
        if (n < 0) {
            printf("rank %d: lofar_next: %s\n", rank, strerror(errno));
            return 1;
        }
        printf("rank %d piece %llu: %.*s\n", rank, (unsigned long long)seq, (int)n, (const char *)buf);
    }
    return 0;
}
