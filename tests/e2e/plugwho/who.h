/*
 * who.h - a test plug-in (tests/e2e/test_t0705_plugin_caller.py): what the
 * I/O node tells a plug-in about the process that calls it.
 */
#ifndef WHO_H
#define WHO_H

#include <stdint.h>

/* The caller's job and its owner, as zoid_caller() gives them; *ngroups is
 * the capacity of groups at the call, the owner's supplementary groups after. */
int32_t w_who(uint64_t *job /* out:ptr */, uint32_t *uid /* out:ptr */, uint32_t *gid /* out:ptr */,
              uint32_t *groups /* out:arr:size=+1 */, uint32_t *ngroups /* inout:ptr */);

/* zoid_caller_in_group(gid). */
int32_t w_in_group(uint32_t gid /* in:obj */);

/* The running job and its owner as a thread of the plug-in that serves no
 * call sees them (zoid_running_job), and the uid zoid_caller() gives that
 * thread; returns what zoid_running_job returned. */
int32_t w_running(uint64_t *job /* out:ptr */, uint32_t *uid /* out:ptr */, uint32_t *no_caller_uid /* out:ptr */);

#endif
