/*
 * byfd.c - the interposers of lattice/syscalls.def's BY_FD(f) lines (fsync,
 * fdatasync): `int f(int fd)`, shipped as fwd_f(remote) on a shipped
 * descriptor, EBADF on the connection's own, libc's f otherwise.
 */
#include <errno.h>
#include <unistd.h>

#include "client.h"

#define BY_FD_SHIPPED(op)   BY_FD_##op
#define BY_FD_OP(x)
#define BY_FD_BY_FD(f)                                      \
    int f(int fd)                                           \
    {                                                       \
        int r;                                              \
        switch (lat_fd_route(fd, &r)) {                     \
        case LAT_SHIP:                                      \
            return (int)fwd_##f(r);                         \
        case LAT_HIDE:                                      \
            return lat_fail(EBADF);                         \
        case LAT_LOCAL:                                     \
            break;                                          \
        }                                                   \
        return REAL(f)(fd);                                 \
    }
#define BY_FD_LOCAL(op)
#define BY_FD_OWN(op)
#define BY_FD_SOCKET(op)
#define BY_FD_REFUSED(op)
#define SYS(name, cls, op, wire, trace, lx) BY_FD_##cls(op)
#include "../include/lattice/syscalls.def"
#undef SYS
