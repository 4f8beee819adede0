/*
 * byfd.c - the interposers of lattice/syscalls.def's BY_FD(f) lines (fsync,
 * fdatasync): `int f(int fd)`, shipped as fwd_f(remote) on a shipped
 * descriptor, EBADF on the connection's own, libc's f otherwise.
 */
#include <errno.h>
#include <unistd.h>

#include "client.h"

#define BY_FD_LINE(f)                                       \
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
#include "../include/lattice/syscalls_by_fd.h"
#undef BY_FD_LINE
