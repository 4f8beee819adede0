/*
 * entry.c - cnk's side of the shipping core (compute/shipc/entry.h): the
 * hooks it calls, and the descriptors cnk keeps from the program.
 */
#include <linux/fcntl.h>

#include "cnk.h"
#include "entry.h"

void shipc_ent_crit_enter(void)
{
    kcrit_enter();
}

void shipc_ent_crit_leave(void)
{
    kcrit_leave();
}

/* cnk's own descriptors are moved above CNK_FD_FLOOR before shipping starts
 * (main.c); whatever is open there now is cnk's, report page included. */
void cnk_fd_setup(void)
{
    shipc_fd_setup(CNK_FD_FLOOR);
    for (int fd = CNK_FD_FLOOR; fd < CNK_FD_FLOOR + 64; fd++)
        if (ksys2(__NR_fcntl, fd, F_GETFD) >= 0 && shipc_fd_hide(fd) < 0)
            break;
}
