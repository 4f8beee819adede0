/*
 * syscalls.h - what cnk makes of a line of lattice/syscalls.def: its table
 * entry (systab.c) and the handlers' prototypes (cnk.h).
 *
 * The class picks the table's default class and handler; SHIPPED, SOCKET and
 * REFUSED lines name their handler through their op, OP(x) or BY_FD(f),
 * pasted onto CNK_SHIP_, CNK_SOCK_ or CNK_REFUSE_.  Pointing every shipped
 * call at one entry is redefining those (e.g. `#define CNK_SHIP_OP(x)
 * cnk_shipped`).  OP and BY_FD must never be macros in cnk: they are pasted,
 * not expanded.
 */
#ifndef CNK_SYSCALLS_H
#define CNK_SYSCALLS_H

/* ---- class -> the table's default class (enum cnk_class) ---- */
#define CNK_CLS_LOCAL(op)       CNK_LOCAL
#define CNK_CLS_OWN(op)         CNK_LOCAL
#define CNK_CLS_SHIPPED(op)     CNK_SHIPPED
#define CNK_CLS_SOCKET(op)      CNK_LOCAL
#define CNK_CLS_REFUSED(op)     CNK_CLS_REFUSE_##op
#define CNK_CLS_REFUSE_0        CNK_UNSUPPORTED     /* ENOSYS at once */
#define CNK_CLS_REFUSE_OP(x)    CNK_SHIPPED         /* the handler routes it, refuses shipped ones */

/* ---- class and op -> the handler (NULL: run as it is, or ENOSYS) ---- */
#define CNK_FN_LOCAL(op)        NULL
#define CNK_FN_OWN(op)          op
#define CNK_FN_SHIPPED(op)      CNK_SHIP_##op
#define CNK_FN_SOCKET(op)       CNK_SOCK_##op
#define CNK_FN_REFUSED(op)      CNK_REFUSE_##op
#define CNK_SHIP_OP(x)          sys_##x             /* entry.c */
#define CNK_SHIP_BY_FD(f)       sys_##f             /* made from the line: ship.c */
#define CNK_SOCK_OP(x)          sock_##x            /* entry.c */
#define CNK_REFUSE_0            NULL
#define CNK_REFUSE_OP(x)        sys_##x             /* ship.c */

/* ---- the handlers' prototypes (OWN ones are declared by their modules) ---- */
#define CNK_HANDLER(fn)         long fn(struct cnk_call *c);
#define CNK_DECL_LOCAL(op)
#define CNK_DECL_OWN(op)
#define CNK_DECL_SHIPPED(op)    CNK_HANDLER(CNK_FN_SHIPPED(op))
#define CNK_DECL_SOCKET(op)     CNK_HANDLER(CNK_FN_SOCKET(op))
#define CNK_DECL_REFUSED(op)    CNK_DECL_REFUSE_##op
#define CNK_DECL_REFUSE_0
#define CNK_DECL_REFUSE_OP(x)   CNK_HANDLER(CNK_REFUSE_OP(x))

#endif
