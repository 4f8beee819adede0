/*
 * entry.h - what each entry layer (cnk: compute/cnk/entry.c; libcnclient:
 * compute/libcnclient/entry.c) provides to the shipping core.
 */
#ifndef SHIPC_ENTRY_H
#define SHIPC_ENTRY_H

#include <stddef.h>
#include <stdint.h>

/* Nothing of the core is exported from libcnclient.so, the hooks included. */
#pragma GCC visibility push(hidden)

/* Around every lock the core holds.  cnk: a program signal handler must
 * not run on this thread meanwhile (it could ship on top of the call in
 * flight): its crit count, lib.h.  Linux mode: nothing. */
void shipc_ent_crit_enter(void);
void shipc_ent_crit_leave(void);

#pragma GCC visibility pop

#endif
