/*
 * torus_sched_check - checks the torus broadcast's schedule (compute/libtorus/
 * sched.c) on every box given on the command line ("4x4x2", "8x2 wrap"...):
 * for every root and colour, each node but the root has exactly one parent,
 * its parent lists it as a child, nothing is fed twice, and every node is
 * reached from the root; on a mesh each node receives from n different
 * directions (one per colour), on a torus from 2n.  Prints one line per box
 * and exits 1 at the first fault.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sched.h"

static int check(const struct torus_box *b)
{
    int v = torus_volume(b), nc = torus_colours(b);
    int *fed = malloc(v * sizeof *fed), *par = malloc(v * sizeof *par), *seen = malloc(v * sizeof *seen);
    int *from = malloc((size_t)v * nc * sizeof *from);
    for (int root = 0; root < v; root++) {
        for (int c = 0; c < nc; c++) {
            memset(fed, 0, v * sizeof *fed);
            for (int me = 0; me < v; me++) {
                int kids[TORUS_MAXKIDS], k = torus_links(b, c, root, me, &par[me], kids);
                for (int i = 0; i < k; i++) {
                    if (kids[i] < 0 || kids[i] >= v || kids[i] == root) {
                        printf("colour %d root %d: node %d feeds bad child %d\n", c, root, me, kids[i]);
                        return 1;
                    }
                    fed[kids[i]]++;
                }
            }
            for (int me = 0; me < v; me++) {
                if ((me == root) != (par[me] < 0) || (me != root && fed[me] != 1)) {
                    printf("colour %d root %d: node %d has parent %d, fed %d times\n", c, root, me, par[me], fed[me]);
                    return 1;
                }
                int kids[TORUS_MAXKIDS], p, found = 0;
                if (me != root) {
                    int k = torus_links(b, c, root, par[me], &p, kids);
                    for (int i = 0; i < k; i++)
                        found |= kids[i] == me;
                    if (!found) {
                        printf("colour %d root %d: %d's parent %d does not feed it\n", c, root, me, par[me]);
                        return 1;
                    }
                }
                /* reached: walk up to the root in at most v steps */
                int at = me, steps = 0;
                while (at != root && steps++ <= v)
                    at = par[at];
                if (at != root) {
                    printf("colour %d root %d: %d never reaches the root\n", c, root, me);
                    return 1;
                }
                from[me * nc + c] = par[me];
            }
        }
        /* a node off every line through the root gets each colour over another
         * link: n on a mesh, 2n on a torus whose rings are longer than 2 */
        int rings = 1;
        for (int d = 0; d < b->n; d++)
            rings &= b->ext[d] > 2;
        for (int me = 0; me < v && nc > 1; me++) {
            int off = 1, a = me, r = root;
            for (int d = 0; d < b->n; d++, a /= b->ext[d - 1], r /= b->ext[d - 1])
                off &= a % b->ext[d] != r % b->ext[d];
            if (!off)
                continue;
            memset(seen, 0, v * sizeof *seen);
            int distinct = 0;
            for (int c = 0; c < nc; c++)
                distinct += !seen[from[me * nc + c]]++;
            if (distinct < (b->wrap && !rings ? b->n : nc)) {
                printf("root %d: node %d gets its %d colours over %d links\n", root, me, nc, distinct);
                return 1;
            }
        }
    }
    free(fed), free(par), free(seen), free(from);
    return 0;
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        struct torus_box b = { 0 };
        char *s = argv[i];
        b.wrap = strstr(s, "wrap") != NULL;
        while (*s && *s != ' ' && b.n < TORUS_MAXDIM) {
            b.ext[b.n++] = (int)strtol(s, &s, 10);
            if (*s == 'x')
                s++;
        }
        if (check(&b)) {
            printf("FAIL %s\n", argv[i]);
            return 1;
        }
        printf("ok %s: %d nodes, %d colours\n", argv[i], torus_volume(&b), torus_colours(&b));
    }
    return 0;
}
