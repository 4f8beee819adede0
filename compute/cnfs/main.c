/*
 * main.c - lattice-fs: the job's file client on a Linux compute node
 * (README.md here; started by cnode, compute/cnode/fs.c).
 *
 *   lattice-fs --conn FD --ctl FD --dp EAGER,RDV,FLAGS [--label TEXT] [--writes cached|direct]
 *
 * conn is the PROC connection to the pset's ciod, its hello said already
 * by cnode's child (this pid); dp what ciod agreed for it.  The sandbox's
 * holder mounts /dev/fuse and sends the descriptor over ctl (SCM_RIGHTS);
 * lattice-fs serves it until the file system is unmounted (the job's
 * mount namespace ended) or the connection is lost, and says which on
 * stderr in one line.  EOF on ctl before a descriptor came: the job never
 * mounted; it ends without a word.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <linux/fuse.h>             /* struct fuse_in_header: a request's opcode */
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cnfs.h"
#include "shipc.h"

static const char *label = "";
static int conn_fd = -1;

static void say(const char *fmt, const char *arg)
{
    char line[512];
    size_t n = (size_t)snprintf(line, sizeof line - 1, "lattice-fs%s%s: ", *label ? " " : "", label);
    if (n < sizeof line - 1)
        n += (size_t)snprintf(line + n, sizeof line - 1 - n, fmt, arg);
    if (n > sizeof line - 2)
        n = sizeof line - 2;                /* cut short, still one line */
    line[n++] = '\n';
    (void)!write(2, line, n);
}

void cnfs_lost(const char *why)
{
    static atomic_flag said = ATOMIC_FLAG_INIT;
    if (atomic_flag_test_and_set(&said))
        for (;;)
            pause();    /* another thread saw it first and is ending the process */
    say("connection to the I/O node lost (%s); ending", why);
    _exit(1);           /* the kernel fails every call on the mount from now on (ENOTCONN) */
}

/* Sees the I/O node hang up while no request is in flight, too. */
static void *watch(void *arg)
{
    (void)arg;
    struct pollfd p = { conn_fd, POLLRDHUP, 0 };
    while (poll(&p, 1, -1) < 0 && errno == EINTR)
        ;
    cnfs_lost("the I/O node closed it");
    return NULL;
}

/* The serving loop's buffers, in one sealed memfd shared with ciod
 * (LAT_DP_SHARE) when it grants LAT_DP_SHM: a write's bytes, read from
 * /dev/fuse into the receive buffer, and a read's, in the read buffer,
 * are then moved by ciod's file system call straight from or into its own
 * mapping of them (docs/protocol.md 6.2), not copied through ours. */
#define RECV_BYTES CNFS_RECV_BYTES

static char *region(size_t len)
{
    int fd = memfd_create("lattice-fs-buffers", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0 || ftruncate(fd, (off_t)len) < 0 || fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0) {
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        close(fd);
        return NULL;
    }
    /* not shared (another host: no LAT_DP_SHM): ciod reaches them by pid */
    (void)shipc_share((uintptr_t)p, len, fd);
    close(fd);          /* ciod mapped it already, or never will */
    return p;
}

/* One serving loop: every call goes over the one connection, one at a
 * time, so more threads would only add wake-ups (four of them made small
 * files ~30% slower on a 2-CPU host); a lock that must wait is handed to
 * the waiter thread (ops.c), so it never holds the loop.  Our own loop, not
 * fuse_session_loop, to read into the shared buffer.  Two receive buffers:
 * a write behind (behind.c) keeps its bytes in one while the next request
 * is read into the other; any request but a write waits for it first, so
 * the I/O node sees every call in the kernel's order.  Returns at the
 * unmount (ENODEV), or -1. */
static int serve(struct fuse_session *se)
{
    char *mem = region(2 * RECV_BYTES + CNFS_MAX_IO);
    if (!mem) {
        say("cannot map its buffers: %s", strerror(errno));
        return -1;
    }
    char *recv[2] = { mem, mem + RECV_BYTES };
    int k = 0;
    struct fuse_buf buf = { .mem = mem, .size = RECV_BYTES };
    cnfs_rbuf = mem + 2 * RECV_BYTES;
    while (!fuse_session_exited(se)) {
        if (behind_holds(recv[k]))
            k ^= 1;     /* one write at most is behind: the other buffer is free */
        buf.mem = recv[k];
        int r = fuse_session_receive_buf(se, &buf);
        if (r == -EINTR || r == -EAGAIN)
            continue;
        if (r < 0) {
            say("reading /dev/fuse: %s", strerror(-r));
            return -1;
        }
        if (r == 0)
            break;      /* unmounted: the job's mount namespace is gone */
        if ((size_t)r < sizeof(struct fuse_in_header) || ((struct fuse_in_header *)buf.mem)->opcode != FUSE_WRITE)
            behind_drain();
        fuse_session_process_buf(se, &buf);
    }
    return 0;
}

/* The /dev/fuse descriptor from the holder: it, 0 at EOF, -1 on error. */
static int receive_fd(int ctl)
{
    char byte, cbuf[CMSG_SPACE(sizeof(int))];
    struct iovec v = { &byte, 1 };
    struct msghdr mh = { .msg_iov = &v, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf };
    ssize_t n;
    while ((n = recvmsg(ctl, &mh, MSG_CMSG_CLOEXEC)) < 0 && errno == EINTR)
        ;
    if (n <= 0)
        return (int)n;
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    if (!c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len != CMSG_LEN(sizeof(int))) {
        errno = EPROTO;
        return -1;
    }
    int fd;
    memcpy(&fd, CMSG_DATA(c), sizeof fd);
    return fd;
}

static int number(const char *s)
{
    char *end;
    long v = s ? strtol(s, &end, 10) : -1;
    return s && *s && !*end && v >= 0 && v < 1 << 20 ? (int)v : -1;
}

int main(int argc, char **argv)
{
    int ctl = -1;
    const char *dp = NULL, *writes = "cached";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--conn"))
            conn_fd = number(argv[i + 1]);
        else if (!strcmp(argv[i], "--ctl"))
            ctl = number(argv[i + 1]);
        else if (!strcmp(argv[i], "--dp"))
            dp = argv[i + 1];
        else if (!strcmp(argv[i], "--label"))
            label = argv[i + 1];
        else if (!strcmp(argv[i], "--writes"))
            writes = argv[i + 1];
    }
    if (conn_fd < 0 || ctl < 0 || !dp || (strcmp(writes, "cached") && strcmp(writes, "direct"))) {
        say("%s", "usage: lattice-fs --conn FD --ctl FD --dp EAGER,RDV,FLAGS [--label TEXT] "
                  "[--writes cached|direct] (started by cnode)");
        return 2;
    }
    cnfs_direct_writes = !strcmp(writes, "direct");
    shipc_fd_setup(0);
    struct shipc_cfg cfg = { .conn = conn_fd, .dp = dp, .mailbox = 1, .mailbox_name = "lattice-fs-mailbox" };
    int r = shipc_init(&cfg);
    if (r < 0) {
        say("the I/O node connection is unusable: %s", strerror(-r));
        return 1;
    }
    node_init();

    int dev = receive_fd(ctl);
    if (dev == 0)
        return 0;                       /* the job ended before it mounted */
    if (dev < 0) {
        say("no /dev/fuse descriptor from the sandbox: %s", strerror(errno));
        return 1;
    }
    close(ctl);

    char *fargv[] = { argv[0], NULL };
    struct fuse_args args = FUSE_ARGS_INIT(1, fargv);
    struct fuse_session *se = fuse_session_new(&args, &cnfs_ops, sizeof cnfs_ops, NULL);
    char mnt[32];
    snprintf(mnt, sizeof mnt, "/dev/fd/%d", dev);
    if (!se || fuse_session_mount(se, mnt) != 0) {
        say("%s", "cannot serve the /dev/fuse descriptor");
        return 1;
    }
    cnfs_se = se;
    pthread_t w;
    if (pthread_create(&w, NULL, watch, NULL) != 0) {
        say("cannot start its watch: %s", strerror(errno));
        return 1;
    }
    if (serve(se) < 0)
        return 1;
    say("%s", "unmounted; ending");
    _exit(0);           /* not fuse_session_destroy: the watch thread may still run */
}
