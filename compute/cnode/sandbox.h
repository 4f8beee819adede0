/*
 * sandbox.h - the node sandbox of a Linux-mode job (flag LAT_JOB_SANDBOX):
 * per job and compute node, a holder process in new mount and UTS
 * namespaces, the block's pid and IPC namespaces on this host (or new ones
 * of the node's, pid 1 of its own then) and the node's network namespace,
 * that builds the node's file view and waits.
 * Each process of the job enters its namespaces (sandbox_enter) and forks
 * once more to be inside its pid namespace (docs/architecture.md, "Linux
 * nodes: the sandbox").
 *
 * The one place that knows what a Linux host must offer for it: namespaces,
 * pidfds, /proc, /dev, /dev/shm, pivot_root.
 */
#ifndef CNODE_SANDBOX_H
#define CNODE_SANDBOX_H

#include <stddef.h>
#include <sys/types.h>

struct job;
struct fs;

struct sandbox {
    pid_t pid;          /* the holder (cnode's child), 0 if none */
    int pidfd;          /* readable when the holder ended; -1 if none */
    int shm;            /* the block's shared memory directory (O_PATH), or -1 */
    int shmlock;        /* the job's lock file there, held shared while the job runs here; -1 */
    int ipcns;          /* the block's IPC namespace, or -1 (the holder made its own) */
    char shmjob[32];    /* the job's directory in it: "job-ID" */
};

#define SANDBOX_NONE { .pid = 0, .pidfd = -1, .shm = -1, .shmlock = -1, .ipcns = -1, .shmjob = "" }

/* Where the host's hwloc topology (topology.c) is inside the sandbox. */
#define SANDBOX_TOPOLOGY "/run/lattice-hwloc.xml"

/* At job start, after the job's container is open and its file client
 * started (fs; NULL if the job has no file trees): the holder made, in the
 * job's container, its file view built, the trees mounted (fs_mount).  0,
 * or -1 with one line in why naming what failed (and --no-sandbox as the
 * way out). */
int sandbox_start(struct sandbox *sb, const struct job *j, struct fs *fs, char *why, size_t len);

/* In a process's child between fork and exec (async-signal-safe), still
 * root: enter the holder's namespaces and chdir to cwd inside them.  The
 * caller then forks once more (the pid namespace holds only children).
 * 0, or -1 with errno. */
int sandbox_enter(const struct sandbox *sb, const char *cwd);

/* Has the process (a child of cnode's: its pid cannot be reused) ended or
 * begun to (in the kernel's exit path, PF_EXITING)?  The holder's death
 * (pid 1 of a node's own pid namespace) kills its namespace's processes
 * before its own end is seen on its pidfd, lattice-fs's breaks their files
 * before: job.c asks this before it reports how a process ended. */
int sandbox_pid_ending(pid_t pid, int pidfd);

/* At job end, after its container was killed: the holder killed (if it
 * still lives) and reaped.  Safe on a sandbox that never started. */
void sandbox_stop(struct sandbox *sb);

#endif
