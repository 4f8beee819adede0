/*
 * cnfs_node_harness.c - drives compute/cnfs/node.c (lattice-fs's inode
 * table) for tests/unit/test_cnfs_node.py.  One command a line on stdin,
 * one answer a line on stdout; nodes are named by the number of the ref
 * that made them (0, 1, ...), the root by "root".
 *   ref PATH DEV INO      -> N: the node's number (an earlier one for a known file)
 *   path N                -> its path, or -ERRNO
 *   child N NAME          -> the child's path, or -ERRNO
 *   forget N COUNT        -> ok
 *   unlink PATH           -> ok
 *   rename FROM TO        -> ok
 *   count                 -> nodes in the table
 *   open N SIZE MTIME CTIME  -> "keep S" or "drop S" (node_cache_open; S 1: attributes stale)
 *   told N SIZE           -> ok (node_told)
 *   wrote N / dropped N   -> ok (node_cache_wrote, node_cache_drop)
 *   stamp N SIZE MTIME CTIME -> ok (node_cache_stamp)
 *   (times in nanoseconds)
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cnfs.h"

static fuse_ino_t ids[100000];
static int nids;

static fuse_ino_t id_of(const char *s)
{
    return strcmp(s, "root") ? ids[atoi(s)] : FUSE_ROOT_ID;
}

int main(void)
{
    char line[9000], a[4200], b[4200];
    unsigned long long dev, ino, n;
    node_init();
    while (fgets(line, sizeof line, stdin)) {
        char buf[PATH_MAX];
        if (sscanf(line, "ref %4199s %llu %llu", a, &dev, &ino) == 3) {
            fuse_ino_t id = node_ref(a, dev, ino);
            int k = 0;
            while (k < nids && ids[k] != id)
                k++;
            if (k == nids)
                ids[nids++] = id;
            printf("%d\n", k);
        } else if (sscanf(line, "path %4199s", a) == 1) {
            int r = node_path(id_of(a), buf);
            r < 0 ? printf("%d\n", r) : printf("%s\n", buf);
        } else if (sscanf(line, "child %4199s %4199s", a, b) == 2) {
            int r = node_child(id_of(a), b, buf);
            r < 0 ? printf("%d\n", r) : printf("%s\n", buf);
        } else if (sscanf(line, "forget %4199s %llu", a, &n) == 2) {
            node_forget(id_of(a), n);
            printf("ok\n");
        } else if (sscanf(line, "unlink %4199s", a) == 1) {
            node_unlinked(a);
            printf("ok\n");
        } else if (sscanf(line, "rename %4199s %4199s", a, b) == 2) {
            node_rename(a, b);
            printf("ok\n");
        } else if (sscanf(line, "open %4199s %llu %llu %llu", a, &dev, &ino, &n) == 4 ||
                   sscanf(line, "stamp %4199s %llu %llu %llu", a, &dev, &ino, &n) == 4) {
            struct stat st = { .st_size = (off_t)dev };
            st.st_mtim = (struct timespec){ (time_t)(ino / 1000000000u), (long)(ino % 1000000000u) };
            st.st_ctim = (struct timespec){ (time_t)(n / 1000000000u), (long)(n % 1000000000u) };
            int changed;
            if (line[0] == 'o') {
                int keep = node_cache_open(id_of(a), &st, &changed);
                printf("%s %d\n", keep ? "keep" : "drop", changed);
            } else {
                node_cache_stamp(id_of(a), &st);
                printf("ok\n");
            }
        } else if (sscanf(line, "told %4199s %llu", a, &n) == 2) {
            node_told(id_of(a), (off_t)n);
            printf("ok\n");
        } else if (sscanf(line, "wrote %4199s", a) == 1) {
            node_cache_wrote(id_of(a));
            printf("ok\n");
        } else if (sscanf(line, "dropped %4199s", a) == 1) {
            node_cache_drop(id_of(a));
            printf("ok\n");
        } else if (!strncmp(line, "count", 5)) {
            printf("%zu\n", node_count());
        } else {
            printf("?\n");
        }
        fflush(stdout);
    }
    return 0;
}
