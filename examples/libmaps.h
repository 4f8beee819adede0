/*
 * libmaps.h - where each shared object of this process is mapped from:
 * one line "libmaps: NAME SIZE FROM" per loaded object (NAME its path as
 * the loader knows it, SIZE its file's size, FROM the file /proc/self/maps
 * names for its first segment, "-" for anonymous memory).  Under cnk with
 * the library cache, FROM is a file of /dev/shm/lattice-libcache-PID-UID; with
 * the copy into big memory it is "-".  Used by examples/libmaps.c and
 * examples/mpi/libmaps.c (tests/e2e/test_t0550_libcache.py).  Last, for the
 * cache directory of the first object mapped from one:
 * "libmaps: dir PATH MODE UID GID" (mode in octal).
 */
#include <elf.h>
#include <link.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* the file /proc/self/maps names for addr, or "-" */
static void mapped_from(uintptr_t addr, char *out, size_t len)
{
    char line[4096];
    FILE *f = fopen("/proc/self/maps", "r");
    snprintf(out, len, "?");
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        int at = 0;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi, &at) < 2 || addr < lo || addr >= hi)
            continue;
        char *path = line + at;
        path[strcspn(path, "\n")] = '\0';
        snprintf(out, len, "%s", *path ? path : "-");
        break;
    }
    if (f)
        fclose(f);
}

static int report_one(struct dl_phdr_info *info, size_t size, void *arg)
{
    char *cache_dir = arg;
    (void)size;
    if (!info->dlpi_name || !*info->dlpi_name || strstr(info->dlpi_name, "linux-vdso"))
        return 0;       /* the executable (cnk loads it into big memory) and the vDSO */
    for (int i = 0; i < info->dlpi_phnum; i++) {
        if (info->dlpi_phdr[i].p_type != PT_LOAD)
            continue;
        char from[4096];
        struct stat st;
        mapped_from(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr, from, sizeof from);
        printf("libmaps: %s %lld %s\n", info->dlpi_name,
               stat(info->dlpi_name, &st) == 0 ? (long long)st.st_size : -1LL, from);
        char *slash = strrchr(from, '/');
        if (!cache_dir[0] && !strncmp(from, "/dev/shm/lattice-libcache-", 26) && slash)
            snprintf(cache_dir, 4096, "%.*s", (int)(slash - from), from);
        break;
    }
    return 0;
}

static void report_maps(void)
{
    char cache_dir[4096] = "";
    struct stat st;
    dl_iterate_phdr(report_one, cache_dir);
    if (cache_dir[0] && stat(cache_dir, &st) == 0)
        printf("libmaps: dir %s %o %u %u\n", cache_dir, (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid,
               (unsigned)st.st_gid);
    fflush(stdout);
}
