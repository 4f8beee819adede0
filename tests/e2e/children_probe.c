/*
 * children_probe: a preloaded program's children on its one PROC
 * connection, for tests/e2e/test_t0850_preload_children.py.  In the
 * job's working directory: a fork()ed child and its parent append N
 * records each to one shipped file at the same time; the child also
 * writes a file of its own with stdio and leaves by exit(); then the
 * parent writes again, popen()s a command (reading its output) and
 * system()s another.  Prints what it saw; exits 0 when all went well.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void die(const char *what)
{
    fprintf(stderr, "children_probe: %s: %s\n", what, strerror(errno));
    exit(1);
}

int main(int argc, char **argv)
{
    int n = argc > 1 ? atoi(argv[1]) : 200;
    int fd = open("shared.dat", O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0644);
    if (fd < 0)
        die("open");
    pid_t c = fork();
    if (c < 0)
        die("fork");
    for (int i = 0; i < n; i++) {
        char rec[16];
        snprintf(rec, sizeof rec, "%c%06d\n", c == 0 ? 'C' : 'P', i);
        if (write(fd, rec, 8) != 8)
            die(c == 0 ? "the child's write" : "the parent's write");
    }
    if (c == 0) {
        FILE *f = fopen("child.dat", "w");
        if (!f || fprintf(f, "child done\n") < 0 || fclose(f) != 0)
            die("the child's own file");
        exit(0);
    }
    int st;
    if (waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        die("the child failed");
    if (write(fd, "P-after\n", 8) != 8)
        die("the parent's write after its child ended");
    close(fd);
    FILE *p = popen("echo popen-says; wc -l < shared.dat", "r");
    if (!p)
        die("popen");
    char line[128];
    while (fgets(line, sizeof line, p))
        printf("popen: %s", line);
    printf("pclose: %d\n", pclose(p));
    fflush(stdout);
    int s = system("echo system-says; cat child.dat");
    printf("system: %d\n", s);
    return 0;
}
