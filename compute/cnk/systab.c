/*
 * systab.c - the one table: for each x86-64 system call number cnk knows,
 * its name, its class (README "System call classes"), its handler and how
 * --trace shows its arguments, all from lattice/syscalls.def (syscalls.h
 * says what a line gives).  A number not there is unsupported: ENOSYS.
 *
 * LOCAL with no handler runs the call as it is; shipped handlers decide by
 * path or descriptor and correct the class; REFUSED entries without an op
 * only give the name to --trace.
 */
#include <asm/unistd.h>

#include "cnk.h"

#include <lattice/zoid_nr.h>
#define __NR_lattice_zoid LAT_NR_ZOID      /* Lattice-private: a plug-in call (plugin.c) */

const struct cnk_sysent cnk_systab[CNK_NSYS] = {
#define SYS(name, cls, op, wire, trace, lx) \
    [__NR_##name] = { #name, CNK_CLS_##cls(op), CNK_FN_##cls(op), trace },
#include <lattice/syscalls.def>
#undef SYS
};
