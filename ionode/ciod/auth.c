/*
 * auth.c - the handshake on every connection (docs/protocol.md section 3).
 *
 * ciod sends a challenge (a fresh random nonce) first; the peer's hello
 * carries its own nonce and an HMAC-SHA256, keyed with the block key, over
 * both nonces and the hello's fields; our ack carries a proof made the same
 * way with another label.  The key never travels, and a hello recorded on
 * one connection is worthless on the next (another challenge).  On a TCP
 * connection the hello also gives the session keys (lattice/seal.h): every
 * frame after our ack is sealed.
 */
#include "ciod.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <lattice/hello_mac.h>

int auth_challenge(struct conn *c)
{
    struct lat_challenge ch;

    if (RAND_bytes(c->nonce_srv, sizeof(c->nonce_srv)) != 1) {
        errno = EIO;
        return -1;
    }
    memcpy(ch.nonce, c->nonce_srv, sizeof(ch.nonce));
    return conn_send(c, LAT_CHALLENGE, 0, &ch, sizeof(ch));
}

bool auth_hello_ok(struct conn *c, const struct lat_hello *hello, const struct lat_hello_proc *hp)
{
    uint8_t want[LAT_MAC_BYTES];

    if (lat_hello_mac(cfg.key, c->nonce_srv, hello, hp, want) < 0)
        return false;
    /* constant time: the comparison must not tell how much of a guess was right */
    if (CRYPTO_memcmp(want, hello->mac, sizeof(want)) != 0)
        return false;
    memcpy(c->nonce_cli, hello->nonce, sizeof(c->nonce_cli));
    if (c->tcp) {                       /* a link between hosts: its keys, live after our ack */
        c->seal_next = malloc(sizeof(*c->seal_next));
        if (!c->seal_next || lat_seal_derive(cfg.key, c->nonce_srv, c->nonce_cli, hello->role, hello->node,
                                             hello->job, true, c->seal_next) < 0) {
            logmsg("connection from %s: cannot derive its session keys", c->peer);
            return false;
        }
    }
    c->authed = true;
    return true;
}

int hello_ack_dp(struct conn *c, uint32_t seq, int err, const struct lat_datapath *dp)
{
    struct lat_hello_ack a = { .err = err, .max_io = LAT_MAX_IO, .pset = cfg.pset,
                               .pset_size = cfg.pset_size };
    struct iovec v[2] = { { &a, sizeof(a) }, { (void *)dp, dp ? sizeof(*dp) : 0 } };

    /* no proof for a peer that did not prove itself: it would be an oracle
     * for nonces of its choice, and it could not check it anyway */
    if (c->authed && lat_ack_proof(cfg.key, c->nonce_srv, c->nonce_cli, &a, dp, a.proof) < 0) {
        memset(a.proof, 0, sizeof(a.proof));
        a.err = err ? err : EIO;
        v[1].iov_len = 0;
    }
    /* the ack is the last plain frame: from the next one on, a link between
     * hosts is sealed, each way (a refusal only ends the connection) */
    pthread_mutex_lock(&c->wlock);
    int rc = conn_sendv_locked(c, LAT_HELLO | LAT_REPLY, seq, v, 2);
    if (rc == 0 && a.err == 0 && c->tcp && !c->seal && (!c->seal_next || conn_seal(c, c->seal_next) < 0)) {
        logmsg("connection from %s: cannot seal it: %s", c->peer, strerror(errno));
        shutdown(c->fd, SHUT_RDWR);
        rc = -1;
    }
    if (c->seal_next) {
        lat_seal_wipe(c->seal_next, sizeof(*c->seal_next));
        free(c->seal_next);
        c->seal_next = NULL;
    }
    pthread_mutex_unlock(&c->wlock);
    return rc;
}

int hello_ack(struct conn *c, uint32_t seq, int err)
{
    return hello_ack_dp(c, seq, err, NULL);
}
