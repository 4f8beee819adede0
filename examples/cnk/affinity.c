/* Prints the CPUs this process may run on (sched_getaffinity), as
 * "affinity: rank R cpus A,B,...": under cnk these are the first --cores of
 * the real CPUs cnode bound the process to (docs/architecture.md, "Nodes on
 * cores"). */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    cpu_set_t set;
    const char *rank = getenv("LATTICE_RANK");

    if (sched_getaffinity(0, sizeof set, &set) != 0) {
        perror("sched_getaffinity");
        return 1;
    }
    printf("affinity: rank %s cpus", rank ? rank : "?");
    for (int i = 0, first = 1; i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &set)) {
            printf("%s%d", first ? " " : ",", i);
            first = 0;
        }
    printf("\n");
    return 0;
}
