/*
 * personality: a program reads its node's personality through the C API
 * (compute/include/lattice/personality.h, build/lib/liblatpers.a) and
 * prints it with lattice_personality_print, the same text as
 * `lattice personality LOCATION`.
 */
#include <stdio.h>
#include <string.h>
#include <errno.h>

#include <lattice/personality.h>

int main(void)
{
    struct lattice_personality p;
    if (lattice_personality(&p) != 0) {
        fprintf(stderr, "personality: lattice_personality failed: %s\n", strerror(errno));
        return 1;
    }
    lattice_personality_print(stdout, &p);
    return fflush(stdout) == 0 ? 0 : 1;
}
