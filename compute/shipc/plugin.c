/*
 * plugin.c - a plug-in call from a generated stub (lattice/zoid.h): one
 * LAT_PLUG_CALL on the process's PROC connection.  The stub's iovecs go to
 * the socket and the reply lands in its iovecs directly, so zero-copy
 * arguments are never copied by the client.  cnk traps it as the
 * Lattice-private system call LAT_NR_ZOID; Linux mode exports
 * lattice_zoid_call() for the stubs' weak reference.
 */
#include <lattice/zoid_nr.h>

#include "internal.h"

long shipc_plugin_call(uint32_t plugin, uint32_t fn, const struct iovec *vreq, long nreq,
                       const struct iovec *vrep, long nrep)
{
    struct iovec req[LAT_ZOID_MAX_IOV], rep[LAT_ZOID_MAX_IOV];
    int64_t cap = 0, a[4];
    size_t got = 0;

    if (nreq < 0 || nreq > LAT_ZOID_MAX_IOV || nrep < 0 || nrep > LAT_ZOID_MAX_IOV)
        return -EINVAL;
    /* a private copy: the program cannot change the vectors under us */
    memcpy(req, vreq, (size_t)nreq * sizeof(req[0]));
    memcpy(rep, vrep, (size_t)nrep * sizeof(rep[0]));
    for (long i = 0; i < nrep; i++) {
        if (rep[i].iov_len > LAT_MAX_PAYLOAD)
            return -EINVAL;
        cap += (int64_t)rep[i].iov_len;
    }
    a[0] = plugin;
    a[1] = fn;
    a[2] = cap;
    a[3] = 0;
    long r = shipc_call_msg(LAT_PLUG_CALL, a, req, (int)nreq, rep, (int)nrep, &got);
    return r < 0 ? r : (long)got;
}

long shipc_sys_lattice_zoid(struct shipc_call *c)
{
    if (c->a[0] < 0 || c->a[0] > UINT32_MAX || c->a[1] < 0 || c->a[1] > UINT32_MAX)
        return shipped(c, -EINVAL);
    return shipped(c, shipc_plugin_call((uint32_t)c->a[0], (uint32_t)c->a[1], (const struct iovec *)c->a[2],
                                        c->a[3], (const struct iovec *)c->a[4], c->a[5]));
}
