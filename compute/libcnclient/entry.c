/*
 * entry.c - libcnclient's side of the shipping core (compute/shipc/entry.h):
 * the hooks the core calls.
 */
#include "client.h"
#include "entry.h"

/* No signal handler of ours to hold back: the program's run as they would. */
void shipc_ent_crit_enter(void) {}
void shipc_ent_crit_leave(void) {}
