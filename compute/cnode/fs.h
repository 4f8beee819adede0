/*
 * fs.h - the job's file client on this node (Linux mode in the sandbox).
 *
 * A lattice-fs process (compute/cnfs/) serves a FUSE file system whose
 * every operation goes to this pset's ciod on a PROC connection of its own
 * and is performed there by the job's I/O worker under the owner's identity.
 * It runs in cnode's namespaces as the job owner without capabilities; the
 * sandbox (sandbox.c) mounts its file system inside the node's mount
 * namespace and binds the job's trees (LATTICE_FS_TREES: the working
 * directory first, then more trees) at their own paths.
 */
#ifndef CNODE_FS_H
#define CNODE_FS_H

#include <stddef.h>
#include <sys/types.h>

struct job;

struct fs {
    pid_t pid;          /* the lattice-fs process, 0 if none */
    int pidfd;          /* polled by job.c: readable when lattice-fs ended; -1 if none */
    int ctl;            /* cnode's end of the socketpair the /dev/fuse descriptor goes over; -1 */
    char **trees;       /* from LATTICE_FS_TREES: trees[0] is the working directory; NULL-terminated */
    uid_t uid;          /* the job owner: the mount's user_id, group_id */
    gid_t gid;
    int direct_writes;  /* LATTICE_FS_WRITES=direct: write-only opens bypass the page cache */
};

/* A fs that never started (fs_stop is safe on it). */
#define FS_NONE { .pid = 0, .pidfd = -1, .ctl = -1, .trees = NULL }

/* Start the job's file client, before the sandbox's namespaces are made.
 * 0, or -1 with one line in why. */
int fs_start(struct fs *fs, const struct job *j, char *why, size_t len);

/* In the sandbox's holder (root, in the job's new mount namespace, before
 * pivot_root): mount the FUSE file system and bind each tree at its own
 * path below root.  0, or -1 with one line in why. */
int fs_mount(struct fs *fs, const char *root, char *why, size_t len);

/* The job's working directory inside the sandbox (trees[0]). */
const char *fs_cwd(const struct fs *fs);

/* At the job's end, after its processes are gone: lattice-fs killed and
 * reaped, descriptors closed; safe on a fs that never started. */
void fs_stop(struct fs *fs);

#endif
