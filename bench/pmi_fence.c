/*
 * pmi_fence - PMI fence time, as a job sees it (bench/pmi_fence.py).
 *
 *   pmi_fence FENCES [PAUSE_MS]
 *
 * Each rank speaks PMI-1 itself over the PMI_FD its compute node gave it
 * (as MPICH's simple PMI client does), no MPI library: init, then FENCES
 * times: put one 452-byte value (the size of an MPICH ch4:ucx business card),
 * barrier_in/barrier_out (the fence), and get the next rank's value of that
 * round (checked).  Between fences it sleeps PAUSE_MS (default 0), so a test
 * can end the job while it runs.  Rank 0 prints one line per fence,
 * "fence I SECONDS", the time from its barrier_in to its barrier_out after
 * the first fence (which also waits for the slowest rank to start); then
 * "ok".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CARD 452

static int fd = -1;
static char kvs[256];

static void die(const char *what, const char *line)
{
    fprintf(stderr, "pmi_fence: %s%s%s\n", what, line ? ": " : "", line ? line : "");
    exit(1);
}

static void say(const char *line)
{
    size_t n = strlen(line), off = 0;

    while (off < n) {
        ssize_t w = write(fd, line + off, n - off);
        if (w <= 0)
            die("cannot write to PMI_FD", NULL);
        off += (size_t)w;
    }
}

/* One reply line (PMI-1 answers one line per command). */
static void hear(char *buf, size_t cap)
{
    size_t n = 0;

    while (n + 1 < cap) {
        ssize_t r = read(fd, buf + n, 1);
        if (r <= 0)
            die("PMI_FD closed", NULL);
        if (buf[n] == '\n')
            break;
        n++;
    }
    buf[n] = '\0';
}

static void ask(const char *line, const char *want, char *buf, size_t cap)
{
    say(line);
    hear(buf, cap);
    if (!strstr(buf, want))
        die("unexpected PMI reply", buf);
}

static double now(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    const char *e = getenv("PMI_FD"), *r = getenv("PMI_RANK"), *s = getenv("PMI_SIZE");
    char line[4096], card[CARD + 1], want[CARD + 1];
    int fences = argc > 1 ? atoi(argv[1]) : 10, pause_ms = argc > 2 ? atoi(argv[2]) : 0;

    if (!e || !r || !s || fences < 1 || pause_ms < 0)
        die("usage: pmi_fence FENCES [PAUSE_MS], run as a job with PMI_FD, PMI_RANK and PMI_SIZE", NULL);
    fd = atoi(e);
    setvbuf(stdout, NULL, _IOLBF, 0);   /* a line per fence, as it happens */
    int rank = atoi(r), size = atoi(s);
    ask("cmd=init pmi_version=1 pmi_subversion=1\n", "rc=0", line, sizeof(line));
    ask("cmd=get_my_kvsname\n", "rc=0", line, sizeof(line));
    char *k = strstr(line, "kvsname=");
    if (!k || sscanf(k + 8, "%255s", kvs) != 1)
        die("no kvsname", line);
    for (int i = 0; i < fences; i++) {
        /* the card: rank and round, then filler, 452 characters */
        int head = snprintf(card, sizeof(card), "r%d-i%d-", rank, i);
        memset(card + head, 'a' + rank % 26, CARD - (size_t)head);
        card[CARD] = '\0';
        snprintf(line, sizeof(line), "cmd=put kvsname=%s key=c%d-%d value=%s\n", kvs, rank, i, card);
        char reply[256];
        ask(line, "rc=0", reply, sizeof(reply));
        double t0 = now();
        ask("cmd=barrier_in\n", "barrier_out", reply, sizeof(reply));
        double dt = now() - t0;
        int next = (rank + 1) % size;
        snprintf(line, sizeof(line), "cmd=get kvsname=%s key=c%d-%d\n", kvs, next, i);
        say(line);
        hear(line, sizeof(line));
        head = snprintf(want, sizeof(want), "r%d-i%d-", next, i);
        memset(want + head, 'a' + next % 26, CARD - (size_t)head);
        want[CARD] = '\0';
        char *v = strstr(line, "value=");
        if (!v || strcmp(v + 6, want))
            die("wrong value after the fence", line);
        if (rank == 0)
            printf("fence %d %.6f\n", i, dt);
        if (pause_ms)
            usleep((useconds_t)pause_ms * 1000);
    }
    ask("cmd=finalize\n", "rc=0", line, sizeof(line));
    if (rank == 0)
        puts("ok");
    return 0;
}
