/* who_impl.c - the I/O-node side of who.h. */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include <lattice/zoid_ion.h>

#include "who.h"

int32_t w_who(uint64_t *job, uint32_t *uid, uint32_t *gid, uint32_t *groups, uint32_t *ngroups)
{
    const struct zoid_caller *c = zoid_caller();
    uint32_t n = c->ngroups < *ngroups ? c->ngroups : *ngroups;

    *job = c->job;
    *uid = c->uid;
    *gid = c->gid;
    memcpy(groups, c->groups, n * sizeof(*groups));
    *ngroups = n;
    return (int32_t)c->ngroups;
}

int32_t w_in_group(uint32_t gid)
{
    return zoid_caller_in_group(gid);
}

struct running { uint64_t job; uint32_t uid, no_caller_uid; int rc; };

static void *ask(void *arg)
{
    struct running *r = arg;

    r->rc = zoid_running_job(&r->job, &r->uid, NULL);
    r->no_caller_uid = zoid_caller()->uid;
    return NULL;
}

int32_t w_running(uint64_t *job, uint32_t *uid, uint32_t *no_caller_uid)
{
    struct running r = { 0, 0, 0, 0 };
    pthread_t t;

    if (pthread_create(&t, NULL, ask, &r) != 0 || pthread_join(t, NULL) != 0) {
        errno = EAGAIN;
        return -1;
    }
    *job = r.job;
    *uid = r.uid;
    *no_caller_uid = r.no_caller_uid;
    return r.rc;
}
