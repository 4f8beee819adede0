/*
 * lattice/zoid.h - the compute side of Lattice plug-ins (docs/plugins.md).
 *
 * Generated stubs marshal a call into iovecs and hand them to zoid_call(),
 * which reaches the process's I/O node one of two ways:
 *   - under cnk: the Lattice-private system call LAT_NR_ZOID, which cnk
 *     traps and ships over its own PROC connection (compute/shipc/plugin.c);
 *   - in Linux mode: lattice_zoid_call(), exported by the preloaded
 *     libcnclient.so (compute/libcnclient/plugin.c, over the same core).  The weak reference is
 *     NULL when no libcnclient is loaded, as under cnk.
 * Header only, so a stub library needs nothing else to link.
 */
#ifndef LATTICE_ZOID_H
#define LATTICE_ZOID_H

#include <stdint.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <lattice/zoid_nr.h>

/* Reply bytes received (into rep, in order), or -1 with errno. */
long lattice_zoid_call(uint32_t plugin, uint32_t fn, const struct iovec *req, int nreq,
                       const struct iovec *rep, int nrep) __attribute__((weak));

static inline long zoid_call(uint32_t plugin, uint32_t fn, const struct iovec *req, int nreq,
                             const struct iovec *rep, int nrep)
{
    if (lattice_zoid_call)
        return lattice_zoid_call(plugin, fn, req, nreq, rep, nrep);
    return syscall(LAT_NR_ZOID, (long)plugin, (long)fn, req, (long)nreq, rep, (long)nrep);
}

#endif
