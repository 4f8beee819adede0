/* exit_code R V: rank R exits with code V (or, if V is negative, is killed
 * by signal -V); every other rank exits 0.  Used to test job exit status. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: exit_code RANK VALUE\n");
        return 64;
    }
    int rank = atoi(getenv("LATTICE_RANK") ? getenv("LATTICE_RANK") : "0");
    int who = atoi(argv[1]), value = atoi(argv[2]);
    if (rank != who)
        return 0;
    printf("rank %d: ending with %d\n", rank, value);
    fflush(stdout);
    if (value < 0)
        raise(-value);
    return value;
}
