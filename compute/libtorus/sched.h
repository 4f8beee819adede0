/*
 * sched.h - the torus broadcast's schedule (no MPI here: tests link it alone).
 *
 * A communicator that fills a box of the torus (x, y, z and the core t) is
 * described by its active dimensions (extent > 1).  The broadcast splits the
 * message in colours: one per dimension on a mesh, two (one per direction)
 * when every active dimension wraps.  Colour c walks the dimensions in the
 * rotated order c, c+1, ... (mod n): its part goes first along the root's
 * line in the first dimension, then every node reached so far forwards it
 * along the second, and so on, so each node receives 1/n (1/2n) of the
 * message over each of its incoming links (the MPI seed, section 5.3).
 */
#ifndef LATTICE_TORUS_SCHED_H
#define LATTICE_TORUS_SCHED_H

#define TORUS_MAXDIM 4
#define TORUS_MAXKIDS (2 * TORUS_MAXDIM)

struct torus_box {
    int n;                      /* active dimensions */
    int ext[TORUS_MAXDIM];      /* their extents, each > 1 */
    int wrap;                   /* every active dimension wraps: a torus */
};

/* Number of colours: n on a mesh, 2n on a torus, 0 for a single point. */
int torus_colours(const struct torus_box *b);

/* Node count of the box. */
int torus_volume(const struct torus_box *b);

/*
 * In colour c's spanning tree rooted at root (linear indices, the first
 * dimension fastest): *parent gets me's parent (-1 for the root), kids[]
 * its children in the order they are fed; returns how many.
 */
int torus_links(const struct torus_box *b, int c, int root, int me, int *parent, int kids[TORUS_MAXKIDS]);

#endif
