/*
 * worker.c - the job's I/O worker: everything ciod does for a job (files,
 * sockets, the compute processes' memory) happens in one process per job
 * that holds the job owner's uids, gids and groups and no capabilities, so
 * the kernel enforces the owner's rights (docs/security.md).
 *
 * The root part of ciod (the monitor, as OpenSSH calls it) keeps the
 * listening socket, the key, the control, node and PMI connections.  At
 * LAT_CTL_JOB it forks the worker, which drops every privilege before it
 * reads anything the job sent; the monitor then asks it to open the job's
 * executables (the kernel checks the owner may execute them) and hands it
 * each compute process's connection once the hello is authenticated and
 * acknowledged.  The two talk over SOCK_SEQPACKET socketpairs (struct
 * wmsg, descriptors as SCM_RIGHTS): on one the monitor asks and the worker
 * answers (opened executables); on the other the worker sends the ranks'
 * standard output, unacknowledged (the channel's socket buffer is the
 * backpressure).  A rank's output still reaches the service node before its
 * exit: the monitor passes each exit through the worker (W_SYNC, answered by
 * W_SYNC_R on the output channel, behind everything the rank's completed
 * writes put there; for cnk, whose writes of the output do not wait for
 * their reply, once all the rank sent was served) and reports it when the
 * answer comes.  Plug-in calls, the one
 * service the monitor keeps (plug-ins are the site's code, loaded at boot),
 * reach it over a socketpair per process (plugin.c serves it unchanged).
 *
 * The worker is forked, not executed anew, so it never re-reads anything
 * as root; it wipes the block key from its copy of the monitor's memory,
 * closes every descriptor it did not get for the job, and is not dumpable,
 * so the job's own processes cannot trace it.  It ends when the monitor
 * closes the channel (the job ended) and dies with the monitor.  One worker
 * runs at a time: a new job waits for the previous one to be reaped.
 */
#include "ciod.h"
#include "shipcall.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <linux/capability.h>
#include <linux/securebits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define WMSG_DATA   65536u              /* output bytes per channel message */
#define OUT_GATHER  (4u * WMSG_DATA)    /* a stream's messages waiting together go up as one CTL_OUTPUT */
#define OUT_ROOM    (2u * OUT_GATHER + WMSG_DATA + 1)  /* the reader's buffer: gatherings one after another */
#define END_GRACE_S 5                   /* a worker that outlives its job this long is killed */
#define WORKER_STACK (512u * 1024u)     /* as a connection thread in main.c */

enum wmsg_type {
    W_READY = 1,    /* worker -> monitor: err, text: it runs as the owner, or why not */
    W_EXE,          /* monitor -> worker: path: open it to execute */
    W_EXE_R,        /* worker -> monitor: err, text; the descriptor on success */
    W_PROC,         /* monitor -> worker: struct wproc; the connection (+ plug-in line) */
    W_OUTPUT,       /* worker -> monitor (output channel): rank, stream, data: a rank wrote on 1 or 2; no ack */
    W_OUTPUT_ACK,   /* monitor -> worker (output channel): W_PROC_GONE or W_STDIN_ACK noted */
    W_PROC_GONE,    /* worker -> monitor (output channel): node, t: its connection closed */
    W_STDIN,        /* monitor -> worker: standard input (stream: LAT_STDIN_* flags), stdin.c */
    W_STDIN_ACK,    /* worker -> monitor (output channel): count bytes of it handed to the ranks */
    W_SYNC,         /* monitor -> worker: count, node, t: answer W_SYNC_R behind that process's output */
    W_SYNC_R,       /* worker -> monitor (output channel): count, as asked; no ack */
};

struct wmsg {
    uint32_t type, len;                 /* len: bytes after this header */
    int32_t  err, rank;
    uint32_t stream, node, t, count;
    uint64_t job;
};

/* ---- the channel: one message, up to two descriptors ---- */

static int wsend(int ch, const struct wmsg *m, const void *data, const int *fds, int nfd)
{
    struct iovec v[2] = { { (void *)m, sizeof(*m) }, { (void *)data, m->len } };
    union { char buf[CMSG_SPACE(2 * sizeof(int))]; struct cmsghdr align; } u;
    struct msghdr mh = { .msg_iov = v, .msg_iovlen = m->len ? 2 : 1 };

    if (nfd > 0) {
        mh.msg_control = u.buf;
        mh.msg_controllen = CMSG_SPACE(nfd * sizeof(int));
        struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(nfd * sizeof(int));
        memcpy(CMSG_DATA(cm), fds, nfd * sizeof(int));
    }
    ssize_t n;
    do
        n = sendmsg(ch, &mh, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    return n == (ssize_t)(sizeof(*m) + m->len) ? 0 : -1;
}

/* 1: a message (data NUL-terminated in buf), 0: EOF, -1: error or malformed.
 * Received descriptors go to fds (-1 where none came). */
static int wrecv(int ch, struct wmsg *m, char *buf, size_t cap, int fds[2])
{
    struct iovec v[2] = { { m, sizeof(*m) }, { buf, cap - 1 } };
    union { char buf[CMSG_SPACE(2 * sizeof(int))]; struct cmsghdr align; } u;
    struct msghdr mh = { .msg_iov = v, .msg_iovlen = 2, .msg_control = u.buf,
                         .msg_controllen = sizeof(u.buf) };
    ssize_t n;

    fds[0] = fds[1] = -1;
    do
        n = recvmsg(ch, &mh, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n <= 0)
        return n == 0 ? 0 : -1;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
            size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            memcpy(fds, CMSG_DATA(cm), (k > 2 ? 2 : k) * sizeof(int));
            for (size_t i = 2; i < k; i++) {        /* never more than two: not ours to keep */
                int extra;
                memcpy(&extra, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
                close(extra);
            }
        }
    if ((size_t)n < sizeof(*m) || (size_t)n != sizeof(*m) + m->len || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
        for (int i = 0; i < 2; i++)
            if (fds[i] >= 0)
                close(fds[i]);
        errno = EPROTO;
        return -1;
    }
    buf[m->len] = '\0';
    return 1;
}

/* ================= the worker process ================= */

static struct {
    int             ch, out;
    uint64_t        job;
    const struct ident *who;
    const char     *cwd;
    pthread_mutex_t send_lock;          /* W_OUTPUT from many threads; one message each */
    pthread_mutex_t lock;
    struct conn   **live;               /* the processes served, grown as they come: no fixed cap */
    unsigned        nlive, nroom;
    pthread_cond_t  gone;               /* also: a watched process entered a call (worker_in_call) */
    bool            cnk;                /* LAT_JOB_CNK: a connection is its process's alone */
} wk = { .ch = -1, .out = -1, .send_lock = PTHREAD_MUTEX_INITIALIZER, .lock = PTHREAD_MUTEX_INITIALIZER,
         .gone = PTHREAD_COND_INITIALIZER };

bool worker_is_self(void)
{
    return wk.ch >= 0;
}

/* One message on the output channel and the monitor's acknowledgement;
 * wk.send_lock held.  -1: the monitor is gone (so is the job). */
static int send_acked(const struct wmsg *m, const void *data)
{
    struct wmsg ack;
    char none[1];
    int fds[2];

    return wsend(wk.out, m, data, NULL, 0) == 0 && wrecv(wk.out, &ack, none, sizeof(none), fds) > 0 ? 0 : -1;
}

/* W_PROC_GONE: once the process sees its connection closed, the monitor
 * knows it may say hello again. */
static void proc_gone(uint32_t node, uint32_t t)
{
    struct wmsg m = { .type = W_PROC_GONE, .node = node, .t = t, .job = wk.job };

    pthread_mutex_lock(&wk.send_lock);
    send_acked(&m, NULL);
    pthread_mutex_unlock(&wk.send_lock);
}

/* A rank's write on 1 or 2, in pieces of WMSG_DATA, not acknowledged: the
 * write returns once all of it is in the channel (a full channel blocks it,
 * as a full pipe would), so before the rank can exit; its exit goes out
 * behind it (W_SYNC).  A monitor that is gone (so is the job) loses it. */
void worker_output(int32_t rank, uint64_t job, uint32_t stream, const void *data, size_t len)
{
    struct wmsg m = { .type = W_OUTPUT, .rank = rank, .stream = stream, .job = job };
    const char *p = data;

    pthread_mutex_lock(&wk.send_lock);
    do {
        m.len = (uint32_t)(len < WMSG_DATA ? len : WMSG_DATA);
        if (wsend(wk.out, &m, p, NULL, 0) < 0)
            break;
        atomic_fetch_add_explicit(&dp_ctr[LAT_CTR_OUT_MSGS], 1, memory_order_relaxed);
        p += m.len;
        len -= m.len;
    } while (len);
    pthread_mutex_unlock(&wk.send_lock);
}

/* W_SYNC: the answer goes behind everything its process sent, from a
 * thread of its own: the main thread must never wait on the output channel
 * (the monitor may be sending it input while its reader waits for W.lock).
 * Asked in order; each answer also answers the earlier ones. */
struct sync_ask {
    struct sync_ask *next;
    uint32_t count, node, t;
};

static struct {
    pthread_mutex_t  lock;
    pthread_cond_t   asked;
    struct sync_ask *head, **tail;
} sy = { .lock = PTHREAD_MUTEX_INITIALIZER, .asked = PTHREAD_COND_INITIALIZER, .tail = &sy.head };

/* Under wk.lock: nothing process c sent can still be unserved: its thread
 * is in a call the process waits for (in_call ends before the reply goes,
 * ship.c).  cnk takes the replies of its
 * unawaited writes before it sends any other call (shipc_async_drain), so
 * all it sent before that call was served, and after it, it sent at most
 * the call's mailbox ring (LAT_MBOX_RING), which may lie unread on the
 * socket: there is nothing to serve in it. */
static bool served_all(struct conn *c)
{
    return atomic_load(&c->in_call);
}

/* Until the process (node, t), which ended, has had everything it sent
 * served: its writes of the job's output it did not wait for (cnk) come
 * before its exit.  Its thread either serves them and reads the end of its
 * connection (it leaves wk.live), or is in a call the process waited for,
 * which may block for ever (a FIFO): then nothing is behind it.  A process
 * of Linux mode may share its connection with children that outlive it,
 * and waits for every reply: nothing to wait for. */
static void proc_served(uint32_t node, uint32_t t)
{
    if (!wk.cnk)
        return;
    pthread_mutex_lock(&wk.lock);
    for (;;) {
        struct conn *c = NULL;
        for (unsigned i = 0; i < wk.nlive && !c; i++)
            if (wk.live[i]->proc_node == node && wk.live[i]->proc_t == t)
                c = wk.live[i];
        if (!c)
            break;                      /* gone, or never connected */
        atomic_store(&c->watched, true);
        if (served_all(c))
            break;
        pthread_cond_wait(&wk.gone, &wk.lock);
    }
    pthread_mutex_unlock(&wk.lock);
}

void worker_in_call(struct conn *c, bool in)
{
    atomic_store(&c->in_call, in);
    if (in && atomic_load(&c->watched)) {   /* an exit waits on this process (proc_served) */
        pthread_mutex_lock(&wk.lock);
        pthread_cond_broadcast(&wk.gone);
        pthread_mutex_unlock(&wk.lock);
    }
}

static void *sync_main(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "ciod-wsync");
    for (;;) {
        pthread_mutex_lock(&sy.lock);
        while (!sy.head)
            pthread_cond_wait(&sy.asked, &sy.lock);
        struct sync_ask *a = sy.head;
        if (!(sy.head = a->next))
            sy.tail = &sy.head;
        pthread_mutex_unlock(&sy.lock);
        proc_served(a->node, a->t);
        struct wmsg r = { .type = W_SYNC_R, .count = a->count, .job = wk.job };
        free(a);
        pthread_mutex_lock(&wk.send_lock);
        wsend(wk.out, &r, NULL, NULL, 0);
        pthread_mutex_unlock(&wk.send_lock);
    }
    return NULL;
}

static void sync_ask(const struct wmsg *m)
{
    struct sync_ask *a = malloc(sizeof(*a));

    if (!a) {                           /* the monitor's reader would wait for ever: the job cannot go on */
        logmsg("worker of job %" PRIu64 ": out of memory", wk.job);
        _exit(1);
    }
    *a = (struct sync_ask){ NULL, m->count, m->node, m->t };
    pthread_mutex_lock(&sy.lock);
    *sy.tail = a;
    sy.tail = &a->next;
    pthread_cond_signal(&sy.asked);
    pthread_mutex_unlock(&sy.lock);
}

/* The answering thread, before the worker says it is ready; -1 if none. */
static int sync_start(void)
{
    pthread_attr_t attr;
    pthread_t t;

    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64u * 1024u);
    return pthread_create(&t, &attr, sync_main, NULL) == 0 ? 0 : -1;
}

void worker_stdin_ack(uint32_t bytes)
{
    struct wmsg m = { .type = W_STDIN_ACK, .count = bytes, .job = wk.job };

    pthread_mutex_lock(&wk.send_lock);
    send_acked(&m, NULL);
    pthread_mutex_unlock(&wk.send_lock);
}

/* Every capability gone for good, then the owner's ids: real, effective,
 * saved and file-system, its groups.  An owner of uid 0 is root without
 * capabilities (SECBIT_NOROOT: not even an exec gives them back). */
static int drop_privileges(const struct ident *who, char *why, size_t whylen)
{
    struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
    struct __user_cap_data_struct caps[2] = { { 0, 0, 0 }, { 0, 0, 0 } };
    uid_t r, e, s;
    gid_t gr, ge, gs;

    if (geteuid() == 0) {
        if (prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                  SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED | SECBIT_NO_CAP_AMBIENT_RAISE |
                  SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED) < 0)
            return errprintf(why, whylen, "securebits: %s", strerror(errno));
        for (int cap = 0; cap <= 63; cap++)
            if (prctl(PR_CAPBSET_DROP, cap) < 0 && errno != EINVAL)
                return errprintf(why, whylen, "dropping capability %d: %s", cap, strerror(errno));
        if (setgroups(who->ngroups, who->groups) < 0 || setresgid(who->gid, who->gid, who->gid) < 0
            || setresuid(who->uid, who->uid, who->uid) < 0)
            return errprintf(why, whylen, "cannot become uid %u gid %u: %s", who->uid, who->gid,
                             strerror(errno));
    } else if (who->uid != getuid()) {
        return errprintf(why, whylen, "ciod runs as uid %u and cannot act as uid %u",
                         (unsigned)getuid(), who->uid);
    }
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
    if (syscall(SYS_capset, &hdr, caps) < 0)
        return errprintf(why, whylen, "capset: %s", strerror(errno));
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || prctl(PR_SET_DUMPABLE, 0) < 0)
        return errprintf(why, whylen, "prctl: %s", strerror(errno));
    /* trust, but read back */
    if (getresuid(&r, &e, &s) < 0 || getresgid(&gr, &ge, &gs) < 0 || r != who->uid || e != who->uid
        || s != who->uid || gr != who->gid || ge != who->gid || gs != who->gid
        || syscall(SYS_capget, &hdr, caps) < 0 || caps[0].effective || caps[0].permitted
        || caps[1].effective || caps[1].permitted)
        return errprintf(why, whylen, "the worker's identity did not take");
    return 0;
}

/* The working directory must be usable by the owner ("." looked up in it). */
static int check_cwd(const char *cwd, char *why, size_t whylen)
{
    int fd = open(cwd, O_PATH | O_DIRECTORY | O_CLOEXEC), fd2 = -1;

    if (fd >= 0) {
        fd2 = openat(fd, ".", O_PATH | O_CLOEXEC);
        int e = errno;
        close(fd);
        errno = e;
    }
    if (fd2 < 0)
        return errprintf(why, whylen, "cannot use working directory %s: %s", cwd, strerror(errno));
    close(fd2);
    return 0;
}

/* W_EXE: the executable, opened by the owner; the kernel says whether the
 * owner may execute it. */
static void open_exe(const char *path)
{
    struct wmsg r = { .type = W_EXE_R };
    char text[CIOD_ERRLEN + LAT_MAX_PATH] = "";
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);

    if (fd < 0 || fstat(fd, &st) < 0) {
        r.err = errno;
        snprintf(text, sizeof(text), "cannot read %.*s: %s", (int)LAT_MAX_PATH, path, strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        r.err = EACCES;                 /* what execve says about non-files */
        snprintf(text, sizeof(text), "cannot execute %.*s: not a regular file", (int)LAT_MAX_PATH, path);
    } else if (syscall(SYS_faccessat2, fd, "", X_OK, AT_EMPTY_PATH | AT_EACCESS) < 0) {
        r.err = errno;
        snprintf(text, sizeof(text), "cannot execute %.*s: %s", (int)LAT_MAX_PATH, path, strerror(errno));
    }
    if (r.err && fd >= 0) {
        close(fd);
        fd = -1;
    }
    r.len = (uint32_t)strlen(text);
    wsend(wk.ch, &r, text, &fd, fd >= 0);
    if (fd >= 0)
        close(fd);
}

struct wstart {
    struct conn *c, *plug;
    struct wproc wp;
    char         who[32];               /* RAS folding: the job owner is this connection's peer */
};

static void *proc_main(void *arg)
{
    struct wstart *s = arg;

    snprintf(s->who, sizeof(s->who), "uid %u", wk.who->uid);
    ras_thread_peer(s->who);
    ship_serve(s->c, s->plug, &s->wp, wk.who, wk.cwd);
    stdin_gone(s->wp.rank);             /* it reads no more (a slot's one connection) */
    proc_gone(s->wp.node, s->wp.t);
    pthread_mutex_lock(&wk.lock);
    for (unsigned i = 0; i < wk.nlive; i++)
        if (wk.live[i] == s->c) {
            wk.live[i] = wk.live[--wk.nlive];
            break;
        }
    pthread_cond_broadcast(&wk.gone);
    pthread_mutex_unlock(&wk.lock);
    conn_hangup(s->c);
    conn_put(s->c);
    if (s->plug) {
        conn_hangup(s->plug);
        conn_put(s->plug);
    }
    free(s);
    return NULL;
}

/* W_PROC: serve the process on a thread of its own. */
static void take_proc(const char *data, size_t len, int fds[2])
{
    struct wstart *s = calloc(1, sizeof(*s));
    pthread_attr_t attr;
    pthread_t t;

    if (!s || len != sizeof(s->wp) || fds[0] < 0 || !(s->c = conn_new(fds[0]))) {
        logmsg("worker of job %" PRIu64 ": a process connection could not be taken", wk.job);
        goto fail;
    }
    fds[0] = -1;
    memcpy(&s->wp, data, sizeof(s->wp));
    if (fds[1] >= 0 && !(s->plug = conn_new(fds[1])))
        goto fail;
    fds[1] = -1;
    if (s->wp.ralen > CONN_RA)
        goto fail;
    memcpy(s->c->ra, s->wp.ra, s->wp.ralen);    /* bytes the monitor read past the hello */
    s->c->proc_node = s->wp.node;
    s->c->proc_t = s->wp.t;
    s->c->ra_len = s->wp.ralen;
    s->c->seq_seen = true;              /* the session goes on: seqs after the hello's */
    s->c->seq_last = s->wp.last_seq;
    /* a link between hosts: its session keys come with it (never the block key) */
    int sealed = s->wp.sealed ? conn_seal(s->c, &s->wp.seal) : 0;
    lat_seal_wipe(&s->wp.seal, sizeof(s->wp.seal));
    if (sealed < 0 || (s->c->tcp && !s->c->seal)) {
        logmsg("worker of job %" PRIu64 ": a process connection between hosts came without its keys", wk.job);
        goto fail;
    }
    pthread_mutex_lock(&wk.lock);
    if (wk.nlive == wk.nroom) {
        unsigned room = wk.nroom ? 2 * wk.nroom : 64;
        struct conn **more = realloc(wk.live, room * sizeof(*more));
        if (!more) {
            pthread_mutex_unlock(&wk.lock);
            goto fail;
        }
        wk.live = more;
        wk.nroom = room;
    }
    wk.live[wk.nlive++] = s->c;
    pthread_mutex_unlock(&wk.lock);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, WORKER_STACK);
    if (pthread_create(&t, &attr, proc_main, s) == 0)
        return;
    pthread_mutex_lock(&wk.lock);
    wk.live[--wk.nlive] = NULL;
    pthread_mutex_unlock(&wk.lock);
fail:
    for (int i = 0; i < 2; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    if (s) {
        if (s->c)
            conn_put(s->c);
        if (s->plug)
            conn_put(s->plug);
        free(s);
    }
}

/* The job ended: hang up on the processes still connected, give their
 * threads a moment to close their files, and go. */
static void finish(void)
{
    struct timespec until;

    pthread_mutex_lock(&wk.lock);
    for (unsigned i = 0; i < wk.nlive; i++)
        conn_hangup(wk.live[i]);
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 2;
    while (wk.nlive && pthread_cond_timedwait(&wk.gone, &wk.lock, &until) == 0)
        ;
    pthread_mutex_unlock(&wk.lock);
    ras_flush();
    _exit(0);
}

/* Closes every descriptor above 2 but keep[0..n) (-1s ignored). */
static void close_all_but(const int *keep, int n)
{
    int from = 3;

    for (;;) {
        int next = -1;                  /* the lowest kept descriptor >= from */
        for (int i = 0; i < n; i++)
            if (keep[i] >= from && (next < 0 || keep[i] < next))
                next = keep[i];
        if (next < 0)
            break;
        if (next > from)
            syscall(SYS_close_range, (unsigned)from, (unsigned)next - 1, 0);
        from = next + 1;
    }
    syscall(SYS_close_range, (unsigned)from, ~0u, 0);
}

/* In the forked child: never returns. */
static void worker_main(int ch, int out, const struct job_spec *js) __attribute__((noreturn));
static void worker_main(int ch, int out, const struct job_spec *js)
{
    static char buf[LAT_MAX_PATH + LAT_STDIN_MAX + 64];     /* a path, or a chunk of input */
    struct wmsg r = { .type = W_READY };
    char why[CIOD_ERRLEN] = "";
    int fds[2];

    explicit_bzero(cfg.key, sizeof(cfg.key));
    int keep[] = { ch, out, ras_fd() }; /* the channels, the RAS spool and the standard streams */
    close_all_but(keep, 3);
    ras_after_fork();
    ras_set_job(js->hdr->job);          /* every event of this worker is about its job */
    wk.ch = ch;
    wk.out = out;
    wk.job = js->hdr->job;
    wk.who = &js->who;
    wk.cwd = js->cwd;
    wk.cnk = (js->hdr->flags & LAT_JOB_CNK) != 0;
    signal(SIGPIPE, SIG_IGN);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (drop_privileges(&js->who, why, sizeof(why)) < 0 || check_cwd(js->cwd, why, sizeof(why)) < 0
        || stdin_setup(js, why, sizeof(why)) < 0
        || (sync_start() < 0 && errprintf(why, sizeof(why), "the worker's output: no thread") < 0))
        r.err = errno ? errno : EPERM;
    /* named only now: a process ps shows as the worker holds no privilege */
    prctl(PR_SET_NAME, "ciod-worker");
    if (cfg.title && cfg.titlelen > 1) {  /* ps tells the worker from its monitor */
        memset(cfg.title, 0, cfg.titlelen);
        snprintf(cfg.title, cfg.titlelen, "ciod-worker");
        size_t n = strlen(cfg.title) + 1;
        if (n < cfg.titlelen)
            snprintf(cfg.title + n, cfg.titlelen - n, "job %" PRIu64 " uid %u block %s pset %u",
                     js->hdr->job, js->who.uid, cfg.block, cfg.pset);
    }
    if (!r.err && (js->hdr->flags & LAT_JOB_CNK))     /* before the push: the ranks look for it */
        libcache_job_start(js->hdr->job);
    r.len = (uint32_t)strlen(why);
    if (wsend(ch, &r, why, NULL, 0) < 0 || r.err)
        _exit(1);
    for (;;) {
        struct wmsg m;
        int rc = wrecv(ch, &m, buf, sizeof(buf), fds);
        if (rc <= 0)
            finish();
        if (m.type == W_EXE)
            open_exe(buf);
        else if (m.type == W_PROC) {
            take_proc(buf, m.len, fds);
            lat_seal_wipe(buf, m.len < sizeof(buf) ? m.len : sizeof(buf));     /* its session keys */
        }
        else if (m.type == W_STDIN)
            stdin_put(m.stream, buf, m.len);
        else if (m.type == W_SYNC)
            sync_ask(&m);
        else
            logmsg("worker of job %" PRIu64 ": message %u from the monitor ignored", wk.job, m.type);
        for (int i = 0; i < 2; i++)
            if (fds[i] >= 0)
                close(fds[i]);
    }
}

/* ================= the monitor's side ================= */

/* A rank's exit waiting for its W_SYNC_R: everything its rank wrote is
 * ahead of that answer in the output channel. */
struct held_exit {
    struct held_exit *next;
    uint32_t          sync, node;
    struct lat_exit   ex;
    size_t            mlen;
    char              msg[];
};

struct worker {
    pid_t     pid;
    int       ch, out;
    uint64_t  job;
    pthread_t reader;
    bool      reading;                  /* reader started: it reaps the worker */
    uint32_t  stdin_held;               /* input bytes passed on, not yet acknowledged (under W.lock) */
    atomic_bool ending;
    /* under W.lock: exits held for their W_SYNC_R, oldest first; the reader
     * reports them, all at once when the channel ends (closed) */
    struct held_exit *held, **held_tail;
    uint32_t  syncs;                    /* W_SYNCs sent */
    bool      closed;
};

static struct {
    pthread_mutex_t lock;
    struct worker  *cur;                /* the running job's */
    struct worker  *old;                /* ended, not yet reaped */
} W = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* The worker handed `bytes` of input to its ranks: the service node may send as much again. */
static void stdin_acked(struct worker *w, uint32_t bytes)
{
    struct lat_stdin ack = { .job = w->job, .bytes = bytes };

    pthread_mutex_lock(&W.lock);
    w->stdin_held -= bytes < w->stdin_held ? bytes : w->stdin_held;
    pthread_mutex_unlock(&W.lock);
    struct conn *ctl = job_owner(w->job);
    if (ctl) {
        conn_send(ctl, LAT_CTL_STDIN_ACK, 0, &ack, sizeof(ack));
        conn_put(ctl);
    }
}

/* The held exits up to W_SYNC number upto (all, and no more held, once the
 * channel closed), oldest first. */
static struct held_exit *take_held(struct worker *w, uint32_t upto, bool closed)
{
    struct held_exit *out = NULL, **tail = &out;

    pthread_mutex_lock(&W.lock);
    while (w->held && (closed || (int32_t)(upto - w->held->sync) >= 0)) {
        *tail = w->held;
        tail = &w->held->next;
        w->held = w->held->next;
    }
    *tail = NULL;
    if (!w->held)
        w->held_tail = &w->held;
    if (closed)
        w->closed = true;
    pthread_mutex_unlock(&W.lock);
    return out;
}

static void report_held(struct held_exit *h)
{
    while (h) {
        struct held_exit *next = h->next;
        atomic_fetch_add_explicit(&dp_ctr[LAT_CTR_EXITS_HELD], 1, memory_order_relaxed);
        job_rank_exit_report(h->node, &h->ex, h->msg, h->mlen);
        free(h);
        h = next;
    }
}

/* Reads what the worker sends until it is gone, then reaps it. */
static void *reader_main(void *arg)
{
    struct worker *w = arg;
    /* output gathered for one CTL_OUTPUT, [base, base + held), then room for
     * a message; another stream's message starts the next gathering in place */
    char *buf = malloc(OUT_ROOM);
    size_t base = 0, held = 0;
    int32_t hrank = 0;
    uint32_t hstream = 0;
    int fds[2], status = 0;
    bool killed = false;

    pthread_setname_np(pthread_self(), "ciod-wreader");
    for (;;) {
        struct pollfd pf = { w->out, POLLIN, 0 };
        int n = poll(&pf, 1, held ? 0 : atomic_load(&w->ending) ? END_GRACE_S * 1000 : 1000);
        if (n == 0 && held) {           /* nothing more waiting: what was gathered goes */
            job_rank_output(hrank, w->job, hstream, buf + base, held);
            base = held = 0;
            continue;
        }
        if (n == 0) {
            if (atomic_load(&w->ending) && !killed) {
                /* its job is over (a file call still under way, a slow host): ending it is
                 * Lattice's own doing, not a failure */
                ras_job_event(w->job, RAS_INFO, cfg.location, "I/O worker of job %" PRIu64 " (pid %d) still ran %d s "
                              "after its job ended: ended by ciod", w->job, (int)w->pid, END_GRACE_S);
                kill(w->pid, SIGKILL);
                killed = true;
            }
            continue;
        }
        struct wmsg m;
        if (base + held + WMSG_DATA + 1 > OUT_ROOM) {   /* rarely: the gathering to the front */
            memmove(buf, buf + base, held);
            base = 0;
        }
        if (!held)
            base = 0;
        int rc = buf ? wrecv(w->out, &m, buf + base + held, WMSG_DATA + 1, fds) : -1;
        for (int i = 0; i < 2 && rc >= 0; i++)
            if (fds[i] >= 0)
                close(fds[i]);
        if (rc <= 0)
            break;
        if (m.type == W_OUTPUT) {       /* the hot path: no acknowledgement */
            if (m.job != w->job || (m.stream != LAT_STDOUT && m.stream != LAT_STDERR))
                continue;
            if (held && (m.rank != hrank || m.stream != hstream)) {     /* another stream: the last one's first */
                job_rank_output(hrank, w->job, hstream, buf + base, held);
                base += held;
                held = 0;
            }
            hrank = m.rank;
            hstream = m.stream;
            held += m.len;
            if (held >= OUT_GATHER) {
                job_rank_output(hrank, w->job, hstream, buf + base, held);
                base = held = 0;
            }
            continue;
        }
        if (held) {                     /* output before anything else, an exit above all */
            job_rank_output(hrank, w->job, hstream, buf + base, held);
            base = held = 0;
        }
        if (m.type == W_SYNC_R) {
            report_held(take_held(w, m.count, false));
            continue;
        }
        if (m.type == W_PROC_GONE && m.job == w->job) {
            job_proc_detach(m.node, m.t, m.job);
        } else if (m.type == W_STDIN_ACK && m.job == w->job) {
            stdin_acked(w, m.count);
        } else {
            logmsg("I/O worker of job %" PRIu64 ": unexpected message %u ignored", w->job, m.type);
            continue;
        }
        struct wmsg ack = { .type = W_OUTPUT_ACK, .job = m.job };
        wsend(w->out, &ack, NULL, NULL, 0);
    }
    /* the channel's end is how its end shows: a worker that died closed it;
     * whatever it sent is passed on, so the exits it held may go (below) */
    if (held)
        job_rank_output(hrank, w->job, hstream, buf + base, held);
    struct held_exit *left = take_held(w, 0, true);
    while (waitpid(w->pid, &status, 0) < 0 && errno == EINTR)
        ;
    bool lost = !atomic_load(&w->ending), told = false;
    if (lost) {                         /* its ranks' I/O is gone: the job cannot end well */
        char text[CIOD_ERRLEN];
        snprintf(text, sizeof(text), "the I/O worker of job %" PRIu64 " (pid %d) %s %d while the job ran: its "
                 "processes' file calls and output were lost", w->job, (int)w->pid,
                 WIFSIGNALED(status) ? "was killed by signal" : "exited with code",
                 WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
        told = job_fail(w->job, "its I/O worker was lost", text);   /* its RAS ERROR says it */
    }
    /* An ERROR only for a real failure.  A SIGKILL after its job ended is
     * Lattice's own: the one sent above, or its PR_SET_PDEATHSIG, which fires
     * when the thread that forked it (the job's control connection's, gone
     * when the job's lattice run is) ends, often before the worker's own exit
     * on EOF: the job was over either way. */
    bool ours = !lost && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
    if (ours && !killed)                /* said once, as INFO (the grace's kill said it above) */
        ras_job_event(w->job, RAS_INFO, cfg.location, "I/O worker of job %" PRIu64 " (pid %d) ended by SIGKILL "
                      "after its job ended: ended with its job's control connection, not a failure",
                      w->job, (int)w->pid);
    if (!told && !ours && (lost || !WIFEXITED(status) || WEXITSTATUS(status) != 0))
        ras_job_event(w->job, RAS_ERROR, cfg.location, "I/O worker of job %" PRIu64 " (pid %d) ended %s %d%s",
                  w->job, (int)w->pid, WIFSIGNALED(status) ? "by signal" : "with code",
                  WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status),
                  lost ? " while its job ran: the job's processes lose their I/O" : "");
    report_held(left);                  /* after the failure's cause */
    free(buf);
    return NULL;                        /* its descriptors stay open until reap_old: worker_end may still use them */
}

/* A worker nobody reads (the job was refused, or its reader did not
 * start): killed and reaped here. */
static void end_unwatched(struct worker *w)
{
    kill(w->pid, SIGKILL);
    while (waitpid(w->pid, NULL, 0) < 0 && errno == EINTR)
        ;
    close(w->ch);
    close(w->out);
    free(w);
}

/* Waits for the worker of an earlier job (bounded: its reader kills it). */
static void reap_old(void)
{
    struct worker *old;

    pthread_mutex_lock(&W.lock);
    old = W.old;
    W.old = NULL;
    pthread_mutex_unlock(&W.lock);
    if (!old)
        return;
    if (!old->reading) {
        end_unwatched(old);
        return;
    }
    pthread_join(old->reader, NULL);
    close(old->ch);
    close(old->out);
    free(old);
}

/* The running job's worker, if it is job's, taken off W.cur; as_old: kept
 * in W.old in the same step, for the next worker_start to wait for. */
static struct worker *take_current(uint64_t job, bool as_old)
{
    struct worker *w = NULL;

    pthread_mutex_lock(&W.lock);
    if (W.cur && W.cur->job == job) {
        w = W.cur;
        W.cur = NULL;
        if (as_old)
            W.old = w;
    }
    pthread_mutex_unlock(&W.lock);
    return w;
}

int worker_start(const struct job_spec *js, char *why, size_t whylen)
{
    struct worker *w = calloc(1, sizeof(*w));
    int sv[2], ov[2], fds[2];
    struct wmsg m;
    char text[CIOD_ERRLEN];

    reap_old();
    pthread_mutex_lock(&W.lock);
    bool busy = W.cur != NULL;
    pthread_mutex_unlock(&W.lock);
    if (busy || !w) {
        free(w);
        return busy ? (errprintf(why, whylen, "a job is running on this I/O node"), EBUSY)
                    : (errprintf(why, whylen, "out of memory"), ENOMEM);
    }
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
        free(w);
        return errprintf(why, whylen, "socketpair: %s", strerror(errno)), errno;
    }
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, ov) < 0) {
        int e = errno;
        close(sv[0]);
        close(sv[1]);
        free(w);
        return errprintf(why, whylen, "socketpair: %s", strerror(e)), e;
    }
    libcache_job_user(js->who.uid);     /* before its worker makes or reuses this user's */
    w->job = js->hdr->job;
    w->held_tail = &w->held;
    w->ch = sv[0];
    w->out = ov[0];
    w->pid = fork();
    if (w->pid == 0) {
        close(sv[0]);
        close(ov[0]);
        worker_main(sv[1], ov[1], js);
    }
    int err = errno;
    close(sv[1]);
    close(ov[1]);
    if (w->pid < 0) {
        close(sv[0]);
        close(ov[0]);
        free(w);
        return errprintf(why, whylen, "cannot start the job's I/O worker: %s", strerror(err)), err;
    }
    /* its first word: it is the owner now, or why it could not be */
    int rc = wrecv(w->ch, &m, text, sizeof(text), fds);
    if (rc <= 0 || m.type != W_READY || m.err) {
        err = rc > 0 && m.type == W_READY && m.err ? m.err : EIO;
        errprintf(why, whylen, "%s", rc > 0 && m.len ? text : "the job's I/O worker failed to start");
        kill(w->pid, SIGKILL);
        while (waitpid(w->pid, NULL, 0) < 0 && errno == EINTR)
            ;
        close(w->ch);
        close(w->out);
        free(w);
        return err;
    }
    pthread_mutex_lock(&W.lock);
    W.cur = w;
    pthread_mutex_unlock(&W.lock);
    return 0;
}

/* Synchronous, before the reader runs: only on_job talks to it then. */
int worker_open_exe(const char *path, int *fd, char *why, size_t whylen)
{
    struct worker *w = W.cur;
    struct wmsg m = { .type = W_EXE, .len = (uint32_t)strlen(path) };
    char text[CIOD_ERRLEN + LAT_MAX_PATH];
    int fds[2];

    *fd = -1;
    if (!w || wsend(w->ch, &m, path, NULL, 0) < 0
        || wrecv(w->ch, &m, text, sizeof(text), fds) <= 0 || m.type != W_EXE_R) {
        errprintf(why, whylen, "cannot read %s: the job's I/O worker is gone", path);
        return EIO;
    }
    if (m.err || fds[0] < 0) {
        if (fds[0] >= 0)
            close(fds[0]);
        errprintf(why, whylen, "%s", text);
        return m.err ? m.err : EIO;
    }
    if (fds[1] >= 0)
        close(fds[1]);
    *fd = fds[0];
    return 0;
}

int worker_run(void)
{
    struct worker *w = W.cur;

    int rc = w ? pthread_create(&w->reader, NULL, reader_main, w) : EINVAL;

    if (w)
        w->reading = rc == 0;
    return rc;
}

void worker_end(uint64_t job)
{
    struct worker *w = take_current(job, true);

    if (!w)
        return;
    atomic_store(&w->ending, true);
    shutdown(w->ch, SHUT_WR);           /* EOF: the worker finishes and exits */
}

/* The job was refused before its worker's reader ran: end it here. */
void worker_abort(uint64_t job)
{
    struct worker *w = take_current(job, false);

    if (w)
        end_unwatched(w);
}

int worker_stdin(uint64_t job, uint32_t flags, const void *data, size_t len)
{
    struct wmsg m = { .type = W_STDIN, .len = (uint32_t)len, .stream = flags, .job = job };
    int rc = ESRCH;

    pthread_mutex_lock(&W.lock);
    if (W.cur && W.cur->job == job && W.cur->stdin_held + len > LAT_STDIN_WINDOW) {
        rc = ENOBUFS;
    } else if (W.cur && W.cur->job == job) {
        rc = wsend(W.cur->ch, &m, data, NULL, 0) == 0 ? 0 : EIO;
        if (rc == 0)
            W.cur->stdin_held += (uint32_t)len;
    }
    pthread_mutex_unlock(&W.lock);
    return rc;
}

bool worker_hold_exit(uint32_t node, uint32_t t, const struct lat_exit *ex, const char *msg, size_t mlen)
{
    struct held_exit *h = malloc(sizeof(*h) + mlen);
    bool held = false;

    if (!h)
        return false;                   /* reported at once: in order but for a write under way */
    *h = (struct held_exit){ .node = node, .ex = *ex, .mlen = mlen };
    memcpy(h->msg, msg, mlen);
    pthread_mutex_lock(&W.lock);
    struct worker *w = W.cur;
    if (w && w->job == ex->job && w->reading && !w->closed) {
        struct wmsg m = { .type = W_SYNC, .count = h->sync = ++w->syncs, .node = node, .t = t, .job = w->job };
        *w->held_tail = h;
        w->held_tail = &h->next;
        held = true;
        /* a worker that cannot take it is dead: its channel's end reports the exit */
        wsend(w->ch, &m, NULL, NULL, 0);
    }
    pthread_mutex_unlock(&W.lock);
    if (!held)
        free(h);
    return held;
}

int worker_give_proc(uint64_t job, const struct wproc *wp, int fd, int plugfd)
{
    struct wmsg m = { .type = W_PROC, .len = sizeof(*wp), .job = job };
    int fds[2] = { fd, plugfd }, rc = -1;

    pthread_mutex_lock(&W.lock);
    if (W.cur && W.cur->job == job)
        rc = wsend(W.cur->ch, &m, wp, fds, plugfd >= 0 ? 2 : 1);
    pthread_mutex_unlock(&W.lock);
    return rc;
}

/* A process's plug-in calls, forwarded by its worker thread: served here,
 * where the plug-ins were loaded at boot, with the caller's identity as the
 * monitor knows it (never as the worker says). */
struct plugline {
    struct conn *c;
    uint64_t     job;
    int32_t      rank;
    uint32_t     node;
};

static void *plugline_main(void *arg)
{
    struct plugline *pl = arg;
    char why[CIOD_ERRLEN];
    struct lat_hdr h;
    int rc;

    pthread_setname_np(pthread_self(), "ciod-plugline");
    while ((rc = conn_recv(pl->c, &h, why, sizeof(why))) > 0) {
        if (h.type != LAT_PLUG_CALL) {
            snprintf(why, sizeof(why), "message type 0x%04x on a plug-in line", h.type);
            rc = -1;
            break;
        }
        if (plugin_serve(pl->c, &h, pl->job, pl->rank, pl->node) < 0)
            break;
    }
    if (rc < 0)
        logmsg("plug-in line of job %" PRIu64 " rank %d: %s; closing", pl->job, pl->rank, why);
    conn_hangup(pl->c);
    conn_put(pl->c);
    free(pl);
    return NULL;
}

/* The monitor's end of a new plug-in line, served on a thread; the worker's end, or -1. */
static int plugline_open(uint64_t job, int32_t rank, uint32_t node)
{
    struct plugline *pl = calloc(1, sizeof(*pl));
    pthread_attr_t attr;
    pthread_t t;
    int sv[2];

    if (!pl || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        free(pl);
        return -1;
    }
    *pl = (struct plugline){ .c = conn_new(sv[0]), .job = job, .rank = rank, .node = node };
    if (!pl->c) {
        close(sv[0]);
        close(sv[1]);
        free(pl);
        return -1;
    }
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, WORKER_STACK);
    if (pthread_create(&t, &attr, plugline_main, pl) != 0) {
        conn_put(pl->c);
        free(pl);
        close(sv[1]);
        return -1;
    }
    return sv[1];
}

bool worker_take_proc(struct conn *c, const struct lat_hello *hello, const struct lat_hello_proc *hp,
                      uint32_t seq)
{
    struct wproc wp = { .job = hello->job, .node = hello->node & 0xffff, .t = hello->node >> 16,
                        .pid = hp ? hp->pid : 0, .last_seq = seq };
    char loc[128];
    int err, plugfd = -1;

    node_location(wp.node, loc, sizeof(loc));
    err = job_proc_attach(wp.node, wp.t, wp.job, &wp.rank);
    if (err) {
        ras_event(RAS_WARNING, cfg.location, "process connection from %s for job %" PRIu64 " node %u "
                  "process %u refused: %s", c->peer, wp.job, wp.node, wp.t,
                  err == EBUSY ? "that process is already connected" : "no such job there");
        hello_ack(c, seq, err);
        return false;
    }
    job_proc_place(wp.job, wp.rank, &wp.index, &wp.count);
    dp_hello(c, hp, &wp.dp);
    if (plugin_count() && (plugfd = plugline_open(wp.job, wp.rank, wp.node)) < 0)
        ras_job_event(wp.job, RAS_WARNING, loc, "job %" PRIu64 " rank %d: no plug-in line: %s", wp.job, wp.rank,
                  strerror(errno));
    if (hello_ack_dp(c, seq, 0, hp ? &wp.dp : NULL) < 0)
        goto fail;
    wp.ralen = c->ra_len - c->ra_pos;
    memcpy(wp.ra, c->ra + c->ra_pos, wp.ralen);
    if (c->seal) {                      /* sealed since the ack: the worker goes on with its keys */
        wp.sealed = 1;
        wp.seal = c->seal->k;
    }
    int given = worker_give_proc(wp.job, &wp, c->fd, plugfd);
    lat_seal_wipe(&wp.seal, sizeof(wp.seal));
    if (given < 0) {
        ras_job_event(wp.job, RAS_ERROR, loc, "job %" PRIu64 " rank %d: its I/O worker is gone: connection closed",
                  wp.job, wp.rank);
        goto fail;
    }
    if (plugfd >= 0)
        close(plugfd);
    return true;
fail:
    if (plugfd >= 0)
        close(plugfd);
    return false;
}
