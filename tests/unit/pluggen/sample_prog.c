/* Calls every function of sample.h through the generated stubs and checks
 * each result exactly; prints "rank R: ok NAME" per check, exits 1 on the
 * first mismatch.  Run by tests/unit/test_pluggen.py under cnk and Linux. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lattice/zoid.h>

#include "sample.h"

static int rank;

#define CHECK(name, cond)                                                             \
    do {                                                                              \
        if (!(cond)) {                                                                \
            printf("rank %d: FAIL %s (%s) errno %d\n", rank, name, #cond, errno);     \
            exit(1);                                                                  \
        }                                                                             \
        printf("rank %d: ok %s\n", rank, name);                                      \
    } while (0)

int main(void)
{
    const char *r = getenv("LATTICE_RANK");
    rank = r ? atoi(r) : -1;

    CHECK("obj", t_add(40, 2) == 42 && t_add(-5, -(1ll << 33)) == (int32_t)(-5 - (1ll << 33)));

    struct point p = { 3, -4, 2.5 }, q;
    double acc = 1.25;
    double s = t_scale(p, &q, &acc);
    CHECK("ptr", s == 7.5 && q.x == 6 && q.y == -12 && q.w == 1.25 && acc == 3.75);

    int32_t v[1000];
    int64_t total, want = 0;
    for (int i = 0; i < 1000; i++)
        want += v[i] = i * i - 5000;
    CHECK("arr in", t_sum(v, 1000, &total) == 1000 && total == want);
    CHECK("arr empty", t_sum(v, 0, &total) == 0 && total == 0);

    double d[5] = { 1.5, -2, 3e300, 4, NAN };
    CHECK("arr inout", t_reverse(d, 5) == 0 && isnan(d[0]) && d[1] == 4 && d[2] == 3e300 && d[3] == -2 && d[4] == 1.5);

    static unsigned char big[200001];
    size_t count = sizeof big;
    CHECK("zerocopy out", t_fill(big, &count, 9) == (ssize_t)sizeof big && count == sizeof big);
    int same = 1;
    for (size_t i = 0; i < sizeof big; i++)
        same &= big[i] == (unsigned char)(9 + i * 7);
    CHECK("zerocopy out data", same);

    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof big; i++)
        h = (h ^ big[i]) * 1099511628211ull;
    CHECK("zerocopy in", t_hash(big, sizeof big) == h);
    CHECK("zerocopy in odd", t_hash(big + 1, 13) != 0);

    CHECK("str", t_strlen("hello, I/O node") == 15 && t_strlen("") == 0);
    errno = 0;
    CHECK("str nullok", t_strlen(NULL) == -1 && errno == ENOENT);

    char up[64];
    size_t cap = sizeof up;
    CHECK("out arr shrinks", t_upper("mixed Case 42", up, &cap) == 0 && cap == 14 && strcmp(up, "MIXED CASE 42") == 0);
    cap = 3;
    errno = 0;
    CHECK("errno", t_upper("too long", up, &cap) == -1 && errno == ERANGE);

    int32_t rows[3][4], *m[3], tt[4][3], *t[4];
    for (int i = 0; i < 3; i++) {
        m[i] = rows[i];
        for (int j = 0; j < 4; j++)
            rows[i][j] = 10 * i + j - 7;
    }
    for (int j = 0; j < 4; j++)
        t[j] = tt[j];
    CHECK("arr2d in/out", t_transpose((const int32_t **)m, t, 3, 4) == 12);
    same = 1;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            same &= tt[j][i] == rows[i][j];
    CHECK("arr2d data", same);
    t_bump(m, 3, 4);
    same = 1;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 4; j++)
            same &= rows[i][j] == 10 * i + j - 7 + 100 * i + j;
    CHECK("arr2d inout", same);

    int32_t x = 17;
    CHECK("nullok both", t_maybe(&x, v, 3) == 3 && x == -17);
    CHECK("nullok NULL", t_maybe(NULL, NULL, 0) == 0);

    int32_t wr;
    uint32_t idx, cnt;
    CHECK("caller", t_who(&wr, &idx, &cnt) == 1 && wr == rank && cnt == 2 && idx == (uint32_t)rank);

    static uint8_t chunk[5000];
    CHECK("userbuf", t_chunk(chunk, sizeof chunk) == (uint8_t)((sizeof chunk - 1) ^ 0x5a));
    same = 1;
    for (size_t i = 0; i < sizeof chunk; i++)
        same &= chunk[i] == (uint8_t)(i ^ 0x5a);
    CHECK("userbuf data", same);

    errno = 0;
    CHECK("impl errno", t_fail(EDOM) == -1 && errno == EDOM);
    t_nothing();
    CHECK("void", 1);

    errno = 0;
    CHECK("non-nullok NULL", t_sum(NULL, 0, &total) == -1 && errno == EFAULT);

    /* over the per-call limit (test config: 256 KiB): refused, the I/O node stays up */
    static unsigned char huge[300000];
    errno = 0;
    CHECK("limit", t_hash(huge, sizeof huge) == UINT64_MAX && errno == E2BIG);
    CHECK("after limit", t_add(1, 1) == 2);

    /* raw calls: no such plug-in, no such function */
    char rb[64];
    struct iovec rq = { rb, 8 }, rp = { rb, sizeof rb };
    memset(rb, 0, sizeof rb);
    errno = 0;
    CHECK("bad plug-in", zoid_call(4242, 0, &rq, 1, &rp, 1) == -1 && errno == ENOENT);
    errno = 0;
    CHECK("bad function", zoid_call(7, 99, &rq, 1, &rp, 1) == -1 && errno == ENOSYS);
    errno = 0;
    CHECK("malformed", zoid_call(7, 0, &rq, 1, &rp, 1) == -1 && errno == EPROTO);
    /* crafted requests the dispatcher must refuse before the implementation runs */
    uint64_t w[8];
    struct iovec cw = { w, 0 };
    memset(w, 0, sizeof w);
    w[0] = 2;                       /* t_sum: 2 elements, but n says 5 */
    w[1] = 0x0000000200000001ull;
    w[2] = 5;
    w[3] = 1;
    cw.iov_len = 4 * 8;
    errno = 0;
    CHECK("size mismatch", zoid_call(7, 2, &cw, 1, &rp, 1) == -1 && errno == EPROTO);
    w[0] = 1ull << 40;              /* t_sum: more elements than the limit */
    errno = 0;
    CHECK("huge count", zoid_call(7, 2, &cw, 1, &rp, 1) == -1 && errno == E2BIG);
    w[0] = 4;                       /* t_strlen: no NUL */
    memcpy(&w[1], "abcdefgh", 8);
    cw.iov_len = 2 * 8;
    errno = 0;
    CHECK("unterminated str", zoid_call(7, 6, &cw, 1, &rp, 1) == -1 && errno == EPROTO);
    memset(w, 0, sizeof w);         /* t_scale: q NULL without nullok */
    w[2] = 0;
    w[3] = 1;
    cw.iov_len = 5 * 8;
    errno = 0;
    CHECK("NULL without nullok", zoid_call(7, 1, &cw, 1, &rp, 1) == -1 && errno == EPROTO);
    CHECK("still serving", t_add(2, 3) == 5);
    printf("rank %d: all ok\n", rank);
    return 0;
}
