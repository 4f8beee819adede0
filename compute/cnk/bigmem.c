/*
 * bigmem.c - big memory: one huge-page region holding the whole program,
 * carved by a first-fit allocator that works from the top down (mappings
 * and stacks high, the image and its brk heap low, as Linux lays them out).
 *
 * Invariant: every free byte of the region is zero, so fresh mappings and
 * brk growth need no clearing; what is given back is cleared on the way.
 *
 * The region is the node's memory.  Memory the program maps outside it
 * (shared files of /dev/shm and memfds, SysV segments, anonymous memory at
 * an address of its own) is charged against it: the free bytes of the
 * region always cover what is charged, so every request together stays
 * within the node, and one that would not gets ENOMEM at the call, as
 * Linux gives it under RLIMIT_AS (README "The node's memory limit").
 */
#include <asm/unistd.h>
#include <linux/errno.h>
#include <linux/fcntl.h>
#include <linux/memfd.h>
#include <linux/mman.h>
#include <linux/shm.h>
#include <linux/stat.h>

#include "cnk.h"

#define PAGE        4096ul
#define MB2         (2ul << 20)
#define GB1         (1ul << 30)
#define NFREE       4096        /* free ranges; beyond that a freed range is lost */
#define NOUT        1024        /* charged mappings outside the region */
#define PROT_RWX    (PROT_READ | PROT_WRITE | PROT_EXEC)

struct bigmem bigmem;

static struct klock lock;       /* the allocator and the break */
static struct range {
    uintptr_t lo, hi;
} fr[NFREE];                    /* free ranges, sorted, never touching */
static int nfree;
static size_t nfree_bytes;      /* their sum */
static uintptr_t brk_lo, brk_cur;
static struct range out[NOUT];  /* the program's mappings outside the region that count against it */
static int nout;
static size_t charged;          /* their bytes (and those of calls under way) */

static uintptr_t up(uintptr_t v, uintptr_t a) { return (v + a - 1) & ~(a - 1); }
static uintptr_t down(uintptr_t v, uintptr_t a) { return v & ~(a - 1); }

/* ---- the region ---- */

static long map_region(uintptr_t base, size_t len, int flags)
{
    flags |= MAP_PRIVATE | MAP_ANONYMOUS | (base ? MAP_FIXED_NOREPLACE : 0);
    long r = ksys6(__NR_mmap, base, len, PROT_RWX, flags, -1, 0);
    if (r >= 0 && base && (uintptr_t)r != base) {   /* a kernel without FIXED_NOREPLACE */
        ksys2(__NR_munmap, r, len);
        return -EEXIST;
    }
    return r;
}

/* hugetlb pages of 1 << shift bytes in a memfd the I/O node maps too
 * (shipc_share), so a big transfer is copied once, between the file and
 * this memory; sealed, so the file can never shrink under ciod's mapping.
 * *fd: the memfd, to share and close. */
static long map_huge_shared(uintptr_t base, size_t len, unsigned shift, int noreserve, int *fd)
{
    long r = ksys2(__NR_memfd_create, "cnk-bigmem",
                   MFD_CLOEXEC | MFD_ALLOW_SEALING | MFD_HUGETLB | (shift << MFD_HUGE_SHIFT));
    if (r < 0)
        return r;
    *fd = (int)r;
    r = ksys2(__NR_ftruncate, *fd, len);
    if (r >= 0)
        r = ksys3(__NR_fcntl, *fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
    if (r >= 0)
        r = ksys6(__NR_mmap, base, len, PROT_RWX,
                  MAP_SHARED | (noreserve ? MAP_NORESERVE : 0) | (base ? MAP_FIXED_NOREPLACE : 0), *fd, 0);
    if (r >= 0 && base && (uintptr_t)r != base) {
        ksys2(__NR_munmap, r, len);
        r = -EEXIST;
    }
    if (r < 0) {
        ksys1(__NR_close, *fd);
        *fd = -1;
    }
    return r;
}

/* hugetlb pages of 1 << shift bytes; base 0: anywhere.  Shared with the
 * I/O node when it can be (LATTICE_BIGMEM_SHARED=0: never), else private.
 * Reserved at mmap (the kernel takes every page from its pool or, as
 * surplus pages, from free memory, without zeroing them: a page is zeroed
 * when first touched), unless noreserve: then each page is taken at its
 * first touch. */
static long map_huge(uintptr_t base, uint64_t size, unsigned shift, int noreserve, int *fd)
{
    uint64_t ps = 1ull << shift;
    const char *s = kgetenv(cnk.envp, "LATTICE_BIGMEM_SHARED");

    *fd = -1;
    if (!s || *s != '0') {
        long r = map_huge_shared(base, up(size, ps), shift, noreserve, fd);
        if (r >= 0 || r == -ENOMEM || r == -EEXIST)
            return r;
    }
    return map_region(base, up(size, ps),
                      MAP_HUGETLB | (noreserve ? MAP_NORESERVE : 0) | (int)(shift << MAP_HUGE_SHIFT));
}

/* 4 KiB pages the kernel may back with transparent huge pages */
static long map_thp(uintptr_t base, uint64_t size)
{
    long r;
    if (base) {
        r = map_region(base, size, 0);
    } else {
        r = map_region(0, size + MB2, 0);   /* room to align to a huge page */
        if (r >= 0) {
            uintptr_t a = up((uintptr_t)r, MB2);
            if (a > (uintptr_t)r)
                ksys2(__NR_munmap, r, a - (uintptr_t)r);
            ksys2(__NR_munmap, a + size, (uintptr_t)r + MB2 - a);
            r = (long)a;
        }
    }
    if (r >= 0)
        ksys3(__NR_madvise, r, size, MADV_HUGEPAGE);
    return r;
}

static void chose(const char *why, uint64_t page)
{
    bigmem.page_size = page;
    cnk.report->page_size = page;
    kfmt(cnk.report->pages_why, sizeof cnk.report->pages_why, "%s", why);
}

/* LATTICE_BIGMEM_PAGES in the job's environment: the largest page size to
 * try (1G, 2M or 4K; the user's cap, lattice.nodes.hugepages honours it too),
 * 1 GiB when absent. */
static uint64_t largest_page(void)
{
    const char *s = kgetenv(cnk.envp, "LATTICE_BIGMEM_PAGES");
    if (!s)
        return GB1;
    if (!strcmp(s, "2M"))
        return MB2;
    if (!strcmp(s, "4K"))
        return PAGE;
    return GB1;
}

/*
 * The page size is the largest that fits the node (docs/architecture.md
 * "Huge pages"): 1 GiB pages only when big memory is a whole number of GiB
 * (a rounded-up 1 GiB page would be memory the node does not have, and the
 * kernel zeroes a 1 GiB page whole at its first touch), else 2 MiB pages,
 * whose first touch zeroes only those 2 MiB; transparent huge pages when
 * the kernel has no hugetlb pages to give.
 */
int bigmem_init(uint64_t size, uintptr_t fixed_lo, uintptr_t fixed_hi)
{
    size = up(size, PAGE);
    if (size < 16 * PAGE || size > (1ull << 46))
        return -EINVAL;
    uintptr_t b2 = fixed_hi ? down(fixed_lo, MB2) : 0, b1 = fixed_hi ? down(fixed_lo, GB1) : 0;
    if (fixed_hi && (fixed_hi - b2 > size || !b2))
        return -ENOMEM;
    uint64_t largest = largest_page();
    const char *rs = kgetenv(cnk.envp, "LATTICE_BIGMEM_RESERVE");
    int noreserve = rs && *rs == '0';
    char why[sizeof cnk.report->pages_why];
    long r = -ENOMEM;
    int fd = -1;

    /* why not 1 GiB pages, or (r >= 0) why them */
    if (largest < GB1)
        kfmt(why, sizeof why, "LATTICE_BIGMEM_PAGES=%s", largest == MB2 ? "2M" : "4K");
    else if (size & (GB1 - 1))
        kfmt(why, sizeof why, "%lu MiB is not a whole number of GiB", (unsigned long)(size >> 20));
    else if (fixed_hi && !(b1 && fixed_hi - b1 <= size))
        kfmt(why, sizeof why, "fixed-address program that 1 GiB pages cannot hold");
    else if ((r = map_huge(b1, size, 30, 0, &fd)) >= 0)
        kfmt(why, sizeof why, "%lu GiB fills whole 1 GiB hugetlb pages", (unsigned long)(size >> 30));
    else
        kfmt(why, sizeof why, "no free 1 GiB huge pages");
    if (r >= 0) {
        chose(why, GB1);
    } else if (largest >= MB2) {
        r = map_huge(b2, size, 21, noreserve, &fd);
        if (r >= 0) {
            size_t n = strlen(why);
            kfmt(why + n, sizeof why - n, "; 2 MiB hugetlb pages%s",
                 noreserve ? " taken at first touch (LATTICE_BIGMEM_RESERVE=0)" : "");
            chose(why, MB2);
        } else {
            size_t n = strlen(why);
            kfmt(why + n, sizeof why - n, "; no free 2 MiB huge pages");
        }
    }
    if (r < 0) {
        r = map_thp(b2, size);
        if (r < 0)
            return (int)r;
        size_t n = strlen(why);
        kfmt(why + n, sizeof why - n, "; 4 KiB pages with transparent huge pages");
        chose(why, PAGE);
        if (largest >= MB2)
            kprint(cnk.err_fd, "cnk: warning: no free huge pages for %lu MiB of big memory: using "
                   "transparent huge pages (see /proc/sys/vm/nr_overcommit_hugepages)\n",
                   (unsigned long)(size >> 20));
    }
    bigmem.base = (uintptr_t)r;
    bigmem.size = size;
    ship_bigmem(bigmem.base, size);
    if (fd >= 0) {              /* ciod keeps its own mapping: our descriptor is not needed */
        bigmem.shared = shipc_share(bigmem.base, up(size, bigmem.page_size), fd) == 0;
        ksys1(__NR_close, fd);
    }
    cnk.report->bigmem_bytes = size;
    fr[0] = (struct range){ bigmem.base, bigmem.base + size };
    nfree = 1;
    nfree_bytes = size;
    return 0;
}

/* execve: the old program's memory goes back to the kernel (hugetlb pages
 * to their pool) before bigmem_init maps a fresh, zeroed region, placed
 * for the new program. */
void bigmem_reset(void)
{
    if (bigmem.shared)          /* ciod lets go too, so the pages go back to the pool */
        shipc_share(0, 0, -1);
    if (bigmem.size)
        ksys2(__NR_munmap, bigmem.base, up(bigmem.size, bigmem.page_size ? bigmem.page_size : PAGE));
    for (int i = 0; i < nout; i++)    /* the old program's own mappings outside it go too, as on Linux */
        ksys2(__NR_munmap, out[i].lo, out[i].hi - out[i].lo);
    nout = 0;
    charged = 0;
    bigmem = (struct bigmem){ 0 };
    ship_bigmem(0, 0);
    nfree = 0;
    nfree_bytes = 0;
    brk_lo = brk_cur = 0;
}

void bigmem_collapse(uintptr_t addr, size_t len)
{
    if (bigmem.page_size == PAGE)   /* best effort: MADV_COLLAPSE is Linux 6.1+ */
        ksys3(__NR_madvise, down(addr, MB2), up(addr + len, MB2) - down(addr, MB2), MADV_COLLAPSE);
}

int bigmem_contains(uintptr_t addr, size_t len)
{
    return addr >= bigmem.base && len <= bigmem.size && addr - bigmem.base <= bigmem.size - len;
}

static int overlaps(uintptr_t addr, size_t len)
{
    return addr < bigmem.base + bigmem.size && addr + len > bigmem.base;
}

/* Does the program's memory in [addr, addr+len) (within one 2 MiB piece)
 * hold pages it has touched?  Untouched pages are zero already. */
static int touched(uintptr_t addr, size_t len)
{
    unsigned char vec[MB2 / PAGE];
    if (ksys3(__NR_mincore, addr, len, vec) < 0)
        return 1;
    for (size_t i = 0; i < len / PAGE; i++)
        if (vec[i] & 1)
            return 1;
    return 0;
}

/* Clear memory given back, 2 MiB at a time.  With transparent huge pages
 * the kernel drops whole pieces for us; hugetlb pages are cleared by hand,
 * because a private hugetlb page dropped with MADV_DONTNEED loses its
 * reservation. */
static void zero(uintptr_t addr, size_t len)
{
    while (len) {
        size_t n = MB2 - (addr & (MB2 - 1));
        n = n < len ? n : len;
        if (touched(addr, n) &&
            (bigmem.page_size != PAGE || n != MB2 || ksys3(__NR_madvise, addr, n, MADV_DONTNEED) < 0))
            memset((void *)addr, 0, n);
        addr += n;
        len -= n;
    }
}

/* ---- the free list (callers hold the lock) ---- */

static void drop(int i, int n)
{
    memmove(&fr[i], &fr[i + n], (size_t)(nfree - i - n) * sizeof *fr);
    nfree -= n;
}

/* Remove [lo, hi) from the free ranges. */
static int carve(uintptr_t lo, uintptr_t hi)
{
    for (int i = 0; i < nfree; i++) {
        struct range *r = &fr[i];
        if (r->hi <= lo || r->lo >= hi)
            continue;
        if (r->lo < lo && r->hi > hi) {
            if (nfree == NFREE)
                return -ENOMEM;
            memmove(&fr[i + 2], &fr[i + 1], (size_t)(nfree - i - 1) * sizeof *fr);
            fr[i + 1] = (struct range){ hi, r->hi };
            r->hi = lo;
            nfree++;
            nfree_bytes -= hi - lo;
            return 0;
        }
        if (r->lo < lo) {
            nfree_bytes -= r->hi - lo;
            r->hi = lo;
        } else if (r->hi > hi) {
            nfree_bytes -= hi - r->lo;
            r->lo = hi;
        } else {
            nfree_bytes -= r->hi - r->lo;
            drop(i--, 1);
        }
    }
    return 0;
}

/* Add [lo, hi) to the free ranges, merging what it touches. */
static void release(uintptr_t lo, uintptr_t hi)
{
    int i = 0, j;
    size_t had = 0;             /* free bytes of the ranges it merges */
    while (i < nfree && fr[i].hi < lo)
        i++;
    for (j = i; j < nfree && fr[j].lo <= hi; j++) {
        lo = fr[j].lo < lo ? fr[j].lo : lo;
        hi = fr[j].hi > hi ? fr[j].hi : hi;
        had += fr[j].hi - fr[j].lo;
    }
    if (j == i) {
        if (nfree == NFREE)
            return;
        memmove(&fr[i + 1], &fr[i], (size_t)(nfree - i) * sizeof *fr);
        nfree++;
    } else {
        drop(i + 1, j - i - 1);
    }
    fr[i] = (struct range){ lo, hi };
    nfree_bytes += hi - lo - had;
}

static int is_free(uintptr_t lo, uintptr_t hi)
{
    for (int i = 0; i < nfree; i++)
        if (fr[i].lo <= lo && hi <= fr[i].hi)
            return 1;
    return 0;
}

/* ---- the node's memory: the region's free bytes cover what is charged ---- */

static size_t free_in(uintptr_t lo, uintptr_t hi)
{
    size_t n = 0;
    for (int i = 0; i < nfree; i++) {
        uintptr_t a = fr[i].lo > lo ? fr[i].lo : lo, b = fr[i].hi < hi ? fr[i].hi : hi;
        n += a < b ? b - a : 0;
    }
    return n;
}

/* Bytes that may still be taken, in the region or outside it. */
static size_t avail(void)
{
    return nfree_bytes > charged ? nfree_bytes - charged : 0;
}

/* May n more free bytes of the region be taken? */
static int room(size_t n)
{
    return !charged || avail() >= n;
}

static int alloc_locked(size_t len, size_t align, uintptr_t *addr)
{
    if (!room(len))
        return -ENOMEM;
    for (int i = nfree - 1; i >= 0; i--) {
        if (fr[i].hi - fr[i].lo < len)
            continue;
        uintptr_t a = down(fr[i].hi - len, align);
        if (a >= fr[i].lo && carve(a, a + len) == 0) {
            *addr = a;
            return 0;
        }
    }
    return -ENOMEM;
}

int bigmem_alloc(size_t len, size_t align, uintptr_t *addr)
{
    if (!len || len > bigmem.size)
        return -ENOMEM;
    klock(&lock);
    int r = alloc_locked(up(len, PAGE), align < PAGE ? PAGE : align, addr);
    kunlock(&lock);
    return r;
}

int bigmem_take(uintptr_t addr, size_t len)
{
    if (!bigmem_contains(addr, len))
        return -ENOMEM;
    klock(&lock);
    int r = carve(down(addr, PAGE), up(addr + len, PAGE));
    kunlock(&lock);
    return r;
}

/* Give [addr, addr+len) back, cleared. */
static void give_back(uintptr_t addr, size_t len)
{
    zero(addr, len);
    klock(&lock);
    release(addr, addr + len);
    kunlock(&lock);
}

/* ---- mappings outside the region, charged against it (callers hold the lock) ---- */

static size_t charged_in(uintptr_t lo, uintptr_t hi)
{
    size_t n = 0;
    for (int i = 0; i < nout; i++) {
        uintptr_t a = out[i].lo > lo ? out[i].lo : lo, b = out[i].hi < hi ? out[i].hi : hi;
        n += a < b ? b - a : 0;
    }
    return n;
}

/* [lo, hi) is no longer mapped (or mapped anew): what was charged there is
 * not.  A split that finds the table full keeps the whole entry charged. */
static void uncharge(uintptr_t lo, uintptr_t hi)
{
    for (int i = 0; i < nout; i++) {
        struct range *r = &out[i];
        if (r->hi <= lo || r->lo >= hi)
            continue;
        if (r->lo < lo && r->hi > hi) {
            if (nout == NOUT)
                continue;
            out[nout++] = (struct range){ hi, r->hi };
            charged -= hi - lo;
            r->hi = lo;
        } else if (r->lo < lo) {
            charged -= r->hi - lo;
            r->hi = lo;
        } else if (r->hi > hi) {
            charged -= hi - r->lo;
            r->lo = hi;
        } else {
            charged -= r->hi - r->lo;
            out[i--] = out[--nout];
        }
    }
}

/* Before a call that maps len bytes outside the region (over [addr,
 * addr+len) if fixed): hold them if the node has them.  *held: what to
 * pass to charged_done. */
static int charge_begin(uintptr_t addr, size_t len, int fixed, size_t *held)
{
    klock(&lock);
    size_t had = fixed ? charged_in(addr, addr + len) : 0;
    *held = len > had ? len - had : 0;
    int ok = nout < NOUT - 1 && avail() >= *held;
    if (ok)
        charged += *held;
    kunlock(&lock);
    return ok ? 0 : -ENOMEM;
}

/* After it: r is where the mapping of len bytes went, or -errno; old..olen
 * a mapping it replaced (mremap's old place), if any. */
static long charge_done(long r, size_t len, size_t held, uintptr_t old, size_t olen)
{
    klock(&lock);
    charged -= held;
    if (r >= 0) {
        uncharge(old, old + olen);
        uncharge((uintptr_t)r, (uintptr_t)r + len);
        if (nout < NOUT)        /* else (threads racing for the last entry) it stays charged for good */
            out[nout++] = (struct range){ (uintptr_t)r, (uintptr_t)r + len };
        charged += len;
    }
    kunlock(&lock);
    return r;
}

/* The program's own mapping outside the region: made by the kernel, charged. */
static long map_charged(struct cnk_call *c, uintptr_t addr, size_t len, int fixed)
{
    size_t held;
    if (charge_begin(addr, len, fixed, &held) < 0)
        return -ENOMEM;
    return charge_done(cnk_passthrough(c), len, held, 0, 0);
}

/* ---- brk: the heap grows up from the image into free space ---- */

void bigmem_brk_init(uintptr_t start)
{
    brk_lo = brk_cur = start;
}

long sys_brk(struct cnk_call *c)
{
    uintptr_t want = (uintptr_t)c->a[0];
    if (want < brk_lo || !bigmem_contains(brk_lo, want - brk_lo))
        return (long)brk_cur;
    klock(&lock);
    uintptr_t old = brk_cur, oend = up(old, PAGE), nend = up(want, PAGE);
    if (nend > oend && (!is_free(oend, nend) || !room(nend - oend) || carve(oend, nend) < 0)) {
        kunlock(&lock);
        return (long)old;   /* Linux says "no" by leaving the break alone */
    }
    brk_cur = want;
    kunlock(&lock);
    if (nend < oend)
        give_back(nend, oend - nend);
    return (long)want;
}

/* ---- mmap and friends ---- */

/* Fill [dst, dst+len) from the file; returns bytes read (the rest is left alone) or -errno. */
static long read_file(int fd, uintptr_t dst, size_t len, int64_t off)
{
    size_t done = 0;
    while (done < len) {
        long r = shipc_pread(fd, (void *)(dst + done), len - done, off + (int64_t)done);
        if (r < 0)
            return done ? (long)done : r;
        if (r == 0)
            break;
        done += (size_t)r;
    }
    return (long)done;
}

/* A shipped descriptor above 2 sits on cnk's O_PATH placeholder (fd.c).
 * If the kernel's descriptor is a real file the table is wrong, and a
 * program's /dev/shm file would be refused as an I/O-node file (what issue
 * 12's MPI_Init failure was first taken for): say so loudly and map it. */
static int placeholder_ok(int fd)
{
    long fl = fd > 2 ? ksys2(__NR_fcntl, fd, F_GETFL) : O_PATH;
    if (fl < 0 || (fl & O_PATH))
        return 1;
    kprint(cnk.err_fd, "[cnk %d] mmap: descriptor %d is marked as the I/O node's but is a local file; "
           "mapped locally\n", cnk.rank, fd);
    return 0;
}

/* Place a mapping: at addr (fixed) or wherever the allocator says.
 * *dirty tells whether the place may hold old contents. */
static long place(uintptr_t addr, size_t len, int flags, int *dirty)
{
    *dirty = 0;
    if (!(flags & (MAP_FIXED | MAP_FIXED_NOREPLACE))) {
        int r = alloc_locked(len, PAGE, &addr);
        return r < 0 ? r : (long)addr;
    }
    if (addr & (PAGE - 1))
        return -EINVAL;
    if (!is_free(addr, addr + len)) {
        if (flags & MAP_FIXED_NOREPLACE)
            return -EEXIST;
        *dirty = 1;
    }
    if (!room(free_in(addr, addr + len)))
        return -ENOMEM;
    int r = carve(addr, addr + len);
    return r < 0 ? r : (long)addr;
}

/* Map the cached copy of shipped fd's file for real (libcache.c). */
static long map_cached(uintptr_t addr, size_t len, int prot, int flags, int fd, int64_t off)
{
    /* the cache holds the file whatever the descriptor: answer for the
     * descriptor first (EACCES for O_WRONLY, EBADF for O_PATH...) */
    long cfd = shipc_map_errno(fd, 0, 0);
    if (cfd < 0)
        return cfd;
    cfd = libcache_open(fd, len);
    if (cfd < 0)
        return cfd;
    long a = ksys6(__NR_mmap, addr, len, prot, flags, cfd, off);
    ksys1(__NR_close, cfd);
    if (a >= 0)
        __atomic_fetch_add(&cnk.report->lib_maps, 1, __ATOMIC_RELAXED);
    return a;
}

/* A private file mapping at a fixed address outside big memory (a segment
 * ld.so places over a cached library): the cached copy, else anonymous
 * memory filled by shipped reads. */
static long map_outside(uintptr_t addr, size_t len, int prot, int flags, int fd, int64_t off)
{
    if ((flags & MAP_TYPE) != MAP_PRIVATE)
        return -EINVAL;
    long a = map_cached(addr, len, prot, flags, fd, off);
    if (a >= 0)
        return a;
    __atomic_fetch_add(&cnk.report->lib_copied, 1, __ATOMIC_RELAXED);
    a = ksys6(__NR_mmap, addr, len, PROT_READ | PROT_WRITE, (flags & ~MAP_TYPE) | MAP_PRIVATE | MAP_ANONYMOUS,
              -1, 0);
    if (a < 0)
        return a;
    long n = read_file(fd, (uintptr_t)a, len, off);
    if (n < 0 || ((prot & PROT_WRITE) == 0 && ksys3(__NR_mprotect, a, len, prot) < 0)) {
        ksys2(__NR_munmap, a, len);
        return n < 0 ? shipc_map_errno(fd, 0, n) : -EINVAL;
    }
    return a;
}

long sys_mmap(struct cnk_call *c)
{
    uintptr_t addr = (uintptr_t)c->a[0];
    size_t len = up((size_t)c->a[1], PAGE);
    int prot = (int)c->a[2], flags = (int)c->a[3], fd = (int)c->a[4];
    int64_t off = c->a[5];
    int type = flags & MAP_TYPE, anon = flags & MAP_ANONYMOUS;
    int fixed = flags & (MAP_FIXED | MAP_FIXED_NOREPLACE);

    if (!c->a[1] || (off & (int64_t)(PAGE - 1)) || type < MAP_SHARED || type > MAP_SHARED_VALIDATE)
        return -EINVAL;
    if (!len || len > (1ul << 47))  /* rounding overflowed, or more than an address space: Linux's ENOMEM */
        return -ENOMEM;
    if (!anon && shipc_fd_is_hidden(fd))
        return -EBADF;
    /* node-local shared files (/dev/shm, memfd): other processes see them,
     * so they are real mappings outside big memory */
    if (!anon && type != MAP_PRIVATE && !shipc_fd_is_shipped(fd))
        return overlaps(addr, len) && fixed ? -EINVAL : map_charged(c, addr, len, fixed);
    if (!anon && type != MAP_PRIVATE && (prot & PROT_WRITE)) {
        if (!placeholder_ok(fd))
            return overlaps(addr, len) && fixed ? -EINVAL : map_charged(c, addr, len, fixed);
        return shipc_map_errno(fd, 1, -ENODEV);   /* a shared writable view of a file on the I/O node */
    }
    if (fixed && !bigmem_contains(addr, len)) {
        if (overlaps(addr, len))
            return -EINVAL;
        if (!anon && shipc_fd_is_shipped(fd))     /* a segment over a cached library (or an address of its own) */
            return map_outside(addr, len, prot, flags, fd, off);
        return map_charged(c, addr, len, 1);    /* the program insists on an address of its own */
    }
    /* a read-only private view of a shipped file (ld.so's first map of a
     * library): the host's cached copy, outside big memory */
    if (!fixed && !anon && type == MAP_PRIVATE && shipc_fd_is_shipped(fd) && !(prot & PROT_WRITE)) {
        long a = map_cached(0, len, prot, flags, fd, off);
        if (a >= 0)
            return a;
    }

    int dirty;
    klock(&lock);
    long a = place(addr, len, flags, &dirty);
    kunlock(&lock);
    if (a < 0)
        return a;
    long n = 0;
    if (!anon) {
        if (shipc_fd_is_shipped(fd))
            __atomic_fetch_add(&cnk.report->lib_copied, 1, __ATOMIC_RELAXED);
        n = read_file(fd, (uintptr_t)a, len, off);
        if (n < 0) {
            give_back((uintptr_t)a, len);
            return shipc_map_errno(fd, 0, n);
        }
    }
    if (dirty)
        zero((uintptr_t)a + (size_t)n, len - (size_t)n);
    return a;
}

long sys_munmap(struct cnk_call *c)
{
    uintptr_t addr = (uintptr_t)c->a[0];
    size_t len = up((size_t)c->a[1], PAGE);
    if (!bigmem_contains(addr, len)) {
        if (overlaps(addr, len))
            return -EINVAL;
        long r = cnk_passthrough(c);
        if (r == 0 && len) {
            klock(&lock);
            uncharge(addr, addr + len);
            kunlock(&lock);
        }
        return r;
    }
    if ((addr & (PAGE - 1)) || !len)
        return -EINVAL;
    give_back(addr, len);
    return 0;
}

/* Grow [old, old+olen) to nlen: in place if the space after it is free,
 * else (MREMAP_MAYMOVE) elsewhere. */
static long grow(uintptr_t old, size_t olen, size_t nlen, int flags)
{
    klock(&lock);
    uintptr_t a = old;
    int r = bigmem_contains(old, nlen) && is_free(old + olen, old + nlen) ?
                (room(nlen - olen) ? carve(old + olen, old + nlen) : -ENOMEM)
          : (flags & MREMAP_MAYMOVE) ? alloc_locked(nlen, PAGE, &a)
          : -ENOMEM;
    kunlock(&lock);
    if (r < 0)
        return r;
    if (a != old) {
        memcpy((void *)a, (void *)old, olen);
        give_back(old, olen);
    }
    return (long)a;
}

/* MREMAP_FIXED: move to new, replacing whatever is there. */
static long move_to(uintptr_t old, size_t olen, size_t nlen, uintptr_t new)
{
    if ((new & (PAGE - 1)) || !bigmem_contains(new, nlen) || (new < old + olen && old < new + nlen))
        return -EINVAL;
    klock(&lock);
    int dirty = !is_free(new, new + nlen), r = room(free_in(new, new + nlen)) ? carve(new, new + nlen) : -ENOMEM;
    kunlock(&lock);
    if (r < 0)
        return r;
    size_t keep = olen < nlen ? olen : nlen;
    memcpy((void *)new, (void *)old, keep);
    if (dirty)
        zero(new + keep, nlen - keep);
    give_back(old, olen);
    return (long)new;
}

long sys_mremap(struct cnk_call *c)
{
    uintptr_t old = (uintptr_t)c->a[0], new = (uintptr_t)c->a[4];
    size_t olen = up((size_t)c->a[1], PAGE), nlen = up((size_t)c->a[2], PAGE);
    int flags = (int)c->a[3];
    if (!bigmem_contains(old, olen ? olen : 1)) {
        if (overlaps(old, olen))
            return -EINVAL;
        klock(&lock);
        int mine = olen && nlen && charged_in(old, old + olen) != 0;
        kunlock(&lock);
        if (!mine)              /* a library's mapping, not counted */
            return cnk_passthrough(c);
        /* a charged mapping moves or grows: charge the growth (less what
         * was charged where MREMAP_FIXED puts it) */
        klock(&lock);
        size_t had = (flags & MREMAP_FIXED) ? charged_in(new, new + nlen) : 0;
        size_t more = nlen > olen + had ? nlen - olen - had : 0;
        int ok = nout < NOUT - 1 && avail() >= more;
        if (ok)
            charged += more;
        kunlock(&lock);
        if (!ok)
            return -ENOMEM;
        long r = cnk_passthrough(c);
        return charge_done(r, nlen, more, old, olen);
    }
    if ((old & (PAGE - 1)) || !nlen || !olen || (flags & ~(MREMAP_MAYMOVE | MREMAP_FIXED)) ||
        ((flags & MREMAP_FIXED) && !(flags & MREMAP_MAYMOVE)))
        return -EINVAL;
    if (flags & MREMAP_FIXED)
        return move_to(old, olen, nlen, new);
    if (nlen <= olen) {
        if (nlen < olen)
            give_back(old + nlen, olen - nlen);
        return (long)old;
    }
    return grow(old, olen, nlen, flags);
}

/* RELRO and guard pages ask for 4 KiB protections that huge pages cannot
 * have: inside big memory everything stays readable and writable. */
long sys_mprotect(struct cnk_call *c)
{
    uintptr_t addr = (uintptr_t)c->a[0];
    size_t len = up((size_t)c->a[1], PAGE);
    if (!overlaps(addr, len))
        return cnk_passthrough(c);
    return addr & (PAGE - 1) ? -EINVAL : 0;
}

long sys_madvise(struct cnk_call *c)
{
    uintptr_t addr = (uintptr_t)c->a[0];
    size_t len = up((size_t)c->a[1], PAGE);
    int advice = (int)c->a[2];
    if (!overlaps(addr, len))
        return cnk_passthrough(c);
    if (!bigmem_contains(addr, len) || (addr & (PAGE - 1)))
        return -EINVAL;
    if (advice == MADV_DONTNEED || advice == MADV_REMOVE)
        zero(addr, len);    /* what the program will read there next */
    return 0;
}

long sys_mem_range(struct cnk_call *c)
{
    return overlaps((uintptr_t)c->a[0], (size_t)c->a[1]) ? 0 : cnk_passthrough(c);
}

long sys_mlockall(struct cnk_call *c)
{
    (void)c;    /* locking would populate all of big memory; hugetlb is never swapped anyway */
    return 0;
}

/* SysV shared memory (UCX's mm/sysv transport between the ranks of a node,
 * which fails MPI_Init when shmget is refused): real kernel segments,
 * attached outside big memory so other processes share the pages. */
long sys_shmat(struct cnk_call *c)
{
    if (c->a[1] && overlaps((uintptr_t)c->a[1], 1))
        return -EINVAL;
    struct shmid64_ds ds;
    if (ksys3(__NR_shmctl, c->a[0], IPC_STAT, &ds) < 0 || !ds.shm_segsz)
        return cnk_passthrough(c);      /* no size to charge: the kernel's answer (EINVAL, EACCES) */
    size_t len = up(ds.shm_segsz, PAGE);
    if (!len)
        return -ENOMEM;
    return map_charged(c, (uintptr_t)c->a[1], len, c->a[1] && (c->a[2] & SHM_REMAP));
}

long sys_shmdt(struct cnk_call *c)
{
    uintptr_t addr = (uintptr_t)c->a[0];
    if (overlaps(addr, 1))
        return -EINVAL;
    long r = cnk_passthrough(c);
    if (r == 0) {
        klock(&lock);
        for (int i = 0; i < nout; i++)
            if (out[i].lo == addr) {
                uncharge(out[i].lo, out[i].hi);
                break;
            }
        kunlock(&lock);
    }
    return r;
}
