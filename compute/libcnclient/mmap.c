/*
 * mmap.c - mmap of a shipped descriptor in Linux mode, as cnk does it for
 * the I/O node's files (compute/cnk/bigmem.c): a private view (or a shared
 * read-only one) is anonymous memory filled by shipped reads, a copy taken
 * at the call; a shared writable view of an I/O-node file cannot be kept
 * in step with the file: ENODEV.  Errors come in Linux's order (the core's
 * shipc_map_errno).  Local descriptors and anonymous memory go to libc.
 */
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include "client.h"

static void *map_shipped(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    long page = sysconf(_SC_PAGESIZE);
    int type = flags & MAP_TYPE;
    if (!len || (off & (page - 1)) || (type != MAP_PRIVATE && type != MAP_SHARED && type != MAP_SHARED_VALIDATE)) {
        errno = EINVAL;
        return MAP_FAILED;
    }
    if (type != MAP_PRIVATE && (prot & PROT_WRITE)) {
        errno = (int)-shipc_map_errno(fd, 1, -ENODEV);
        return MAP_FAILED;
    }
    long err = shipc_map_errno(fd, 0, 0);
    if (err < 0) {
        errno = (int)-err;
        return MAP_FAILED;
    }
    int anon = (flags & ~(MAP_TYPE | MAP_POPULATE | MAP_NONBLOCK)) | MAP_PRIVATE | MAP_ANONYMOUS;
    char *a = REAL(mmap)(addr, len, PROT_READ | PROT_WRITE, anon, -1, 0);
    if (a == MAP_FAILED)
        return a;
    for (size_t done = 0; done < len;) {
        long n = shipc_pread(fd, a + done, len - done, off + (off_t)done);
        if (n < 0) {
            munmap(a, len);
            errno = (int)-shipc_map_errno(fd, 0, n);
            return MAP_FAILED;
        }
        if (n == 0)
            break;      /* past the end: zeros, as a file's last page */
        done += (size_t)n;
    }
    if (prot != (PROT_READ | PROT_WRITE) && mprotect(a, len, prot) < 0) {
        int e = errno;
        munmap(a, len);
        errno = e;
        return MAP_FAILED;
    }
    return a;
}

void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    int r;
    if (flags & MAP_ANONYMOUS)
        return REAL(mmap)(addr, len, prot, flags, fd, off);
    switch (lat_fd_route(fd, &r)) {
    case LAT_SHIP:
        return map_shipped(addr, len, prot, flags, fd, off);
    case LAT_HIDE:
        errno = EBADF;
        return MAP_FAILED;
    default:
        return REAL(mmap)(addr, len, prot, flags, fd, off);
    }
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    return mmap(addr, len, prot, flags, fd, off);
}
