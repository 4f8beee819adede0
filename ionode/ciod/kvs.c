/*
 * kvs.c - a string -> string table for the PMI key/value space: chained
 * hashing (FNV-1a), entries allocated one by one.  Not thread safe: like
 * the engine that uses it (pmi_engine.c), its caller serializes the calls.
 */
#include "pmi_engine.h"

#include <stdlib.h>
#include <string.h>

struct kvs {
    struct kv **bucket;
    uint32_t    count;
    size_t      bytes;              /* what kvs_cost counts, for every entry */
};

struct kv {
    struct kv *next;
    char      *val;
    char       key[];
};

#define KVS_BUCKETS 4096u

/* What an entry costs: its strings and its header (the caller's bounds,
 * pmi_engine.c, are on this). */
static size_t entry_cost(size_t keylen, size_t vallen)
{
    return sizeof(struct kv) + keylen + 1 + vallen + 1;
}

static uint32_t hash(const char *s)
{
    uint32_t h = 2166136261u;

    while (*s)
        h = (h ^ (uint8_t)*s++) * 16777619u;
    return h;
}

struct kvs *kvs_new(void)
{
    struct kvs *t = calloc(1, sizeof(*t));

    if (t && !(t->bucket = calloc(KVS_BUCKETS, sizeof(*t->bucket)))) {
        free(t);
        return NULL;
    }
    return t;
}

void kvs_free(struct kvs *t)
{
    if (!t)
        return;
    for (uint32_t i = 0; i < KVS_BUCKETS; i++)
        for (struct kv *e = t->bucket[i], *n; e; e = n) {
            n = e->next;
            free(e->val);
            free(e);
        }
    free(t->bucket);
    free(t);
}

const char *kvs_get(const struct kvs *t, const char *key)
{
    for (struct kv *e = t->bucket[hash(key) % KVS_BUCKETS]; e; e = e->next)
        if (!strcmp(e->key, key))
            return e->val;
    return NULL;
}

uint32_t kvs_count(const struct kvs *t)
{
    return t->count;
}

size_t kvs_bytes(const struct kvs *t)
{
    return t->bytes;
}

size_t kvs_cost(const struct kvs *t, const char *key, const char *val, bool *isnew)
{
    const char *old = kvs_get(t, key);
    size_t vl = strlen(val);

    *isnew = old == NULL;
    if (old)
        return vl > strlen(old) ? vl - strlen(old) : 0;
    return entry_cost(strlen(key), vl);
}

/* 0, or -1 if out of memory (the old value, if any, stays). */
int kvs_put(struct kvs *t, const char *key, const char *val)
{
    struct kv **head = &t->bucket[hash(key) % KVS_BUCKETS];
    char *v = strdup(val);

    if (!v)
        return -1;
    for (struct kv *e = *head; e; e = e->next)
        if (!strcmp(e->key, key)) {
            t->bytes = t->bytes - strlen(e->val) + strlen(v);
            free(e->val);
            e->val = v;
            return 0;
        }
    size_t kl = strlen(key) + 1;
    struct kv *e = malloc(sizeof(*e) + kl);
    if (!e) {
        free(v);
        return -1;
    }
    memcpy(e->key, key, kl);
    e->val = v;
    e->next = *head;
    *head = e;
    t->count++;
    t->bytes += entry_cost(kl - 1, strlen(v));
    return 0;
}
