"""The I/O-node dispatcher: decodes a request, checks it against the
per-call limit, calls the hand-written implementation (the header's own
function names) and builds the reply; exports the `zoid_plugin` descriptor
ciod loads (lattice/zoid_ion.h)."""
from __future__ import annotations

import os

from pluggen.cgen import RUNTIME, es, ret_bytes
from pluggen.model import Function, Param, Plugin

DISP_RUNTIME = r"""
/* Zeroed memory owned by the reply (freed by zd_done), or NULL. */
ZP_FN void *zd_alloc(struct zoid_reply *rep, size_t n)
{
    if (rep->nmem == ZOID_REPLY_IOV)
        return NULL;
    void *p = calloc(1, n ? n : 1);
    if (p)
        rep->mem[rep->nmem++] = p;
    return p;
}

ZP_FN void zd_iov(struct zoid_reply *rep, const void *p, size_t n)
{
    if (n && rep->n < ZOID_REPLY_IOV)
        rep->iov[rep->n++] = (struct iovec){ (void *)p, n };
}
"""


def _bytes(p: Param) -> str:
    if p.kind == "arr":
        return f"(size_t)n_{p.name} * {es(p)}"
    return f"(size_t)r_{p.name} * (size_t)c_{p.name} * {es(p)}"


def _decode(p: Param, i: int) -> list[str]:
    n = p.name
    if p.kind == "obj":
        return [f"    {p.ctype.text(strip_const=True)} v_{n};",
                f"    memcpy(&v_{n}, zp_take(&rd, sizeof v_{n}), sizeof v_{n});"]
    null = "1" if p.nullok else "0"
    if p.kind == "ptr":
        L = [f"    void *a_{n} = NULL;", f"    uint64_t f_{n} = zp_get64(&rd);",
             f"    if (f_{n} > 1 || (!f_{n} && !{null}))\n        return EPROTO;",
             f"    if (f_{n}) {{"]
        if p.sends:
            L.append(f"        a_{n} = (void *)zp_take(&rd, {es(p)});")
        else:
            L.append(f"        if (!(a_{n} = zd_alloc(rep, {es(p)})))\n            return ENOMEM;")
        L += ["    }", f"    out += f_{n} ? ZP_AL({es(p)}) : 0;" if p.returns else ""]
        return L
    if p.kind == "str":
        return [f"    const char *a_{n} = NULL;", f"    uint64_t l_{n} = zp_get64(&rd);",
                f"    if (!l_{n} && !{null})\n        return EPROTO;",
                f"    if (l_{n} > limit)\n        return E2BIG;",
                f"    if (l_{n}) {{",
                f"        a_{n} = zp_take(&rd, (size_t)l_{n});",
                f"        if (!rd.bad && a_{n}[l_{n} - 1] != 0)\n            return EPROTO;",
                "    }"]
    if p.kind == "arr":
        L = [f"    void *a_{n} = NULL;", f"    uint64_t n_{n} = zp_get64(&rd);",
             f"    int null_{n} = n_{n} == ZP_NULL;",
             f"    if (null_{n} && !{null})\n        return EPROTO;",
             f"    if (null_{n})\n        n_{n} = 0;",
             f"    if (n_{n} > limit / {es(p)})\n        return E2BIG;"]
        if p.sends and not p.zerocopy:
            L.append(f"    if (!null_{n})\n        a_{n} = (void *)zp_take(&rd, {_bytes(p)});")
        if p.returns:
            L.append(f"    out += {'0' if p.zerocopy else '8'} + ZP_AL({_bytes(p)});")
        return L
    # arr2d
    L = [f"    void **a_{n} = NULL;", f"    uint64_t r_{n} = zp_get64(&rd), c_{n} = zp_get64(&rd);",
         f"    int null_{n} = r_{n} == ZP_NULL;",
         f"    if (null_{n} && !{null})\n        return EPROTO;",
         f"    if (null_{n})\n        r_{n} = 0;",
         f"    if (c_{n} > limit / {es(p)} || (c_{n} && r_{n} > limit / {es(p)} / c_{n}) || r_{n} > limit / sizeof(void *))\n        return E2BIG;",
         f"    char *d_{n} = NULL;",
         f"    if (!null_{n}) {{",
         f"        if (!(a_{n} = zd_alloc(rep, (size_t)r_{n} * sizeof(void *))))\n            return ENOMEM;"]
    if p.sends:
        L.append(f"        d_{n} = (char *)zp_take(&rd, {_bytes(p)});")
    else:
        L.append(f"        if (!(d_{n} = zd_alloc(rep, {_bytes(p)})))\n            return ENOMEM;")
    L += [f"        for (uint64_t i = 0; i < r_{n}; i++)",
          f"            a_{n}[i] = d_{n} + i * c_{n} * {es(p)};", "    }"]
    if p.returns:
        L.append(f"    out += ZP_AL({_bytes(p)});")
    return L


def _size_check(f: Function, p: Param, key: str, count: str) -> list[str]:
    """The implementation sees the size argument: it must agree with the data sent."""
    j = getattr(p, key)
    s = f.params[j]
    val = f"(uint64_t)v_{s.name}" if s.kind == "obj" else \
        f"(a_{s.name} ? (uint64_t)*({s.elem().text()} *)a_{s.name} : 0)"
    cond = f"{val} != {count}"
    if p.nullok:
        cond = f"!null_{p.name} && {cond}"
    return [f"    if ({cond})\n        return EPROTO;"]


def _arg(p: Param) -> str:
    if p.kind == "obj":
        return f"v_{p.name}"
    return f"({p.ctype.text()})a_{p.name}"


def _function(f: Function, plugin: Plugin) -> list[str]:
    L = [f"static int zd_{f.name}(const char *req, size_t len, size_t limit, struct zoid_reply *rep)",
         "{", "    struct zp_rd rd = { req, len, 0, 0 };",
         "    size_t out = 8 + " + ret_bytes(f) + ";"]
    for i, p in enumerate(f.params):
        L += [x for x in _decode(p, i) if x]
    # zero-copy inputs follow the record, each padded to 8 bytes
    for p in f.params:
        if p.kind == "arr" and p.zerocopy and p.sends:
            L.append(f"    if (!null_{p.name})\n        a_{p.name} = (void *)zp_take(&rd, {_bytes(p)});")
    L.append("    if (rd.bad || rd.off != len)\n        return EPROTO;")
    for p in f.params:
        if p.kind == "arr":
            L += _size_check(f, p, "size", f"n_{p.name}")
        elif p.kind == "arr2d":
            L += _size_check(f, p, "size", f"r_{p.name}") + _size_check(f, p, "size2", f"c_{p.name}")
    L.append("    if (out > limit)\n        return E2BIG;")
    for i, p in enumerate(f.params):
        if p.kind == "arr" and p.direction == "out" and not p.userbuf:
            L.append(f"    if (!null_{p.name} && !(a_{p.name} = zd_alloc(rep, {_bytes(p)})))\n        return ENOMEM;")
        if p.userbuf:
            L += [f"    if (!null_{p.name}) {{",
                  f"        if (!(a_{p.name} = {plugin.name}_alloc({f.number}, {i}, {_bytes(p)})))\n            return errno ? errno : ENOMEM;",
                  f"        rep->ub[rep->nub] = a_{p.name};\n        rep->ubarg[rep->nub++] = {i};",
                  "    }"]
    call = f"{f.name}({', '.join(_arg(p) for p in f.params)})"
    L.append("    char *head = zd_alloc(rep, out);\n    if (!head)\n        return ENOMEM;")
    L.append("    errno = 0;")
    if f.ret.is_void():
        L.append(f"    {call};")
    else:
        L.append(f"    {f.ret.text(strip_const=True)} ret = {call};")
    L.append("    int32_t err[2] = { errno, 0 };")
    L.append("    struct zp_buf h = { head, 0, out + 8, 0 };")
    if not f.ret.is_void():
        L.append("    zp_put(&h, &ret, sizeof ret);")
    L.append("    zp_put(&h, err, sizeof err);")
    for p in f.params:
        if not p.returns:
            continue
        n = p.name
        if p.kind == "arr" and p.zerocopy:
            L += [f"    zd_iov(rep, a_{n}, {_bytes(p)});",
                  f"    zd_iov(rep, zp_zero, ZP_AL({_bytes(p)}) - {_bytes(p)});"]
        elif p.kind == "ptr":
            L.append(f"    if (a_{n})\n        zp_put(&h, a_{n}, {es(p)});")
        elif p.kind == "arr":
            s = f.params[p.size] if p.size is not None else None
            back = f"n_{n}"
            if s is not None and s.kind == "ptr" and s.direction == "inout":
                L.append(f"    uint64_t back_{n} = a_{s.name} ? (uint64_t)*({s.elem().text()} *)a_{s.name} : 0;")
                L.append(f"    if (back_{n} > n_{n})\n        back_{n} = n_{n};")
                back = f"back_{n}"
            L += [f"    if (!null_{n}) {{", f"        zp_u64(&h, {back});",
                  f"        zp_put(&h, a_{n}, (size_t){back} * {es(p)});", "    }"]
        elif p.kind == "arr2d":
            L.append(f"    if (!null_{n})\n        zp_put(&h, d_{n}, {_bytes(p)});")
    L += ["    zd_iov(rep, head, h.len);", "    return 0;", "}", ""]
    return L


def emit_dispatcher(plugin: Plugin) -> str:
    inc = os.path.basename(plugin.header)
    pre = plugin.name
    out = [f"/* Generated by lattice-pluggen from {inc}: I/O-node dispatcher of plug-in",
           f" * {plugin.name} (id {plugin.id}).  Do not edit; see docs/plugins.md. */",
           "#include <errno.h>", "#include <stdint.h>", "#include <stdlib.h>", "#include <string.h>",
           "", "#include <lattice/zoid_ion.h>", "", f'#include "{inc}"', "",
           "const struct zoid_api *zoid_api;",
           "",
           "/* Optional hand-written hooks (docs/plugins.md \"Implementation\"). */",
           f"int {pre}_init(const char *config) __attribute__((weak));",
           f"void {pre}_fini(void) __attribute__((weak));"]
    if plugin.uses_userbuf:
        out += [f"void *{pre}_alloc(uint32_t fn, unsigned arg, size_t bytes);",
                f"void {pre}_release(uint32_t fn, unsigned arg, void *buf);"]
    out.append(RUNTIME)
    out.append(DISP_RUNTIME)
    fn_of_reply = "static _Thread_local uint32_t zd_fn;" if plugin.uses_userbuf else ""
    out += [fn_of_reply,
            "static void zd_done(struct zoid_reply *rep)", "{"]
    if plugin.uses_userbuf:
        out += ["    for (int i = 0; i < rep->nub; i++)",
                f"        {pre}_release(zd_fn, rep->ubarg[i], rep->ub[i]);"]
    out += ["    for (int i = 0; i < rep->nmem; i++)", "        free(rep->mem[i]);",
            "    rep->nmem = rep->nub = 0;", "}", ""]
    for f in plugin.functions:
        out += _function(f, plugin)
    out += ["static int zd_dispatch(uint32_t fn, const char *req, size_t len, size_t limit, struct zoid_reply *rep)",
            "{", "    rep->done = zd_done;"]
    if plugin.uses_userbuf:
        out.append("    zd_fn = fn;")
    out.append("    switch (fn) {")
    for f in plugin.functions:
        out.append(f"    case {f.number}: return zd_{f.name}(req, len, limit, rep);")
    out += ["    }", "    return ENOSYS;", "}", "",
            "const struct zoid_plugin zoid_plugin = {",
            f"    ZOID_ABI, {plugin.id}u, \"{plugin.name}\", {len(plugin.functions)}u, 0, zd_dispatch,",
            f"    {pre}_init, {pre}_fini, &zoid_api,", "};", ""]
    return "\n".join(out)
