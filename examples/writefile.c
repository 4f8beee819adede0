/* writefile PATH TEXT: create PATH (mode 0644) holding TEXT. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: writefile PATH TEXT\n");
        return 64;
    }
    int fd = open(argv[1], O_CREAT | O_TRUNC | O_WRONLY, 0644);
    if (fd < 0 || write(fd, argv[2], strlen(argv[2])) < 0 || close(fd) < 0) {
        printf("writefile: %s: %s\n", argv[1], strerror(errno));
        return 1;
    }
    return 0;
}
