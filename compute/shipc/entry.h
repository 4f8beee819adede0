/*
 * entry.h - what each entry layer (cnk: compute/cnk/entry.c; libcnclient:
 * compute/libcnclient/entry.c) provides to the shipping core.
 */
#ifndef SHIPC_ENTRY_H
#define SHIPC_ENTRY_H

#endif
