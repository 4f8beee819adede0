/*
 * conformance_fault DIR N: bad-pointer check N of the conformance test
 * (tests/e2e/test_t0800_conformance.py), in the scratch directory DIR that
 * examples/conformance.c has run in. Linux answers EFAULT; a client that
 * reads or writes the bad pointer itself dies of it instead, so each check
 * runs in a process of its own. It prints one line in conformance.h's
 * format; N past the last check prints "# no check N" and exits 1.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "conformance.h"

/* volatile: the compiler must not see the value and warn about it */
static void *volatile never_mapped = (void *)8;

int main(int argc, char **argv)
{
    if (argc != 3 || chdir(argv[1]) != 0) {
        fprintf(stderr, "usage: conformance_fault DIR N\n");
        return 64;
    }
    void *bad = never_mapped;
    char buf[8];
    int fd = open("fault.dat", O_CREAT | O_RDWR | O_TRUNC, 0644), s[2];
    if (fd < 0 || write(fd, "content", 7) != 7 || lseek(fd, 0, SEEK_SET) != 0) {
        printf("conformance_fault: fault.dat: %s\n", strerror(errno));
        return 1;
    }
    switch (atoi(argv[2])) {
    case 0: SAY(write(fd, bad, 5), "write(file, bad buffer)"); break;
    case 1: SAY(read(fd, bad, 5), "read(file, bad buffer)"); break;
    case 2: SAY(pread(fd, bad, 5, 0), "pread(file, bad buffer)"); break;
    case 3: SAY(writev(fd, bad, 1), "writev(file, bad iovec array)"); break;
    case 4: SAY(fstat(fd, bad), "fstat(file, bad stat buffer)"); break;
    case 5: SAY(stat("fault.dat", bad), "stat(fault.dat, bad stat buffer)"); break;
    case 6: SAY(stat(bad, (struct stat *)buf), "stat(bad path)"); break;
    case 7: SAY(open(bad, O_RDONLY), "open(bad path)"); break;
    case 8: SAY(readlink("pre/link", bad, 10), "readlink(pre/link, bad buffer)"); break;
    case 9: SAY(getcwd(bad, 100) ? 0 : -1, "getcwd(bad buffer)"); break;
    case 10: SAY(getdents64(open(".", O_RDONLY | O_DIRECTORY), bad, 4096), "getdents64(dir, bad buffer)"); break;
    case 11: SAY(utimensat(AT_FDCWD, "fault.dat", bad, 0), "utimensat(fault.dat, bad times)"); break;
    case 12: SAY(pipe(bad), "pipe(bad array)"); break;
    case 13:
        SAY(socketpair(AF_UNIX, SOCK_STREAM, 0, s) == 0 ? send(s[0], bad, 4, 0) : -1, "send(socket pair, bad buffer)");
        break;
    case 14:
        SAY(connect(socket(AF_INET, SOCK_STREAM, 0), bad, 16), "connect(TCP socket, bad address)");
        break;
    default:
        printf("# no check %s\n", argv[2]);
        return 1;
    }
    return 0;
}
