/*
 * internal.h - shared by the files of the shipping core only.
 */
#ifndef SHIPC_INTERNAL_H
#define SHIPC_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <linux/errno.h>
#include <linux/uio.h>

#include <lattice/ksys.h>
#include <lattice/wire.h>

#include "entry.h"
#include "shipc.h"

#define SHIPC_MIN(a, b) ((a) < (b) ? (a) : (b))
#define LAT_MBOX_MAXIOV 64          /* vectors a mailbox call may gather or scatter */

/* A lock between the program's threads (futex; no signal handler of the
 * program runs on the holder's thread under cnk). */
struct shipc_lock { struct kmutex m; };

static inline void shipc_lock_take(struct shipc_lock *l)
{
    shipc_ent_crit_enter();
    kmutex_lock(&l->m);
}

static inline void shipc_lock_drop(struct shipc_lock *l)
{
    kmutex_unlock(&l->m);
    shipc_ent_crit_leave();
}

/* The string functions the core uses: cnk's lib.c in cnk, libc's in
 * libcnclient.so (neither does I/O, so nothing interposed is reached). */
void *memcpy(void *restrict d, const void *restrict s, size_t n);
void *memset(void *d, int c, size_t n);
int memcmp(const void *a, const void *b, size_t n);
size_t strlen(const char *s);
size_t strnlen(const char *s, size_t max);

/* ---- conn.c: the PROC connection ---- */
struct shipc_conn {
    int fd;                     /* -1: none */
    int dead;                   /* broken: every call is EIO */
    int forked;                 /* a fork()ed child: the connection is the parent's */
    uint32_t *seq;              /* the seq of the last message sent (shared: shipc_cfg.seq) */
    uint64_t rdv_min;           /* transfers of at least this go rendezvous; 0 never */
    uint64_t dp_flags;          /* LAT_DP_* ciod granted */
};
extern struct shipc_conn shipc_conn;
extern struct shipc_lock shipc_conn_lock_;     /* from a request to its reply */
uint32_t shipc_next_seq(void);                  /* never 0 */
long shipc_broken(const char *why, long err);  /* -EIO; err is -errno */
long shipc_send_all(struct iovec *v, int cnt, size_t *sent);
int shipc_reply_ok(const struct lat_hdr *rh, uint16_t type, uint32_t want_seq, int is_error);
/* conn_lock held: one request (LAT_HF_* flags) -> *sq; its reply (spin: poll first) */
long shipc_send_req(uint16_t type, uint8_t flags, const int64_t a[4], const struct iovec *out, int nout,
                    uint32_t *sq);
long shipc_recv_reply(uint16_t type, uint32_t sq, const struct iovec *in, int nin, size_t *got, int spin);

/* ---- mbox.c: the mailbox, and one call either way ---- */
void shipc_mbox_init(const struct shipc_cfg *cfg);
void shipc_mbox_forget(void);
long shipc_call_locked(uint16_t type, const int64_t a[4], const struct iovec *out, int nout,
                       const struct iovec *in, int nin, size_t *got);

/* ---- bulk.c ---- */
void shipc_rdv_wait_init(void);                 /* the timer of rendezvous waits (hidden) */

#endif
