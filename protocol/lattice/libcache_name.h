/*
 * libcache_name.h - the name of a user's library cache directory on a
 * host, which ciod (ionode/ciod/libcache.c) makes and cnk
 * (compute/cnk/libcache.c) finds without a message between them: both
 * derive it from the address of the ciod's unix socket (ciod from its
 * --listen, cnk with getpeername on its PROC connection).
 *
 * The key is the machine's, not the block's nor the ciod's, so the cache
 * survives the block: a socket under the machine's runtime directory
 * (SHARED "/tmp/lattice-UID-HASH/...", lattice.safepath.runtime_dir) is
 * keyed by that directory; any other (the machine's own HOME/run) by the
 * socket's directory.  The name is
 *     /dev/shm/lattice-libcache-m<8 hex: FNV-1a 64 of the key, folded>-<uid>
 * (47 bytes at most: cnk's report line carries it in 48; two machines
 * that meet on 32 bits share one user's cache, which is safe: files are
 * named by version).
 * Header-only and libc-free: cnk is freestanding.
 */
#ifndef LATTICE_LIBCACHE_NAME_H
#define LATTICE_LIBCACHE_NAME_H

#include <stddef.h>
#include <stdint.h>

#define LAT_LIBCACHE_PREFIX  "/dev/shm/lattice-libcache-"
#define LAT_LIBCACHE_RUNTIME "/tmp/lattice-"
#define LAT_LIBCACHE_MAX     48     /* the whole name, with its NUL */

/* The machine key of a socket path (no "unix:"); 0: not a path we know. */
static inline uint32_t lat_libcache_key(const char *sock)
{
    const char *end = NULL, *p;
    size_t rt = sizeof(LAT_LIBCACHE_RUNTIME) - 1, i;

    if (!sock || sock[0] != '/')
        return 0;
    for (i = 0; i < rt && sock[i] == LAT_LIBCACHE_RUNTIME[i]; i++)
        ;
    if (i == rt) {                  /* the runtime directory: up to its first '/' */
        for (p = sock + rt; *p && *p != '/'; p++)
            ;
        end = *p ? p : NULL;
    } else {
        for (p = sock; *p; p++)     /* the socket's directory */
            if (*p == '/')
                end = p;
    }
    if (!end || end == sock)
        return 0;
    uint64_t h = 14695981039346656037ull;
    for (p = sock; p < end; p++)
        h = (h ^ (unsigned char)*p) * 1099511628211ull;
    h ^= h >> 32;
    return (uint32_t)h ? (uint32_t)h : 1;
}

/* "/dev/shm/lattice-libcache-m<key>-<uid>" into out (LAT_LIBCACHE_MAX). */
static inline void lat_libcache_name(char *out, uint32_t key, uint32_t uid)
{
    static const char hex[] = "0123456789abcdef";
    const char *s = LAT_LIBCACHE_PREFIX;
    char digits[11];
    int n = 0, i;

    while (*s)
        *out++ = *s++;
    *out++ = 'm';
    for (i = 7; i >= 0; i--)
        *out++ = hex[(key >> (i * 4)) & 15];
    *out++ = '-';
    do
        digits[n++] = (char)('0' + uid % 10);
    while ((uid /= 10));
    while (n)
        *out++ = digits[--n];
    *out = '\0';
}

#endif
