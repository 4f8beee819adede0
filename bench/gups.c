/*
 * gups: random access to a large table, the HPCC RandomAccess update loop
 * (single process): TABLE is 2^k 64-bit words, each update XORs a
 * pseudo-random value into the word it selects.  128 independent streams run
 * in lockstep, as in HPCC's reference code, so the memory system sees many
 * misses at once; the cost per update is then set by TLB and cache misses,
 * which is what the page size changes.
 *
 *   gups [--no-thp|--hugetlb-1g|--hugetlb-2m] [--dependent] [TABLE_MIB [UPDATES_M]]
 *
 * --dependent runs one stream whose every update waits for the word the
 * previous update loaded (its address goes through that word ANDed with a
 * zero the compiler cannot see): no two misses overlap, so each update pays
 * the whole TLB-miss and memory latency, like the seeds' random-read test.
 * The sequence of addresses is the same as without it.
 *
 * TABLE_MIB (default 1024) is rounded down to a power of two; UPDATES_M is
 * millions of updates (default 64).  The table is allocated and initialised
 * before the clock starts; touch_s is how long that first touch of the
 * table took (the kernel allocating and clearing its pages).  Prints one line:
 *   loop=hpcc table_mib=1024 updates=67108864 ns_per_update=41.2 gups=0.0243 errors=0 touch_s=0.41 alloc=malloc page=1G thp=0M
 * errors counts table words that are wrong after the updates are applied a
 * second time (XOR twice restores every word; HPCC allows 1%).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pages.h"

#define POLY 0x0000000000000007ULL
#define PERIOD 1317624576693539401LL
#define NSTREAMS 128

/* HPCC's HPCC_starts: the n-th value of the random sequence. */
static uint64_t starts(int64_t n)
{
    uint64_t m2[64], temp, ran;
    while (n < 0) n += PERIOD;
    while (n > PERIOD) n -= PERIOD;
    if (n == 0) return 0x1;
    temp = 0x1;
    for (int i = 0; i < 64; i++) {
        m2[i] = temp;
        temp = (temp << 1) ^ ((int64_t)temp < 0 ? POLY : 0);
        temp = (temp << 1) ^ ((int64_t)temp < 0 ? POLY : 0);
    }
    int i;
    for (i = 62; i >= 0; i--)
        if ((n >> i) & 1) break;
    ran = 0x2;
    while (i > 0) {
        temp = 0;
        for (int j = 0; j < 64; j++)
            if ((ran >> j) & 1) temp ^= m2[j];
        ran = temp;
        i -= 1;
        if ((n >> i) & 1)
            ran = (ran << 1) ^ ((int64_t)ran < 0 ? POLY : 0);
    }
    return ran;
}

static void update(uint64_t *table, uint64_t mask, uint64_t nupdate)
{
    uint64_t ran[NSTREAMS];
    for (int j = 0; j < NSTREAMS; j++)
        ran[j] = starts((int64_t)(nupdate / NSTREAMS * (uint64_t)j));
    for (uint64_t i = 0; i < nupdate / NSTREAMS; i++) {
        for (int j = 0; j < NSTREAMS; j++) {
            ran[j] = (ran[j] << 1) ^ ((int64_t)ran[j] < 0 ? POLY : 0);
            table[ran[j] & mask] ^= ran[j];
        }
    }
}

static uint64_t opaque_zero;     /* 0, but the compiler cannot know it */

static void update_dependent(uint64_t *table, uint64_t mask, uint64_t nupdate)
{
    uint64_t ran = 1, last = 0;
    for (uint64_t i = 0; i < nupdate; i++) {
        ran = (ran << 1) ^ ((int64_t)ran < 0 ? POLY : 0);
        uint64_t k = (ran ^ (last & opaque_zero)) & mask;
        last = table[k];
        table[k] = last ^ ran;
    }
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
    int skip = pages_options(argc, argv);
    argc -= skip;
    argv += skip;
    int dependent = argc > 1 && strcmp(argv[1], "--dependent") == 0;
    if (dependent) {
        argc--;
        argv++;
    }
    opaque_zero = (uint64_t)(argc > 1000);
    void (*run)(uint64_t *, uint64_t, uint64_t) = dependent ? update_dependent : update;
    uint64_t mib = argc > 1 ? strtoull(argv[1], NULL, 10) : 1024;
    uint64_t million = argc > 2 ? strtoull(argv[2], NULL, 10) : 64;
    if (mib < 1 || million < 1) {
        fprintf(stderr, "usage: gups [--no-thp|--hugetlb-1g|--hugetlb-2m] [--dependent] [TABLE_MIB [UPDATES_M]]\n");
        return 2;
    }
    uint64_t words = 1;
    while (words * 2 * 8 <= mib << 20) words *= 2;
    uint64_t nupdate = million * 1000000 / NSTREAMS * NSTREAMS;

    double tt = now();
    uint64_t *table = pages_alloc(words * 8);
    for (uint64_t i = 0; i < words; i++)
        table[i] = i;
    tt = now() - tt;
    char pages[64];
    pages_describe(table, pages, sizeof pages);

    double t0 = now();
    run(table, words - 1, nupdate);
    double t = now() - t0;

    run(table, words - 1, nupdate);      /* undo: every word must be back */
    uint64_t errors = 0;
    for (uint64_t i = 0; i < words; i++)
        errors += table[i] != i;

    printf("loop=%s table_mib=%llu updates=%llu ns_per_update=%.2f gups=%.5f errors=%llu touch_s=%.3f alloc=%s %s\n",
           dependent ? "dependent" : "hpcc", (unsigned long long)(words * 8 >> 20), (unsigned long long)nupdate, t * 1e9 / (double)nupdate,
           (double)nupdate / t * 1e-9, (unsigned long long)errors, tt, pages_mode_name(), pages);
    return errors * 100 > words ? 1 : 0;
}
