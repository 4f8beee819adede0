/*
 * lattice/iov_slice.h - the part [skip, skip + len) of a vector of buffers,
 * as another vector: how the socket calls of cnk and libcnclient cut a
 * program's iovecs into messages.  Header-only and freestanding; the
 * includer has struct iovec (linux/uio.h or sys/uio.h).
 */
#ifndef LATTICE_IOV_SLICE_H
#define LATTICE_IOV_SLICE_H

#include <stddef.h>

/* At most max vectors into out; returns how many, *bytes what they hold
 * (less than len when max ran out first). */
static inline int lat_iov_slice(const struct iovec *iov, size_t cnt, size_t skip, size_t len, struct iovec *out,
                                int max, size_t *bytes)
{
    int n = 0;

    *bytes = 0;
    for (size_t i = 0; i < cnt && len && n < max; i++) {
        if (skip >= iov[i].iov_len) {
            skip -= iov[i].iov_len;
            continue;
        }
        size_t take = iov[i].iov_len - skip < len ? iov[i].iov_len - skip : len;
        out[n++] = (struct iovec){ (char *)iov[i].iov_base + skip, take };
        skip = 0;
        len -= take;
        *bytes += take;
    }
    return n;
}

#endif
