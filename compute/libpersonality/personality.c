/*
 * personality.c - the personality API (lattice/personality.h): parse
 * LATTICE_PERSONALITY, print the canonical text.
 *
 * Strict on what it knows (every field once, numbers in range, strings that
 * fit), lenient on what it does not (unknown keys are skipped).  No
 * allocation, no global state: safe in any program, threaded or not.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lattice/personality.h>

enum field {
    F_BLOCK, F_LOCATION, F_COORDS, F_TORUS, F_PSET, F_PSET_SIZE, F_RANK_IN_PSET, F_IONODE, F_MEMORY,
    F_CORES, F_MODE, F_T, F_COUNT
};

/* t came later: values without it (older nodes) mean core 0 */
#define OPTIONAL (1u << F_T)

static const char *const names[F_COUNT] = {
    [F_BLOCK] = "block", [F_LOCATION] = "location", [F_COORDS] = "coords", [F_TORUS] = "torus",
    [F_PSET] = "pset", [F_PSET_SIZE] = "pset_size", [F_RANK_IN_PSET] = "rank_in_pset",
    [F_IONODE] = "ionode", [F_MEMORY] = "memory", [F_CORES] = "cores", [F_MODE] = "mode",
    [F_T] = "t",
};

/* A decimal number of [s, end) with no sign, no spaces, at most max. */
static int number(const char *s, const char *end, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;
    if (s == end || end - s > 20)
        return -1;
    for (; s < end; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    if (v > max)
        return -1;
    *out = v;
    return 0;
}

static int uint_field(const char *s, const char *end, unsigned *out)
{
    uint64_t v;
    if (number(s, end, UINT32_MAX, &v) < 0)
        return -1;
    *out = (unsigned)v;
    return 0;
}

/* "a,b,c" */
static int triple(const char *s, const char *end, unsigned *a, unsigned *b, unsigned *c)
{
    const char *c1 = memchr(s, ',', (size_t)(end - s));
    if (!c1)
        return -1;
    const char *c2 = memchr(c1 + 1, ',', (size_t)(end - c1 - 1));
    if (!c2)
        return -1;
    return uint_field(s, c1, a) < 0 || uint_field(c1 + 1, c2, b) < 0 || uint_field(c2 + 1, end, c) < 0 ? -1 : 0;
}

/* A string field: not empty, printable, no spaces, fits with its NUL. */
static int string_field(const char *s, const char *end, char *out, size_t size)
{
    size_t n = (size_t)(end - s);
    if (n == 0 || n >= size)
        return -1;
    for (const char *q = s; q < end; q++)
        if (*q <= ' ' || *q > '~')
            return -1;
    memcpy(out, s, n);
    out[n] = '\0';
    return 0;
}

static int field(enum field f, const char *v, const char *end, struct lattice_personality *p)
{
    switch (f) {
    case F_BLOCK:
        return string_field(v, end, p->block, sizeof p->block);
    case F_LOCATION:
        return string_field(v, end, p->location, sizeof p->location);
    case F_IONODE:
        return string_field(v, end, p->ionode, sizeof p->ionode);
    case F_MODE:
        if (string_field(v, end, p->mode, sizeof p->mode) < 0)
            return -1;
        return strcmp(p->mode, "co") && strcmp(p->mode, "vn") ? -1 : 0;
    case F_COORDS:
        return triple(v, end, &p->x, &p->y, &p->z);
    case F_TORUS:
        if (triple(v, end, &p->torus_x, &p->torus_y, &p->torus_z) < 0)
            return -1;
        return p->torus_x && p->torus_y && p->torus_z ? 0 : -1;
    case F_PSET:
        return uint_field(v, end, &p->pset);
    case F_PSET_SIZE:
        return uint_field(v, end, &p->pset_size) < 0 || !p->pset_size ? -1 : 0;
    case F_RANK_IN_PSET:
        return uint_field(v, end, &p->rank_in_pset);
    case F_MEMORY:
        return number(v, end, INT64_MAX, &p->memory) < 0 || !p->memory ? -1 : 0;
    case F_CORES:
        return uint_field(v, end, &p->cores) < 0 || !p->cores ? -1 : 0;
    case F_T:
        return uint_field(v, end, &p->t);
    case F_COUNT:
        break;
    }
    return -1;
}

int lattice_personality_parse(const char *text, struct lattice_personality *p)
{
    struct lattice_personality tmp;
    unsigned seen = 0;

    if (!text || !p) {
        errno = EINVAL;
        return -1;
    }
    memset(&tmp, 0, sizeof tmp);
    for (const char *s = text; *s;) {
        const char *end = strchr(s, ';');
        if (!end)
            end = s + strlen(s);
        const char *eq = memchr(s, '=', (size_t)(end - s));
        if (!eq || eq == s)
            goto bad;
        enum field f = F_COUNT;
        for (int i = 0; i < F_COUNT; i++)
            if ((size_t)(eq - s) == strlen(names[i]) && !memcmp(s, names[i], (size_t)(eq - s)))
                f = (enum field)i;
        if (f != F_COUNT) {             /* unknown keys: a newer node's, skipped */
            if (seen & 1u << f || field(f, eq + 1, end, &tmp) < 0)
                goto bad;
            seen |= 1u << f;
        }
        s = *end ? end + 1 : end;
    }
    if ((seen | OPTIONAL) != (1u << F_COUNT) - 1)
        goto bad;
    if (tmp.x >= tmp.torus_x || tmp.y >= tmp.torus_y || tmp.z >= tmp.torus_z ||
        tmp.rank_in_pset >= tmp.pset_size)
        goto bad;
    /* the process's core exists: one process (core 0) per node in co mode */
    if (tmp.t >= tmp.cores || (tmp.t != 0 && !strcmp(tmp.mode, "co")))
        goto bad;
    *p = tmp;
    return 0;
bad:
    errno = EINVAL;
    return -1;
}

int lattice_personality(struct lattice_personality *p)
{
    const char *text = getenv(LATTICE_PERSONALITY_ENV);
    if (!text) {
        errno = ENOENT;
        return -1;
    }
    return lattice_personality_parse(text, p);
}

int lattice_personality_print(FILE *f, const struct lattice_personality *p)
{
    if (!f || !p) {
        errno = EINVAL;
        return -1;
    }
    int n = fprintf(f,
                   "block: %s\n"
                   "location: %s\n"
                   "coords: %u,%u,%u\n"
                   "torus: %ux%ux%u\n"
                   "pset: %u\n"
                   "pset_size: %u\n"
                   "rank_in_pset: %u\n"
                   "ionode: %s\n"
                   "memory: %" PRIu64 "\n"
                   "cores: %u\n"
                   "mode: %s\n"
                   "t: %u\n",
                   p->block, p->location, p->x, p->y, p->z, p->torus_x, p->torus_y, p->torus_z, p->pset,
                   p->pset_size, p->rank_in_pset, p->ionode, p->memory, p->cores, p->mode, p->t);
    /* flushed, so that an output error shows here and not at exit */
    return n < 0 || fflush(f) != 0 ? -1 : n;
}
