/*
 * internal.h - shared by the files of the shipping core only.
 */
#ifndef SHIPC_INTERNAL_H
#define SHIPC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <linux/errno.h>
#include <lattice/ksys.h>

#include "entry.h"
#include "shipc.h"

#define SHIPC_MIN(a, b) ((a) < (b) ? (a) : (b))

/* A lock between the program's threads (futex; no signal handler of the
 * program runs on the holder's thread under cnk). */
struct shipc_lock { struct kmutex m; };

static inline void shipc_lock_take(struct shipc_lock *l)
{
    shipc_ent_crit_enter();
    kmutex_lock(&l->m);
}

static inline void shipc_lock_drop(struct shipc_lock *l)
{
    kmutex_unlock(&l->m);
    shipc_ent_crit_leave();
}

/* The string functions the core uses: cnk's lib.c in cnk, libc's in
 * libcnclient.so (neither does I/O, so nothing interposed is reached). */
void *memcpy(void *restrict d, const void *restrict s, size_t n);
void *memset(void *d, int c, size_t n);
int memcmp(const void *a, const void *b, size_t n);
size_t strlen(const char *s);
size_t strnlen(const char *s, size_t max);

#endif
