/*
 * pages.h - how a benchmark gets its big buffer, and what pages back it.
 * Header-only, shared by gups, stream_copy and fft2d.
 *
 * Options every one of them understands (before its own arguments):
 *   --no-thp       prctl(PR_SET_THP_DISABLE) before allocating: plain 4 KiB pages
 *   --hugetlb-1g   mmap(MAP_HUGETLB | MAP_HUGE_1GB): explicit 1 GiB pages
 *   --hugetlb-2m   mmap(MAP_HUGETLB | MAP_HUGE_2MB): explicit 2 MiB pages
 * and otherwise malloc (what an unchanged program does; under cnk that is
 * big memory).  pages_describe() reads /proc/self/smaps (node-local under
 * cnk) and says what backs the buffer: "page=4K thp=0M" and so on.
 */
#ifndef BENCH_PAGES_H
#define BENCH_PAGES_H

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>

#ifndef MAP_HUGE_SHIFT
#define MAP_HUGE_SHIFT 26
#endif
#ifndef MAP_HUGE_1GB
#define MAP_HUGE_1GB (30 << MAP_HUGE_SHIFT)
#endif
#ifndef MAP_HUGE_2MB
#define MAP_HUGE_2MB (21 << MAP_HUGE_SHIFT)
#endif

enum pages_mode { PAGES_MALLOC, PAGES_NO_THP, PAGES_HUGETLB_1G, PAGES_HUGETLB_2M };

static enum pages_mode pages_mode = PAGES_MALLOC;

/* Consume the page options at the front of argv; returns how many. */
static inline int pages_options(int argc, char **argv)
{
    int i = 1;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--no-thp") == 0)
            pages_mode = PAGES_NO_THP;
        else if (strcmp(argv[i], "--hugetlb-1g") == 0)
            pages_mode = PAGES_HUGETLB_1G;
        else if (strcmp(argv[i], "--hugetlb-2m") == 0)
            pages_mode = PAGES_HUGETLB_2M;
        else
            break;
    }
    if (pages_mode == PAGES_NO_THP && prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0) != 0) {
        perror("prctl(PR_SET_THP_DISABLE)");
        exit(1);
    }
    return i - 1;
}

static inline const char *pages_mode_name(void)
{
    switch (pages_mode) {
    case PAGES_NO_THP: return "no-thp";
    case PAGES_HUGETLB_1G: return "hugetlb-1g";
    case PAGES_HUGETLB_2M: return "hugetlb-2m";
    default: return "malloc";
    }
}

/* A buffer of len bytes, 64-byte aligned; exits with a message on failure. */
static inline void *pages_alloc(size_t len)
{
    void *p;
    if (pages_mode == PAGES_HUGETLB_1G || pages_mode == PAGES_HUGETLB_2M) {
        size_t unit = pages_mode == PAGES_HUGETLB_1G ? (size_t)1 << 30 : (size_t)2 << 20;
        size_t n = (len + unit - 1) / unit * unit;
        p = mmap(NULL, n, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB |
                 (pages_mode == PAGES_HUGETLB_1G ? MAP_HUGE_1GB : MAP_HUGE_2MB), -1, 0);
        if (p == MAP_FAILED) {
            fprintf(stderr, "mmap %zu bytes of %s pages: %s (reserve them in "
                    "/sys/kernel/mm/hugepages/)\n", n, pages_mode_name(), strerror(errno));
            exit(1);
        }
        return p;
    }
    if (posix_memalign(&p, 64, len) != 0) {
        fprintf(stderr, "cannot allocate %zu bytes\n", len);
        exit(1);
    }
    return p;
}

/* "page=4K thp=123M" for the mapping of /proc/self/smaps holding addr. */
static inline void pages_describe(const void *addr, char *out, size_t n)
{
    snprintf(out, n, "page=?");
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return;
    char line[512];
    int in = 0;
    long page_kb = -1, thp_kb = 0;
    uintptr_t a = (uintptr_t)addr;
    while (fgets(line, sizeof line, f)) {
        uintptr_t s, e;
        char perms[8];
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s", &s, &e, perms) == 3) {
            if (in)
                break;
            in = a >= s && a < e;
            continue;
        }
        if (in) {
            sscanf(line, "KernelPageSize: %ld kB", &page_kb);
            sscanf(line, "AnonHugePages: %ld kB", &thp_kb);
        }
    }
    fclose(f);
    if (page_kb >= 1 << 20)
        snprintf(out, n, "page=%ldG thp=%ldM", page_kb >> 20, thp_kb >> 10);
    else if (page_kb >= 1 << 10)
        snprintf(out, n, "page=%ldM thp=%ldM", page_kb >> 10, thp_kb >> 10);
    else
        snprintf(out, n, "page=%ldK thp=%ldM", page_kb, thp_kb >> 10);
}

#endif
