/* Which ranks share this process's node, from PMI_process_mapping. */
#ifndef LATTICE_LIBPMI_CLIQUE_H
#define LATTICE_LIBPMI_CLIQUE_H

/* Parse "(vector,(nodeid,nnodes,ppn),...)" for a job of `size` ranks and
 * fill ranks[] with the ranks on `rank`'s node in increasing order; returns
 * how many, or -1 if the text is malformed. ranks must hold `size` ints. */
int clique_from_mapping(const char *mapping, int size, int rank, int *ranks);

#endif
