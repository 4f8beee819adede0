/*
 * job.h - one job on this node, shared by job.c (receiving, supervising),
 * launch.c (starting the processes) and report.c (cnk's report line).
 */
#ifndef CNODE_JOB_H
#define CNODE_JOB_H

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cnode.h"
#include "container.h"
#include "fs.h"
#include "sandbox.h"

#include "../include/lattice/cnk_report.h"   /* path-relative: cnode builds with -Iprotocol only */

#define MAX_GROUPS 65536u
#define PIPE_CHUNK 65536

/* descriptors in the child just before exec */
enum { CHILD_PROC_FD = 3, CHILD_IMAGE_FD = 4, CHILD_ERR_FD = 5, CHILD_REPORT_FD = CNK_REPORT_FD,
       CHILD_KERNEL_FD = 7, CHILD_PMI_FD = 8,
       CHILD_SEQ_FD = CHILD_REPORT_FD };   /* Linux mode: the page of the connection's seq counter */
_Static_assert(CNK_REPORT_FD == 6, "cnk's report descriptor follows the error pipe");
#define REPORT_BYTES 4096

enum state { IDLE, LOADING, RUNNING };

/* One compute process of the job on this node. */
struct proc {
    uint32_t rank, t, app;
    pid_t pid;
    int pidfd;
    int out[3];                 /* [1], [2]: read ends of the stdout/stderr pipes, -1 at EOF */
    int pmi;                    /* our end of its PMI socketpair, -1 if closed */
    int reportfd;               /* cnk jobs: the report page, -1 otherwise */
    const uint32_t *cpu;        /* LAT_JOB_CPUS: the CPUs to bind it to (into the job's desc), else NULL */
    uint32_t ncpus;
    int32_t progress;           /* MPIR_CVAR_ASYNC_PROGRESS to add, or LAT_PROGRESS_UNSET */
    int started, exited, status, done;
};

struct job {
    const struct personality *pers;
    const struct kernels *k;
    int conn;
    uint32_t seq;               /* of the last message sent on conn (ciod checks they increase) */
    enum state state;

    struct lat_node_job nj;
    uint8_t *desc;              /* copy of the JOB payload */
    uint32_t *groups;
    char **argv[LAT_MAX_APPS], **env;   /* point into desc */
    uint32_t napps, ppn, nprocs, left;  /* left: processes that have not reported their end */
    int placed;                 /* LAT_JOB_PLACED: per-process personality (mode, memory share, t) */
    uint32_t stdin_rank;        /* LAT_JOB_STDIN: the rank reading the job's input, or LAT_STDIN_ALL */
    uint64_t image_size[LAT_MAX_APPS];
    int memfd[LAT_MAX_APPS];
    uint64_t received;
    struct proc *proc;          /* nprocs of them used; room for nroom (no fixed cap: vn mode runs one per core) */
    uint32_t nroom;
    struct container box;       /* the job's cgroup on this node (container.h), from START to its end */
    struct sandbox sb;          /* LAT_JOB_SANDBOX: the node sandbox's holder (sandbox.h), from START to its end */
    struct fs fs;               /* and its file client (fs.h), if the job has file trees */
    char unsealed[512];         /* why it could not be emptied, for the last exit message; "" if it was */
};

/* job.c */
void proc_failed(struct job *j, struct proc *p, int err, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void launch_failed(struct job *j, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int is_cnk(const struct job *j);
int sandboxed(const struct job *j);     /* LAT_JOB_SANDBOX: Linux mode in the node sandbox */
/* the job's processes are over: kill what is left in its container and remove it */
void job_seal(struct job *j);

/* launch.c: a job of root is root without capabilities (its processes, its file client) */
int drop_capabilities(void);
/* launch.c: START came; every process of the job is started (or the job fails) */
void launch_start(struct job *j, const struct msg *m);

/* stdin_pump.c: does this process read the job's standard input through a
 * pump (a sandboxed job with LAT_JOB_STDIN, its reading rank)?  And the
 * pump started: the read end of the pipe it feeds (close-on-exec), the
 * process's descriptor 0; or -1 and why. */
int stdin_reads(const struct job *j, const struct proc *pr);
int stdin_pump(struct job *j, const struct proc *pr, char *why, size_t len);

/* report.c: cnk's report page as cnk left it (0 if it never wrote it), and its line */
int report_read(const struct proc *p, struct cnk_report *r);
void report_line(const struct cnk_report *r, char *buf, size_t len);

#endif
