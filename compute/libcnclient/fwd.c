/*
 * fwd.c - the function-shipping stubs generated from lattice/fwd_posix.h
 * (build/gen/fwd_posix_stubs.c), over lat_call() (conn.c): ret, or -1
 * with errno.  Hidden: fwd_posix.h declares them so.
 */
#include <errno.h>
#include <string.h>
#include <sys/uio.h>

#include "client.h"

static int64_t transport(uint16_t type, const int64_t a[4], const struct iovec *out, int nout,
                         const struct iovec *in, int nin, size_t *got)
{
    return lat_call(type, a[0], a[1], a[2], a[3], out, nout, in, nin, got);
}

#define FWD_API
#define FWD_FAIL(err) lat_fail(err)
#define FWD_TRANSPORT transport

#include "fwd_posix_stubs.c"
