"""Pieces shared by both generated files: the 8-byte-aligned wire layout
helpers (one copy in each file, static) and C expressions per parameter."""
from __future__ import annotations

from pluggen.model import Function, Param

RUNTIME = r"""
#define ZP_AL(n) (((size_t)(n) + 7u) & ~(size_t)7u)
#define ZP_NULL UINT64_MAX
#define ZP_FN static __attribute__((unused))    /* not every file needs every helper */

static const char zp_zero[8];

/* A growing, 8-byte-aligned record of marshalled values. */
struct zp_buf { char *p; size_t len, cap; int oom; };

ZP_FN void zp_raw(struct zp_buf *b, const void *src, size_t n)
{
    if (b->oom || n == 0)
        return;
    if (b->len + n + 8 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 8)
            cap *= 2;
        char *q = realloc(b->p, cap);
        if (!q) {
            b->oom = 1;
            return;
        }
        b->p = q;
        b->cap = cap;
    }
    memcpy(b->p + b->len, src, n);
    b->len += n;
}

ZP_FN void zp_pad(struct zp_buf *b)
{
    zp_raw(b, zp_zero, ZP_AL(b->len) - b->len);
}

ZP_FN void zp_put(struct zp_buf *b, const void *src, size_t n)
{
    zp_raw(b, src, n);
    zp_pad(b);
}

ZP_FN void zp_u64(struct zp_buf *b, uint64_t v)
{
    zp_put(b, &v, sizeof v);
}

/* Reading a record back: every take is bounds-checked; `bad` sticks. */
struct zp_rd { const char *p; size_t len, off; int bad; };

ZP_FN const void *zp_take(struct zp_rd *r, size_t n)
{
    if (r->bad || n > r->len - r->off) {
        r->bad = 1;
        return zp_zero;
    }
    const char *q = r->p + r->off;
    r->off += ZP_AL(n) < r->len - r->off ? ZP_AL(n) : r->len - r->off;
    return q;
}

ZP_FN uint64_t zp_get64(struct zp_rd *r)
{
    uint64_t v;
    memcpy(&v, zp_take(r, sizeof v), sizeof v);
    return v;
}
"""


def es(p: Param) -> str:
    """Bytes of one element of an arr/arr2d or the object of a ptr."""
    return p.elem().size_expr()


def size_value(f: Function, idx: int) -> str:
    """C expression (uint64_t) for the value of size argument `idx` on the compute side."""
    s = f.params[idx]
    if s.kind == "obj":
        return f"(uint64_t){s.name}"
    return f"({s.name} ? (uint64_t)*{s.name} : 0)"


def ret_bytes(f: Function) -> str:
    return "0" if f.ret.is_void() else f"ZP_AL(sizeof({f.ret.text()}))"
