/*
 * mapping_probe: what a rank of a mapping test reports (tests/e2e/
 * test_t0620_mapping.py): its LATTICE_RANK, its node's torus coordinates,
 * its core t, the job's mode and its memory from the personality, and its first argument
 * (which program of an MPMD job it is).  One line:
 *
 *   rank=5 coords=1,0,1 t=0 mode=co app=A memory=268435456 async=1
 *
 * (async: MPIR_CVAR_ASYNC_PROGRESS, which coprocessor mode sets, or "-")
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lattice/personality.h>

int main(int argc, char **argv)
{
    struct lattice_personality p;
    const char *rank = getenv("LATTICE_RANK"), *async = getenv("MPIR_CVAR_ASYNC_PROGRESS");
    if (lattice_personality(&p) != 0) {
        fprintf(stderr, "mapping_probe: rank %s: lattice_personality: %s\n", rank ? rank : "?", strerror(errno));
        return 1;
    }
    printf("rank=%s coords=%u,%u,%u t=%u mode=%s app=%s memory=%llu async=%s\n", rank ? rank : "?", p.x, p.y,
           p.z, p.t, p.mode, argc > 1 ? argv[1] : "-", (unsigned long long)p.memory, async ? async : "-");
    return fflush(stdout) == 0 ? 0 : 1;
}
