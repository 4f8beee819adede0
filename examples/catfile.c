/* catfile PATH: copy a file to stdout; exit 1 with the reason if it can't. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: catfile PATH\n");
        return 64;
    }
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) {
        printf("catfile: %s: %s\n", argv[1], strerror(errno));
        return 1;
    }
    char buf[65536];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0)
        if (write(1, buf, (size_t)n) != n)
            return 1;
    close(fd);
    return n < 0;
}
