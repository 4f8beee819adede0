/*
 * interpose.c - the interposers made from lattice/syscalls.def: each
 * GEN(ret, (params), (args)) line becomes `ret name params`, the call as
 * the kernel sees it handed to the shipping core (lat_sys: routed by path,
 * descriptor or destination as under cnk; node-local ones, and every call
 * of an inert library, are the system call itself).  The calls whose libc
 * function differs from the system call (varargs, glibc's own names and
 * arguments, _chk and LFS variants) are the HAND lines: hand-written in
 * file.c, stat.c, misc.c, dir.c and sock.c.  glibc's declarations are
 * included, so a line whose parameters differ from libc's does not build.
 */
/* glibc's plain prototypes: with _GNU_SOURCE sockaddr arguments are
 * transparent unions, which the list's parameters are not */
#undef _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/file.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include "client.h"

struct mmsghdr;                 /* glibc declares these calls with _GNU_SOURCE only */
struct statx;

/* (a, b, c) -> (long)(a), (long)(b), (long)(c), 0, 0, 0: lat_sys's six */
#define LCN_NARGS(...) LCN_NARGS_(__VA_ARGS__, 6, 5, 4, 3, 2, 1, 0)
#define LCN_NARGS_(a, b, c, d, e, f, n, ...) n
#define LCN_CAT(a, b) LCN_CAT_(a, b)
#define LCN_CAT_(a, b) a##b
#define LCN_LONGS(...) LCN_CAT(LCN_LONGS, LCN_NARGS(__VA_ARGS__))(__VA_ARGS__)
#define LCN_LONGS1(a) (long)(a), 0, 0, 0, 0, 0
#define LCN_LONGS2(a, b) (long)(a), (long)(b), 0, 0, 0, 0
#define LCN_LONGS3(a, b, c) (long)(a), (long)(b), (long)(c), 0, 0, 0
#define LCN_LONGS4(a, b, c, d) (long)(a), (long)(b), (long)(c), (long)(d), 0, 0
#define LCN_LONGS5(a, b, c, d, e) (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), 0
#define LCN_LONGS6(a, b, c, d, e, f) (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f)

/* linux GEN(r, p, a) -> `r name p`; HAND and NO -> nothing made */
#define LCN_LX_GEN(r, p, a) GEN_, r, p, a
#define LCN_LX_HAND NONE_, 0, 0, 0
#define LCN_LX_NO NONE_, 0, 0, 0
#define LCN_LINE(name, lx) LCN_LINE_(name, LCN_LX_##lx)
#define LCN_LINE_(name, ...) LCN_EMIT(name, __VA_ARGS__)
#define LCN_EMIT(name, kind, r, p, a) LCN_EMIT_##kind(name, r, p, a)
#define LCN_EMIT_NONE_(name, r, p, a)
#define LCN_EMIT_GEN_(name, r, p, a) \
    r name p { return (r)lat_sys(SYS_##name, LCN_LONGS a); }

#define SYS(name, cls, op, wire, trace, lx) LCN_LINE(name, lx)
#include <lattice/syscalls.def>
#undef SYS
