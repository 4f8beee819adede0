/*
 * cnfs.h - lattice-fs, the job's FUSE file client on a Linux compute node
 * (README.md here): shared by its files.
 *
 *   main.c   arguments, the /dev/fuse descriptor from cnode, the session, the end
 *   entry.c  the shipping core's entry hooks (compute/shipc/entry.h)
 *   node.c   the inode table: FUSE node ids to paths on the I/O node
 *   ops.c    every FUSE operation, shipped to ciod (lattice/fwd_posix.h)
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

/* ---- node.c: FUSE node ids <-> absolute paths on the I/O node ---- */
/* Node id FUSE_ROOT_ID is "/", the I/O node's root; every other id is a
 * node of the table, found again by its path.  All functions lock. */
void node_init(void);
/* The path of id into buf (PATH_MAX): 0, or -ESTALE (forgotten), -ENAMETOOLONG */
int node_path(fuse_ino_t id, char *buf);
/* parent's path + "/" + name into buf: 0, -ESTALE, -ENAMETOOLONG, -EINVAL (a name with '/', "." or "..") */
int node_child(fuse_ino_t parent, const char *name, char *buf);
/* The node of path, made if new, its lookup count raised by one: its id, 0 if out of memory */
fuse_ino_t node_ref(const char *path);
/* The kernel forgot n lookups of id: the node goes at 0. */
void node_forget(fuse_ino_t id, uint64_t n);
/* from was renamed to to: every node at or below from moves (one at to goes away from the index). */
void node_rename(const char *from, const char *to);
/* Nodes in the table (for tests and the end line). */
size_t node_count(void);

/* ---- attr.c ---- */
void attr_from_lat(struct stat *st, const struct lat_stat *ls);
void statvfs_from_lat(struct statvfs *sv, const struct lat_statfs *ls);
/* A node's inode number as the job sees it: the I/O node's, folded with
 * its device so two trees on different file systems do not collide. */
uint64_t attr_ino(uint64_t dev, uint64_t ino);

/* ---- ops.c ---- */
extern const struct fuse_lowlevel_ops cnfs_ops;
extern __thread char *cnfs_rbuf;       /* this serving thread's read buffer (CNFS_MAX_IO) */

/* ---- entry.c ---- */
/* The connection broke: the one line was said; the session ends. */
void cnfs_lost(const char *why);
void cnfs_set_session(struct fuse_session *se);

#endif
