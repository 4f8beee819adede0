/* pmi_probe: a rank that speaks PMI-1 raw on its PMI_FD (test_t0770_pmi_sealed.py).
 *   pmi_probe hold FIFO     init, finalize, then wait until FIFO is opened and
 *                           closed by the test (which meanwhile copies this
 *                           process's PMI_FD, as a process left behind keeps it)
 *   pmi_probe victim FIFO [nofence]   init, put card=victim-R, wait as hold
 *                           does, then barrier (not with nofence: a rank of
 *                           the pset has left), get card and get leftover, finalize:
 *                           "rank R card VALUE leftover VALUE", and
 *                           "unexpected REPLY" for any answer it did not ask for
 *   pmi_probe flood N SIZE FIFO   init, N puts of SIZE-character values: "puts
 *                           N ok K first-error REPLY"; then waits as hold does
 *                           and finalizes
 * Each answer is read as one line; any failure prints a line and exits 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int fd = -1, rank = -1;
static char kvs[256];

static void die(const char *what)
{
    printf("rank %d: %s: %s\n", rank, what, errno ? strerror(errno) : "unexpected end");
    exit(1);
}

static void say(const char *line)
{
    size_t n = strlen(line);

    for (size_t w = 0; w < n;) {
        ssize_t k = write(fd, line + w, n - w);
        if (k <= 0)
            die("write to PMI_FD");
        w += (size_t)k;
    }
}

/* One answer line (without its newline) into buf. */
static void hear(char *buf, size_t cap)
{
    size_t n = 0;

    errno = 0;
    for (;;) {
        char c;
        ssize_t k = read(fd, &c, 1);
        if (k <= 0)
            die("read from PMI_FD");
        if (c == '\n')
            break;
        if (n + 1 < cap)
            buf[n++] = c;
    }
    buf[n] = '\0';
}

/* An answer that must start with cmd=want. */
static void expect(const char *want, char *buf, size_t cap)
{
    char prefix[64];

    hear(buf, cap);
    snprintf(prefix, sizeof(prefix), "cmd=%s ", want);
    if (strncmp(buf, prefix, strlen(prefix)))
        printf("unexpected %s\n", buf);
}

static void start(void)
{
    char buf[4096];
    const char *f = getenv("PMI_FD"), *r = getenv("PMI_RANK");

    if (!f || !r) {
        printf("no PMI_FD or PMI_RANK\n");
        exit(1);
    }
    fd = atoi(f);
    rank = atoi(r);
    say("cmd=init pmi_version=1 pmi_subversion=1\n");
    expect("response_to_init", buf, sizeof(buf));
    say("cmd=get_my_kvsname\n");
    expect("my_kvsname", buf, sizeof(buf));
    const char *k = strstr(buf, "kvsname=");
    snprintf(kvs, sizeof(kvs), "%s", k ? k + 8 : "");
}

/* Until the test opens the FIFO and closes it again: an event, not a delay. */
static void wait_fifo(const char *path)
{
    char c;
    int f = open(path, O_RDONLY);

    if (f < 0)
        die(path);
    while (read(f, &c, 1) > 0)
        ;
    close(f);
}

static void finalize(void)
{
    char buf[4096];

    say("cmd=finalize\n");
    expect("finalize_ack", buf, sizeof(buf));
}

static const char *value_of(const char *line)
{
    const char *v = strstr(line, "value=");

    return v ? v + 6 : strstr(line, "msg=") ? strstr(line, "msg=") + 4 : line;
}

int main(int argc, char **argv)
{
    char line[8192], buf[4096], card[4096], left[4096];

    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && !strcmp(argv[1], "hold")) {
        start();
        finalize();
        wait_fifo(argv[2]);
        return 0;
    }
    if ((argc == 3 || argc == 4) && !strcmp(argv[1], "victim")) {
        start();
        snprintf(line, sizeof(line), "cmd=put kvsname=%s key=card value=victim-%d\n", kvs, rank);
        say(line);
        expect("put_result", buf, sizeof(buf));
        wait_fifo(argv[2]);
        if (argc == 3) {
            say("cmd=barrier_in\n");
            expect("barrier_out", buf, sizeof(buf));
        }
        snprintf(line, sizeof(line), "cmd=get kvsname=%s key=card\n", kvs);
        say(line);
        expect("get_result", card, sizeof(card));
        snprintf(line, sizeof(line), "cmd=get kvsname=%s key=leftover\n", kvs);
        say(line);
        expect("get_result", left, sizeof(left));
        finalize();
        printf("rank %d card %s leftover %s\n", rank, value_of(card), value_of(left));
        return 0;
    }
    if (argc == 5 && !strcmp(argv[1], "flood")) {
        long n = atol(argv[2]), size = atol(argv[3]), ok = 0;
        char first[4096] = "none", *value = malloc((size_t)size + 1);
        if (!value || size < 1 || size > 1024)
            return 1;
        memset(value, 'v', (size_t)size);
        value[size] = '\0';
        start();
        for (long i = 0; i < n; i++) {
            snprintf(line, sizeof(line), "cmd=put kvsname=%s key=k%ld value=%s\n", kvs, i, value);
            say(line);
            expect("put_result", buf, sizeof(buf));
            if (!strncmp(buf, "cmd=put_result rc=0", 19))
                ok++;
            else if (!strcmp(first, "none"))
                snprintf(first, sizeof(first), "%s", buf);
        }
        printf("puts %ld ok %ld first-error %s\n", n, ok, first);
        wait_fifo(argv[4]);
        finalize();
        return 0;
    }
    fprintf(stderr, "usage: pmi_probe hold FIFO | victim FIFO | flood N SIZE FIFO\n");
    return 2;
}
