/*
 * netdev.c - which network interfaces a job's UCX may use (UCX_NET_DEVICES).
 *
 * UCX 1.13 lists every interface that has an address when the program
 * calls ucp_init, and opens each again when it creates its worker; an
 * interface whose address went in between (a veth, bridge or tap device of
 * something else on the host coming or going) fails the worker with "No
 * such device", and MPICH's MPI_Init with it (compute/cnk/README.md,
 * "MPI_Init under load").  The interfaces of the host's default routes are
 * the ones that carry its traffic; naming them keeps the rest out.
 */
#include <stdio.h>
#include <string.h>

#include "cnode.h"

/* Append name to the comma-separated list out (len bytes) unless it is there. */
static void add_name(char *out, size_t len, const char *name)
{
    size_t n = strlen(name), used = strlen(out);
    for (const char *p = out; *p;) {
        const char *c = strchr(p, ',');
        size_t l = c ? (size_t)(c - p) : strlen(p);
        if (l == n && !strncmp(p, name, n))
            return;
        p += l + (c != NULL);
    }
    if (used + n + 2 > len)
        return;
    if (used)
        out[used++] = ',';
    memcpy(out + used, name, n + 1);
}

/* The interfaces of the default routes, IPv4 (/proc/net/route) else IPv6
 * (/proc/net/ipv6_route, loopback's unreachable route left out); "" if none. */
void netdev_default_routes(char *out, size_t len)
{
    char line[512], name[64];
    out[0] = '\0';
    FILE *f = fopen("/proc/net/route", "re");
    if (f) {
        unsigned dest, flags;
        while (fgets(line, sizeof line, f))    /* Iface Destination Gateway Flags ... */
            if (sscanf(line, "%63s %x %*x %x", name, &dest, &flags) == 3 && dest == 0 && (flags & 1))
                add_name(out, len, name);
        fclose(f);
    }
    if (out[0] || !(f = fopen("/proc/net/ipv6_route", "re")))
        return;
    char dst[33];
    unsigned plen, flags;
    while (fgets(line, sizeof line, f))         /* dst plen src splen next metric ref use flags iface */
        if (sscanf(line, "%32s %x %*s %*x %*s %*x %*x %*x %x %63s", dst, &plen, &flags, name) == 4 &&
            plen == 0 && !strcmp(dst, "00000000000000000000000000000000") && (flags & 1) &&
            !(flags & 0x200) && strcmp(name, "lo"))    /* RTF_UP, not RTF_REJECT */
            add_name(out, len, name);
    fclose(f);
}
