/*
 * attr.c - the I/O node's answers (struct lat_stat, struct lat_statfs:
 * Linux's layouts, wire.h) as the structs libfuse replies with.
 */
#include <string.h>

#include "cnfs.h"

uint64_t attr_ino(uint64_t dev, uint64_t ino)
{
    /* the I/O node's numbers as they are on its root's device; the device
     * folded into the high bits elsewhere (inode numbers rarely use them) */
    static uint64_t root_dev;
    static int have_root;
    if (!have_root) {
        root_dev = dev;
        have_root = 1;
    }
    if (dev == root_dev)
        return ino;
    return ino ^ (dev * 0x9e3779b97f4a7c15ull & 0xffff000000000000ull);
}

void attr_from_lat(struct stat *st, const struct lat_stat *ls)
{
    memset(st, 0, sizeof *st);
    st->st_ino = attr_ino(ls->dev, ls->ino);
    st->st_nlink = ls->nlink;
    st->st_mode = ls->mode;
    st->st_uid = ls->uid;
    st->st_gid = ls->gid;
    st->st_rdev = ls->rdev;
    st->st_size = ls->size;
    st->st_blksize = ls->blksize;
    st->st_blocks = ls->blocks;
    st->st_atim.tv_sec = ls->atime_sec;
    st->st_atim.tv_nsec = ls->atime_nsec;
    st->st_mtim.tv_sec = ls->mtime_sec;
    st->st_mtim.tv_nsec = ls->mtime_nsec;
    st->st_ctim.tv_sec = ls->ctime_sec;
    st->st_ctim.tv_nsec = ls->ctime_nsec;
}

void statvfs_from_lat(struct statvfs *sv, const struct lat_statfs *ls)
{
    memset(sv, 0, sizeof *sv);
    sv->f_bsize = (unsigned long)ls->bsize;
    sv->f_frsize = (unsigned long)(ls->frsize ? ls->frsize : ls->bsize);
    sv->f_blocks = ls->blocks;
    sv->f_bfree = ls->bfree;
    sv->f_bavail = ls->bavail;
    sv->f_files = ls->files;
    sv->f_ffree = ls->ffree;
    sv->f_favail = ls->ffree;
    sv->f_fsid = ls->fsid;
    sv->f_namemax = (unsigned long)ls->namelen;
}
