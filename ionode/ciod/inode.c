/*
 * inode.c - the shipped calls that make links and nodes, change owners and
 * reserve space: symlinkat, linkat, fchownat, mknodat, fallocate.  Like
 * every shipped call they run in the job's worker, which holds the owner's
 * identity and no capability: the kernel decides (chown to another user,
 * or a device node, is EPERM as it would be for the owner at a shell).
 */
#include "shipcall.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

int srv_symlinkat(struct proc *p, struct call *k, int newdirfd, const char *target, const char *path)
{
    int dir;

    if (!at_dir(p, k, newdirfd, path, &dir))
        return 0;
    coll_changed();
    return result(k, symlinkat(target, dir, path));
}

int srv_linkat(struct proc *p, struct call *k, int olddirfd, int newdirfd, int flags, const char *from,
               const char *to)
{
    int odir, ndir;

    /* AT_EMPTY_PATH links the open file itself: its descriptor is olddirfd */
    if (!at_dir(p, k, olddirfd, (flags & AT_EMPTY_PATH) && !from[0] ? NULL : from, &odir) ||
        !at_dir(p, k, newdirfd, to, &ndir))
        return 0;
    coll_changed();
    return result(k, linkat(odir, from, ndir, to, flags));
}

int srv_fchownat(struct proc *p, struct call *k, int dirfd, int64_t uid, int64_t gid, int flags,
                 const char *path)
{
    int dir;

    if (!at_dir(p, k, dirfd, (flags & AT_EMPTY_PATH) && !path[0] ? NULL : path, &dir))
        return 0;
    coll_changed();
    return result(k, fchownat(dir, path, (uid_t)uid, (gid_t)gid, flags));
}

int srv_mknodat(struct proc *p, struct call *k, int dirfd, int mode, uint64_t dev, const char *path)
{
    int dir;

    if (!at_dir(p, k, dirfd, path, &dir))
        return 0;
    coll_changed();
    return result(k, mknodat(dir, path, (mode_t)mode, (dev_t)dev));
}

int srv_fallocate(struct proc *p, struct call *k, struct rfd *r, int mode, int64_t off, int64_t len)
{
    int fd;

    (void)p;
    if (!real_fd(k, r, ESPIPE, &fd))
        return 0;
    return result(k, fallocate(fd, mode, (off_t)off, (off_t)len));
}
