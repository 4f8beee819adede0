/*
 * plugin.c - plug-in calls in Linux mode: lattice_zoid_call(), which the
 * generated stubs find through a weak reference (lattice/zoid.h) when this
 * library is preloaded; the call itself is the shipping core's
 * (compute/shipc/plugin.c), as under cnk.
 */
#include <errno.h>
#include <stdint.h>

#include <sys/uio.h>

#include "client.h"

__attribute__((visibility("default")))
long lattice_zoid_call(uint32_t plugin, uint32_t fn, const struct iovec *req, int nreq,
                       const struct iovec *rep, int nrep)
{
    if (!lat_active())
        return lat_fail(ENOSYS);
    return (long)lcn_ret(shipc_plugin_call(plugin, fn, req, nreq, rep, nrep));
}
