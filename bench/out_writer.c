/*
 * out_writer - the ranks of bench/output.py: writes or reads a job's
 * standard streams as fast as it can.
 *
 *   out_writer bin BYTES    BYTES of binary data in writes of 1 MiB
 *   out_writer lines BYTES  100-byte lines in writes of 4000 bytes (40 lines, about
 *                           what stdio's 4 KiB buffer gives a pipe)
 *   out_writer sink         reads descriptor 0 to its end in reads of 1 MiB; prints bytes=N
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BIG (1u << 20)

static char buf[BIG];

static void write_all(const char *p, size_t n)
{
    while (n > 0) {
        ssize_t w = write(1, p, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            perror("out_writer: write");
            exit(1);
        }
        p += w;
        n -= (size_t)w;
    }
}

int main(int argc, char **argv)
{
    if (argc == 2 && !strcmp(argv[1], "sink")) {
        unsigned long long total = 0;
        ssize_t n;
        while ((n = read(0, buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR))
            total += n > 0 ? (unsigned long long)n : 0;
        printf("bytes=%llu\n", total);
        return n < 0;
    }
    if (argc != 3 || (strcmp(argv[1], "bin") && strcmp(argv[1], "lines"))) {
        fprintf(stderr, "usage: out_writer bin|lines BYTES | out_writer sink\n");
        return 2;
    }
    unsigned long long left = strtoull(argv[2], NULL, 10);
    size_t chunk = BIG;
    if (!strcmp(argv[1], "lines")) {
        chunk = 4000;
        for (size_t i = 0; i < sizeof buf; i++)
            buf[i] = i % 100 == 99 ? '\n' : (char)('a' + i % 26);
    } else {
        for (size_t i = 0; i < sizeof buf; i++)
            buf[i] = (char)(i * 131u);
    }
    while (left > 0) {
        size_t k = left < chunk ? (size_t)left : chunk;
        write_all(buf, k);
        left -= k;
    }
    return 0;
}
