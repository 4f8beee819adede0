/* stdio_probe: what a rank sees of its standard streams (test_t0310_srun.py).
 *   stdio_probe streams   "out R" on stdout, "err R" on stderr
 *   stdio_probe sum       reads descriptor 0 to its end: "rank R read N bytes fnv HEX"
 *   stdio_probe poll MS   poll(0, MS) once and print "rank R poll N", then
 *                         poll without limit, print again, and read as sum does
 */
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank(void)
{
    const char *r = getenv("LATTICE_RANK");
    return r ? atoi(r) : -1;
}

static int sum(void)
{
    static char buf[1 << 17];
    uint64_t h = 1469598103934665603ull, n = 0;
    ssize_t got;

    while ((got = read(0, buf, sizeof(buf))) > 0) {
        for (ssize_t i = 0; i < got; i++)
            h = (h ^ (unsigned char)buf[i]) * 1099511628211ull;
        n += (uint64_t)got;
    }
    if (got < 0) {
        perror("read");
        return 1;
    }
    printf("rank %d read %llu bytes fnv %016llx\n", rank(), (unsigned long long)n, (unsigned long long)h);
    return 0;
}

static void poll_once(int ms)
{
    struct pollfd pf = { 0, POLLIN, 0 };
    int n = poll(&pf, 1, ms);

    printf("rank %d poll %d\n", rank(), n);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "streams")) {
        printf("out %d\n", rank());
        fprintf(stderr, "err %d\n", rank());
        return 0;
    }
    if (argc >= 2 && !strcmp(argv[1], "sum"))
        return sum();
    if (argc >= 3 && !strcmp(argv[1], "poll")) {
        poll_once(atoi(argv[2]));
        poll_once(-1);
        return sum();
    }
    fprintf(stderr, "usage: stdio_probe streams | sum | poll MS\n");
    return 2;
}
