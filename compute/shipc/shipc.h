/*
 * shipc.h - the shipping client core (compute/shipc/, README.md there): what
 * the two entry layers, cnk (compute/cnk/) and libcnclient.so
 * (compute/libcnclient/), call.  The core follows cnk's conventions: results
 * are -errno, never errno; no libc, no allocation, no thread-local storage.
 * It includes only freestanding headers, so it builds both ways.
 */
#ifndef SHIPC_H
#define SHIPC_H

#include <stddef.h>
#include <stdint.h>

/* How a call on a path or a descriptor goes: SHIPC_LOCAL (the node's own
 * kernel runs it), SHIPC_SHIP (with the remote descriptor; LAT_AT_FDCWD for
 * the I/O node's working directory), or -errno. */
enum { SHIPC_LOCAL = 0, SHIPC_SHIP = 1 };

/* ---- path.c: the one path rule (README.md "Node-local names") ---- */
int shipc_path_is_local(const char *path);      /* NULL: 0 */

#endif
