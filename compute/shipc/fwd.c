/*
 * fwd.c - the function-shipping stubs generated from lattice/fwd_posix.h
 * (build/gen/fwd_posix_stubs.c), once for both kernels, over the core's
 * transport (shipc_call_msg takes the connection lock): ret or -errno.
 * Linux mode's interposers turn -errno into -1 and errno themselves.
 */
#include "internal.h"

#define FWD_API
#define FWD_FAIL(err) (-(int64_t)(err))
#define FWD_TRANSPORT shipc_call_msg

#include "fwd_posix_stubs.c"
