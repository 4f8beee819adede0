/*
 * cnk_report.h - what cnk tells its compute node about a job, through a
 * shared page.
 *
 * cnode creates a 4096-byte memfd, passes it to cnk as descriptor
 * CNK_REPORT_FD, and reads it after the process has ended, however it ended
 * (exit, signal, load failure).  cnk maps it MAP_SHARED and keeps it current:
 * counters are bumped atomically as calls happen, so a rank killed by a
 * signal still reports what it did.  Node-local, never on the wire: cnode
 * turns it into the text of its LAT_NODE_EXIT message.
 */
#ifndef LATTICE_CNK_REPORT_H
#define LATTICE_CNK_REPORT_H

#include <stdint.h>

#define CNK_REPORT_MAGIC 0x4B4E43u      /* "CNK" */
#define CNK_REPORT_FD    6              /* descriptor cnode hands to cnk */

enum cnk_class { CNK_LOCAL = 0, CNK_SHIPPED = 1, CNK_UNSUPPORTED = 2, CNK_NCLASS = 3 };

struct cnk_report {
    uint32_t magic;             /* CNK_REPORT_MAGIC once cnk has started */
    uint32_t loaded;            /* 1 once the program runs (its entry point reached) */
    int32_t  launch_err;        /* errno-style code if the program could not be loaded */
    uint32_t pad;
    uint64_t bigmem_bytes;      /* size of big memory */
    uint64_t page_size;         /* bytes per page backing it: 1 GiB, 2 MiB or 4 KiB (THP) */
    uint64_t count[CNK_NCLASS]; /* system calls by class (enum cnk_class) */
    char     pages_why[160];    /* why this page size, e.g. "no 1 GiB pages free; 2 MiB hugetlb" */
    char     message[512];      /* the load failure, for the user */
    /* the host's library cache (compute/cnk/libcache.c) */
    uint64_t lib_maps;          /* file mappings served from the cache, outside big memory */
    uint64_t lib_fetched;       /* bytes this process fetched into the cache for its pset */
    uint64_t lib_copied;        /* private file mappings copied into big memory instead */
    char     lib_dir[48];       /* the cache directory, "" if none */
    char     lib_off[32];       /* why there is no cache (one word), "" if there is */
    /* the thread limit (compute/cnk/thread.c): threads the process may run, clones refused at it */
    uint32_t thread_limit;
    uint32_t threads_refused;
};
_Static_assert(sizeof(struct cnk_report) <= 4096, "cnk_report fits a page");

#endif
