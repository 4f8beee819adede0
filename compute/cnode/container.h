/*
 * container.h - the kernel container of a job on this node: one cgroup,
 * made fresh for the job, that every process of the job enters before it
 * runs anything of the job's, and that cnode kills whole and removes when
 * the job ends (docs/security.md, "Jobs are sealed in time").
 *
 * The only place that knows cgroups: where the hierarchy is, v2 or v1,
 * how a container is killed and how its end is seen.
 */
#ifndef CNODE_CONTAINER_H
#define CNODE_CONTAINER_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct container {
    char path[600];             /* the job's cgroup directory; "" if none is open */
    int procs;                  /* its cgroup.procs, open for writing (the child writes "0"), or -1 */
};

#define CONTAINER_NONE { .path = "", .procs = -1 }

/* At start: find the hierarchy and check that the block's directory
 * "<root>/NAME" can be made (NAME is the personality's "container", e.g.
 * lattice/S-1a2b3c4d5e6f; it exists only while a job of the block has a
 * container on this host).
 * 0, or -1 and why; a cnode that is not root and finds no place it may
 * write runs jobs without a container (container_required() is then 0). */
int container_setup(const char *name, char *why, size_t len);
int container_required(void);

/* At job start: the job's own cgroup, "<job>-<location>", created (never an
 * existing one).  0, or -1 and why (c stays closed). */
int container_open(struct container *c, uint64_t job, const char *location, char *why, size_t len);

/* fork() for a process of the job: on cgroup v2 the child is born in the
 * container (clone3, CLONE_INTO_CGROUP), which spares it the move that
 * costs ~10 ms on a busy host; *inside says whether it was. */
pid_t container_fork(const struct container *c, int *inside);

/* In the child between fork and exec (async-signal-safe), still root:
 * enter the container; for a job of root (which owns the cgroup files even
 * without capabilities) also a mount namespace where every cgroup file
 * system is read-only, so that it cannot move itself out either.  0, or -1
 * with errno.  container_entered: the same for a child born inside. */
int container_enter(const struct container *c, int root_job);
/* Before the first fork of a job of root: every cgroup file system's mount
 * point, from mountinfo (once in the cnode's life: a line per mount). */
void container_note_points(void);
int container_entered(const struct container *c, int root_job);

/* A descriptor of the container's directory for clone3's CLONE_INTO_CGROUP
 * (cgroup v2; container_fork), or -1 if there is none (v1; closed). */
int container_clone_fd(const struct container *c);

/* At job end: kill every process in it, wait until it is empty (an event,
 * not a time window; LATTICE_CONTAINER_WAIT seconds at most, 30 unless set)
 * and remove it (and the block's directory if no other job is there).  0,
 * or -1 and why (then the directory stays, for the host agent's sweep).  Closes c either way; nothing to do if c is closed. */
int container_seal(struct container *c, char *why, size_t len);

/* The container's directory, open (O_DIRECTORY), or -1: the sandbox's
 * holder keeps it for container_kill_others, its mount namespace having no
 * cgroup file system. */
int container_dir(const struct container *c);

/* From a process inside the container dir names (the sandbox's holder, once
 * cnode died): SIGKILL to every other process of it this process can see,
 * until none is left or a bound number of rounds passed (a process forking
 * as fast as it is killed is the agent's sweep's).  Not frozen first: the
 * caller would freeze itself. */
void container_kill_others(int dir);

#endif
