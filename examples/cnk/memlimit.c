/*
 * memlimit: every way a program asks for memory, asked for more than the
 * node has.  Each case must fail with the errno Linux gives under a memory
 * limit (RLIMIT_AS: `prlimit --as`), and the process must live on and still
 * be able to allocate afterwards.
 *
 *   memlimit MIB [CASE...]
 *
 * MIB is the node's memory (under cnk: big memory; natively: the limit).
 * Requests that must fail ask for 2 x MIB (or sizes that overflow), so the
 * answer is the same whatever else the process has mapped.  One line a case:
 *   memlimit: CASE: ERRNO_NAME; alloc after ok
 * (ok instead of ERRNO_NAME where the request must succeed, e.g. brk keeps
 * the old break), or
 *   memlimit: CASE: FAIL what
 * and at the end `memlimit: done N cases, F failed`; exit status 1 if any failed.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <unistd.h>

static size_t node;             /* bytes */
static int failed, cases;
static const char *only[64];
static int nonly;

static const char *ename(int e)
{
    const char *n = strerrorname_np(e);
    return n ? n : "?";
}

/* The process lives on: it can still allocate and touch a MiB. */
static int alloc_after(void)
{
    char *p = malloc(1 << 20);
    if (!p)
        return 0;
    memset(p, 0x5a, 1 << 20);
    int ok = p[0] == 0x5a && p[(1 << 20) - 1] == 0x5a;
    free(p);
    void *m = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        return 0;
    memset(m, 1, 1 << 20);
    munmap(m, 1 << 20);
    return ok;
}

/* got: the errno the call gave (0: it succeeded); want likewise. */
static void report(const char *name, int got, int want, const char *what)
{
    cases++;
    int after = alloc_after();
    if (got == want && after && !what) {
        printf("memlimit: %s: %s; alloc after ok\n", name, want ? ename(want) : "ok");
    } else {
        failed++;
        printf("memlimit: %s: FAIL got %s want %s%s%s%s\n", name, got ? ename(got) : "success",
               want ? ename(want) : "success", after ? "" : ", cannot allocate after", what ? ": " : "",
               what ? what : "");
    }
    fflush(stdout);
}

static int mmap_errno(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    void *p = mmap(addr, len, prot, flags, fd, off);
    if (p == MAP_FAILED)
        return errno;
    munmap(p, len);
    return 0;
}

static int wanted(const char *name)
{
    if (!nonly)
        return 1;
    for (int i = 0; i < nonly; i++)
        if (!strcmp(only[i], name))
            return 1;
    return 0;
}

#define CASE(name) if (wanted(name))

/* A file in /dev/shm (node-local shared memory, as MPICH's windows use). */
static int shm_file(size_t len, int by_write)
{
    char path[64];
    snprintf(path, sizeof path, "/dev/shm/memlimit-%d", (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0)
        return -1;
    unlink(path);
    if (by_write) {         /* MPICH's way: a byte at the last offset */
        if (lseek(fd, (off_t)len - 1, SEEK_SET) < 0 || write(fd, "", 1) != 1) {
            close(fd);
            return -1;
        }
    } else if (ftruncate(fd, (off_t)len) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: memlimit MIB [CASE...]\n");
        return 2;
    }
    node = strtoull(argv[1], NULL, 10) << 20;
    for (int i = 2; i < argc && nonly < 64; i++)
        only[nonly++] = argv[i];
    const size_t big = 2 * node, half = node / 2;
    const int rw = PROT_READ | PROT_WRITE, anon = MAP_PRIVATE | MAP_ANONYMOUS;
    void *faraway = (void *)0x600000000000ul;      /* an address of the program's own, as MPICH picks */

    CASE("brk") {
        /* Linux says no by returning the old break */
        uintptr_t cur = (uintptr_t)syscall(SYS_brk, 0);
        uintptr_t r = (uintptr_t)syscall(SYS_brk, cur + big);
        report("brk", r == cur ? 0 : EFAULT, 0, r == cur ? NULL : "the break moved");
    }
    CASE("brk-size-max") {         /* a break that wraps the address space: the old one */
        uintptr_t cur = (uintptr_t)syscall(SYS_brk, 0);
        uintptr_t r = (uintptr_t)syscall(SYS_brk, UINTPTR_MAX);
        report("brk-size-max", r == cur ? 0 : EFAULT, 0, r == cur ? NULL : "the break moved");
    }
    CASE("sbrk") {
        errno = 0;
        void *r = sbrk((intptr_t)big);
        report("sbrk", r == (void *)-1 ? errno : 0, ENOMEM, NULL);
    }
    CASE("malloc") {
        errno = 0;
        void *p = malloc(big);
        report("malloc", p ? 0 : errno, ENOMEM, NULL);
        free(p);
    }
    CASE("mmap-private") report("mmap-private", mmap_errno(NULL, big, rw, anon, -1, 0), ENOMEM, NULL);
    CASE("mmap-shared") report("mmap-shared", mmap_errno(NULL, big, rw, MAP_SHARED | MAP_ANONYMOUS, -1, 0), ENOMEM, NULL);
    CASE("mmap-noreserve")
        report("mmap-noreserve", mmap_errno(NULL, big, rw, anon | MAP_NORESERVE, -1, 0), ENOMEM, NULL);
    CASE("mmap-fixed") report("mmap-fixed", mmap_errno(faraway, big, rw, anon | MAP_FIXED, -1, 0), ENOMEM, NULL);
    CASE("mmap-fixed-noreplace")
        report("mmap-fixed-noreplace", mmap_errno(faraway, big, rw, anon | MAP_FIXED_NOREPLACE, -1, 0), ENOMEM, NULL);
    CASE("mmap-size-max") report("mmap-size-max", mmap_errno(NULL, SIZE_MAX, rw, anon, -1, 0), ENOMEM, NULL);
    CASE("mmap-size-max-page")
        report("mmap-size-max-page", mmap_errno(NULL, SIZE_MAX - 4095, rw, anon, -1, 0), ENOMEM, NULL);
    CASE("mmap-2^63") report("mmap-2^63", mmap_errno(NULL, (size_t)1 << 63, rw, anon, -1, 0), ENOMEM, NULL);
    CASE("malloc-size-max") {
        volatile size_t n = SIZE_MAX;
        errno = 0;
        void *p = malloc(n);
        report("malloc-size-max", p ? 0 : errno, ENOMEM, NULL);
    }
    CASE("calloc-overflow") {
        volatile size_t n = SIZE_MAX / 2;    /* not a constant: the compiler would warn */
        errno = 0;
        void *p = calloc(n, 4);
        report("calloc-overflow", p ? 0 : errno, ENOMEM, NULL);
    }
    CASE("dev-shm") {
        int fd = shm_file(big, 0);
        int e = fd < 0 ? errno : mmap_errno(NULL, big, rw, MAP_SHARED, fd, 0);
        report("dev-shm", fd < 0 ? -1 : e, ENOMEM, fd < 0 ? "cannot make the /dev/shm file" : NULL);
        if (fd >= 0)
            close(fd);
    }
    CASE("dev-shm-written") {      /* sized by writing its last byte, mapped at an address of its own */
        int fd = shm_file(big, 1);
        int e = fd < 0 ? errno : mmap_errno(faraway, big, rw, MAP_SHARED | MAP_FIXED, fd, 0);
        report("dev-shm-written", fd < 0 ? -1 : e, ENOMEM, fd < 0 ? "cannot make the /dev/shm file" : NULL);
        if (fd >= 0)
            close(fd);
    }
    CASE("memfd") {
        int fd = memfd_create("memlimit", MFD_CLOEXEC);
        int e = fd < 0 || ftruncate(fd, (off_t)big) < 0 ? -1 : mmap_errno(NULL, big, rw, MAP_SHARED, fd, 0);
        report("memfd", e, ENOMEM, e == -1 ? "cannot make the memfd" : NULL);
        if (fd >= 0)
            close(fd);
    }
    CASE("file-private") {         /* a regular file (under cnk: the I/O node's), copied in */
        char path[64];
        snprintf(path, sizeof path, "memlimit-%d.dat", (int)getpid());
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
        int e = fd < 0 || ftruncate(fd, (off_t)big) < 0 ? -1 : mmap_errno(NULL, big, rw, MAP_PRIVATE, fd, 0);
        report("file-private", e, ENOMEM, e == -1 ? "cannot make the file" : NULL);
        if (fd >= 0)
            close(fd);
        unlink(path);
    }
    CASE("file-shared-ro") {
        char path[64];
        snprintf(path, sizeof path, "memlimit-%d.dat", (int)getpid());
        int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
        int e = fd < 0 || ftruncate(fd, (off_t)big) < 0 ? -1 : mmap_errno(NULL, big, PROT_READ, MAP_SHARED, fd, 0);
        report("file-shared-ro", e, ENOMEM, e == -1 ? "cannot make the file" : NULL);
        if (fd >= 0)
            close(fd);
        unlink(path);
    }
    CASE("mremap-inplace") {
        void *p = mmap(NULL, 1 << 20, rw, anon, -1, 0);
        void *q = p == MAP_FAILED ? MAP_FAILED : mremap(p, 1 << 20, big, 0);
        int e = q == MAP_FAILED ? errno : 0;
        report("mremap-inplace", p == MAP_FAILED ? -1 : e, ENOMEM, NULL);
        munmap(q == MAP_FAILED ? p : q, q == MAP_FAILED ? 1 << 20 : big);
    }
    CASE("mremap-maymove") {
        void *p = mmap(NULL, 1 << 20, rw, anon, -1, 0);
        void *q = p == MAP_FAILED ? MAP_FAILED : mremap(p, 1 << 20, big, MREMAP_MAYMOVE);
        int e = q == MAP_FAILED ? errno : 0;
        report("mremap-maymove", p == MAP_FAILED ? -1 : e, ENOMEM, NULL);
        munmap(q == MAP_FAILED ? p : q, q == MAP_FAILED ? 1 << 20 : big);
    }
    CASE("mremap-size-max") {      /* a length that overflows when rounded: EINVAL, as Linux */
        void *p = mmap(NULL, 1 << 20, rw, anon, -1, 0);
        void *q = p == MAP_FAILED ? MAP_FAILED : mremap(p, 1 << 20, SIZE_MAX, MREMAP_MAYMOVE);
        int e = q == MAP_FAILED ? errno : 0;
        report("mremap-size-max", p == MAP_FAILED ? -1 : e, EINVAL, NULL);
        munmap(p, 1 << 20);
    }
    CASE("mremap-dev-shm") {       /* a node-local shared mapping grown past the node */
        int fd = shm_file(big, 0);
        void *p = fd < 0 ? MAP_FAILED : mmap(NULL, 1 << 20, rw, MAP_SHARED, fd, 0);
        void *q = p == MAP_FAILED ? MAP_FAILED : mremap(p, 1 << 20, big, MREMAP_MAYMOVE);
        int e = q == MAP_FAILED ? errno : 0;
        report("mremap-dev-shm", p == MAP_FAILED ? -1 : e, ENOMEM, p == MAP_FAILED ? "cannot map 1 MiB" : NULL);
        if (p != MAP_FAILED)
            munmap(q == MAP_FAILED ? p : q, q == MAP_FAILED ? 1 << 20 : big);
        if (fd >= 0)
            close(fd);
    }
    CASE("shmat") {
        int id = shmget(IPC_PRIVATE, big, IPC_CREAT | 0600);
        void *p = id < 0 ? (void *)-1 : shmat(id, NULL, 0);
        int e = id < 0 ? -1 : p == (void *)-1 ? errno : 0;
        report("shmat", e, ENOMEM, id < 0 ? "shmget failed" : NULL);
        if (p != (void *)-1)
            shmdt(p);
        if (id >= 0)
            shmctl(id, IPC_RMID, NULL);
    }
    /* memory of the node taken outside the heap counts: half of it mapped
     * at an address of the program's own (or from /dev/shm) leaves no room
     * for three quarters more */
    CASE("fixed-then-malloc") {
        void *p = mmap(faraway, half, rw, anon | MAP_FIXED, -1, 0);
        int e = p == MAP_FAILED ? -1 : mmap_errno(NULL, node / 4 * 3, rw, anon, -1, 0);
        report("fixed-then-malloc", e, ENOMEM, p == MAP_FAILED ? "cannot map half the node" : NULL);
        if (p != MAP_FAILED)
            munmap(p, half);
    }
    CASE("dev-shm-then-malloc") {
        int fd = shm_file(half, 0);
        void *p = fd < 0 ? MAP_FAILED : mmap(NULL, half, rw, MAP_SHARED, fd, 0);
        int e = p == MAP_FAILED ? -1 : mmap_errno(NULL, node / 4 * 3, rw, anon, -1, 0);
        report("dev-shm-then-malloc", e, ENOMEM, p == MAP_FAILED ? "cannot map half the node" : NULL);
        if (p != MAP_FAILED)
            munmap(p, half);
        if (fd >= 0)
            close(fd);
    }
    CASE("dev-shm-twice") {        /* each mapping of a segment counts, as RLIMIT_AS counts it */
        size_t part = node / 8 * 3;
        int fd = shm_file(part, 0);
        void *p = fd < 0 ? MAP_FAILED : mmap(NULL, part, rw, MAP_SHARED, fd, 0);
        void *q = p == MAP_FAILED ? MAP_FAILED : mmap(NULL, part, rw, MAP_SHARED, fd, 0);
        int e = q == MAP_FAILED ? -1 : mmap_errno(NULL, part, rw, anon, -1, 0);
        report("dev-shm-twice", e, ENOMEM, q == MAP_FAILED ? "cannot map 3/8 of the node twice" : NULL);
        if (q != MAP_FAILED)
            munmap(q, part);
        if (p != MAP_FAILED)
            munmap(p, part);
        if (fd >= 0)
            close(fd);
    }
    CASE("shmat-then-malloc") {    /* an attached segment counts until shmdt gives it back */
        int id = shmget(IPC_PRIVATE, half, IPC_CREAT | 0600);
        void *p = id < 0 ? (void *)-1 : shmat(id, NULL, 0);
        int e = p == (void *)-1 ? -1 : mmap_errno(NULL, node / 4 * 3, rw, anon, -1, 0);
        int back = p != (void *)-1 && shmdt(p) == 0 ? mmap_errno(NULL, node / 4 * 3, rw, anon, -1, 0) : -1;
        report("shmat-then-malloc", e, ENOMEM, p == (void *)-1 ? "cannot attach half the node"
                                              : back ? "no room after shmdt" : NULL);
        if (id >= 0)
            shmctl(id, IPC_RMID, NULL);
    }
    CASE("mremap-grown-counts") {  /* a shared mapping grown within the node counts at its new size */
        int fd = shm_file(half, 0);
        void *p = fd < 0 ? MAP_FAILED : mmap(NULL, 1 << 20, rw, MAP_SHARED, fd, 0);
        void *q = p == MAP_FAILED ? MAP_FAILED : mremap(p, 1 << 20, half, MREMAP_MAYMOVE);
        int e = q == MAP_FAILED ? -1 : mmap_errno(NULL, node / 4 * 3, rw, anon, -1, 0);
        report("mremap-grown-counts", e, ENOMEM, q == MAP_FAILED ? "cannot grow to half the node" : NULL);
        if (q != MAP_FAILED)
            munmap(q, half);
        else if (p != MAP_FAILED)
            munmap(p, 1 << 20);
        if (fd >= 0)
            close(fd);
    }
    CASE("unmapped-gives-back") {  /* what munmap gives back can be taken again */
        void *p = mmap(faraway, half, rw, anon | MAP_FIXED, -1, 0);
        if (p != MAP_FAILED)
            munmap(p, half);
        int e = p == MAP_FAILED ? -1 : mmap_errno(NULL, node / 4 * 3, rw, anon, -1, 0);
        report("unmapped-gives-back", e, 0, p == MAP_FAILED ? "cannot map half the node" : NULL);
    }
    CASE("many-small") {           /* 1 MiB at a time until full: within the node, then all given back */
        size_t n = 0, max = 2 * (node >> 20) + 16;
        void **v = calloc(max, sizeof *v);
        int e = 0;
        while (v && n < max) {
            void *p = mmap(NULL, 1 << 20, rw, anon, -1, 0);
            if (p == MAP_FAILED) {
                e = errno;
                break;
            }
            *(volatile char *)p = 1;
            v[n++] = p;
        }
        char what[96] = "";
        if (n << 20 > node || n < (node >> 20) / 2)
            snprintf(what, sizeof what, "%zu MiB mapped of a %zu MiB node", n, node >> 20);
        for (size_t i = 0; i < n; i++)
            munmap(v[i], 1 << 20);
        free(v);
        report("many-small", e, ENOMEM, what[0] ? what : NULL);
    }
    printf("memlimit: done %d cases, %d failed\n", cases, failed);
    return failed ? 1 : 0;
}
