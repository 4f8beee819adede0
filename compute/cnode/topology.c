/*
 * topology.c - where a job's hwloc may read the host's topology.
 *
 * MPICH and Open MPI ask hwloc for the topology in MPI_Init, and hwloc
 * finds it by reading ~500 files of /proc and /sys in every rank (each a
 * trapped call under cnk).  Whoever learns the host's cores for the
 * service node leaves hwloc's XML of this host in /dev/shm
 * (lattice.nodes.host.export_topology); a rank loading it does the same work
 * in a few calls.  Used only when it is a regular file of cnode's own user
 * that nobody else may write: /dev/shm is anyone's, and a topology planted
 * there must not steer another user's ranks.
 */
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cnode.h"

int topology_file(char *out, size_t len)
{
    struct stat st;
    int n = snprintf(out, len, "/dev/shm/lattice-hwloc-%u.xml", (unsigned)geteuid());
    if (n < 0 || (size_t)n >= len || lstat(out, &st) != 0)
        return 0;
    return S_ISREG(st.st_mode) && st.st_uid == geteuid() && !(st.st_mode & (S_IWGRP | S_IWOTH));
}
