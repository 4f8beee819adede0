/*
 * bigbss: a program whose static array (bss) is BIGBSS_MIB mebibytes, more
 * than a small node has: a compute node kernel must refuse to load it.
 * Where it does load, it touches every page and prints
 *   bigbss: touched N MiB
 */
#include <stdio.h>

#ifndef BIGBSS_MIB
#define BIGBSS_MIB 1536
#endif

static char big[(size_t)BIGBSS_MIB << 20];

int main(void)
{
    for (size_t i = 0; i < sizeof big; i += 4096)
        big[i] = 1;
    size_t n = 0;
    for (size_t i = 0; i < sizeof big; i += 4096)
        n += big[i];
    printf("bigbss: touched %zu MiB\n", n * 4096 >> 20);
    return 0;
}
