/*
 * startfds.c - the descriptors a Linux-mode process starts with, made to
 * look as they would natively (plan D10, issue 14):
 *
 * - the client's own (the PROC connection, the seq page) move to 1000 and
 *   above, past the soft RLIMIT_NOFILE where there is room (the core's
 *   shipc_own_floor), as cnk's do, so the program's first descriptor is 3,
 *   its numbers are the native ones, and EMFILE comes where it would; the variables that name them follow, so a
 *   program this one execs finds them;
 * - cnode's memfd of the executable (fexecve, AT_EXECFN /dev/fd/N) is
 *   closed once it is this process's own image (a #! script's interpreter
 *   still reads it, so then it stays);
 * - 0, 1, 2 stand for the rank's remote ones only while they are still the
 *   ones cnode gave the rank (recorded in the page the rank's processes
 *   share): a child that popen() or a shell gave a pipe or file there
 *   keeps it local.  A program that opens /dev/null on 0 itself is taken
 *   for cnode's, the one case this cannot tell apart.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "client.h"

int lat_move_own(int fd, const char *var)
{
    if (fd < 0 || fd >= shipc_own_floor())
        return fd;
    /* not close-on-exec: a program this one execs uses it too */
    long moved = shipc_own_dup(fd, 0);
    if (moved < 0)
        return fd;      /* no room: it stays */
    char num[24];
    snprintf(num, sizeof num, "%ld", moved);
    if (lat_setenv(var, num) != 0) {
        syscall(SYS_close, moved);
        return fd;
    }
    syscall(SYS_close, fd);
    return (int)moved;
}

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

void lat_close_image(void)
{
    const char *fn = (const char *)getauxval(AT_EXECFN);
    char *end;
    struct stat img, exe;
    if (!fn || strncmp(fn, "/dev/fd/", 8) != 0)
        return;
    long fd = strtol(fn + 8, &end, 10);
    if (end == fn + 8 || *end || fd < 3 || fd >= shipc_own_floor())
        return;
    if (syscall(SYS_fstat, (int)fd, &img) == 0 &&
        syscall(SYS_newfstatat, AT_FDCWD, "/proc/self/exe", &exe, 0) == 0 && same_file(&img, &exe))
        syscall(SYS_close, (int)fd);
}

/* cnode's 0, 1, 2 are recorded by the rank's first program, in the page
 * the rank's processes share (without one, in LATTICE_IO_STDIO, which names
 * the process cnode started, so that one left in an environment passed on
 * from another job is not believed); later programs keep shipping only
 * those of 0, 1, 2 that are still cnode's. */
int lat_stdio_identify(struct lat_page *page)
{
    struct stat st[3];
    unsigned long long dev, ino;
    for (int fd = 0; fd < 3; fd++)
        if (syscall(SYS_fstat, fd, &st[fd]) != 0)
            st[fd].st_dev = st[fd].st_ino = (unsigned long)-1;
    if (page) {
        if (!__atomic_load_n(&page->stdio_set, __ATOMIC_ACQUIRE)) {
            for (int fd = 0; fd < 3; fd++) {
                page->stdio[fd][0] = st[fd].st_dev;
                page->stdio[fd][1] = st[fd].st_ino;
            }
            __atomic_store_n(&page->stdio_set, 1, __ATOMIC_RELEASE);
            return 1;
        }
        for (int fd = 0; fd < 3; fd++)
            if (page->stdio[fd][0] != st[fd].st_dev || page->stdio[fd][1] != st[fd].st_ino)
                shipc_fd_forget(fd, 0);     /* the program's own: local */
        return 0;
    }
    const char *hello = lat_getenv("LATTICE_IO_PID");
    char rec[32 + 3 * 48], *p;
    snprintf(rec, sizeof rec, "%s;", hello ? hello : "");
    const char *was = lat_getenv("LATTICE_IO_STDIO");
    if (!was || strncmp(was, rec, strlen(rec)) != 0) {     /* the rank's first program: these are cnode's */
        for (int fd = 0; fd < 3; fd++)
            snprintf(rec + strlen(rec), sizeof rec - strlen(rec), "%s%llu:%llu", fd ? "," : "",
                     (unsigned long long)st[fd].st_dev, (unsigned long long)st[fd].st_ino);
        lat_setenv("LATTICE_IO_STDIO", rec);
        return 1;
    }
    p = (char *)was + strlen(rec);
    for (int fd = 0; fd < 3; fd++) {
        if (sscanf(p, "%llu:%llu", &dev, &ino) != 2 || st[fd].st_dev != dev || st[fd].st_ino != ino)
            shipc_fd_forget(fd, 0);         /* the program's own: local */
        p = strchr(p, ',');
        if (!p)
            p = "";
        else
            p++;
    }
    return 0;
}
