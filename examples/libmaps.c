/*
 * libmaps - where this dynamic program's libraries are mapped from
 * (libmaps.h), after loading each shared object named on the command line
 * and printing its version():
 *
 *   libmaps [LIB.so | =SRC:DST]...
 *
 * LIB.so: dlopen, "version: LIB V", dlclose.  =SRC:DST: overwrite DST in
 * place with SRC's bytes (same inode, new contents and mtime), so a later
 * LIB.so naming DST shows whether the new version was mapped.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include "libmaps.h"

static int overwrite(const char *src, const char *dst)
{
    char buf[65536];
    int in = open(src, O_RDONLY), out = open(dst, O_WRONLY | O_TRUNC);
    ssize_t n = 0;
    while (in >= 0 && out >= 0 && (n = read(in, buf, sizeof buf)) > 0)
        if (write(out, buf, (size_t)n) != n)
            n = -1;
    if (in < 0 || out < 0 || n < 0) {
        perror(dst);
        return -1;
    }
    close(in);
    return close(out);
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        if (argv[i][0] == '=') {
            char *dst = strchr(argv[i], ':');
            if (!dst)
                return 2;
            *dst++ = '\0';
            if (overwrite(argv[i] + 1, dst) < 0)
                return 1;
            continue;
        }
        void *h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
        const char *(*version)(void) = h ? (const char *(*)(void))dlsym(h, "version") : NULL;
        if (!version) {
            fprintf(stderr, "libmaps: %s: %s\n", argv[i], dlerror());
            return 1;
        }
        printf("version: %s %s\n", argv[i], version());
        dlclose(h);
    }
    report_maps();
    return 0;
}
