/*
 * outpattern MODE BYTES - a known stream of output for the output tests
 * (test_t1090_output.py), the same run natively and in a job for the same
 * rank (LATTICE_RANK), written in chunks of uneven sizes.
 *
 *   bin     BYTES pseudo-random bytes of every value (newlines among them)
 *   flat    the same with each newline made a space: one line, no end
 *   lines   100-byte lines "RANK LINENO aaaa...\n", BYTES rounded down
 *   stream  flat, a newline, then standard input copied to the end, "end\n"
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void write_all(const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(1, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            perror("outpattern: write");
            exit(1);
        }
        p += w;
        n -= (size_t)w;
    }
}

/* uneven chunks: a byte, a page less three, a pipe and more, a MiB, ... */
static void write_chunked(const char *p, size_t n)
{
    static const size_t sizes[] = { 1, 4093, 65543, 1u << 20, 100, 30000 };
    for (unsigned i = 0; n > 0; i++) {
        size_t k = sizes[i % (sizeof sizes / sizeof sizes[0])];
        if (k > n)
            k = n;
        write_all(p, k);
        p += k;
        n -= k;
    }
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: outpattern bin|flat|lines|stream BYTES\n");
        return 2;
    }
    const char *mode = argv[1], *r = getenv("LATTICE_RANK");
    size_t n = strtoull(argv[2], NULL, 10);
    int rank = r ? atoi(r) : 0;
    char *buf = malloc(n + 1);
    if (!buf)
        return 1;
    if (!strcmp(mode, "lines")) {
        size_t lines = n / 100;
        for (size_t i = 0; i < lines; i++) {
            char *l = buf + 100 * i;
            int h = snprintf(l, 100, "%d %08zu ", rank, i);
            memset(l + h, 'a' + (int)(i % 26), 99 - (size_t)h);
            l[99] = '\n';
        }
        n = 100 * lines;
    } else {
        uint64_t s = 0x9E3779B97F4A7C15ull * (uint64_t)(rank + 1);
        for (size_t i = 0; i < n; i++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            buf[i] = (char)(s >> 56);
            if (strcmp(mode, "bin") && buf[i] == '\n')
                buf[i] = ' ';
        }
    }
    write_chunked(buf, n);
    if (!strcmp(mode, "stream")) {
        write_all("\n", 1);
        ssize_t got;
        while ((got = read(0, buf, n + 1)) > 0)
            write_all(buf, (size_t)got);
        write_all("end\n", 4);
    }
    return 0;
}
