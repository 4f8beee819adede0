/*
 * dispatch.c - a file system call, as the kernel sees it, to its handler.
 * Each handler decides by path or descriptor whether the call runs on the
 * node (shipc_ent_local), is answered here, or is shipped, and says so in
 * c->cls.
 */
#include <asm/unistd.h>

#include <lattice/zoid_nr.h>

#include "internal.h"

long shipc_sys(struct shipc_call *c)
{
    switch (c->nr) {
#define SHIPC_CASE(name) case __NR_##name: return shipc_sys_##name(c);
    SHIPC_FILE_CALLS(SHIPC_CASE)
    SHIPC_SOCK_CALLS(SHIPC_CASE)
#undef SHIPC_CASE
    case __NR_accept4:
        return shipc_sys_accept(c);
    case __NR_epoll_pwait2:
        return shipc_sys_epoll_pwait(c);
    case LAT_NR_ZOID:
        return shipc_sys_lattice_zoid(c);
    default:
        c->cls = SHIPC_CLS_REFUSED;
        return -ENOSYS;
    }
}
