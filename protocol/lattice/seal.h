/*
 * lattice/seal.h - sealed frames on links between hosts (docs/protocol.md
 * section 3.3; the constants and the formula are in wire.h).
 *
 * After the handshake of a TCP connection each direction has its own key,
 * derived with HKDF-SHA256 from the block key and both handshake nonces, and
 * a frame counter that is the GCM nonce: a frame flipped, replayed,
 * reordered, dropped or injected fails its tag.  Implemented once with
 * OpenSSL (protocol/peer/seal.c) for ciod (net.c), cnode (peer.c, its PROC
 * relay) and ciod's own tree client; the service node's mirror is
 * service/lattice/transport/wire.py (seal_keys, Sealer).
 */
#ifndef LATTICE_SEAL_H
#define LATTICE_SEAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include <lattice/wire.h>

#define LAT_SEAL_KEY_BYTES 32u          /* AES-256 */

/* The state of a sealed connection as it can be handed to another process
 * (a PROC connection goes from ciod's monitor to the job's I/O worker):
 * the two session keys and the next frame number of each direction.
 * Never the block key. */
struct lat_seal_keys {
    uint8_t  tx[LAT_SEAL_KEY_BYTES];    /* our frames' key */
    uint8_t  rx[LAT_SEAL_KEY_BYTES];    /* the peer's frames' key */
    uint64_t tx_n, rx_n;                /* the next frame's number, each way */
};

/* A sealed connection's live state: a cipher context per direction, keyed once. */
struct lat_seal {
    void    *tx, *rx;                   /* EVP_CIPHER_CTX */
    struct lat_seal_keys k;
};

/* The session keys of a connection: ciod's view (server true: it sends
 * DOWN, receives UP) or the peer's.  0, or -1 if libcrypto failed. */
int  lat_seal_derive(const uint8_t key[LAT_KEY_BYTES], const uint8_t sn[LAT_NONCE_BYTES],
                     const uint8_t cn[LAT_NONCE_BYTES], uint32_t role, uint32_t node, uint64_t job,
                     bool server, struct lat_seal_keys *out);
/* Live state from keys (which it copies); 0 or -1.  lat_seal_free wipes it. */
int  lat_seal_init(struct lat_seal *s, const struct lat_seal_keys *k);
void lat_seal_free(struct lat_seal *s);
/* Wipes memory that held keys (the compiler may not drop it). */
void lat_seal_wipe(void *p, size_t n);

/* Sealing one frame of plain bytes len (a header and its payload), in
 * pieces: begin writes the 4-byte length, update encrypts (out may be in),
 * end writes the tag and counts the frame.  0 or -1. */
int  lat_seal_begin(struct lat_seal *s, uint32_t len, uint8_t lenbuf[LAT_SEAL_LEN_BYTES]);
int  lat_seal_update(struct lat_seal *s, const void *in, size_t n, void *out);
int  lat_seal_end(struct lat_seal *s, uint8_t tag[LAT_SEAL_TAG_BYTES]);

/* Opening one: begin takes the length read (-1 if it cannot be a frame:
 * under a header or over LAT_SEAL_MAX), update decrypts what is not yet
 * trusted, end checks the tag: 0, or -1 if the frame is not authentic
 * (nothing decrypted may then be used).  The frame is counted either way. */
int  lat_open_begin(struct lat_seal *s, const uint8_t lenbuf[LAT_SEAL_LEN_BYTES], uint32_t *len);
int  lat_open_update(struct lat_seal *s, const void *in, size_t n, void *out);
int  lat_open_end(struct lat_seal *s, const uint8_t tag[LAT_SEAL_TAG_BYTES]);

/* The whole sealed frame of iov[0..n) into out (room for
 * LAT_SEAL_LEN_BYTES + the bytes + LAT_SEAL_TAG_BYTES): its size, or -1. */
long lat_seal_frame(struct lat_seal *s, const struct iovec *iov, int n, uint8_t *out);

/* Whether fd is a socket between hosts (TCP), whose frames are sealed. */
bool lat_seal_wanted(int fd);

#endif
