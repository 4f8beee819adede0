/* sample.h - a plug-in exercising every annotation (tests/unit/test_pluggen.py). */
#ifndef SAMPLE_H
#define SAMPLE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct point {
    int32_t x, y;
    double  w;
};

int32_t t_add(int32_t a /* in:obj */, int64_t b /* in:obj */);
double t_scale(struct point p /* in:obj */, struct point *q /* out:ptr */,
               double *acc /* inout:ptr */);
int t_sum(const int32_t *v /* in:arr:size=+1 */, uint32_t n /* in:obj */,
          int64_t *total /* out:ptr */);
int t_reverse(double *v /* inout:arr:size=+1 */, size_t n /* in:obj */);
ssize_t t_fill(void *buf /* out:arr:size=+1:zerocopy */, size_t *count /* inout:ptr */,
               uint8_t seed /* in:obj */);
uint64_t t_hash(const void *data /* in:arr:size=+1:zerocopy */, size_t len /* in:obj */);
int t_strlen(const char *s /* in:str:nullok */);
int t_upper(const char *s /* in:str */, char *out /* out:arr:size=+1 */,
            size_t *cap /* inout:ptr */);
int t_transpose(const int32_t **m /* in:arr2d:size=+2:size2=+3 */,
                int32_t **t /* out:arr2d:size=+2:size2=+1 */,
                uint32_t rows /* in:obj */, uint32_t cols /* in:obj */);
void t_bump(int32_t **m /* inout:arr2d:size=+1:size2=+2 */, uint32_t rows /* in:obj */,
            uint32_t cols /* in:obj */);
int t_maybe(int32_t *p /* inout:ptr:nullok */, const int32_t *v /* in:arr:size=+1:nullok */,
            uint32_t n /* in:obj */);
int t_who(int32_t *rank /* out:ptr */, uint32_t *index /* out:ptr */, uint32_t *count /* out:ptr */);
int t_chunk(uint8_t *buf /* out:arr:size=+1:zerocopy:userbuf */, uint32_t n /* in:obj */);
int t_fail(int code /* in:obj */);
void t_nothing(void);

#endif
