/*
 * identity.c - act as the job owner, one thread at a time.
 *
 * Linux keeps credentials per thread; only the glibc wrappers of
 * setgroups/setuid/... broadcast a change to every thread of the process.
 * So the raw setgroups system call plus setfsgid/setfsuid (never
 * broadcast) change the file-system identity of the calling thread alone:
 * one job's files are opened as its owner while other threads keep theirs.
 * Setting a non-zero fsuid also drops the file-system capabilities
 * (CAP_DAC_OVERRIDE, CAP_FOWNER, ...) of that thread, as the kernel does.
 */
#include "ciod.h"

#include <errno.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static bool is_root;
static gid_t saved_groups[CIOD_MAX_GROUPS * 4];
static int saved_ngroups;

void ident_init(void)
{
    is_root = geteuid() == 0;
    saved_ngroups = getgroups(sizeof(saved_groups) / sizeof(saved_groups[0]), saved_groups);
    if (saved_ngroups < 0)
        saved_ngroups = 0;
}

bool ident_is_root(void)
{
    return is_root;
}

/* Not root: the caller checked that the job runs as ciod's own user. */
int ident_enter(const struct ident *who)
{
    if (!is_root)
        return 0;
    if (syscall(SYS_setgroups, (size_t)who->ngroups, who->groups) < 0)
        return errno;
    setfsgid(who->gid);
    setfsuid(who->uid);
    /* setfs*id report the old value, not failure: read back to be sure. */
    if ((uint32_t)setfsgid(-1) != who->gid || (uint32_t)setfsuid(-1) != who->uid) {
        ident_leave();
        return EPERM;
    }
    return 0;
}

void ident_leave(void)
{
    if (!is_root)
        return;
    setfsuid(geteuid());
    setfsgid(getegid());
    if (syscall(SYS_setgroups, (size_t)saved_ngroups, saved_groups) < 0) {
        /* cannot happen as root; the thread keeps the job's groups at worst */
    }
}

/* Would `who` get `mode` (R_OK|W_OK|X_OK bits) on a file like st? */
bool ident_may(const struct ident *who, const struct stat *st, int mode)
{
    unsigned shift, bits;

    if (who->uid == 0) {
        /* root may execute only if someone may */
        if ((mode & X_OK) && !S_ISDIR(st->st_mode) && !(st->st_mode & 0111))
            return false;
        return true;
    }
    if (st->st_uid == who->uid) {
        shift = 6;
    } else {
        bool member = st->st_gid == who->gid;
        for (uint32_t i = 0; !member && i < who->ngroups; i++)
            member = st->st_gid == who->groups[i];
        shift = member ? 3 : 0;
    }
    bits = (st->st_mode >> shift) & 7;
    return (bits & (unsigned)mode) == (unsigned)mode;
}
