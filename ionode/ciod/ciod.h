/*
 * ciod.h - shared declarations of the I/O node daemon.
 *
 * ciod serves one pset: the service node's control connections, one node
 * connection per compute node, and one function-shipping (PROC) connection
 * per compute process.  Every connection runs on its own thread; the only
 * state they share is the configuration (read-only after start), the job
 * table in job.c (under its mutex), the running job's PMI engine (pmi.c,
 * under its own lock) and the call counters (atomics).
 *
 * Lock order, to stay deadlock free:  conn.wlock of a control connection
 * -> conn.wlock of a node connection -> the job table lock.  Nobody holds
 * the job table lock while writing to a socket.
 */
#ifndef CIOD_H
#define CIOD_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <lattice/seal.h>
#include <lattice/wire.h>

#define CIOD_MAX_GROUPS 256u        /* lat_job.ngroups limit */
#define CIOD_ERRLEN     256u        /* fixed error-text buffers (no malloc on error paths) */
#define NSYS            (LAT_SYS__END - LAT_SYS__BASE)

/* Configuration from the command line; read-only once threads run. */
struct ciod_config {
    const char *block;
    uint32_t    pset;
    uint32_t    pset_size;
    const char *listen;             /* where the pset's compute nodes connect (and the service node, on one host) */
    const char *listen_also;        /* a second address, e.g. tcp: for a service node on another host; or NULL */
    int         notify_fd;          /* --notify-fd: "listening ADDR" and "ready" lines for the host agent; or -1 */
    const char *location;           /* this I/O node's location */
    uint8_t     key[LAT_KEY_BYTES];
    char       *title;                  /* argv's bytes, for a worker's name in ps */
    size_t      titlelen;
};
extern struct ciod_config cfg;

/* Shipped calls executed since start, indexed by type - LAT_SYS__BASE
 * (in memory the workers share with the monitor: datapath_init). */
extern atomic_uint_fast64_t *sys_calls;

/* ---- net.c: addresses, connections, framed messages ---- */

#define CONN_RA 4096

struct conn {
    int             fd;
    atomic_int      refs;           /* the thread serving it + anyone sending to it */
    pthread_mutex_t wlock;          /* one writer at a time: messages never interleave */
    char           *buf;            /* the only receive buffer: LAT_MAX_PAYLOAD bytes */
    char            peer[96];       /* for diagnostics */
    char            who[72];        /* the peer's identity for RAS folding: "uid N" or the host */
    struct conn    *pnext, *pprev;  /* admit.c: the list of connections waiting for their hello */
    bool            pending;        /* admit.c: on that list (under its lock) */
    bool            evicted;        /* admit.c: shut down to make room for a newer one */
    /* the handshake (auth.c) and the seq rule (conn_recv), docs/protocol.md 3 */
    uint8_t         nonce_srv[LAT_NONCE_BYTES], nonce_cli[LAT_NONCE_BYTES];
    bool            authed;         /* the hello's mac was right: acks carry a proof */
    bool            seq_seen;       /* a message was received: seq_last is its seq */
    uint32_t        seq_last;
    uint32_t        seq_out;        /* the last seq sent, on a PMI tree connection (under wlock) */
    /* sealed frames on a link between hosts (docs/protocol.md 3.3): keys
     * derived at the hello (seal_next), live once our ack is sent (seal) */
    bool            tcp;            /* a socket between hosts: sealed after the hello */
    struct lat_seal_keys *seal_next;
    struct lat_seal *seal;          /* every frame each way goes through it (send: under wlock) */
    uint8_t        *sbuf;           /* sealing scratch (CONN_SBUF bytes, under wlock) */
    /* read-ahead: a small message arrives in one read, header and payload
     * (conn_recv, dp_spin); the bytes of the next message may wait here */
    uint32_t        ra_pos, ra_len;
    char            ra[CONN_RA];
    /* a process's connection in its job's worker (worker.c, ship.c): which
     * process, and whether its thread is in a call other than a write of the
     * job's output (nothing the process sent before can still be unserved) */
    uint32_t        proc_node, proc_t;
    atomic_bool     in_call, watched;
};

#define CONN_SBUF (64u * 1024u)

int  net_listen(const char *addr, char *err, size_t errlen);
void net_unlink(const char *addr);
struct conn *conn_new(int fd);
struct conn *conn_get(struct conn *c);
void conn_put(struct conn *c);
void conn_hangup(struct conn *c);

/* conn_recv: 1 = a message is in c->buf (h filled), 0 = clean EOF between
 * messages, -1 = protocol violation or I/O error, `why` says which.  Every
 * message must have a seq after the previous one's (the first: the hello). */
int conn_recv(struct conn *c, struct lat_hdr *h, char *why, size_t whylen);

/* From now on every frame of c is sealed with keys k (copied; the caller
 * wipes its copy): 0, or -1 (out of memory, libcrypto).  Caller holds wlock
 * or is c's only user. */
int  conn_seal(struct conn *c, const struct lat_seal_keys *k);

/* Sends header + iov as one message.  _locked: caller holds c->wlock. */
int conn_sendv(struct conn *c, uint16_t type, uint32_t seq, const struct iovec *iov, int n);
int conn_sendv_locked(struct conn *c, uint16_t type, uint32_t seq, const struct iovec *iov, int n);
int conn_send(struct conn *c, uint16_t type, uint32_t seq, const void *p, size_t len);

/* A lat_sysret reply (type | LAT_REPLY) with optional data or text. */
int reply_ret(struct conn *c, uint16_t type, uint32_t seq, int64_t ret, int err,
              const void *data, size_t len);
/* LAT_ERROR reply: ret -1, err, text. */
int reply_error(struct conn *c, uint32_t seq, int err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* ---- ras.c: RAS spool and diagnostics ---- */

enum ras_sev { RAS_INFO, RAS_WARNING, RAS_ERROR, RAS_FATAL };
int  ras_open(const char *path, char *err, size_t errlen);
int  ras_fd(void);                     /* the spool, which the worker keeps */
void ras_after_fork(void);              /* in the worker: the monitor's folds are not its own */
/* in escaped into out as one field of one spool line, safe on a terminal. */
void ras_escape(char *out, size_t len, const char *in);
/* An event.  On a thread whose peer is untrusted (ras_thread_peer: a
 * connection before its hello is accepted, or a compute process's), events
 * of one kind (the call's fmt) from one peer identity are folded: the first
 * RAS_FOLD_BURST of a window are written, the rest counted and written as one
 * "[repeated N times in the last T s]" event when the window ends. */
void ras_event(enum ras_sev sev, const char *location, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The same, folded under an explicit peer identity (any thread). */
void ras_event_from(const char *who, enum ras_sev sev, const char *location, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* An event about one job (its id in the spool line's JOB field: `lattice ras --job`). */
void ras_job_event(uint64_t job, enum ras_sev sev, const char *location, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* In a job's I/O worker: every event of this process is about job. */
void ras_set_job(uint64_t job);
/* The calling thread's peer identity for folding; NULL: its events are not folded. */
void ras_thread_peer(const char *who);
/* Writes every pending fold summary now (at exit). */
void ras_flush(void);
void logmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* One line to the --notify-fd, if any (main.c): the host agent's readiness events. */
void notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
int  errprintf(char *buf, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void node_location(uint32_t node, char *buf, size_t len);

/* ---- admit.c: what peers may cost: caps on connections and on those
 * still waiting for their hello ---- */

#define ADMIT_HELLO_MAX     64u     /* connections waiting for their hello */
#define ADMIT_CONTROL_MAX   16u     /* the service node's control connections, in the total below */
#define ADMIT_PPN           64u     /* processes per node the cap allows for until a job has more */

/* After the arguments: the caps from pset_size, lowered by LATTICE_MAX_CONNS
 * and LATTICE_MAX_HELLO; -1 (err set) if one of those is not a number >= 1. */
int  admit_init(char *err, size_t errlen);
/* In the accept loop: true if c may have a thread (counted, on the pending
 * list; the oldest pending one may have been evicted for it); false: c is
 * over the cap on all connections, to be closed at once (counted). */
bool admit_new(struct conn *c);
void admit_undo(struct conn *c);    /* its thread could not start */
/* The hello of c was accepted for `role`: off the pending list.  false if c
 * was evicted meanwhile (its thread ends). */
bool admit_hello_done(struct conn *c, uint32_t role);
void admit_end(struct conn *c);     /* its thread ends */
/* A job of ppn processes per node came from the service node: room for
 * their PROC and PMI connections (the cap only grows; not past
 * LATTICE_MAX_CONNS). */
void admit_ppn(uint32_t ppn);

/* The job owner: what its I/O worker becomes (worker.c). */
struct ident {
    uint32_t uid, gid, ngroups;
    gid_t    groups[CIOD_MAX_GROUPS];
};

/* ---- job.c: nodes and the running job, shared under one mutex ---- */

struct job;                             /* opaque outside job.c */

struct job_app {                        /* one application (MPMD) */
    const char     *exe;
    const char     *argv;               /* its argv strings, back to back */
    size_t          argvlen;
    uint32_t        nargs;
};

struct job_spec {                       /* a decoded, validated LAT_CTL_JOB */
    const struct lat_job *hdr;
    const int32_t  *rank;               /* [pset_size] */
    const uint32_t *groups;             /* [ngroups] */
    const char     *cwd;
    const char     *env;                /* env strings, back to back */
    size_t          envlen;
    const char     *mapping;            /* PMI_process_mapping, "" if not given */
    const struct lat_slot *slot;        /* [nslots]: the processes of this pset */
    const struct lat_cpus *cpus;        /* [nslots] with LAT_JOB_CPUS, else NULL */
    const uint32_t *cpu;                /* every slot's CPUs, slot after slot (LAT_JOB_CPUS) */
    uint32_t        nslots, napps, ppn;
    uint32_t        stdin_rank;         /* with LAT_JOB_STDIN: who reads the input (LAT_STDIN_ALL: all) */
    struct job_app  app[LAT_MAX_APPS];
    struct lat_slot one[LAT_MAX_PSET];  /* slots of a job without LAT_JOB_PLACED */
    struct ident    who;
};

int  node_attach(uint32_t node, struct conn *c);
void node_detach(uint32_t node, struct conn *c);
void job_status(struct lat_ctl_status *st);
bool job_busy(void);

/* Registers the job; on success *nodes holds a reference to the connection
 * of every node that has a rank (NULL elsewhere). */
int  job_register(const struct job_spec *js, struct conn *ctl,
                  struct conn *nodes[LAT_MAX_PSET], char *why, size_t whylen);
/* After the push: ends the job at once if no rank of it runs here. */
bool job_started(uint64_t id);
/* References to the current job's nodes (or all nodes); returns the count. */
int  job_nodes(struct conn *nodes[LAT_MAX_PSET], bool all, uint64_t *id);
/* Sends sig to the ranks of job id if id is the job running here: 0, else
 * ESRCH (*running: the job that runs, 0 if none) and nothing is touched. */
int  job_signal(uint64_t id, int sig, const char *by, uint64_t *running);
/* SIGKILL to whatever job runs here (shutdown of the I/O node). */
void job_kill_any(const char *by);
/* Job id cannot go on here: a RAS ERROR, LAT_CTL_JOB_FAIL with text to its
 * owner, and SIGKILL to its ranks (by: why, a string constant); once per job.
 * false: it does not run here (ended meanwhile), or was failed already. */
bool job_fail(uint64_t id, const char *by, const char *text);
/* The owner's control connection closed: its job is killed. */
void job_ctl_closed(struct conn *ctl);

/* Node traffic of the job: output and rank exits, forwarded to its owner. */
void job_output(uint32_t node, uint32_t rank, uint32_t stream, const void *data, size_t len);
/* A rank's exit from its node: held until its worker's output channel has
 * passed on what the rank wrote before it (worker_hold_exit), then reported
 * (job_rank_exit_report); at once where the job has no worker to ask. */
void job_rank_exit(uint32_t node, const struct lat_exit *ex, const char *msg, size_t mlen);
void job_rank_exit_report(uint32_t node, const struct lat_exit *ex, const char *msg, size_t mlen);
void job_rank_output(int32_t rank, uint64_t id, uint32_t stream, const void *data, size_t len);

/* PROC hello: checks job id, node and process index: 0 (*rank set), EACCES
 * (no such process), EBUSY (it is connected already: one connection at a time). */
int  job_proc_attach(uint32_t node, uint32_t t, uint64_t id, int32_t *rank);
/* Its connection closed (the worker said so): it may say hello again. */
void job_proc_detach(uint32_t node, uint32_t t, uint64_t id);
/* The rank of process t of node in job id: 0 or EACCES (PMI connections). */
int  job_proc_rank(uint32_t node, uint32_t t, uint64_t id, int32_t *rank);
/* A reference to the job's control connection if job `id` runs, else NULL. */
struct conn *job_owner(uint64_t id);
/* The owner of job *id (0: of whichever job runs, *id set), from the job
 * record: 0, or ESRCH if it does not run here (or its owner hung up). */
int  job_who(uint64_t *id, struct ident *who);

/* Where the process of `rank` stands among the job's processes of this pset
 * (by rank), and how many there are; 0, 0 if the job is gone. */
void job_proc_place(uint64_t id, int32_t rank, uint32_t *index, uint32_t *count);

/* ---- libcache.c: the job user's library cache directory on the compute host ---- */

void libcache_init(void);               /* at start: remove those of ciods that are gone */
void libcache_job_start(uint64_t job);  /* in the job's worker, as the owner */
void libcache_job_user(uid_t uid);      /* the monitor, before a job of uid: other users' caches go */

/* ---- plugin.c: plug-ins (docs/plugins.md) ---- */

int  plugin_add(const char *spec, char *err, size_t errlen);    /* --plugin PATH[:LIMIT][;CONFIG] */
int  plugin_load_all(char *err, size_t errlen);                /* dlopen + init, before serving */
unsigned plugin_count(void);
/* LAT_PLUG_CALL on a process connection; < 0 only if the reply could not be sent. */
int  plugin_serve(struct conn *c, const struct lat_hdr *h, uint64_t job, int32_t rank, uint32_t node);

/* ---- pmi.c: the connection side of the pset's PMI proxy (the engine,
 * pmi_engine.c, answers the commands) ---- */

int  pmi_job_start(const struct job_spec *js, char *why, size_t whylen);
void pmi_job_end(uint64_t id);
/* A rank of job ended (coded: it exited with status): judged, then its PMI
 * sealed (its own connection closed, nothing more taken for it). */
void pmi_rank_exit(uint64_t job, uint32_t rank, bool coded, int status);
/* Bytes a rank wrote on its PMI_FD, relayed by its node (nc: the node's
 * connection, where the answers go), or from its own PMI connection (NULL). */
void pmi_input(uint32_t node, struct conn *nc, uint32_t rank, const char *data, size_t len);
/* A process's own PMI connection (LAT_ROLE_PMI), after its hello. */
void pmi_serve(struct conn *c, const struct lat_hello *hello, uint32_t seq);
/* LAT_CTL_FENCE_OUT from the service node; -1 (why set) if malformed. */
int  pmi_fence_out(const char *p, size_t len, char *why, size_t whylen);
/* LAT_CTL_NAME_OUT from the service node; -1 (why set) if malformed. */
int  pmi_name_out(const char *p, size_t len, char *why, size_t whylen);
/* The job's PMI fence tree (LAT_JOB_TREE), its state: */
/* LAT_CTL_PMI_TREE's children (psets) and whether an I/O node is above:
 * 0 or an errno (why set). */
int  pmi_tree_set(uint64_t job, uint32_t n, const uint32_t *psets, bool has_parent, char *why, size_t whylen);
/* The way up is settled: the connection to the I/O node above, or NULL
 * (the service node is above, or why says why there is no connection: a
 * fence that needs it breaks the tree).  Fences go up from now.  0, or
 * ESRCH if the job ended meanwhile. */
int  pmi_tree_up(uint64_t job, struct conn *up, const char *why);
/* A child's hello (pset): waits until the tree is known; 0 (*child its
 * index) or EACCES (not a child of this one in job, or connected already). */
int  pmi_tree_child_attach(uint64_t job, uint32_t pset, struct conn *c, uint32_t *child);
/* A LAT_CTL_FENCE from a child: 0, -1 (why set) if malformed or unexpected. */
int  pmi_tree_child_fence(uint64_t job, uint32_t child, const char *p, size_t len, char *why, size_t whylen);
void pmi_tree_child_gone(uint64_t job, uint32_t child, struct conn *c);
void pmi_tree_up_gone(uint64_t job, struct conn *up);
/* The tree broke here: a RAS ERROR and LAT_CTL_TREE_FAIL to the job's owner, once. */
void pmi_tree_fail(uint64_t job, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- tree.c: the connections of a job's PMI fence tree ---- */

/* LAT_CTL_PMI_TREE: decoded, the children recorded, the I/O node above
 * being connected by a thread of its own.  0, an errno (a refusal, why
 * set), or -1 if malformed. */
int  tree_start(const char *p, size_t len, char *why, size_t whylen);
/* A child I/O node's connection (LAT_ROLE_TREE), after its hello's mac was checked. */
void tree_serve_child(struct conn *c, const struct lat_hello *hello, uint32_t seq);

/* ---- datapath.c: eager and rendezvous transfers, the I/O node's counters ---- */

extern atomic_uint_fast64_t *dp_ctr;   /* [LAT_CTR__END], shared with the workers */
void     datapath_init(void);
uint64_t dp_now_ns(void);
void     dp_account(unsigned call, uint64_t ns, uint64_t bytes);
void     dp_ctr_max(enum lat_ctr i, uint64_t v);
/* The LAT_CTL_COUNTERS reply in out (u64 words); 0 if cap is too small. */
size_t   dp_counters(uint64_t *out, size_t cap);
#define  DP_COUNTER_WORDS (NSYS + 2 + NSYS * (2 + LAT_HIST_BUCKETS) + LAT_CTR__END)
/* Polls briefly for a process's next request (LATTICE_SPIN_US). */
/* The thresholds a PROC hello gets (hp NULL: an old-style hello). */
void     dp_hello(struct conn *c, const struct lat_hello_proc *hp, struct lat_datapath *dp);
int      dp_seg_iovecs(const void *data, unsigned n, struct iovec *segs, uint64_t *total);
int      dp_segments(const char *data, size_t dlen, int64_t count, struct iovec *segs, unsigned *nseg);
/* The part [skip, skip + len) of the segments, into out: how many. */
int      dp_seg_slice(const struct iovec *segs, unsigned n, uint64_t skip, size_t len, struct iovec *out);
/* A region of a process's memory that ciod maps too (LAT_DP_SHARE). */
struct dp_shm {
    char    *map;                       /* NULL: none */
    uint64_t base, len;                 /* in the process's address space */
};
/* LAT_DP_SHARE of process pid: 0 or an errno (refused, RAS event said why). */
int      dp_share(struct dp_shm *shm, pid_t pid, const char *loc, uint64_t base, uint64_t len, int64_t fd);
void     dp_unshare(struct dp_shm *shm);
/* The process's segments as pointers into our mapping of its shared
 * region (sock.c sends and receives there); false if one lies outside. */
bool     dp_shm_translate(const struct dp_shm *shm, const struct iovec *segs, unsigned n, struct iovec *out);
/* Polls the socket and the mailbox (mb->map NULL: none) for the next
 * request; true: one waits in the mailbox (seq != done). */
bool     dp_spin(struct conn *c, unsigned *skip, const struct dp_shm *mb, uint32_t done);
int      dp_mbox_share(struct dp_shm *mb, pid_t pid, const char *loc, int64_t fd, uint32_t *done);
int      dp_mbox_take(const struct dp_shm *mb, uint32_t seq, struct lat_hdr *h, char *buf, char *why,
                      size_t whylen);
void     dp_mbox_reply(const struct dp_shm *mb, uint16_t type, uint32_t seq, int64_t ret, int err,
                       const void *data, size_t len);
/* pos: the file offset the transfer starts at, -1 if unknown */
int64_t  dp_rdv(pid_t pid, const struct dp_shm *shm, char *win, size_t winlen, bool wr, int64_t pos,
                const struct iovec *segs, unsigned nseg, uint64_t count,
                ssize_t (*io)(void *ctx, char *buf, size_t n, uint64_t done), void *ctx, int *err);

/* ---- collective.c: shared read-only opens, stats and reads ---- */

struct coll_ofd;
struct stat;
void collective_init(void);
bool coll_on(void);
int  coll_open(const struct ident *who, const char *path, int flags, struct coll_ofd **o, int *plain);
struct coll_ofd *coll_dup(struct coll_ofd *o);
void coll_close(struct coll_ofd *o);
int  coll_fd(const struct coll_ofd *o);
int64_t *coll_pos(struct coll_ofd *o);
ssize_t coll_pread(struct coll_ofd *o, char *dst, size_t n, int64_t off);
int  coll_stat(const struct ident *who, const char *path, int flags, struct stat *st);
void coll_changed(void);

/* ---- the three kinds of connection ---- */

void control_serve(struct conn *c);
void node_serve(struct conn *c, uint32_t node, uint32_t seq);

/* ---- worker.c: the job's I/O worker process, as the owner ---- */

struct wproc {                          /* a process's connection, handed to the worker */
    uint64_t job;
    int32_t  rank;
    uint32_t node, t;                   /* pset-local node, process index on it */
    uint32_t index, count;              /* among the job's processes of the pset (plug-ins) */
    uint32_t pid;                       /* the process that said hello (0: unknown) */
    uint32_t last_seq;                  /* the hello's */
    uint32_t ralen;                     /* bytes read past the hello */
    struct lat_datapath dp;             /* agreed in the hello */
    uint32_t sealed;                    /* 1: a TCP connection, its frames sealed with seal */
    struct lat_seal_keys seal;          /* the session's keys and counters (never the block key) */
    char     ra[CONN_RA];
};

/* The monitor: */
int  worker_start(const struct job_spec *js, char *why, size_t whylen);    /* 0 or an errno */
int  worker_open_exe(const char *path, int *fd, char *why, size_t whylen);  /* 0 or an errno */
int  worker_run(void);                  /* after the push: its messages are served */
void worker_end(uint64_t job);          /* the job ended: the worker finishes */
void worker_abort(uint64_t job);        /* the job was refused before it ran */
/* LAT_CTL_STDIN of the running job, passed to its worker: 0, ESRCH (not the
 * running job), ENOBUFS (over the window) or EIO (the worker is gone). */
int  worker_stdin(uint64_t job, uint32_t flags, const void *data, size_t len);
int  worker_give_proc(uint64_t job, const struct wproc *wp, int fd, int plugfd);
/* A rank's exit (job ex->job), reported by the output channel's reader once
 * the worker answered a W_SYNC sent now, behind its rank's output: true, or
 * false if the job has no worker watched (the caller reports it at once). */
bool worker_hold_exit(uint32_t node, uint32_t t, const struct lat_exit *ex, const char *msg, size_t mlen);
/* A PROC hello: checked, acknowledged, handed over (true: the caller must
 * not hang up on the connection, which is the worker's now). */
bool worker_take_proc(struct conn *c, const struct lat_hello *hello, const struct lat_hello_proc *hp,
                      uint32_t seq);
/* The worker: */
bool worker_is_self(void);
void worker_output(int32_t rank, uint64_t job, uint32_t stream, const void *data, size_t len);
void worker_stdin_ack(uint32_t bytes);  /* stdin.c: bytes handed to the reading ranks */
/* ship.c: the process of c is in a call that is not a write of the job's
 * output (in), or out of it; an exit waiting on it is told */
void worker_in_call(struct conn *c, bool in);

/* stdin.c: the job's standard input in its worker (LAT_JOB_STDIN). */
int     stdin_setup(const struct job_spec *js, char *why, size_t whylen);   /* pipes and the pump */
void    stdin_put(uint32_t flags, const void *data, size_t len);            /* a W_STDIN chunk */
int     stdin_fd(int32_t rank);         /* the rank's pipe to read, or -1: it reads end of file */
void    stdin_gone(int32_t rank);       /* its connection closed: its pipe goes, the input does not wait for it */
/* A read of that pipe: waits for data or end of file; -1 EINTR once conn_fd hangs up. */
ssize_t stdin_read(int fd, int conn_fd, void *buf, size_t n);
/* ship.c: serves a process's calls in the worker; plug NULL: no plug-in line. */
void ship_serve(struct conn *c, struct conn *plug, const struct wproc *wp, const struct ident *who,
                const char *cwd);

/* session.c: the thread of every connection (hello, then the role). */
void *session_thread(void *arg);    /* the thread: admission accounting around session_main */
void *session_main(void *arg);

/* auth.c: the handshake (docs/protocol.md section 3).  The challenge: a
 * fresh nonce, sent first; 0 or -1 (errno). */
int   auth_challenge(struct conn *c);
/* The hello's mac, checked in constant time; true: the peer holds the key. */
bool  auth_hello_ok(struct conn *c, const struct lat_hello *hello, const struct lat_hello_proc *hp);
/* The ack, with our proof if the hello was authenticated. */
int   hello_ack(struct conn *c, uint32_t seq, int err);
/* A PROC hello's ack with the data path it agreed (dp NULL: the plain ack). */
int   hello_ack_dp(struct conn *c, uint32_t seq, int err, const struct lat_datapath *dp);

#endif
