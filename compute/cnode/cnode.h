/*
 * cnode.h - the compute node supervisor.
 *
 *   main.c   arguments, personality, hidden paths, the message loop
 *   net.c    messages from ciod (connecting, the hello, sending: protocol/peer/peer.c)
 *   relay.c  a process's connection to an I/O node on another host, sealed for it
 *   netdev.c which network interfaces a job's UCX may use (UCX_NET_DEVICES)
 *   topology.c where a job's hwloc may read the host's topology (HWLOC_XMLFILE)
 *   job.c    one job: receive it, supervise its processes, report how each ended
 *   launch.c start the job's processes (in Linux mode or under cnk)
 *   report.c cnk's report page as the exit message's report line
 *   container.c the job's cgroup: entered by its processes, killed whole at its end
 *   sandbox.c the node sandbox of a Linux-mode job: namespaces, its file view, its holder
 *   job.h    the job's types, shared by job.c, launch.c and report.c
 */
#ifndef CNODE_H
#define CNODE_H

#include <stddef.h>
#include <poll.h>
#include <stdint.h>
#include <sys/types.h>

#include <lattice/peer.h>
#include <lattice/wire.h>

struct personality {
    char *block;
    uint8_t key[LAT_KEY_BYTES];
    char *ciod;                 /* address: unix:/path or tcp:host:port */
    uint32_t node;              /* pset-local index */
    char *location;             /* e.g. R00-M0-N00-C:J05 */
    char **hide;                /* NULL-terminated */
    uint64_t memory;            /* bytes of memory of the node (cnk --memory) */
    uint32_t cores;             /* cores of the node (cnk --cores) */
    char *env;                  /* LATTICE_PERSONALITY value (compute/include/lattice/personality.h) */
    char *env_head;             /* its fields before memory= (a placed job writes the rest per process) */
    char *mode;                 /* the node's mode from the personality file: co or vn */
    char *container;            /* the block's cgroup directory below the hierarchy's root (container.h) */
    int by_agent;               /* started by a host agent (it named the container) */
    struct {                    /* the optional "sandbox" object the host agent writes; NULL if absent */
        char *netns;            /* the node's network namespace (a /run/netns file), its link configured */
        char *shm;              /* the block's shared memory directory on this host: each job's
                                   /dev/shm is a directory of it, shared by the job's nodes here */
        char *ipcns;            /* the block's IPC namespace on this host (a bind-mounted nsfs file):
                                   UCX's and MPI's System V and shared-memory peers are the nodes' */
        char *pidns;            /* the block's pid namespace on this host (a bind-mounted nsfs file,
                                   its pid 1 the agent's lattice-pidns-init), or NULL: a node's own */
        char *ifname, *address, *gateway;   /* the node's link, for its processes' UCX_NET_DEVICES */
    } sandbox;
};

/* How the node starts a job's process. */
struct kernels {
    const char *client;         /* Linux mode: libcnclient.so, preloaded */
    const char *cnk;            /* the compute node kernel, or NULL if this node has none */
    int cnk_fd;                 /* it, opened once at start (O_CLOEXEC), or -1 */
};

struct msg {
    struct lat_hdr h;
    uint8_t *p;                 /* payload, h.len bytes */
};

/* net.c; connecting, the handshake and sending: lattice/peer.h */
/* netdev.c: the interfaces of the host's default routes, comma-separated ("" if none) */
void netdev_default_routes(char *out, size_t len);
/* topology.c: 1 and the host's hwloc topology file in out if it is there and
 * trustworthy (cnode's own, writable by nobody else), else 0 */
int topology_file(char *out, size_t len);
/* 1 message, 0 orderly EOF, -1 error (errno; EPROTO for a bad header) */
int net_recv(int fd, struct msg *m);
/* relay.c: a process's PROC connection: for a tcp: I/O node, the process's
 * end of a socketpair to a relay that seals the link for it (the process
 * holds no key); else the connection itself.  A descriptor or -1 (errno). */
int relay_connect(const char *addr, const uint8_t key[LAT_KEY_BYTES], double retry_seconds);

/* job.c */
struct job;
/* conn: the node connection, whose hello had seq hello_seq */
struct job *job_new(const struct personality *pers, const struct kernels *k, int conn, uint32_t hello_seq);
/* Handle one message from ciod; returns 0, or 1 if the node must exit (shutdown). */
int job_message(struct job *j, const struct msg *m);
/* descriptors to poll while a job runs (pipes, pidfds, PMI sockets): at most
 * job_pollfd_max (4 per process); job_pollfds fills pfd, returns the count */
int job_pollfd_max(const struct job *j);
int job_pollfds(struct job *j, struct pollfd *pfd, int max);
void job_events(struct job *j, const struct pollfd *pfd, int n);
void job_kill_now(struct job *j);   /* SIGKILL the process group and reap */
int job_running(const struct job *j);

void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
