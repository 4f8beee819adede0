/*
 * byfd.c - the interposers of lattice/syscalls.def's BY_FD(f) lines (fsync,
 * fdatasync): `int f(int fd)`, through the shipping core as under cnk
 * (compute/shipc/file.c makes its handlers from the same lines).
 */
#include <sys/syscall.h>
#include <unistd.h>

#include "client.h"

#define BY_FD_LINE(f) int f(int fd) { return (int)lat_sys(SYS_##f, fd, 0, 0, 0, 0, 0); }
#include "../include/lattice/syscalls_by_fd.h"
#undef BY_FD_LINE
