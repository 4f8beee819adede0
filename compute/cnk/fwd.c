/*
 * fwd.c - the function-shipping stubs generated from lattice/fwd_posix.h
 * (build/gen/fwd_posix_stubs.c), over cnk's transport: ship_call() takes
 * the connection lock and returns ret or -errno.
 */
#include <linux/errno.h>
#include <linux/uio.h>

#include "cnk.h"
#include "lib.h"

#define FWD_API
#define FWD_FAIL(err) (-(int64_t)(err))
#define FWD_TRANSPORT ship_call

#include "fwd_posix_stubs.c"
