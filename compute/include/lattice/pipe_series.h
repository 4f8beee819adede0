/*
 * lattice/pipe_series.h - a read or write above LAT_MAX_IO without
 * rendezvous, as a pipelined series of chunks (docs/protocol.md section
 * 6.2): up to LAT_PIPE_DEPTH requests in flight, so ciod works on one chunk
 * while the next arrives.  ciod cancels the chunks after a short or failed
 * one (ECANCELED), so nothing lands beyond the count returned.
 *
 * Header-only and freestanding (no libc, no errno names) so that libcnclient
 * and cnk can share it; the caller moves the bytes and holds its connection
 * for the whole series, so the chunks of two threads never interleave.
 */
#ifndef LATTICE_PIPE_SERIES_H
#define LATTICE_PIPE_SERIES_H

#include <stddef.h>
#include <stdint.h>

#include <lattice/wire.h>

/* How the caller moves one chunk, bytes [at, at + len) of the transfer.
 * Errors are -errno. */
struct lat_pipe_io {
    void *ctx;
    /* Send the chunk's request with header flags (LAT_HF_PIPE_FIRST or
     * LAT_HF_PIPE_NEXT); *sq: its seq.  0, or -errno with nothing on the
     * wire (a bad buffer) or the connection lost. */
    long (*send)(void *ctx, size_t at, size_t len, uint8_t flags, uint32_t *sq);
    /* Receive the reply to request sq (a read's data go to [at, at + len)):
     * bytes moved or -errno. */
    long (*recv)(void *ctx, uint32_t sq, size_t at, size_t len);
    /* Nonzero once the connection is lost: nothing more can be received. */
    int (*lost)(void *ctx);
};

/* Moves total bytes in chunks of chunk (> 0) bytes.  Returns the sum of the
 * chunks up to the first short or failed one (the replies after it, ECANCELED,
 * are received and ignored), or when that sum is 0 the first chunk's error
 * (or the first send's, when nothing could be sent). */
static inline long lat_pipe_series(const struct lat_pipe_io *io, size_t total, size_t chunk)
{
    uint32_t sq[LAT_PIPE_DEPTH];
    size_t sent = 0, done = 0;
    unsigned head = 0, tail = 0;        /* chunks sent, replies received */
    int sending = 1, counting = 1;      /* cleared by a failed send / a short or failed chunk */
    long r, err = 0;

    while (tail < head || (sending && sent < total)) {
        if (sending && sent < total && head - tail < LAT_PIPE_DEPTH) {
            size_t len = total - sent < chunk ? total - sent : chunk;
            r = io->send(io->ctx, sent, len, head ? LAT_HF_PIPE_NEXT : LAT_HF_PIPE_FIRST, &sq[head % LAT_PIPE_DEPTH]);
            if (r < 0 && io->lost(io->ctx))
                return done ? (long)done : r;
            if (r < 0) {                /* the chunks before it still count */
                err = head ? 0 : r;
                sending = 0;
                continue;
            }
            head++;
            sent += len;
            continue;
        }
        /* the oldest chunk in flight */
        size_t at = (size_t)tail * chunk, want = total - at < chunk ? total - at : chunk;
        r = io->recv(io->ctx, sq[tail % LAT_PIPE_DEPTH], at, want);
        tail++;
        if (r < 0 && io->lost(io->ctx))
            return done ? (long)done : r;
        if (!counting)
            continue;                   /* after a short one: ECANCELED */
        if (r < 0) {
            err = done ? 0 : r;
            counting = sending = 0;
        } else {
            done += (size_t)r < want ? (size_t)r : want;
            if ((size_t)r < want)       /* end of file, full disk... */
                counting = sending = 0;
        }
    }
    return done ? (long)done : err;
}

#endif
