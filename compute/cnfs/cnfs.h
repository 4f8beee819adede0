/*
 * cnfs.h - lattice-fs, the job's FUSE file client on a Linux compute node
 * (README.md here): shared by its files.
 *
 *   main.c   arguments, the /dev/fuse descriptor from cnode, the session, the end
 *   entry.c  the shipping core's entry hooks (compute/shipc/entry.h)
 *   node.c   the inode table: FUSE node ids to paths on the I/O node, and
 *            the stamp of the version of each file the page cache holds
 *   ops.c    every FUSE operation, shipped to ciod (lattice/fwd_posix.h)
 *   behind.c write-through writes answered before the I/O node has them
 *   attr.c   lat_stat and lat_statfs to struct stat and struct statvfs
 */
#ifndef CNFS_H
#define CNFS_H

#define FUSE_USE_VERSION 312

#include <fuse_lowlevel.h>
#include <limits.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include <lattice/wire.h>

/* How long the kernel may trust an entry or attributes without asking
 * again: the bound on how stale one node's view of another node's change
 * can be (README.md "Consistency"). */
#define CNFS_TIMEOUT 1.0
/* The largest read or write one FUSE request carries (max_pages 256). */
#define CNFS_MAX_IO (1u << 20)
/* Writes through the cache of at least this many bytes go behind (behind.c). */
#define CNFS_BEHIND_MIN (64u << 10)
/* A receive buffer: libfuse reads up to 256 pages and a header. */
#define CNFS_RECV_BYTES (CNFS_MAX_IO + 64 * 1024)

/* ---- node.c: FUSE node ids <-> files of the I/O node, and their paths ---- */
/* Node id FUSE_ROOT_ID is "/", the I/O node's root; every other id is a
 * node of the table, one per (device, inode) of the I/O node, reached by
 * the path it was last looked up by.  All functions lock. */
void node_init(void);
/* The path of id into buf (PATH_MAX): 0, or -ESTALE (forgotten), -ENAMETOOLONG */
int node_path(fuse_ino_t id, char *buf);
/* parent's path + "/" + name into buf: 0, -ESTALE, -ENAMETOOLONG, -EINVAL (a name with '/', "." or "..") */
int node_child(fuse_ino_t parent, const char *name, char *buf);
/* The node of the file (dev, ino), made if new, path its latest name, its
 * lookup count raised by one: its id, 0 if out of memory */
fuse_ino_t node_ref(const char *path, uint64_t dev, uint64_t ino);
/* path was unlinked (or removed): the node it named is reached by its other names only. */
void node_unlinked(const char *path);
/* The kernel forgot n lookups of id: the node goes at 0. */
void node_forget(fuse_ino_t id, uint64_t n);
/* from was renamed to to: every name at or below from moves; those at or
 * below to (what the rename replaced) are gone. */
void node_rename(const char *from, const char *to);
/* Nodes in the table (for tests and the end line). */
size_t node_count(void);

/* What the kernel's page cache of a file holds, against the I/O node's
 * file (close-to-open, as NFS): a stamp (size, mtime, ctime) of the
 * version the cache holds.  The root and unknown ids have none. */
/* At an open: st the file's attributes now.  1: the cache holds this
 * version, keep it; 0: drop it (keep_cache 0).  Either way st is the stamp.
 * *stale: the kernel's attributes are stale too (another version than the
 * one stamped, or another size than it was last told): drop them. */
int node_cache_open(fuse_ino_t id, const struct stat *st, int *stale);
/* At fsync or a lock of an open that reads through the cache: st the file
 * now.  0: the cache holds it; 1: it does not (another node changed it):
 * st is the stamp now, the cache and the kernel's attributes must go. */
int node_cache_check(fuse_ino_t id, const struct stat *st);
/* The kernel was told size as the file's (a lookup's, getattr's, create's reply). */
void node_told(fuse_ino_t id, off_t size);
/* Changed through the cache (a write-through write, a setattr): the cache
 * follows the file, the stamp is stale until node_cache_stamp. */
void node_cache_wrote(fuse_ino_t id);
/* Changed past the cache (a direct_io write, fallocate): it no longer holds the file. */
void node_cache_drop(fuse_ino_t id);
/* st: the attributes right after this node's own changes: the new stamp,
 * if the cache followed every change since the last one. */
void node_cache_stamp(fuse_ino_t id, const struct stat *st);

/* ---- attr.c ---- */
void attr_from_lat(struct stat *st, const struct lat_stat *ls);
/* A struct statx from the I/O node: 0 and *dev its device, or -EIO */
struct lat_statx;
int attr_from_statx(struct stat *st, uint64_t *dev, const struct lat_statx *lx);
void statvfs_from_lat(struct statvfs *sv, const struct lat_statfs *ls);
/* A node's inode number as the job sees it: the I/O node's, folded with
 * its device so two trees on different file systems do not collide. */
uint64_t attr_ino(uint64_t dev, uint64_t ino);

/* ---- ops.c ---- */
extern const struct fuse_lowlevel_ops cnfs_ops;
extern __thread char *cnfs_rbuf;       /* this serving thread's read buffer (CNFS_MAX_IO) */
extern int cnfs_direct_writes;          /* --writes direct: write-only opens bypass the page cache too */
extern struct fuse_session *cnfs_se;    /* for notifications to the kernel */

/* ---- behind.c: one write shipped while the program goes on ---- */
/* Ship buf (size bytes at off of remote rfd) on the writer thread, after
 * the one before it; its error, if any, goes to *err.  0, or -1 when there
 * is no thread (the caller ships it itself). */
int behind_post(int *err, int rfd, const char *buf, size_t size, off_t off);
/* Until no write is behind. */
void behind_drain(void);
/* The write behind is in the receive buffer that starts at buf. */
int behind_holds(const char *buf);

/* ---- entry.c ---- */
/* The connection broke: the one line was said; the session ends. */
void cnfs_lost(const char *why);
void cnfs_set_session(struct fuse_session *se);

#endif
