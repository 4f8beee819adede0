/*
 * exitrace_probe LINES FAILRANK exit|kill|FIFO [WIDTH] - the race between a rank's
 * last output and its exit (test_t1090_output.py): every rank writes LINES
 * lines "RANK I\n", each its own write(2) on stdout (every 100th also on
 * stderr), and ends at once, without a flush: _exit(0), but rank FAILRANK
 * _exit(3) ("exit"), kills itself with SIGKILL ("kill"), or (a path) opens
 * that FIFO for reading, which blocks until the job is killed.  WIDTH pads
 * each line to that many bytes (at most 65536) with dots before its newline.
 */
#include <fcntl.h>
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
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: exitrace_probe LINES FAILRANK exit|kill|FIFO [WIDTH]\n");
        return 2;
    }
    const char *r = getenv("LATTICE_RANK");
    int rank = r ? atoi(r) : 0, fail = atoi(argv[2]);
    long lines = atol(argv[1]), width = argc == 5 ? atol(argv[4]) : 0;
    static char line[65536];

    if (width < 0 || width > (long)sizeof(line))
        return 2;
    for (long i = 0; i < lines; i++) {
        int n = snprintf(line, 64, "%d %ld", rank, i);
        if (width > n + 1) {
            memset(line + n, '.', (size_t)(width - n - 1));
            n = (int)width - 1;
        }
        line[n++] = '\n';
        put(1, line, (size_t)n);
        if (i % 100 == 99)
            put(2, line, (size_t)n);
    }
    if (rank == fail && !strcmp(argv[3], "kill"))
        kill(getpid(), SIGKILL);
    if (rank == fail && strcmp(argv[3], "exit") && open(argv[3], O_RDONLY) >= 0)
        _exit(4);                       /* a writer came: not what the test does */
    _exit(rank == fail ? 3 : 0);
}
