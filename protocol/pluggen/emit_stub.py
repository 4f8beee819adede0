"""The compute-side stubs: one C function per prototype, with the header's
own name and signature, that marshals the arguments into one request,
calls zoid_call() and unmarshals the reply (docs/plugins.md "Wire layout")."""
from __future__ import annotations

import os

from pluggen.cgen import RUNTIME, es, ret_bytes, size_value
from pluggen.model import Function, Param, Plugin


def _signature(f: Function) -> str:
    params = ", ".join(f"{p.ctype.text()} {p.name}".replace("* ", "*") for p in f.params) or "void"
    return f"{f.ret.text()} {f.name}({params})"


def _counts(f: Function) -> list[str]:
    out = []
    for p in f.params:
        if p.kind == "arr":
            assert p.size is not None
            out.append(f"    uint64_t n_{p.name} = {p.name} ? {size_value(f, p.size)} : 0;")
        elif p.kind == "arr2d":
            assert p.size is not None and p.size2 is not None
            out.append(f"    uint64_t r_{p.name} = {p.name} ? {size_value(f, p.size)} : 0;")
            out.append(f"    uint64_t c_{p.name} = {size_value(f, p.size2)};")
    return out


def _bytes(p: Param) -> str:
    if p.kind == "arr":
        return f"(size_t)n_{p.name} * {es(p)}"
    return f"(size_t)r_{p.name} * (size_t)c_{p.name} * {es(p)}"


def _marshal(p: Param) -> list[str]:
    n = p.name
    if p.kind == "obj":
        return [f"    zp_put(&h, &{n}, sizeof {n});"]
    if p.kind == "ptr":
        out = [f"    zp_u64(&h, {n} != NULL);"]
        if p.sends:
            out.append(f"    if ({n})\n        zp_put(&h, {n}, {es(p)});")
        return out
    if p.kind == "str":
        return [f"    uint64_t l_{n} = {n} ? strlen({n}) + 1 : 0;",
                f"    zp_u64(&h, l_{n});",
                f"    if ({n})\n        zp_put(&h, {n}, l_{n});"]
    if p.kind == "arr":
        out = [f"    if ((uint64_t){_bytes(p)} / {es(p)} != n_{n} || n_{n} == ZP_NULL) {{\n"
               f"        errno = E2BIG;\n        goto fail;\n    }}",
               f"    zp_u64(&h, {n} ? n_{n} : ZP_NULL);"]
        if p.sends and not p.zerocopy:
            out.append(f"    if ({n})\n        zp_put(&h, {n}, {_bytes(p)});")
        return out
    # arr2d
    out = [f"    if (c_{n} && r_{n} > SIZE_MAX / c_{n} / {es(p)}) {{\n        errno = E2BIG;\n        goto fail;\n    }}",
           f"    zp_u64(&h, {n} ? r_{n} : ZP_NULL);", f"    zp_u64(&h, c_{n});"]
    if p.sends:
        out.append(f"    for (uint64_t i = 0; {n} && i < r_{n}; i++)\n"
                   f"        zp_raw(&h, {n}[i], (size_t)c_{n} * {es(p)});\n    zp_pad(&h);")
    return out


def _reply_cap(p: Param) -> str | None:
    if not p.returns:
        return None
    if p.kind == "ptr":
        return f"({p.name} ? ZP_AL({es(p)}) : 0)"
    if p.kind == "arr" and not p.zerocopy:
        return f"({p.name} ? 8 + ZP_AL({_bytes(p)}) : 0)"
    if p.kind == "arr2d":
        return f"({p.name} ? ZP_AL({_bytes(p)}) : 0)"
    return None


def _unmarshal(f: Function, p: Param) -> list[str]:
    n = p.name
    if not p.returns:
        return []
    if p.kind == "ptr":
        return [f"    if ({n})\n        memcpy({n}, zp_take(&rd, {es(p)}), {es(p)});"]
    if p.kind == "arr" and not p.zerocopy:
        return [f"    if ({n}) {{",
                f"        uint64_t got_{n} = zp_get64(&rd);",
                f"        if (got_{n} > n_{n})\n            rd.bad = 1;",
                f"        else\n            memcpy({n}, zp_take(&rd, (size_t)got_{n} * {es(p)}), (size_t)got_{n} * {es(p)});",
                "    }"]
    if p.kind == "arr2d":
        return [f"    if ({n}) {{",
                f"        const char *d_{n} = zp_take(&rd, {_bytes(p)});",
                f"        for (uint64_t i = 0; !rd.bad && i < r_{n}; i++)",
                f"            memcpy({n}[i], d_{n} + i * c_{n} * {es(p)}, (size_t)c_{n} * {es(p)});",
                "    }"]
    return []


def _function(f: Function) -> list[str]:
    void = f.ret.is_void()
    L = [f"{_signature(f)}", "{"]
    L += ["    struct zp_buf h = { 0 };",
          "    struct iovec req[LAT_ZOID_MAX_IOV], rep[LAT_ZOID_MAX_IOV];",
          "    int nreq = 1, nrep = 0;",
          "    size_t zc = 0, hcap = 8 + " + ret_bytes(f) + ";",
          "    char *rbuf = NULL;",
          "    long got;"]
    if not void:
        L.append(f"    {f.ret.text()} ret;")
        L.append("    memset(&ret, 0xff, sizeof ret);    /* the failure value: all bits set (-1) */")
    L += _counts(f)
    for p in f.params:
        if p.kind != "obj" and not p.nullok:
            L.append(f"    if (!{p.name}) {{\n        errno = EFAULT;\n        goto fail;\n    }}")
    for p in f.params:
        L += _marshal(p)
    L.append("    if (h.oom) {\n        errno = ENOMEM;\n        goto fail;\n    }")
    L.append("    req[0] = (struct iovec){ h.p, h.len };")
    for p in f.params:
        if p.kind == "arr" and p.zerocopy and p.sends:
            L.append(f"    if ({p.name} && n_{p.name}) {{\n"
                     f"        req[nreq++] = (struct iovec){{ (void *){p.name}, {_bytes(p)} }};\n"
                     f"        if (ZP_AL({_bytes(p)}) != {_bytes(p)})\n"
                     f"            req[nreq++] = (struct iovec){{ (void *)zp_zero, ZP_AL({_bytes(p)}) - {_bytes(p)} }};\n"
                     "    }")
        if p.kind == "arr" and p.zerocopy and p.returns:
            L.append(f"    if ({p.name} && n_{p.name}) {{\n"
                     f"        rep[nrep++] = (struct iovec){{ {p.name}, {_bytes(p)} }};\n"
                     f"        zc += ZP_AL({_bytes(p)});\n"
                     f"        if (ZP_AL({_bytes(p)}) != {_bytes(p)})\n"
                     f"            rep[nrep++] = (struct iovec){{ zp_scratch, ZP_AL({_bytes(p)}) - {_bytes(p)} }};\n"
                     "    }")
        cap = _reply_cap(p)
        if cap:
            L.append(f"    hcap += {cap};")
    L += ["    if (!(rbuf = malloc(hcap))) {\n        errno = ENOMEM;\n        goto fail;\n    }",
          "    rep[nrep++] = (struct iovec){ rbuf, hcap };",
          f"    got = zoid_call(ZP_ID, {f.number}, req, nreq, rep, nrep);",
          "    if (got < 0)\n        goto fail;",
          "    if ((size_t)got < zc + 8) {\n        errno = EIO;\n        goto fail;\n    }",
          "    struct zp_rd rd = { rbuf, (size_t)got - zc, 0, 0 };"]
    if not void:
        L.append("    memcpy(&ret, zp_take(&rd, sizeof ret), sizeof ret);")
    L.append("    int32_t err;\n    memcpy(&err, zp_take(&rd, 8), sizeof err);")
    for p in f.params:
        L += _unmarshal(f, p)
    L += ["    if (rd.bad) {\n        errno = EIO;\n        goto fail;\n    }",
          "    if (err)\n        errno = err;",
          "    free(h.p);\n    free(rbuf);",
          "    return" + ("" if void else " ret") + ";",
          "fail:",
          "    free(h.p);\n    free(rbuf);",
          "    return" + ("" if void else " ret") + ";",
          "}", ""]
    return L


def emit_stubs(plugin: Plugin) -> str:
    inc = os.path.basename(plugin.header)
    out = [f"/* Generated by lattice-pluggen from {inc}: compute-side stubs of plug-in",
           f" * {plugin.name} (id {plugin.id}).  Do not edit; see docs/plugins.md. */",
           "#include <errno.h>", "#include <stdint.h>", "#include <stdlib.h>", "#include <string.h>",
           "", "#include <lattice/zoid.h>", "", f'#include "{inc}"', "",
           f"#define ZP_ID {plugin.id}u", RUNTIME,
           "/* where zero-copy padding lands (unused by a header without zero-copy arrays) */",
           "static _Thread_local char zp_scratch[8] __attribute__((unused));", ""]
    for f in plugin.functions:
        out += _function(f)
    return "\n".join(out)
