/* hello: every rank says where it runs.  The smallest job there is. */
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    const char *rank = getenv("LATTICE_RANK");
    const char *size = getenv("LATTICE_SIZE");
    const char *node = getenv("LATTICE_NODE");
    printf("hello from rank %s of %s on %s\n", rank ? rank : "?", size ? size : "?",
           node ? node : "?");
    return 0;
}
