/*
 * peer.h - the client side of a connection to ciod (protocol/peer/peer.c):
 * cnode's connections and a ciod's to its parent in a PMI fence tree.
 */
#ifndef LATTICE_PEER_H
#define LATTICE_PEER_H

#include <stddef.h>
#include <stdint.h>

#include <lattice/wire.h>

/* addr: unix:/path or tcp:HOST:PORT; retried for retry_seconds while ciod
 * is not listening yet.  A descriptor, or -1 (errno). */
/* TCP keepalive probes (5 s idle, 2 s apart, 3): a vanished host fails its connection in ~11 s. */
void net_keepalive(int fd);

int net_connect(const char *addr, double retry_seconds);
/* The handshake, our hello with seq `seq`; returns 0, or -1 with errno (the
 * ack's err if refused, EBADMSG if ciod's proof is wrong).  With hp (a PROC
 * hello), *dp gets the data path ciod agreed. */
int net_hello(int fd, uint32_t role, uint32_t node, uint64_t job, const uint8_t key[LAT_KEY_BYTES], uint32_t seq);
int net_hello_proc(int fd, uint32_t role, uint32_t node, uint64_t job, const uint8_t key[LAT_KEY_BYTES],
                   uint32_t seq, const struct lat_hello_proc *hp, struct lat_datapath *dp);
/* One message; seq: after the last one sent on the connection (the hello's first) */
int net_send(int fd, uint16_t type, uint32_t seq, const void *a, size_t alen, const void *b, size_t blen);
/* Exactly len bytes: 1, 0 at EOF before the first byte if eof_ok, -1 error (errno) */
int net_read_full(int fd, void *buf, size_t len, int eof_ok);
/* One message (payload: room for LAT_MAX_PAYLOAD), opened if fd is sealed:
 * 1, 0 at EOF before it if eof_ok, -1 (errno; EBADMSG: a sealed frame not
 * authentic, EPROTO: a bad header). */
int net_recv_frame(int fd, struct lat_hdr *h, void *payload, int eof_ok);

/* Sealing (docs/protocol.md 3.3): after net_hello on a TCP socket, fd is
 * sealed and net_send/net_recv_frame seal and open its frames.  A caller
 * that takes the connection over (ciod's tree client) takes its keys:
 * 1 (k set, fd no longer sealed here), 0 if fd is not sealed.  net_forget:
 * fd is closed, its state goes. */
struct lat_seal_keys;
int  net_seal_take(int fd, struct lat_seal_keys *k);
void net_forget(int fd);

#endif
