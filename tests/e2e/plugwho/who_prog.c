/*
 * who_prog.c - a compute process of the who.h plug-in: prints what the I/O
 * node said about its caller, and what its own environment says.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "who.h"

int main(int argc, char **argv)
{
    uint64_t job = 0, rjob = 0;
    uint32_t uid = 0, gid = 0, ruid = 0, nuid = 0, groups[300], n = 300;
    const char *rank = getenv("LATTICE_RANK"), *pmi = getenv("PMI_JOBID");

    int32_t all = w_who(&job, &uid, &gid, groups, &n);
    if (all < 0) {
        printf("w_who: %s\n", strerror(errno));
        return 1;
    }
    printf("rank %s env job %s\n", rank ? rank : "?", pmi ? pmi : "?");
    printf("rank %s caller job %" PRIu64 " uid %u gid %u groups", rank ? rank : "?", job, uid, gid);
    for (uint32_t i = 0; i < n; i++)
        printf(" %u", groups[i]);
    printf("\n");
    for (int i = 1; i < argc; i++) {
        uint32_t g = (uint32_t)strtoul(argv[i], NULL, 10);
        printf("rank %s in group %u: %d\n", rank ? rank : "?", g, w_in_group(g));
    }
    int32_t rc = w_running(&rjob, &ruid, &nuid);
    printf("rank %s running rc %d job %" PRIu64 " uid %u\n", rank ? rank : "?", rc, rjob, ruid);
    printf("rank %s no caller uid %u\n", rank ? rank : "?", nuid);
    return 0;
}
