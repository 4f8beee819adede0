/* sleeper SECONDS: print a line, then sleep; lets tests kill a running job. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int seconds = argc > 1 ? atoi(argv[1]) : 60;
    printf("rank %s: sleeping\n", getenv("LATTICE_RANK") ? getenv("LATTICE_RANK") : "?");
    fflush(stdout);
    sleep((unsigned)seconds);
    return 0;
}
