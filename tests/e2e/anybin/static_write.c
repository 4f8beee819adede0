/* static_write.c - a statically linked program writing a file in its working
 * directory with stdio (no dynamic loader, so no LD_PRELOAD can reach it). */
#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: static_write FILE\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "w");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    fputs("static ok\n", f);
    if (fclose(f) != 0) {
        perror("fclose");
        return 1;
    }
    puts("wrote");
    return 0;
}
