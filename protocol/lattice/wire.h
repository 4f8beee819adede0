/*
 * lattice/wire.h - the Lattice wire protocol, version 3.
 *
 * One header for both sides of every connection to an I/O node daemon
 * (ciod): the service node's control connection, the compute node's node
 * connection, and each compute process's function-shipping connection.
 * The specification in prose is docs/protocol.md.  The service node's view
 * of it (service/lattice/transport/wire_h.py: every LAT_* number and struct layout)
 * is generated from this file at build time (`make py-wire`), and a test
 * compares it with what a C compiler makes of this file.  The shipped calls
 * (LAT_SYS_*) and their transport facts are generated from
 * lattice/fwd_posix.h.
 *
 * Every message is a 16-byte header followed by `len` payload bytes.
 * All integers are little-endian and fixed-width; structs below contain
 * no implicit padding (checked by _Static_assert), so a little-endian
 * host may read and write them directly.  Strings travel NUL-terminated
 * inside the payload and are validated by the receiver.
 */
#ifndef LATTICE_WIRE_H
#define LATTICE_WIRE_H

#include <stdint.h>

#define LAT_MAGIC   0x5454414Cu     /* "LATT" on the wire */
#define LAT_VERSION 6                /* 2: challenge-response hello, seq checked;
                                        3: transport flags in the header (lat_hdr.flags);
                                        4: lat_kill names its job;
                                        5: the PMI fence goes through a tree of I/O nodes;
                                        6: frames on TCP are sealed (AES-256-GCM) after the hello */

/* Limits.  A receiver closes the connection on a header whose len is
 * larger than LAT_MAX_PAYLOAD: it never buffers more than that. */
#define LAT_MAX_IO        (1u << 20)             /* data bytes per read/write chunk */
#define LAT_MAX_PAYLOAD   (LAT_MAX_IO + 8192u)   /* largest payload of any message */
#define LAT_MAX_PATH      4096u                  /* including the NUL */
#define LAT_MAX_FDS       1024u                  /* remote descriptors per process */
#define LAT_KEY_BYTES     32u                    /* block security key (never on the wire) */
#define LAT_NONCE_BYTES   32u                    /* handshake nonces */
#define LAT_MAC_BYTES     32u                    /* HMAC-SHA256 */
#define LAT_MAX_PSET      128u                   /* compute nodes per I/O node */
#define LAT_MAX_ARGS      4096u                  /* argv + envp strings per job */
#define LAT_MAX_IMAGE     (1ull << 31)           /* largest executable pushed */
#define LAT_MAX_PPN       4096u                  /* processes per compute node: one per core (vn mode), as lattice init allows */
#define LAT_MAX_APPS      64u                    /* MPMD applications per job */
#define LAT_CPU_LIMIT     65536u                 /* CPU numbers (OS indexes) are below this: Linux allows 8192 */

/* PMI limits (docs/protocol.md section 10): what get_maxes announces and
 * every PMI line is checked against. */
#define LAT_PMI_KVSNAME_MAX 256u
#define LAT_PMI_KEY_MAX     64u                  /* characters, without the NUL */
#define LAT_PMI_VAL_MAX     1024u
#define LAT_PMI_LINE_MAX    4096u                /* one PMI-1 line or PMI-2 command */

struct lat_hdr {
    uint32_t magic;     /* LAT_MAGIC */
    uint8_t  version;   /* LAT_VERSION */
    uint8_t  flags;     /* LAT_HF_*: how a shipped request travels; 0 on every other message */
    uint16_t type;      /* enum lat_type; replies have LAT_REPLY set */
    uint32_t len;       /* payload bytes following this header */
    uint32_t seq;       /* set by the sender, echoed in the reply; on a connection to
                           ciod each message ciod receives has a seq after the last one
                           ((int32_t)(seq - last) > 0; docs/protocol.md section 3.2) */
};
_Static_assert(sizeof(struct lat_hdr) == 16, "lat_hdr layout");

#define LAT_REPLY 0x8000u

/*
 * Header flags (lat_hdr.flags, docs/protocol.md section 2.1): the transport
 * a shipped request uses, at most one of them, and only on a call whose
 * data may go in bulk (LAT_BULK_MAP below: the calls fwd_posix.h marks
 * zerocopy).  Replies and every other message carry 0.  ciod answers a
 * shipped call with flags it does not allow LAT_ERROR EINVAL, and closes
 * a connection that puts flags on any other message.
 */
#define LAT_HF_RDV        0x01u     /* a rendezvous: the data are struct lat_rdv_seg[] naming
                                       the process's memory; ciod moves the bytes itself */
#define LAT_HF_PIPE_FIRST 0x02u     /* the first chunk of a pipelined series */
#define LAT_HF_PIPE_NEXT  0x04u     /* a later chunk of the same series */
#define LAT_HF_ALL        (LAT_HF_RDV | LAT_HF_PIPE_FIRST | LAT_HF_PIPE_NEXT)

/*
 * Message types.  Each service owns a block of 256 numbers; a request's
 * reply is the same number with LAT_REPLY set.  Messages marked one-way
 * have no reply.
 */
enum lat_type {
    /* session: the handshake on every connection to ciod (docs/protocol.md section 3) */
    LAT_HELLO          = 0x0001,  /* struct lat_hello -> struct lat_hello_ack */
    LAT_DP_SHARE       = 0x0002,  /* PROC connection, process -> ciod: struct lat_sysreq
                                     (a0 base, a1 len, a2 fd) -> struct lat_sysret
                                     (docs/protocol.md section 6.2) */
    LAT_MBOX_SHARE     = 0x0003,  /* PROC connection, process -> ciod: struct lat_sysreq
                                     (a0 fd of its mailbox memfd) -> struct lat_sysret
                                     (docs/protocol.md section 6.4) */
    LAT_MBOX_RING      = 0x0004,  /* one-way, empty: a request waits in the mailbox; its seq
                                     is that request's */
    LAT_CHALLENGE      = 0x0005,  /* one-way ciod->peer, the first message on every
                                     connection: struct lat_challenge */
    LAT_ERROR          = 0x00FF,  /* reply to a request ciod could not decode:
                                     struct lat_sysret (ret -1, err) + message text */

    /* control: service node <-> ciod */
    LAT_CTL_STATUS     = 0x0100,  /* empty -> struct lat_ctl_status */
    LAT_CTL_JOB        = 0x0101,  /* struct lat_job + tail -> struct lat_sysret + message text */
    LAT_CTL_KILL       = 0x0102,  /* struct lat_kill -> struct lat_sysret; ESRCH unless
                                     lat_kill.job is the job running there */
    LAT_CTL_SHUTDOWN   = 0x0103,  /* empty -> struct lat_sysret; then ciod exits */
    LAT_CTL_COUNTERS   = 0x0104,  /* empty -> uint64_t calls[LAT_SYS__END - LAT_SYS__BASE] */
    LAT_CTL_FENCE_OUT  = 0x0105,  /* one-way sn->ciod: struct lat_fence + key/value strings:
                                     the fence is complete, here is everything it published */
    LAT_CTL_STDIN      = 0x0106,  /* one-way sn->ciod: struct lat_stdin + at most LAT_STDIN_MAX
                                     bytes of the job's standard input (LAT_JOB_STDIN) */
    LAT_CTL_PMI_TREE   = 0x0107,  /* struct lat_pmi_tree + child psets + parent address ->
                                     struct lat_sysret + message text: where this I/O node
                                     sits in the job's PMI fence tree (LAT_JOB_TREE) */
    LAT_CTL_NAME_OUT   = 0x0110,  /* one-way sn->ciod: struct lat_name + port\0 (a lookup's):
                                     the answer to a rank's name service request */
    LAT_CTL_OUTPUT     = 0x0180,  /* one-way ciod->sn: struct lat_output + data */
    LAT_CTL_EXIT       = 0x0181,  /* one-way ciod->sn: struct lat_exit + message text */
    LAT_CTL_JOB_END    = 0x0182,  /* one-way ciod->sn: struct lat_job_end */
    LAT_CTL_FENCE      = 0x0183,  /* one-way ciod->sn: struct lat_fence + key/value strings:
                                     every rank of the pset entered the fence, with their puts */
    LAT_CTL_ABORT      = 0x0184,  /* one-way ciod->sn: struct lat_abort + message text */
    LAT_CTL_STDIN_ACK  = 0x0185,  /* one-way ciod->sn: struct lat_stdin: that many
                                     bytes of standard input were handed to the ranks */
    LAT_CTL_TREE_FAIL  = 0x0186,  /* one-way ciod->sn: struct lat_job_end + message text: the
                                     job's PMI fence tree broke here (a peer lost, a bad
                                     fence); the service node ends the job */
    LAT_CTL_JOB_FAIL   = 0x0187,  /* one-way ciod->sn: struct lat_job_end + message text: the
                                     job cannot go on on this I/O node (its I/O worker was
                                     lost); ciod kills its ranks, the service node ends the
                                     job with an error */
    LAT_CTL_NAME       = 0x0190,  /* one-way ciod->sn: struct lat_name + service\0 port\0:
                                     a rank publishes, unpublishes or looks up a name */

    /* node: compute node <-> ciod */
    LAT_NODE_JOB       = 0x0200,  /* one-way ciod->cn: struct lat_node_job + tail */
    LAT_NODE_IMAGE     = 0x0201,  /* one-way ciod->cn: raw executable bytes */
    LAT_NODE_START     = 0x0202,  /* one-way ciod->cn: struct lat_job_end (job id) */
    LAT_NODE_KILL      = 0x0203,  /* one-way ciod->cn: struct lat_kill; ignored unless
                                     lat_kill.job is the node's job */
    LAT_NODE_SHUTDOWN  = 0x0204,  /* one-way ciod->cn: empty; the node exits */
    LAT_NODE_PMI_REPLY = 0x0205,  /* one-way ciod->cn: struct lat_pmi + bytes for the rank's PMI_FD */
    LAT_NODE_OUTPUT    = 0x0280,  /* one-way cn->ciod: struct lat_output + data */
    LAT_NODE_EXIT      = 0x0281,  /* one-way cn->ciod: struct lat_exit + message text */
    LAT_NODE_PMI       = 0x0282,  /* one-way cn->ciod: struct lat_pmi + bytes the rank wrote on PMI_FD */

    /* function shipping: compute process -> ciod.  Request payload is
     * struct lat_sysreq + data, reply payload struct lat_sysret + data.
     * Each call, its arguments and their checks are declared once, in
     * lattice/fwd_posix.h; the lines below are generated from it. */
    /* BEGIN generated by lattice-pluggen --wire from lattice/fwd_posix.h (make wire-h) */
    LAT_SYS__BASE      = 0x0300,
    LAT_SYS_OPENAT     = 0x0300,  /* a0 dirfd, a1 flags, a2 mode; path */
    LAT_SYS_CLOSE      = 0x0301,  /* a0 fd */
    LAT_SYS_READ       = 0x0302,  /* a0 fd, a1 count -> buf */
    LAT_SYS_WRITE      = 0x0303,  /* a0 fd; buf */
    LAT_SYS_PREAD      = 0x0304,  /* a0 fd, a1 count, a2 offset -> buf */
    LAT_SYS_PWRITE     = 0x0305,  /* a0 fd, a2 offset; buf */
    LAT_SYS_LSEEK      = 0x0306,  /* a0 fd, a1 offset, a2 whence */
    LAT_SYS_FSTATAT    = 0x0307,  /* a0 dirfd, a1 flags; path -> st */
    LAT_SYS_STATX      = 0x0308,  /* a0 dirfd, a1 flags, a2 mask; path -> stx */
    LAT_SYS_FACCESSAT  = 0x0309,  /* a0 dirfd, a1 mode, a2 flags; path */
    LAT_SYS_UNLINKAT   = 0x030A,  /* a0 dirfd, a1 flags; path */
    LAT_SYS_RENAMEAT   = 0x030B,  /* a0 olddirfd, a1 newdirfd, a2 flags; oldpath, newpath */
    LAT_SYS_MKDIRAT    = 0x030C,  /* a0 dirfd, a1 mode; path */
    LAT_SYS_GETDENTS64 = 0x030D,  /* a0 fd, a1 count -> buf */
    LAT_SYS_READLINKAT = 0x030E,  /* a0 dirfd, a1 bufsiz; path -> buf */
    LAT_SYS_TRUNCATE   = 0x030F,  /* a1 length; path */
    LAT_SYS_FTRUNCATE  = 0x0310,  /* a0 fd, a1 length */
    LAT_SYS_FSYNC      = 0x0311,  /* a0 fd */
    LAT_SYS_FDATASYNC  = 0x0312,  /* a0 fd */
    LAT_SYS_DUP        = 0x0313,  /* a0 fd */
    LAT_SYS_FCNTL      = 0x0314,  /* a0 fd, a1 cmd, a2 arg */
    LAT_SYS_CHDIR      = 0x0315,  /* path */
    LAT_SYS_FCHDIR     = 0x0316,  /* a0 fd */
    LAT_SYS_GETCWD     = 0x0317,  /* a0 size -> buf */
    LAT_SYS_UMASK      = 0x0318,  /* a0 mask */
    LAT_SYS_FCHMODAT   = 0x0319,  /* a0 dirfd, a1 mode, a2 flags; path */
    LAT_SYS_FCHMOD     = 0x031A,  /* a0 fd, a1 mode */
    LAT_SYS_UTIMENSAT  = 0x031B,  /* a0 dirfd, a1 flags, a2 has_times; times, path */
    LAT_SYS_STATFS     = 0x031C,  /* path -> sfs */
    LAT_SYS_FSTATFS    = 0x031D,  /* a0 fd -> sfs */
    LAT_SYS_SOCKET     = 0x031E,  /* a0 domain, a1 type, a2 protocol */
    LAT_SYS_CONNECT    = 0x031F,  /* a0 fd, a1 wait, a2 resume; addr */
    LAT_SYS_BIND       = 0x0320,  /* a0 fd; addr */
    LAT_SYS_SENDMSG    = 0x0321,  /* a0 fd, a1 flags, a2 namelen, a3 wait; name, buf */
    LAT_SYS_RECVMSG    = 0x0322,  /* a0 fd, a1 flags, a2 count, a3 wait -> from, buf */
    LAT_SYS_SHUTDOWN   = 0x0323,  /* a0 fd, a1 how */
    LAT_SYS_SETSOCKOPT = 0x0324,  /* a0 fd, a1 level, a2 name; val */
    LAT_SYS_GETSOCKOPT = 0x0325,  /* a0 fd, a1 level, a2 name, a3 len -> val */
    LAT_SYS_GETSOCKNAME = 0x0326,  /* a0 fd -> addr */
    LAT_SYS_GETPEERNAME = 0x0327,  /* a0 fd -> addr */
    LAT_SYS_POLL       = 0x0328,  /* a0 nfds, a1 wait; fds -> fds */
    LAT_SYS_SEND_RDV   = 0x0329,  /* a0 fd, a1 flags, a2 namelen, a3 wait; name, segs */
    LAT_SYS_RECV_RDV   = 0x032A,  /* a0 fd, a1 flags, a2 wait; segs -> from */
    LAT_SYS_LOCK       = 0x032B,  /* a0 fd, a1 cmd, a2 wait; fl -> fl */
    LAT_SYS_FLOCK      = 0x032C,  /* a0 fd, a1 op, a2 wait */
    LAT_SYS_SYMLINKAT  = 0x032D,  /* a0 newdirfd; target, path */
    LAT_SYS_LINKAT     = 0x032E,  /* a0 olddirfd, a1 newdirfd, a2 flags; oldpath, newpath */
    LAT_SYS_FCHOWNAT   = 0x032F,  /* a0 dirfd, a1 uid, a2 gid, a3 flags; path */
    LAT_SYS_MKNODAT    = 0x0330,  /* a0 dirfd, a1 mode, a2 dev; path */
    LAT_SYS_FALLOCATE  = 0x0331,  /* a0 fd, a1 mode, a2 offset, a3 len */
    LAT_SYS_OPENAT_STAT = 0x0332,  /* a0 dirfd, a1 flags, a2 mode; path -> st */
    LAT_SYS__END       = 0x0333,
    /* END generated */

    /* plug-ins: compute process -> ciod (docs/plugins.md).  Request payload is
     * struct lat_sysreq (a0 plug-in id, a1 function number, a2 reply bytes the
     * caller can take) + marshalled arguments; reply struct lat_sysret (ret 0,
     * or -1 and err: ENOENT no such plug-in, ENOSYS no such function, E2BIG
     * over the plug-in's limit, EPROTO malformed) + marshalled results. */
    LAT_PLUG_CALL      = 0x0400,
};

/*
 * Transport facts of the shipped calls, one bit per call (bit t -
 * LAT_SYS__BASE), from the annotations in lattice/fwd_posix.h:
 *   LAT_MBOX_MAP  msg=N:mbox, the call may travel in the mailbox (section
 *                 6.4): it never waits (a socket call's wait watches the
 *                 socket), so ciod's mailbox thread is not held
 *   LAT_BULK_MAP  the call has a zerocopy array: it may carry LAT_HF_*
 */
/* BEGIN generated transport by lattice-pluggen --wire from lattice/fwd_posix.h (make wire-h) */
/* OPENAT, CLOSE, READ, WRITE, PREAD, PWRITE, LSEEK, FSTATAT, STATX, FACCESSAT, UNLINKAT, RENAMEAT,
 * MKDIRAT, GETDENTS64, READLINKAT, TRUNCATE, FTRUNCATE, FSYNC, FDATASYNC, DUP, FCNTL, CHDIR,
 * FCHDIR, GETCWD, UMASK, FCHMODAT, FCHMOD, UTIMENSAT, STATFS, FSTATFS, SYMLINKAT, LINKAT,
 * FCHOWNAT, MKNODAT, FALLOCATE, OPENAT_STAT */
#define LAT_MBOX_MAP 0x0007E0003FFFFFFFull
/* READ, WRITE, PREAD, PWRITE */
#define LAT_BULK_MAP 0x000000000000003Cull
/* END generated */

static inline int lat_sys_bit(uint64_t map, unsigned type)
{
    return type >= LAT_SYS__BASE && type < LAT_SYS__END && (map >> (type - LAT_SYS__BASE) & 1u);
}

/* Whether a request of this type and these header flags may travel in the
 * mailbox: a call marked mbox, without rendezvous or series. */
static inline int lat_mbox_ok(unsigned type, unsigned flags)
{
    return flags == 0 && lat_sys_bit(LAT_MBOX_MAP, type);
}

/* Whether a request of this type may carry these header flags: none, or
 * one LAT_HF_* on a call with bulk data. */
static inline int lat_hdr_flags_ok(unsigned type, unsigned flags)
{
    return flags == 0 || ((flags == LAT_HF_RDV || flags == LAT_HF_PIPE_FIRST || flags == LAT_HF_PIPE_NEXT) &&
                          lat_sys_bit(LAT_BULK_MAP, type));
}

/* Sockets on the I/O node (LAT_SYS_SOCKET..LAT_SYS_POLL, lattice/fwd_posix.h). */
#define LAT_MAX_SOCKADDR 128u       /* sizeof(struct sockaddr_storage) */
#define LAT_MAX_SOCKOPT  1024u      /* option value bytes */
#define LAT_ERR_WAIT     0x10000    /* lat_sysret.err: the call's wait ran out, nothing done */

struct lat_sockname {               /* head of a RECVMSG reply */
    uint32_t len;                   /* sender address bytes used in addr (0: none) */
    uint32_t flags;                 /* msg_flags (MSG_TRUNC...) */
    uint8_t  addr[LAT_MAX_SOCKADDR];
};
_Static_assert(sizeof(struct lat_sockname) == 136, "lat_sockname layout");

struct lat_pollfd {                 /* Linux struct pollfd, fd a remote descriptor */
    int32_t  fd;
    int16_t  events;
    int16_t  revents;
};
_Static_assert(sizeof(struct lat_pollfd) == 8, "lat_pollfd layout");

/* Directory descriptor meaning "the process's working directory". */
#define LAT_AT_FDCWD (-100)

/* Connection roles, carried in lat_hello.role. */
enum lat_role {
    LAT_ROLE_CONTROL = 1,   /* the service node */
    LAT_ROLE_NODE    = 2,   /* a compute node's supervisor */
    LAT_ROLE_PROC    = 3,   /* a compute process shipping its calls */
    LAT_ROLE_PMI     = 4,   /* a compute process's own PMI connection (raw PMI after the hello) */
    LAT_ROLE_TREE    = 5,   /* another I/O node of the job, a child in its PMI fence tree:
                               lat_hello.node is the child's pset, .job the job */
};

/*
 * The handshake (docs/protocol.md section 3): ciod sends lat_challenge,
 * the peer answers with lat_hello, ciod with lat_hello_ack.  The block key
 * never travels; both sides prove they hold it with HMAC-SHA256 keyed with
 * it (lattice/hello_mac.h):
 *   hello.mac = HMAC(key, LAT_HELLO_LABEL || challenge.nonce || hello.nonce
 *                         || role || node || job [|| lat_hello_proc])
 *   ack.proof = HMAC(key, LAT_ACK_LABEL || challenge.nonce || hello.nonce
 *                         || err || max_io || pset || pset_size [|| lat_datapath])
 * (labels without their NUL, integers as on the wire).
 */
#define LAT_HELLO_LABEL "lattice hello v2"
#define LAT_ACK_LABEL   "lattice ack v2"

/*
 * Sealed frames (docs/protocol.md section 3.3): on a TCP connection, every
 * message after the hello's ack travels as
 *   u32 len || AES-256-GCM(k_dir, nonce = 0u32 || n_dir (u64), aad = len)(lat_hdr || payload) || tag
 * where len counts the ciphertext (16 + the header's len), n_dir counts the
 * frames of that direction from 0 (never sent), and each direction's key is
 *   HKDF-SHA256(ikm = block key, salt = challenge.nonce || hello.nonce,
 *               info = LAT_SEAL_LABEL || role || node || job || dir)
 * with dir LAT_SEAL_UP (the peer's frames to ciod) or LAT_SEAL_DOWN.
 * lattice/seal.h implements it for ciod and cnode, wire.py for the service node.
 */
#define LAT_SEAL_LABEL     "lattice seal v1"
#define LAT_SEAL_UP        0u                    /* the connecting peer -> ciod */
#define LAT_SEAL_DOWN      1u                    /* ciod -> the connecting peer */
#define LAT_SEAL_LEN_BYTES 4u                    /* the length before each sealed frame */
#define LAT_SEAL_TAG_BYTES 16u                   /* the GCM tag after it */
#define LAT_SEAL_MAX       (16u + LAT_MAX_PAYLOAD)   /* largest len: a header and the largest payload */

struct lat_challenge {
    uint8_t  nonce[LAT_NONCE_BYTES];    /* fresh random bytes of ciod's, per connection */
};
_Static_assert(sizeof(struct lat_challenge) == 32, "lat_challenge layout");

struct lat_hello {
    uint32_t role;                  /* enum lat_role */
    uint32_t node;                  /* pset-local node index (NODE, PROC, PMI); for PROC and
                                       PMI the process's index t on its node in bits 16..31 */
    uint64_t job;                   /* job id (PROC, PMI), else 0 */
    uint8_t  nonce[LAT_NONCE_BYTES];/* fresh random bytes of the peer's */
    uint8_t  mac[LAT_MAC_BYTES];    /* HMAC over LAT_HELLO_LABEL, both nonces, the fields above */
};
_Static_assert(sizeof(struct lat_hello) == 80, "lat_hello layout");

struct lat_hello_ack {
    int32_t  err;           /* 0, or why the hello was refused (EACCES, EPROTO, EBUSY) */
    uint32_t max_io;        /* agreed data chunk size (LAT_MAX_IO) */
    uint32_t pset;          /* pset number of this I/O node */
    uint32_t pset_size;     /* compute nodes in the pset */
    uint8_t  proof[LAT_MAC_BYTES];  /* HMAC over LAT_ACK_LABEL, both nonces, the fields above
                                       and a lat_datapath that follows; zeroes if the hello's
                                       mac was wrong */
};
_Static_assert(sizeof(struct lat_hello_ack) == 48, "lat_hello_ack layout");

/*
 * Data path (docs/protocol.md sections 3 and 6.2).  A PROC hello MAY carry
 * struct lat_hello_proc after struct lat_hello; ciod then answers with
 * lat_hello_ack followed by struct lat_datapath, the thresholds it chose.
 * A transfer of at most eager_max bytes travels in the messages (eager);
 * one of at least rdv_min bytes, when LAT_DP_VM is granted, is a
 * rendezvous: READ/PREAD/WRITE/PWRITE with header flag LAT_HF_RDV and, as
 * data, the segments of the process's memory (struct lat_rdv_seg[]); ciod
 * moves the bytes itself between the file and that memory
 * (process_vm_readv/writev), at most `window` bytes buffered per process.
 *
 * With LAT_DP_SHM granted too, the process may share a region of its memory
 * (cnk's big memory, a sealed memfd) with LAT_DP_SHARE; a rendezvous whose
 * segments all lie in it is done by ciod straight on its own mapping of the
 * region: the file system call copies the bytes once.
 *
 * Without rendezvous (another host, or LATTICE_DATAPATH=messages), a
 * transfer above eager_max is a series of chunks sent without waiting for
 * each reply: header flag LAT_HF_PIPE_FIRST on the first, LAT_HF_PIPE_NEXT
 * on the rest.
 * After a chunk of a series fails or comes back short, ciod answers the
 * series' remaining chunks with err ECANCELED without running them.
 */
struct lat_hello_proc {
    uint32_t pid;           /* the compute process, on the host of the connection */
    uint32_t flags;         /* LAT_DP_* the process can do */
};
_Static_assert(sizeof(struct lat_hello_proc) == 8, "lat_hello_proc layout");

struct lat_datapath {
    uint32_t eager_max;     /* largest data of one message (LAT_MAX_IO) */
    uint32_t rdv_min;       /* transfers from this many bytes go rendezvous; 0 = never */
    uint32_t flags;         /* LAT_DP_* granted */
    uint32_t window;        /* bytes ciod buffers per process for a rendezvous */
};
_Static_assert(sizeof(struct lat_datapath) == 16, "lat_datapath layout");

#define LAT_DP_VM       1u              /* ciod may reach the process's memory by pid */
#define LAT_DP_SHM      2u              /* ciod maps memory the process shares (LAT_DP_SHARE) */
#define LAT_PIPE_DEPTH  4u              /* chunks a process keeps in flight */

/* LAT_DP_SHARE (a0 base, a1 len, a2 fd): ciod opens the process's
 * descriptor fd (/proc/PID/fd/FD), which must be a memfd sealed against
 * shrinking, of at least len bytes, and maps it; [base, base + len) of the
 * process's address space is then that mapping.  A new share replaces the
 * old one (execve); len 0 drops it. */
/*
 * Mailbox (docs/protocol.md section 6.4): with LAT_DP_SHM granted, a
 * process may share one more sealed memfd of LAT_MBOX_SIZE bytes
 * (LAT_MBOX_SHARE); a small call then travels through it instead of the
 * socket.  The process writes req (header and payload), then stores req_seq = its seq
 * (release); unless srv_spin is 1 it sends LAT_MBOX_RING on the socket.
 * ciod copies the request out, checks it as a socket message, writes rep
 * (a reply exactly as on the socket), stores rep_seq = its seq and,
 * if cli_wait is 1, FUTEX_WAKEs rep_seq.  Each side stores its flag, then
 * (full fence) loads the other's word, so one of them always sees the
 * other.  Only a request lat_mbox_ok() allows travels here (a call marked
 * mbox in fwd_posix.h, without header flags); everything else stays on the
 * socket.
 */
#define LAT_MBOX_SIZE     16384u
#define LAT_MBOX_REQ_SLOT 8064u         /* the request: struct lat_hdr + payload */
#define LAT_MBOX_REP_SLOT 8192u         /* the reply: struct lat_hdr + payload */
#define LAT_MBOX_REQ_MAX  (LAT_MBOX_REQ_SLOT - 16u)  /* request payload (lat_sysreq + data) */
#define LAT_MBOX_REP_MAX  (LAT_MBOX_REP_SLOT - 16u)  /* reply payload (lat_sysret + data) */

struct lat_mbox {
    uint32_t req_seq;       /* process: the request in req has this seq */
    uint32_t srv_spin;      /* ciod: 1 while it polls req_seq (no LAT_MBOX_RING needed) */
    uint32_t pad0[14];
    uint32_t rep_seq;       /* ciod: the reply in rep answers this seq */
    uint32_t cli_wait;      /* process: 1 while it sleeps on rep_seq (FUTEX_WAIT) */
    uint32_t pad1[14];
    uint8_t  req[LAT_MBOX_REQ_SLOT];
    uint8_t  rep[LAT_MBOX_REP_SLOT];
};
_Static_assert(sizeof(struct lat_mbox) == LAT_MBOX_SIZE, "lat_mbox layout");

#define LAT_RDV_MAXSEG  1024u           /* segments in one rendezvous request */

struct lat_rdv_seg {
    uint64_t addr;          /* in the compute process's address space */
    uint64_t len;
};
_Static_assert(sizeof(struct lat_rdv_seg) == 16, "lat_rdv_seg layout");

/*
 * LAT_CTL_COUNTERS reply: uint64_t calls[nsys] (nsys = LAT_SYS__END -
 * LAT_SYS__BASE), then nsys x { uint64_t bytes, nanoseconds, hist[nbuckets] }
 * (hist[b]: calls that took [2^b, 2^(b+1)) ns, the last bucket everything
 * longer), then uint64_t stat[nstats] (enum lat_ctr), and last struct
 * lat_counters_ext, which says how to read the rest.
 */
struct lat_counters_ext {
    uint32_t nsys;
    uint32_t nbuckets;      /* LAT_HIST_BUCKETS */
    uint32_t nstats;        /* LAT_CTR__END */
    uint32_t pad;
};
_Static_assert(sizeof(struct lat_counters_ext) == 16, "lat_counters_ext layout");
#define LAT_HIST_BUCKETS 32u

enum lat_ctr {
    LAT_CTR_EAGER = 0,      /* reads/writes whose data travelled in messages */
    LAT_CTR_EAGER_BYTES,
    LAT_CTR_RDV,            /* rendezvous transfers */
    LAT_CTR_RDV_BYTES,
    LAT_CTR_RDV_FAULT,      /* rendezvous refused: memory not reachable (EFAULT) */
    LAT_CTR_RDV_BUF_MAX,    /* largest rendezvous buffer held for one process, bytes */
    LAT_CTR_COLL_OPEN_REQ,  /* collective I/O: read-only opens asked for ... */
    LAT_CTR_COLL_OPEN_FS,   /* ... and opened on the file system */
    LAT_CTR_COLL_STAT_REQ,  /* stats asked for ... */
    LAT_CTR_COLL_STAT_FS,   /* ... and done on the file system */
    LAT_CTR_COLL_READ_REQ,  /* reads of cached files asked for ... */
    LAT_CTR_COLL_READ_FS,   /* ... and blocks read from the file system */
    LAT_CTR_COLL_REVALIDATE,/* fstat of a cached file before serving it */
    LAT_CTR_COLL_INVALIDATE,/* entries dropped: changed, written, renamed, unlinked */
    LAT_CTR_COLL_BYTES,     /* bytes the cache holds now */
    LAT_CTR_EAGER_MAX,      /* settings: what a PROC hello is offered ... */
    LAT_CTR_RDV_MIN,        /* ... (0: rendezvous off) */
    LAT_CTR_COLLECTIVE,     /* 1 if collective I/O is on */
    LAT_CTR_SHM,            /* rendezvous (counted above too) done on a shared mapping: one copy */
    LAT_CTR_SHM_BYTES,
    LAT_CTR_SHM_SHARES,     /* LAT_DP_SHARE regions mapped ... */
    LAT_CTR_SHM_REFUSED,    /* ... and refused */
    LAT_CTR_PIPE_SERIES,    /* pipelined series of chunks ... */
    LAT_CTR_PIPE_CHUNKS,    /* ... and their chunks ... */
    LAT_CTR_PIPE_CANCELLED, /* ... answered ECANCELED after a short or failed one */
    LAT_CTR_DATAPATH,       /* setting: 2 shm + rendezvous, 1 rendezvous, 0 messages only */
    LAT_CTR_MBOX_SHARES,    /* mailboxes mapped (LAT_MBOX_SHARE) ... */
    LAT_CTR_MBOX_CALLS,     /* ... calls served through them ... */
    LAT_CTR_MBOX_RINGS,     /* ... of which woke ciod with LAT_MBOX_RING ... */
    LAT_CTR_MBOX_BAD,       /* ... and requests refused as malformed */
    LAT_CTR_SOCK_RDV,       /* socket sends/receives done rendezvous (SEND_RDV, RECV_RDV) ... */
    LAT_CTR_SOCK_RDV_BYTES,
    LAT_CTR_SOCK_SHM,       /* ... of which on the shared mapping: one copy */
    LAT_CTR_SOCK_SHM_BYTES,
    LAT_CTR_OUT_MSGS,       /* output messages the jobs' I/O workers handed over, unacknowledged */
    LAT_CTR_EXITS_HELD,     /* rank exits reported behind their I/O worker's output (W_SYNC) */
    LAT_CTR__END,
};

/* Generic result: syscall replies, control acks, LAT_ERROR. */
struct lat_sysret {
    int64_t  ret;           /* result, or -1 */
    int32_t  err;           /* errno when ret == -1, else 0 */
    uint32_t pad;
};
_Static_assert(sizeof(struct lat_sysret) == 16, "lat_sysret layout");

struct lat_sysreq {
    int64_t a[4];           /* arguments, as documented per call above */
};
_Static_assert(sizeof(struct lat_sysreq) == 32, "lat_sysreq layout");

struct lat_ctl_status {
    uint32_t nodes_connected;   /* compute nodes that said hello and are alive */
    uint32_t pset_size;
    uint64_t job;               /* running job id, 0 if idle */
};
_Static_assert(sizeof(struct lat_ctl_status) == 16, "lat_ctl_status layout");

/*
 * LAT_CTL_JOB payload: struct lat_job, then
 *   int32_t  rank[pset_size]   rank run by each pset-local node (its process t = 0), -1 = idle
 *   uint32_t groups[ngroups]   supplementary groups
 *   with LAT_JOB_PLACED only:
 *     struct lat_job_ext       slots of this pset, applications, processes per node
 *     struct lat_slot slot[nslots]
 *     uint32_t nargs[napps]    argv count of each application (nargs[0] == lat_job.nargs)
 *   with LAT_JOB_CPUS (only with LAT_JOB_PLACED):
 *     struct lat_cpus cpus[nslots]   each slot's CPUs and progress thread, in slot order
 *     uint32_t cpu[sum of ncpus]     the CPUs, slot after slot
 *   strings, each NUL-terminated: exe, cwd, argv[nargs], env[nenv]
 *   with LAT_JOB_PLACED only, more strings: PMI_process_mapping, then for
 *     applications 1..napps-1: exe, argv[nargs[i]]
 * Without LAT_JOB_PLACED every node with a rank runs one process (t = 0) of
 * application 0 and PMI_process_mapping is not known.
 */
struct lat_job {
    uint64_t job;           /* job id (service node database) */
    uint32_t uid;
    uint32_t gid;
    uint32_t ngroups;       /* <= 256 */
    uint32_t nargs;         /* argv count, >= 1 */
    uint32_t nenv;
    uint32_t nranks;        /* ranks in the whole job */
    uint32_t pset_size;     /* must equal the I/O node's */
    uint32_t flags;         /* LAT_JOB_* bits; others are refused */
};
_Static_assert(sizeof(struct lat_job) == 40, "lat_job layout");

/* Job flags: lat_job.flags (CTL_JOB), passed on in lat_node_job.flags.
 * ciod refuses a job with a bit it does not know, or TRACE without CNK. */
enum lat_job_flags {
    LAT_JOB_CNK    = 1,     /* run under the compute node kernel (cnk), not Linux mode */
    LAT_JOB_TRACE  = 2,     /* cnk --trace: print every system call; needs LAT_JOB_CNK */
    LAT_JOB_VN     = 4,     /* virtual node mode (personality mode=vn); else coprocessor mode */
    LAT_JOB_PLACED = 8,     /* the message carries slots and applications (lat_job_ext) */
    LAT_JOB_CPUS   = 16,    /* each slot's CPUs (lat_cpus); needs LAT_JOB_PLACED */
    LAT_JOB_STDIN  = 32,    /* standard input comes in LAT_CTL_STDIN for the rank(s) named by
                               lat_job_ext.stdin_rank; needs LAT_JOB_PLACED.  Without it every
                               rank's descriptor 0 reads end of file at once */
    LAT_JOB_TREE   = 64,    /* the job's fences go through a tree of I/O nodes: a
                               LAT_CTL_PMI_TREE follows, and this pset's fence waits for it */
    LAT_JOB_SANDBOX = 128,  /* Linux mode in the node sandbox (namespaces, files through the FUSE
                               client, IP through the I/O node); never with LAT_JOB_CNK */
};
/* The process slot (lat_hello.node >> 16) of a node's file client
 * (lattice-fs, compute/cnfs/) in a LAT_JOB_SANDBOX job: one PROC connection
 * per node, bound to the job like a process's, standing for no rank (-1). */
#define LAT_PROC_FS 0xFFFFu
#define LAT_JOB_FLAGS_ALL (LAT_JOB_CNK | LAT_JOB_TRACE | LAT_JOB_VN | LAT_JOB_PLACED | LAT_JOB_CPUS | LAT_JOB_STDIN | LAT_JOB_TREE | LAT_JOB_SANDBOX)

/* Rank mapping of a job in one pset (LAT_JOB_PLACED). */
struct lat_job_ext {
    uint32_t nslots;        /* processes (ranks) in this pset, or on this node (NODE_JOB) */
    uint32_t napps;         /* applications of the job, 1..LAT_MAX_APPS */
    uint32_t ppn;           /* processes per node of the job's mode, 1..LAT_MAX_PPN */
    uint32_t stdin_rank;    /* with LAT_JOB_STDIN: the rank that reads the job's standard input,
                               or LAT_STDIN_ALL (each rank reads all of it); else 0 */
};
_Static_assert(sizeof(struct lat_job_ext) == 16, "lat_job_ext layout");

/*
 * Standard input (LAT_CTL_STDIN down, LAT_CTL_STDIN_ACK up; docs/protocol.md
 * section 4.1).  The service node sends the job's input to the I/O nodes of
 * the ranks that read it, in order, and has at most LAT_STDIN_WINDOW bytes
 * unacknowledged per I/O node; ciod acknowledges bytes once every reading
 * rank of its pset was handed them.  LAT_STDIN_EOF (in the last message,
 * with or without data) ends the input: reads return 0 from then on.
 */
#define LAT_STDIN_ALL    0xFFFFFFFFu    /* lat_job_ext.stdin_rank: every rank */
#define LAT_STDIN_MAX    65536u         /* data bytes per LAT_CTL_STDIN */
#define LAT_STDIN_WINDOW 1048576u       /* unacknowledged bytes per I/O node: several round trips of the pipe speed */
#define LAT_STDIN_EOF    1u

struct lat_stdin {
    uint64_t job;
    uint32_t bytes;         /* CTL_STDIN: data bytes that follow; CTL_STDIN_ACK: bytes handed over */
    uint32_t flags;         /* LAT_STDIN_EOF (CTL_STDIN only) */
};
_Static_assert(sizeof(struct lat_stdin) == 16, "lat_stdin layout");

struct lat_slot {
    uint32_t rank;          /* job rank, < nranks, each at most once */
    uint32_t node;          /* pset-local node index */
    uint32_t t;             /* process index on the node, < ppn, each (node, t) at most once */
    uint32_t app;           /* application number (PMI appnum), < napps */
};
_Static_assert(sizeof(struct lat_slot) == 16, "lat_slot layout");

/* The real CPUs of one slot (LAT_JOB_CPUS): the node binds the process to
 * them before exec, and sets MPIR_CVAR_ASYNC_PROGRESS to progress (0 or 1)
 * unless the job's environment has it; LAT_PROGRESS_UNSET adds nothing. */
struct lat_cpus {
    uint32_t ncpus;         /* 1..LAT_CPU_LIMIT CPU numbers follow (in the cpu[] array) */
    int32_t  progress;      /* 0, 1 or LAT_PROGRESS_UNSET */
};
_Static_assert(sizeof(struct lat_cpus) == 8, "lat_cpus layout");
#define LAT_PROGRESS_UNSET (-1)

/* A signal for the processes of one job (LAT_CTL_KILL, LAT_NODE_KILL): a
 * receiver whose job is not `job` refuses it and acts on nothing, so that
 * ending one job can never touch another. */
struct lat_kill {
    uint64_t job;
    int32_t  sig;
    uint32_t pad;
};
_Static_assert(sizeof(struct lat_kill) == 16, "lat_kill layout");

enum lat_stream { LAT_STDOUT = 1, LAT_STDERR = 2 };

struct lat_output {
    uint32_t rank;          /* job rank (from ciod) or 0 (from a node: ciod fills it) */
    uint32_t stream;        /* enum lat_stream */
};
_Static_assert(sizeof(struct lat_output) == 8, "lat_output layout");

enum lat_exit_how {
    LAT_EXIT_CODE    = 1,   /* value = exit code */
    LAT_EXIT_SIGNAL  = 2,   /* value = signal number */
    LAT_EXIT_LAUNCH  = 3,   /* could not start; value = errno; message says why */
    LAT_EXIT_LOST    = 4,   /* the node died; value = 0; message names the node */
};

struct lat_exit {
    uint64_t job;
    uint32_t rank;
    uint32_t node;          /* pset-local node index */
    uint32_t how;           /* enum lat_exit_how */
    int32_t  value;
};
_Static_assert(sizeof(struct lat_exit) == 24, "lat_exit layout");

struct lat_job_end {
    uint64_t job;
};
_Static_assert(sizeof(struct lat_job_end) == 8, "lat_job_end layout");

/*
 * LAT_NODE_JOB payload: struct lat_node_job, then
 *   uint32_t groups[ngroups]
 *   with LAT_JOB_PLACED only:
 *     struct lat_job_ext             nslots = processes on this node
 *     struct lat_slot slot[nslots]   node == this node
 *     struct lat_node_app app[napps] image sizes (0: not run here) and argv counts
 *   with LAT_JOB_CPUS only: struct lat_cpus cpus[nslots], uint32_t cpu[] (as in LAT_CTL_JOB,
 *     for this node's slots in the order of slot[])
 *   strings, each NUL-terminated: argv[nargs], env[nenv]
 *   with LAT_JOB_PLACED only: argv of applications 1..napps-1
 * followed on the connection by LAT_NODE_IMAGE messages carrying exactly
 * image_size bytes (with LAT_JOB_PLACED: the images of the applications
 * back to back, in application order), then LAT_NODE_START.
 * rank is the rank of process t = 0; nargs is application 0's count.
 */
struct lat_node_job {
    uint64_t job;
    uint64_t image_size;
    uint32_t rank;
    uint32_t size;          /* ranks in the whole job */
    uint32_t uid;
    uint32_t gid;
    uint32_t ngroups;
    uint32_t nargs;
    uint32_t nenv;
    uint32_t flags;         /* the job's LAT_JOB_* flags */
};
_Static_assert(sizeof(struct lat_node_job) == 48, "lat_node_job layout");

struct lat_node_app {
    uint64_t image_size;    /* bytes of this application's image pushed, 0 if no process here runs it */
    uint32_t nargs;
    uint32_t pad;
};
_Static_assert(sizeof(struct lat_node_app) == 16, "lat_node_app layout");

/* PMI relay between a compute node and ciod (LAT_NODE_PMI, LAT_NODE_PMI_REPLY):
 * the bytes of one rank's PMI stream, in order. */
struct lat_pmi {
    uint32_t rank;
    uint32_t pad;
};
_Static_assert(sizeof(struct lat_pmi) == 8, "lat_pmi layout");

/* A fence (LAT_CTL_FENCE up, LAT_CTL_FENCE_OUT down), followed by nkv pairs
 * of strings key \0 value \0.  A large one is split into messages with
 * LAT_FENCE_MORE set on every message but the last. */
struct lat_fence {
    uint64_t job;
    uint32_t epoch;         /* fences completed before this one */
    uint32_t nkv;
    uint32_t flags;         /* LAT_FENCE_MORE */
    uint32_t pad;
};
_Static_assert(sizeof(struct lat_fence) == 24, "lat_fence layout");
#define LAT_FENCE_MORE 1u

/*
 * The job's PMI fence tree (LAT_CTL_PMI_TREE, docs/protocol.md section 10):
 * the I/O nodes that run ranks form a k-ary tree under the service node.
 * Each child connects to its parent with a LAT_ROLE_TREE hello and sends it
 * its subtree's LAT_CTL_FENCE; the parent sends LAT_CTL_FENCE_OUT back down.
 * Payload: struct lat_pmi_tree, uint32_t child_pset[nchildren], then the
 * parent's address, NUL-terminated ("" : the service node, over the
 * CONTROL connection, as without a tree).
 */
struct lat_pmi_tree {
    uint64_t job;
    uint32_t nchildren;     /* I/O nodes below this one */
    uint32_t pad;
};
_Static_assert(sizeof(struct lat_pmi_tree) == 16, "lat_pmi_tree layout");

/* A rank called PMI abort: the job ends with its code (LAT_CTL_ABORT). */
struct lat_abort {
    uint64_t job;
    uint32_t rank;
    int32_t  code;
};
_Static_assert(sizeof(struct lat_abort) == 16, "lat_abort layout");

/* MPI name publishing through PMI (LAT_CTL_NAME, LAT_CTL_NAME_OUT): the
 * service node keeps the job's names; rc 0 done, else the name is taken
 * (publish) or unknown (unpublish, lookup). */
struct lat_name {
    uint64_t job;
    uint32_t rank;
    uint32_t op;            /* LAT_NAME_* */
    int32_t  rc;            /* in NAME_OUT */
    uint32_t pad;
};
_Static_assert(sizeof(struct lat_name) == 24, "lat_name layout");
enum lat_name_op { LAT_NAME_PUBLISH = 1, LAT_NAME_UNPUBLISH = 2, LAT_NAME_LOOKUP = 3 };

struct lat_timespec {
    int64_t sec;
    int64_t nsec;           /* or UTIME_NOW / UTIME_OMIT */
};
_Static_assert(sizeof(struct lat_timespec) == 16, "lat_timespec layout");

struct lat_stat {
    uint64_t dev, ino, nlink;
    uint32_t mode, uid, gid, pad;
    uint64_t rdev;
    int64_t  size, blksize, blocks;
    int64_t  atime_sec, atime_nsec;
    int64_t  mtime_sec, mtime_nsec;
    int64_t  ctime_sec, ctime_nsec;
};
_Static_assert(sizeof(struct lat_stat) == 120, "lat_stat layout");

struct lat_statfs {
    int64_t  type, bsize;
    uint64_t blocks, bfree, bavail, files, ffree, fsid;
    int64_t  namelen, frsize, flags;
};
_Static_assert(sizeof(struct lat_statfs) == 88, "lat_statfs layout");

struct lat_flock {                  /* a Linux struct flock; pid is -1 for a lock held through an I/O node */
    int16_t  type, whence;          /* F_RDLCK, F_WRLCK, F_UNLCK; SEEK_SET, SEEK_CUR, SEEK_END */
    int32_t  pid;
    int64_t  start, len;
};
_Static_assert(sizeof(struct lat_flock) == 24, "lat_flock layout");

#endif
