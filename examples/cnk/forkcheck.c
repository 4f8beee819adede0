/*
 * forkcheck: a program that tries to start a child and copes when it cannot.
 *
 * Tries fork() and posix_spawn("/bin/true").  Prints one line for each:
 *   fork: ENOSYS (Function not implemented), continuing without a child
 *   fork: child exited 7                       (where fork works)
 *   spawn: ENOSYS (...), continuing without a child
 *   spawn: child exited 0
 * then does its work alone and prints "forkcheck: done".  Exits 0 when each
 * attempt either worked or failed with ENOSYS, 1 otherwise.
 */
#include <errno.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static int report(const char *what, int err, pid_t child)
{
    if (err) {
        printf("%s: %s (%s)%s\n", what, strerrorname_np(err), strerror(err),
               err == ENOSYS ? ", continuing without a child" : "");
        return err == ENOSYS ? 0 : 1;
    }
    int st;
    if (waitpid(child, &st, 0) != child) {
        printf("%s: waitpid: %s\n", what, strerror(errno));
        return 1;
    }
    printf("%s: child exited %d\n", what, WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st));
    return 0;
}

int main(void)
{
    int bad = 0;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0)
        _exit(7);
    bad |= report("fork", pid < 0 ? errno : 0, pid);

    char *argv[] = { "true", NULL };
    pid_t child = -1;
    int e = posix_spawn(&child, "/bin/true", NULL, NULL, argv, environ);
    bad |= report("spawn", e, child);

    unsigned long acc = 0;
    for (unsigned long i = 0; i < 1000000; i++)
        acc += i ^ (i >> 3);
    printf("forkcheck: done (%lu)\n", acc);
    return bad;
}
