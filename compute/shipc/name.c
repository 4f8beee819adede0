/*
 * name.c - names and the working directory: unlink, rename, mkdir, link,
 * symlink, chown, mknod, chdir, getcwd, umask.  The working directory lives on the I/O
 * node, as on Blue Gene/L.
 */
#include <linux/fcntl.h>

#include <lattice/fwd_posix.h>

#include "internal.h"

/* ---- names: unlink, rename, mkdir ---- */

static long do_unlinkat(struct shipc_call *c, long dirfd, const char *path, int flags)
{
    int rd;
    long ret;

    if (!by_path(c, dirfd, path, &rd, &ret))
        return ret;
    return shipped(c, fwd_unlinkat(rd, flags, path));
}

long shipc_sys_unlink(struct shipc_call *c) { return do_unlinkat(c, AT_FDCWD, PATH(0), 0); }
long shipc_sys_unlinkat(struct shipc_call *c) { return do_unlinkat(c, c->a[0], PATH(1), (int)c->a[2]); }
long shipc_sys_rmdir(struct shipc_call *c) { return do_unlinkat(c, AT_FDCWD, PATH(0), AT_REMOVEDIR); }

/* Two names: both local runs the call, one on each node is EXDEV (as
 * across file systems); *ro, *rn are the remote dirfds when both ship. */
int shipc_two_names(struct shipc_call *c, long od, const char *old, long nd, const char *new,
                     int *ro, int *rn, long *ret)
{
    int a = shipc_path_route((int)od, old, ro);
    int b = shipc_path_route((int)nd, new, rn);

    if (a < 0 || b < 0)
        *ret = answered(c, a < 0 ? a : b);
    else if (a == SHIPC_LOCAL && b == SHIPC_LOCAL)
        *ret = local(c);
    else if (a != b)
        *ret = answered(c, -EXDEV);
    else
        return 1;
    return 0;
}

static long do_rename(struct shipc_call *c, long od, const char *old, long nd, const char *new,
                      unsigned flags)
{
    int ro, rn;
    long ret;

    if (!shipc_two_names(c, od, old, nd, new, &ro, &rn, &ret))
        return ret;
    return shipped(c, fwd_renameat(ro, rn, (int)flags, old, new));
}

long shipc_sys_rename(struct shipc_call *c)
{
    return do_rename(c, AT_FDCWD, PATH(0), AT_FDCWD, PATH(1), 0);
}

long shipc_sys_renameat(struct shipc_call *c)
{
    return do_rename(c, c->a[0], PATH(1), c->a[2], PATH(3), 0);
}

long shipc_sys_renameat2(struct shipc_call *c)
{
    return do_rename(c, c->a[0], PATH(1), c->a[2], PATH(3), (unsigned)c->a[4]);
}

static long do_mkdirat(struct shipc_call *c, long dirfd, const char *path, int mode)
{
    int rd;
    long ret;

    if (!by_path(c, dirfd, path, &rd, &ret))
        return ret;
    return shipped(c, fwd_mkdirat(rd, mode, path));
}

long shipc_sys_mkdir(struct shipc_call *c) { return do_mkdirat(c, AT_FDCWD, PATH(0), (int)c->a[1]); }
long shipc_sys_mkdirat(struct shipc_call *c) { return do_mkdirat(c, c->a[0], PATH(1), (int)c->a[2]); }

/* ---- links, owners, nodes: made on the I/O node, as the job's user ---- */

static long do_linkat(struct shipc_call *c, long od, const char *old, long nd, const char *new, int flags)
{
    int ro, rn;
    long ret;

    if (!shipc_two_names(c, od, old, nd, new, &ro, &rn, &ret))
        return ret;
    return shipped(c, fwd_linkat(ro, rn, flags, old, new));
}

long shipc_sys_link(struct shipc_call *c) { return do_linkat(c, AT_FDCWD, PATH(0), AT_FDCWD, PATH(1), 0); }
long shipc_sys_linkat(struct shipc_call *c)
{
    return do_linkat(c, c->a[0], shipc_empty_ok(PATH(1), (int)c->a[4]), c->a[2], PATH(3), (int)c->a[4]);
}

/* The new name decides; the target is only text. */
static long do_symlinkat(struct shipc_call *c, const char *target, long dirfd, const char *path)
{
    int rd;
    long ret;

    if (!by_path(c, dirfd, path, &rd, &ret))
        return ret;
    if (!target)
        return answered(c, -EFAULT);
    if (strnlen(target, LAT_MAX_PATH) >= LAT_MAX_PATH)
        return answered(c, -ENAMETOOLONG);
    return shipped(c, fwd_symlinkat(rd, target, path));
}

long shipc_sys_symlink(struct shipc_call *c) { return do_symlinkat(c, PATH(0), AT_FDCWD, PATH(1)); }
long shipc_sys_symlinkat(struct shipc_call *c) { return do_symlinkat(c, PATH(0), c->a[1], PATH(2)); }

/* uid and gid -1 (as 32 bits) leave them as they are. */
static int64_t owner_id(long id) { return (uint32_t)id == (uint32_t)-1 ? -1 : (int64_t)(uint32_t)id; }

static long do_fchownat(struct shipc_call *c, long dirfd, const char *path, long uid, long gid, int flags)
{
    int rd;
    long ret;

    if (!by_path(c, dirfd, path, &rd, &ret))
        return ret;
    return shipped(c, fwd_fchownat(rd, owner_id(uid), owner_id(gid), flags, path));
}

long shipc_sys_chown(struct shipc_call *c) { return do_fchownat(c, AT_FDCWD, PATH(0), c->a[1], c->a[2], 0); }
long shipc_sys_lchown(struct shipc_call *c)
{
    return do_fchownat(c, AT_FDCWD, PATH(0), c->a[1], c->a[2], AT_SYMLINK_NOFOLLOW);
}
long shipc_sys_fchownat(struct shipc_call *c)
{
    return do_fchownat(c, c->a[0], shipc_empty_ok(PATH(1), (int)c->a[4]), c->a[2], c->a[3], (int)c->a[4]);
}

long shipc_sys_fchown(struct shipc_call *c)
{
    int r;
    long ret;

    if (!by_fd(c, c->a[0], &r, &ret))
        return ret;
    return shipped(c, fwd_fchownat(r, owner_id(c->a[1]), owner_id(c->a[2]), AT_EMPTY_PATH, ""));
}

/* FIFOs and regular files; devices need a capability ciod's worker lacks. */
static long do_mknodat(struct shipc_call *c, long dirfd, const char *path, long mode, long dev)
{
    int rd;
    long ret;

    if (!by_path(c, dirfd, path, &rd, &ret))
        return ret;
    return shipped(c, fwd_mknodat(rd, (int)(uint32_t)mode, (uint64_t)(uint32_t)dev, path));
}

long shipc_sys_mknod(struct shipc_call *c) { return do_mknodat(c, AT_FDCWD, PATH(0), c->a[1], c->a[2]); }
long shipc_sys_mknodat(struct shipc_call *c) { return do_mknodat(c, c->a[0], PATH(1), c->a[2], c->a[3]); }

/* ---- working directory, umask, modes, times ---- */

/* Always shipped, /proc included: relative names resolve on the I/O node. */
long shipc_sys_chdir(struct shipc_call *c)
{
    const char *path = PATH(0);

    if (!path)
        return local(c);
    if (strnlen(path, LAT_MAX_PATH) >= LAT_MAX_PATH)
        return answered(c, -ENAMETOOLONG);
    return shipped(c, fwd_chdir(path));
}

/* The system call's contract: the length with the NUL, ERANGE if short. */
long shipc_sys_getcwd(struct shipc_call *c)
{
    size_t cap = SHIPC_MIN((size_t)c->a[1], (size_t)LAT_MAX_IO);
    long ret = fwd_getcwd((char *)c->a[0], (int64_t)cap);

    if (ret > 0 && ((size_t)ret > cap || ((char *)c->a[0])[ret - 1] != '\0'))
        ret = -EIO;
    return shipped(c, ret);
}

/* The local umask follows too: /dev/shm files are created here. */
long shipc_sys_umask(struct shipc_call *c)
{
    long mine = ksys1(__NR_umask, c->a[0] & 0777);
    long old = fwd_umask(c->a[0] & 0777);

    return shipped(c, old < 0 ? mine : old);
}
