/* PMI_process_mapping, as MPICH's process managers write it: blocks of
 * (first node, number of nodes, ranks per node) assigned in rank order,
 * the whole vector repeating until every rank has a node (so a cyclic
 * mapping is written as one short block).  Every block places at least one
 * rank, so a mapping of `size` ranks has at most `size` blocks: no other cap. */
#include "clique.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct block { long node, nnodes, ppn; };

static int number(const char **pp, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(*pp, &end, 10);
    if (end == *pp || errno || v < 0 || v > 1L << 30)
        return -1;
    *pp = end;
    *out = v;
    return 0;
}

static int expect(const char **pp, char c)
{
    while (**pp == ' ')
        (*pp)++;
    if (**pp != c)
        return -1;
    (*pp)++;
    return 0;
}

static int parse(const char *p, struct block *b, int max)
{
    int n = 0;
    if (expect(&p, '(') < 0 || strncmp(p, "vector", 6))
        return -1;
    p += 6;
    while (expect(&p, ',') == 0) {
        if (n == max || expect(&p, '(') < 0 || number(&p, &b[n].node) < 0 || expect(&p, ',') < 0
            || number(&p, &b[n].nnodes) < 0 || expect(&p, ',') < 0 || number(&p, &b[n].ppn) < 0
            || expect(&p, ')') < 0 || b[n].nnodes == 0 || b[n].ppn == 0)
            return -1;
        n++;
    }
    if (expect(&p, ')') < 0 || *p || n == 0)
        return -1;
    return n;
}

int clique_from_mapping(const char *mapping, int size, int rank, int *ranks)
{
    int max = size > 0 ? size : 1;
    struct block *b = malloc(sizeof *b * (size_t)max);
    long *node = malloc(sizeof *node * (size_t)max);
    int nb = b && node ? parse(mapping, b, max) : -1, count = -1;

    if (nb > 0 && rank >= 0 && rank < size) {
        int r = 0;
        while (r < size)                /* repeat the vector until all ranks are placed */
            for (int i = 0; i < nb && r < size; i++)
                for (long k = 0; k < b[i].nnodes && r < size; k++)
                    for (long j = 0; j < b[i].ppn && r < size; j++)
                        node[r++] = b[i].node + k;
        count = 0;
        for (r = 0; r < size; r++)
            if (node[r] == node[rank])
                ranks[count++] = r;
    }
    free(b);
    free(node);
    return count;
}
