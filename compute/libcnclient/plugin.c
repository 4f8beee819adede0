/*
 * plugin.c - plug-in calls in Linux mode: lattice_zoid_call(), which the
 * generated stubs find through a weak reference (lattice/zoid.h) when this
 * library is preloaded.  One LAT_PLUG_CALL on the process's connection; the
 * stub's iovecs are sent and filled as they are (zero-copy arguments).
 */
#include <errno.h>
#include <stdint.h>

#include <sys/uio.h>

#include "../include/lattice/zoid_nr.h"

#include "client.h"

__attribute__((visibility("default")))
long lattice_zoid_call(uint32_t plugin, uint32_t fn, const struct iovec *req, int nreq,
                       const struct iovec *rep, int nrep)
{
    size_t cap = 0, got = 0;

    if (!lat_active() || lat_forked())
        return lat_fail(ENOSYS);
    if (nreq < 0 || nreq > LAT_ZOID_MAX_IOV || nrep < 0 || nrep > LAT_ZOID_MAX_IOV)
        return lat_fail(EINVAL);
    for (int i = 0; i < nrep; i++)
        cap += rep[i].iov_len;
    if (lat_call(LAT_PLUG_CALL, plugin, fn, (int64_t)cap, 0, req, nreq, rep, nrep, &got) < 0)
        return -1;
    return (long)got;
}
