/*
 * lofar.h - a plug-in in the spirit of LOFAR's on ZOID (docs/plugins.md):
 * an I/O-node thread receives a stream of datagrams into a ring buffer and
 * hands consecutive datagrams round-robin to the compute processes of the
 * pset (scatter); a gather call sums the processes' vectors on the I/O node
 * and sends one UDP datagram with the sum once every process contributed.
 *
 * Generated into build/plugins/lofar/ by lattice-pluggen --id 2; the I/O node
 * side is lofar_impl.c, the configuration "unix=@NAME dest=HOST:PORT
 * slots=N" (an authenticated stream: only the job owner's datagrams) or
 * "port=P ..." (UDP, trusted networks only).
 */
#ifndef LOFAR_H
#define LOFAR_H

#include <stdint.h>

#define LOFAR_PIECE_MAX 8192u       /* bytes of one datagram kept */
#define LOFAR_VEC_MAX   4096u       /* elements of a gathered vector */

/* The next piece meant for this process, waiting for it: its bytes go
 * straight from the ring (zero-copy, the ring's own buffer).  Returns the
 * piece's length (<= cap) and its number in the job's stream in *seq. */
int32_t lofar_next(uint8_t *buf /* out:arr:size=+1:zerocopy:userbuf */, uint32_t cap /* in:obj */,
                   uint64_t *seq /* out:ptr */);

/* Add vals to this round's sum; the last process of the pset to do so sends
 * the sum (n little-endian int64) to the configured address.  Returns the
 * round number; a process that is a round ahead waits for the others. */
int64_t lofar_put(const int64_t *vals /* in:arr:size=+1 */, uint32_t n /* in:obj */);

#endif
