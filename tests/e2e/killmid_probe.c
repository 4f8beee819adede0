/*
 * killmid_probe: a fork()ed child of a preloaded program is killed while
 * it ships 4 MiB writes in a loop (so nearly always inside a call), for
 * tests/e2e/test_t0850_preload_children.py.  The parent then writes 20
 * times and says (on its local stderr, which survives a dead connection)
 * what the child's first write returned, how many of its own went and how
 * many failed with EIO.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void)
{
    static char buf[4 << 20];
    int fd = open("killmid.dat", O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0)
        return 1;
    int pfd[2];
    if (pipe(pfd) < 0)
        return 1;
    pid_t c = fork();
    if (c == 0) {               /* says how its first write went, then writes on */
        long first = pwrite(fd, buf, sizeof buf, 0);
        (void)!write(pfd[1], &first, sizeof first);
        for (;;)
            pwrite(fd, buf, sizeof buf, 0);
    }
    long first = 0;
    if (read(pfd[0], &first, sizeof first) != sizeof first)
        return 1;
    usleep(20000);
    kill(c, SIGKILL);
    waitpid(c, NULL, 0);
    int ok = 0, eio = 0;
    for (int i = 0; i < 20; i++) {
        if (pwrite(fd, "x", 1, 0) == 1)
            ok++;
        else if (errno == EIO)
            eio++;
    }
    char line[96];
    int n = snprintf(line, sizeof line, "child wrote %ld; after the kill: ok %d eio %d\n", first, ok, eio);
    syscall(SYS_write, 2, line, n);     /* cnode's stderr pipe: local, never shipped */
    return 0;
}
