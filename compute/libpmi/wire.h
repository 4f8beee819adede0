/* The PMI-1 "simple" wire protocol, client side: one `cmd=NAME k=v ...\n`
 * line per request, one reply line per request (abort has none). */
#ifndef LATTICE_LIBPMI_WIRE_H
#define LATTICE_LIBPMI_WIRE_H

#include <stddef.h>

/* Longest reply line accepted: a 1024-byte value plus its keys, with room
 * for servers that allow bigger values (Hydra allows 1024 as well). */
#define PMIW_LINE_MAX 4096
#define PMIW_FIELDS_MAX 16

struct pmiw_reply {
    char line[PMIW_LINE_MAX];       /* the reply, split in place */
    int nfields;
    const char *key[PMIW_FIELDS_MAX];
    const char *val[PMIW_FIELDS_MAX];
    int rc;                         /* the reply's rc= (0 if absent) */
};

/* Send `req` (without the newline) on fd and read the reply, which must be
 * `cmd=want` (an rc, if any, must be an integer). Returns 0, or -1 after printing why. */
int pmiw_call(int fd, const char *req, const char *want, struct pmiw_reply *rp);

/* Send a request that gets no reply (abort). */
int pmiw_send(int fd, const char *req);

/* The value of `key` in a reply, NULL if absent. */
const char *pmiw_get(const struct pmiw_reply *rp, const char *key);

/* Parse one reply line in place into rp; returns 0 or -1 with *why set. */
int pmiw_parse(struct pmiw_reply *rp, const char **why);

/* Print "lattice libpmi: ..." on stderr. */
void pmiw_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
