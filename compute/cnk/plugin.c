/*
 * plugin.c - the Lattice-private system call LAT_NR_ZOID: a plug-in call
 * from a generated stub (lattice/zoid.h), shipped as one LAT_PLUG_CALL over
 * cnk's PROC connection.  The stub's iovecs go to the socket and the reply
 * lands in its iovecs directly, so zero-copy arguments are never copied by
 * cnk.  Returns the reply bytes or -errno (ciod's status for the call).
 */
#include <linux/errno.h>
#include <linux/uio.h>

#include <lattice/wire.h>
#include <lattice/zoid_nr.h>

#include "cnk.h"

long sys_lattice_zoid(struct cnk_call *c)
{
    struct iovec req[LAT_ZOID_MAX_IOV], rep[LAT_ZOID_MAX_IOV];
    long nreq = c->a[3], nrep = c->a[5];
    int64_t cap = 0, a[4];
    size_t got = 0;

    if (c->a[0] < 0 || c->a[0] > UINT32_MAX || c->a[1] < 0 || c->a[1] > UINT32_MAX
        || nreq < 0 || nreq > LAT_ZOID_MAX_IOV || nrep < 0 || nrep > LAT_ZOID_MAX_IOV)
        return -EINVAL;
    /* a private copy: the program cannot change the vectors under us */
    memcpy(req, (const void *)c->a[2], (size_t)nreq * sizeof(req[0]));
    memcpy(rep, (const void *)c->a[4], (size_t)nrep * sizeof(rep[0]));
    for (long i = 0; i < nrep; i++) {
        if (rep[i].iov_len > LAT_MAX_PAYLOAD)
            return -EINVAL;
        cap += (int64_t)rep[i].iov_len;
    }
    a[0] = c->a[0];
    a[1] = c->a[1];
    a[2] = cap;
    a[3] = 0;
    long r = shipc_call_msg(LAT_PLUG_CALL, a, req, (int)nreq, rep, (int)nrep, &got);
    return r < 0 ? r : (long)got;
}
