/*
 * pmi_engine.h - the PMI engine of one job in one pset (docs/protocol.md
 * section 10): it frames, parses and answers the processes' PMI-1 and PMI-2
 * commands, keeps the key/value space and counts the fence.
 *
 * It knows nothing of connections: the caller (pmi.c) hands it the bytes a
 * process wrote on its PMI_FD, in whatever pieces they came, and what the
 * service node sent to end a fence; the engine answers through the callbacks
 * of struct pmi_ops, each called before the entry point returns.  It is not
 * thread safe: the caller serializes the calls of one engine.
 */
#ifndef PMI_ENGINE_H
#define PMI_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <lattice/wire.h>

struct pmi_engine;

/* The longest PMI_process_mapping served.  get_maxes says values may have
 * LAT_PMI_VAL_MAX (1024) characters, but MPICH 4.0.2's PMI-1 client aborts
 * MPI_Init on a mapping of 681 characters or more (673 was read; measured
 * with 128 ranks on irregular map files, docs/protocol.md section 10); one
 * not served makes it find the ranks that share a node by itself. */
#define PMI_MAPPING_MAX 640u

/* A process of the job in this pset. */
struct pmi_dest {
    uint32_t slot;                  /* its index in pmi_job.slot */
    uint32_t rank, node;
};

/* Where the engine's effects go; ctx is the one given to the entry point. */
struct pmi_ops {
    /* One complete answer for a process: a PMI-1 line with its newline, or
     * a PMI-2 command with its length prefix. */
    void (*answer)(void *ctx, const struct pmi_dest *to, const char *data, size_t len);
    /* Every process of the pset (and every I/O node below this one in the
     * job's PMI fence tree) entered the fence: n LAT_CTL_FENCE payloads
     * (struct lat_fence + key\0value\0 ...) back to back in msg, len[i]
     * bytes each, for the I/O node above (or the service node), kept together. */
    void (*fence)(void *ctx, const char *msg, const size_t *len, int n);
    /* A process aborted, or left without finalize: no answer; the job ends. */
    void (*abort)(void *ctx, const struct pmi_dest *who, int code, const char *msg);
    /* A process asked the name service (MPI_Publish_name and friends): op
     * is LAT_NAME_*, port "" unless publishing.  The request goes to the
     * service node, the answer comes back through pmi_engine_name_out. */
    void (*name)(void *ctx, const struct pmi_dest *who, int op, const char *service, const char *port);
    /* A process's request was bad and got an error answer; text says why. */
    void (*bad_request)(void *ctx, const struct pmi_dest *who, const char *text);
    /* Something the engine could not do (out of memory), for the log. */
    void (*note)(void *ctx, const char *text);
    /* A fence cannot complete: an I/O node below this one is gone before
     * joining it.  The job must end; said once per job. */
    void (*broken)(void *ctx, const char *text);
};

/* What one job's PMI may hold in one I/O node (docs/protocol.md section 10,
 * "Bounds"): a put past one of them gets an error reply with the reason
 * and a RAS event, never more of ciod's memory.  0 in a field: its default. */
struct pmi_limits {
    uint32_t job_keys;              /* keys in the job's key space and node attributes here */
    size_t   job_bytes;             /* their bytes, with the puts waiting for the fence */
    uint32_t proc_keys;             /* puts of one process since it last entered a fence */
    size_t   proc_bytes;            /* their bytes */
};
#define PMI_JOB_KEYS   131072u
#define PMI_JOB_BYTES  ((size_t)32 << 20)
#define PMI_PROC_KEYS  4096u
#define PMI_PROC_BYTES ((size_t)4 << 20)

struct pmi_job {
    uint64_t               id;          /* the kvsname is "lattice-ID" */
    uint32_t               nranks;      /* of the whole job */
    uint32_t               nslots;      /* its processes in this pset */
    const struct lat_slot *slot;        /* [nslots]: rank, node, app */
    const char            *mapping;     /* PMI_process_mapping, "" if none; served only
                                           up to PMI_MAPPING_MAX characters */
    bool                   tree;        /* LAT_JOB_TREE: no fence goes up before pmi_engine_tree */
    struct pmi_limits      lim;
};

/* NULL if out of memory.  ops is kept, not copied. */
struct pmi_engine *pmi_engine_new(const struct pmi_job *job, const struct pmi_ops *ops);
void pmi_engine_free(struct pmi_engine *e);         /* NULL is fine */

/* The slot of rank, -1 if it has none here; *node: the slot's node. */
int  pmi_engine_slot(const struct pmi_engine *e, uint32_t rank, uint32_t *node);

/* Bytes the process of slot wrote: every complete command in what it wrote
 * so far is served, most answered at once; a fence is answered at its
 * FENCE_OUT, a waiting info-getnodeattr at the put.  An abort stops this
 * call's work. */
void pmi_engine_input(struct pmi_engine *e, uint32_t slot, const char *data, size_t len, void *ctx);

/* The process of slot exited with status: one that sent init but neither
 * finalize nor abort has left MPI, and the others would wait for it
 * forever, so it aborts (status, or 1 if 0), as Hydra does. */
void pmi_engine_exit(struct pmi_engine *e, uint32_t slot, int status, void *ctx);

/* A LAT_CTL_FENCE_OUT payload: 0, or -1 (why set) if it is malformed. */
int  pmi_fence_check(const char *p, size_t len, char *why, size_t whylen);
/* A FENCE_OUT that passed pmi_fence_check: its keys are stored, and the
 * last chunk releases every process of the fence.  false: it matches no
 * fence waiting here (nothing changed). */
bool pmi_engine_fence_out(struct pmi_engine *e, const char *p, void *ctx);

/* LAT_CTL_PMI_TREE of a tree job: this pset's fence also waits for the
 * fences of nchildren I/O nodes below it (0: none), whose chunks may come
 * from now on.  -1: not a tree job, told twice, or out of memory. */
int  pmi_engine_tree(struct pmi_engine *e, uint32_t nchildren);
/* The way up is open (connected to the I/O node above): fences go up from now. */
void pmi_engine_tree_up(struct pmi_engine *e, void *ctx);
/* This pset's fence went up and waits for its FENCE_OUT. */
bool pmi_engine_fence_waits(const struct pmi_engine *e);
/* A LAT_CTL_FENCE chunk (passed pmi_fence_check) from child 0..nchildren-1:
 * its keys go up with this pset's; its last chunk counts it in.  -1 (why
 * set) if the child is not one, or the fence is not the one under way. */
int  pmi_engine_child_fence(struct pmi_engine *e, uint32_t child, const char *p, char *why, size_t whylen,
                            void *ctx);
/* The connection of a child ended: a fence it has not joined cannot
 * complete (ops->broken, now or when the next fence starts). */
void pmi_engine_child_gone(struct pmi_engine *e, uint32_t child, void *ctx);

/* The service node's answer to rank's name request (rc 0: done; port: a
 * lookup's).  false: rank has no name request waiting (nothing changed). */
bool pmi_engine_name_out(struct pmi_engine *e, uint32_t rank, int op, int rc, const char *port, void *ctx);

/* ---- kvs.c: the string -> string table of the key/value space ---- */

struct kvs;
struct kvs *kvs_new(void);
void kvs_free(struct kvs *t);
const char *kvs_get(const struct kvs *t, const char *key);
int  kvs_put(struct kvs *t, const char *key, const char *val);   /* 0, -1: out of memory */
uint32_t kvs_count(const struct kvs *t);
size_t   kvs_bytes(const struct kvs *t);   /* its strings and entry headers */
/* What kvs_put(key, val) would add to kvs_bytes (0 if it shrinks a value);
 * *isnew: the key is not there yet. */
size_t   kvs_cost(const struct kvs *t, const char *key, const char *val, bool *isnew);

#endif
