/* raw_syscall.c - a file written with raw syscall(2)s: openat, write,
 * close, no libc wrapper that a preload library could interpose. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    static const char text[] = "raw ok\n";
    if (argc != 2) {
        fprintf(stderr, "usage: raw_syscall FILE\n");
        return 2;
    }
    long fd = syscall(SYS_openat, AT_FDCWD, argv[1], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        perror("openat");
        return 1;
    }
    if (syscall(SYS_write, fd, text, strlen(text)) != (long)strlen(text)) {
        perror("write");
        return 1;
    }
    if (syscall(SYS_close, fd) != 0) {
        perror("close");
        return 1;
    }
    puts("wrote");
    return 0;
}
