/*
 * smaps.h - find the mapping of /proc/self/smaps that holds an address.
 * Header-only, used by the examples that show where their memory lives.
 * Under cnk /proc is a node-local path: this reads the compute process's
 * own smaps, not the I/O node's.
 */
#ifndef EXAMPLES_SMAPS_H
#define EXAMPLES_SMAPS_H

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct mapping {
    uintptr_t start, end;
    long kernel_page_kb;        /* KernelPageSize */
    long anon_huge_kb;          /* AnonHugePages (THP) */
    long rss_kb;                /* Rss */
    char perms[8];
    char name[128];             /* the path or [heap], [stack], anon_inode:..., or "" */
};

/* 0 and *m filled if some mapping holds addr; -1 if none (or smaps unreadable). */
static inline int smaps_find(const void *addr, struct mapping *m)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f)
        return -1;
    char line[512];
    int in = 0, found = -1;
    uintptr_t a = (uintptr_t)addr;
    while (fgets(line, sizeof line, f)) {
        uintptr_t s, e;
        char perms[8];
        int name_at = 0;
        if (sscanf(line, "%" SCNxPTR "-%" SCNxPTR " %7s %*s %*s %*s %n", &s, &e, perms, &name_at) == 3) {
            if (in)
                break;              /* the mapping we wanted is complete */
            if (a >= s && a < e) {
                in = 1;
                found = 0;
                memset(m, 0, sizeof *m);
                m->start = s;
                m->end = e;
                snprintf(m->perms, sizeof m->perms, "%s", perms);
                snprintf(m->name, sizeof m->name, "%s", name_at ? line + name_at : "");
                m->name[strcspn(m->name, "\n")] = 0;
            }
            continue;
        }
        if (!in)
            continue;
        long v;
        if (sscanf(line, "KernelPageSize: %ld kB", &v) == 1)
            m->kernel_page_kb = v;
        else if (sscanf(line, "AnonHugePages: %ld kB", &v) == 1)
            m->anon_huge_kb = v;
        else if (sscanf(line, "Rss: %ld kB", &v) == 1)
            m->rss_kb = v;
    }
    fclose(f);
    return found;
}

/* One line a test can parse:
 *   WHAT addr=0x... map=0xS-0xE size_kb=N page_kb=K thp_kb=T rss_kb=R perms=rw-p name=[...] */
static inline void smaps_print(FILE *out, const char *what, const void *addr)
{
    struct mapping m;
    if (smaps_find(addr, &m) != 0) {
        fprintf(out, "%s addr=%p map=none\n", what, addr);
        return;
    }
    fprintf(out, "%s addr=%p map=0x%" PRIxPTR "-0x%" PRIxPTR " size_kb=%" PRIuPTR
            " page_kb=%ld thp_kb=%ld rss_kb=%ld perms=%s name=%s\n",
            what, addr, m.start, m.end, (m.end - m.start) >> 10, m.kernel_page_kb, m.anon_huge_kb,
            m.rss_kb, m.perms, m.name[0] ? m.name : "-");
}

#endif
