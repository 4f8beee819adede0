/*
 * lattice/syscalls_by_fd.h - BY_FD_LINE(f) once per BY_FD(f) line of
 * lattice/syscalls.def (a call whose one argument is a descriptor: fwd_f on
 * the remote one).  Define BY_FD_LINE, include this, undefine it: the
 * shipping core makes its handlers shipc_sys_f with it (compute/shipc/file.c);
 * the interposers come from the lines' GEN (libcnclient/interpose.c).
 * No include guard, like the list.
 */
#define LAT_BY_FD_LOCAL(op)
#define LAT_BY_FD_OWN(op)
#define LAT_BY_FD_SOCKET(op)
#define LAT_BY_FD_REFUSED(op)
#define LAT_BY_FD_SHIPPED(op)   LAT_BY_FD_##op
#define LAT_BY_FD_OP(x)
#define LAT_BY_FD_BY_FD(f)      BY_FD_LINE(f)
#define SYS(name, cls, op, wire, trace, lx) LAT_BY_FD_##cls(op)
#include "syscalls.def"
#undef SYS
