/*
 * exitrace_probe LINES FAILRANK exit|kill - the race between a rank's last
 * output and its exit (test_t1090_output.py): every rank writes LINES lines
 * "RANK I\n", each its own write(2) on stdout (every 100th also on stderr),
 * and ends at once, without a flush: _exit(0), but rank FAILRANK _exit(3)
 * ("exit") or kills itself with SIGKILL ("kill").
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void put(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w <= 0)
            _exit(100);                 /* a lost write: the test sees the code */
        p += w;
        n -= (size_t)w;
    }
}

int main(int argc, char **argv)
{
    if (argc != 4 || (strcmp(argv[3], "exit") && strcmp(argv[3], "kill"))) {
        fprintf(stderr, "usage: exitrace_probe LINES FAILRANK exit|kill\n");
        return 2;
    }
    const char *r = getenv("LATTICE_RANK");
    int rank = r ? atoi(r) : 0, fail = atoi(argv[2]);
    long lines = atol(argv[1]);
    char line[64];

    for (long i = 0; i < lines; i++) {
        int n = snprintf(line, sizeof(line), "%d %ld\n", rank, i);
        put(1, line, (size_t)n);
        if (i % 100 == 99)
            put(2, line, (size_t)n);
    }
    if (rank == fail && !strcmp(argv[3], "kill"))
        kill(getpid(), SIGKILL);
    _exit(rank == fail ? 3 : 0);
}
