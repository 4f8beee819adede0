/*
 * lattice/hello_mac.h - what the handshake MACs (docs/protocol.md section 3),
 * for both ends in C: ciod (ionode/ciod/auth.c) and cnode (compute/cnode/net.c).
 * The service node's mirror is service/lattice/transport/wire.py (hello_mac, ack_proof).
 * HMAC-SHA256 from OpenSSL's libcrypto, keyed with the block key.
 */
#ifndef LATTICE_HELLO_MAC_H
#define LATTICE_HELLO_MAC_H

#include <stddef.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <lattice/wire.h>

/* HMAC(key, label || sn || cn || a[0..alen) || b[0..blen)); 0, or -1 if
 * libcrypto failed. */
static inline int lat_hmac(const uint8_t key[LAT_KEY_BYTES], const char *label,
                           const uint8_t sn[LAT_NONCE_BYTES], const uint8_t cn[LAT_NONCE_BYTES],
                           const void *a, size_t alen, const void *b, size_t blen,
                           uint8_t out[LAT_MAC_BYTES])
{
    unsigned char msg[32 + 2 * LAT_NONCE_BYTES + 64];
    size_t ll = strlen(label), n = 0;
    unsigned int outlen = 0;

    if (ll > 32 || alen + blen > 64)
        return -1;
    memcpy(msg, label, ll);
    n += ll;
    memcpy(msg + n, sn, LAT_NONCE_BYTES);
    n += LAT_NONCE_BYTES;
    memcpy(msg + n, cn, LAT_NONCE_BYTES);
    n += LAT_NONCE_BYTES;
    if (alen)
        memcpy(msg + n, a, alen);
    n += alen;
    if (blen)
        memcpy(msg + n, b, blen);
    n += blen;
    if (!HMAC(EVP_sha256(), key, LAT_KEY_BYTES, msg, n, out, &outlen) || outlen != LAT_MAC_BYTES)
        return -1;
    return 0;
}

/* The mac of a hello: its fields before the nonce, and lat_hello_proc if sent. */
static inline int lat_hello_mac(const uint8_t key[LAT_KEY_BYTES], const uint8_t sn[LAT_NONCE_BYTES],
                                const struct lat_hello *h, const struct lat_hello_proc *hp,
                                uint8_t out[LAT_MAC_BYTES])
{
    _Static_assert(offsetof(struct lat_hello, nonce) == 16, "hello fields first");
    return lat_hmac(key, LAT_HELLO_LABEL, sn, h->nonce, h, offsetof(struct lat_hello, nonce),
                    hp, hp ? sizeof(*hp) : 0, out);
}

/* The proof of an ack: its fields before the proof, and lat_datapath if sent. */
static inline int lat_ack_proof(const uint8_t key[LAT_KEY_BYTES], const uint8_t sn[LAT_NONCE_BYTES],
                                const uint8_t cn[LAT_NONCE_BYTES], const struct lat_hello_ack *a,
                                const struct lat_datapath *dp, uint8_t out[LAT_MAC_BYTES])
{
    _Static_assert(offsetof(struct lat_hello_ack, proof) == 16, "ack fields first");
    return lat_hmac(key, LAT_ACK_LABEL, sn, cn, a, offsetof(struct lat_hello_ack, proof),
                    dp, dp ? sizeof(*dp) : 0, out);
}

#endif
