/*
 * lattice/personality.h - a program's view of its compute node's personality.
 *
 * Every compute process Lattice starts (under cnk or in Linux mode) finds its
 * node's personality in the environment variable LATTICE_PERSONALITY, one
 * line of `key=value` fields separated by `;`:
 *
 *   block=B;location=R00-M0-N00-C:J02;coords=1,0,0;torus=2,2,4;pset=0;
 *   pset_size=8;rank_in_pset=2;ionode=R00-M0-N00-I:J00;memory=1073741824;
 *   cores=2;mode=co;t=0
 *
 * (one line, no spaces).  lattice_personality() parses it; fields it does
 * not know are skipped, so newer nodes can add some.  Every field is
 * required except the trailing t=N (the process's core, default 0), which
 * older nodes did not send.  The mode is the job's: in coprocessor mode
 * ("co") a node runs one process (t=0); in virtual node mode ("vn") one per
 * core, t = 0..cores-1, each with the node's memory divided by its cores.  The block's security
 * key is not part of it: a job never sees the key.
 *
 * Link with -llatpers (build/lib/liblatpers.a or liblatpers.so).
 */
#ifndef LATTICE_PERSONALITY_H
#define LATTICE_PERSONALITY_H

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LATTICE_PERSONALITY_ENV "LATTICE_PERSONALITY"

struct lattice_personality {
    char     block[80];         /* the block (partition) the node belongs to */
    char     location[32];      /* the compute node, e.g. R00-M0-N00-C:J05 */
    unsigned x, y, z;           /* torus coordinates of the node */
    unsigned torus_x, torus_y, torus_z;  /* the machine's torus dimensions */
    unsigned pset;              /* pset number (= its I/O node) */
    unsigned pset_size;         /* compute nodes per pset */
    unsigned rank_in_pset;      /* this node's index inside its pset, 0..pset_size-1 */
    char     ionode[32];        /* the pset's I/O node, e.g. R00-M0-N00-I:J00 */
    uint64_t memory;            /* bytes of memory of this process: the node's in co, node's / cores in vn */
    unsigned cores;             /* cores of the node */
    char     mode[8];           /* the job's mode: "co" (coprocessor) or "vn" (virtual node) */
    unsigned t;                 /* this process's core on the node: 0 in co, 0..cores-1 in vn */
};

/*
 * Fill *p from LATTICE_PERSONALITY.  Returns 0, or -1 with errno:
 *   ENOENT  the variable is not set: the program was not started by Lattice
 *   EINVAL  it is set but malformed (a field missing, repeated, not a number,
 *           out of range or too long; t not below cores, or not 0 in co mode)
 */
int lattice_personality(struct lattice_personality *p);

/* The same from a string in the format above (the parser behind it). */
int lattice_personality_parse(const char *text, struct lattice_personality *p);

/*
 * Print the canonical text, one `key: value` line per field, exactly what
 * `lattice personality LOCATION` prints for the node:
 *
 *   block: R00
 *   location: R00-M0-N00-C:J02
 *   coords: 0,1,0
 *   torus: 2x2x4
 *   pset: 0
 *   pset_size: 8
 *   rank_in_pset: 2
 *   ionode: R00-M0-N00-I:J00
 *   memory: 1073741824
 *   cores: 2
 *   mode: co
 *   t: 0
 *
 * The stream is flushed.  Returns the number of bytes written, or -1 (errno
 * set) on an output error.
 */
int lattice_personality_print(FILE *f, const struct lattice_personality *p);

#ifdef __cplusplus
}
#endif

#endif
