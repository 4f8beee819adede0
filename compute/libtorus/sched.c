/*
 * sched.c - the torus broadcast's per-colour spanning trees (sched.h).
 */
#include "sched.h"

int torus_colours(const struct torus_box *b)
{
    return b->n ? (b->wrap ? 2 * b->n : b->n) : 0;
}

int torus_volume(const struct torus_box *b)
{
    int v = 1;
    for (int i = 0; i < b->n; i++)
        v *= b->ext[i];
    return v;
}

static void split(const struct torus_box *b, int idx, int c[TORUS_MAXDIM])
{
    for (int i = 0; i < b->n; i++) {
        c[i] = idx % b->ext[i];
        idx /= b->ext[i];
    }
}

static int join(const struct torus_box *b, const int c[TORUS_MAXDIM])
{
    int idx = 0;
    for (int i = b->n - 1; i >= 0; i--)
        idx = idx * b->ext[i] + c[i];
    return idx;
}

/* me moved to position q along dimension d */
static int moved(const struct torus_box *b, const int me[TORUS_MAXDIM], int d, int q)
{
    int c[TORUS_MAXDIM];
    for (int i = 0; i < b->n; i++)
        c[i] = me[i];
    c[d] = q;
    return join(b, c);
}

int torus_links(const struct torus_box *b, int colour, int root, int me, int *parent, int kids[TORUS_MAXKIDS])
{
    int n = b->n, r[TORUS_MAXDIM], m[TORUS_MAXDIM], order[TORUS_MAXDIM];
    int dir = b->wrap && colour >= n ? -1 : 1;   /* a torus's second n colours run backwards */
    split(b, root, r);
    split(b, me, m);
    for (int i = 0; i < n; i++)
        order[i] = (colour % n + i) % n;
    int j = -1;         /* the phase that reaches me: the last dimension (in order) where I differ from the root */
    for (int i = 0; i < n; i++)
        if (m[order[i]] != r[order[i]])
            j = i;
    int k = 0;
    *parent = -1;
    if (j >= 0) {
        int d = order[j], L = b->ext[d];
        if (b->wrap) {
            *parent = moved(b, m, d, (m[d] - dir + L) % L);
            int q = (m[d] + dir + L) % L;
            if (q != r[d])
                kids[k++] = moved(b, m, d, q);
        } else {
            int away = m[d] > r[d] ? 1 : -1;
            *parent = moved(b, m, d, m[d] - away);
            if (m[d] + away >= 0 && m[d] + away < L)
                kids[k++] = moved(b, m, d, m[d] + away);
        }
    }
    for (int i = j + 1; i < n; i++) {       /* start the lines of the later dimensions */
        int d = order[i], L = b->ext[d];
        if (b->wrap) {
            kids[k++] = moved(b, m, d, (m[d] + dir + L) % L);
        } else {
            if (m[d] + 1 < L)
                kids[k++] = moved(b, m, d, m[d] + 1);
            if (m[d] - 1 >= 0)
                kids[k++] = moved(b, m, d, m[d] - 1);
        }
    }
    return k;
}
