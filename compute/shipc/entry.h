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

/* The connection broke (why, err a positive errno): say so, once, on fd 2
 * in the entry's words (t0800 and the tests match them). */
void shipc_ent_broken(const char *why, int err);

/* [p, p + n) is known to be mapped, readable (wr: writable): the mailbox
 * copies it with memcpy; elsewhere the kernel copies (EFAULT, no crash). */
int shipc_ent_user_ok(const void *p, size_t n, int wr);

/* CLOCK_MONOTONIC in ns (a rendezvous's wait). */
uint64_t shipc_ent_now_ns(void);

/* The program's threads, itself included (more than one: a shipped wait
 * comes in slices, so the others get the connection). */
unsigned shipc_ent_threads(void);

/* Run a call on the node's own kernel, with the program's arguments as
 * they are: the result or -errno.  cnk: the system call itself (ppoll,
 * pselect6 and epoll_pwait with SIGSYS taken out of their mask). */
struct shipc_call;
long shipc_ent_local(struct shipc_call *c);

#pragma GCC visibility pop

#endif
