/*
 * conn.c - start-up of Linux mode's shipping: the PROC connection cnode
 * opened and authenticated before exec (LATTICE_IO_FD), handed to the
 * shipping core (compute/shipc/: one request/one reply under its lock, seq
 * checked, mailbox, rendezvous, pipelined series), and fork handling.
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "client.h"

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int active;              /* LATTICE_IO_FD was valid */
static int conn = -1;
static int forked;              /* we are a fork()ed child: not the process that said hello */
static pid_t self;              /* whose memory this is (a vfork()ed child has another pid) */
/* The page LATTICE_IO_SEQ_FD, which cnode gives the process: the seq of
 * the last message sent on the connection (ciod refuses one not after it)
 * and the lock every process on the connection takes from a request to
 * its reply (struct shipc_shared), so that a program it execs, a child,
 * a shell's pipeline, each with its own copy of this library on the same
 * connection, take turns and never reuse a number.  Without it, the
 * core's own word and lock (this process alone). */
static struct lat_page *sharedp;
static int seq_fd = -1;

static void *libc_sym(const char *name)
{
    void *h = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
    void *p = h ? dlsym(h, name) : NULL;
    if (h)
        dlclose(h);
    return p;
}

const char *lat_getenv(const char *name)
{
    static char *(*libc_getenv)(const char *);
    if (!libc_getenv && !(libc_getenv = (char *(*)(const char *))libc_sym("getenv")))
        libc_getenv = getenv;
    return libc_getenv(name);
}

/* glibc's setenv changes a variable the environment already has in place,
 * in the array main() was given, which is what a shell passes on */
int lat_setenv(const char *name, const char *value)
{
    static int (*libc_setenv)(const char *, const char *, int);
    if (!libc_setenv && !(libc_setenv = (int (*)(const char *, const char *, int))libc_sym("setenv")))
        libc_setenv = setenv;
    return libc_setenv(name, value, 1);
}

void lat_say(const char *msg)
{
    /* local fd 2 is cnode's stderr pipe: it reaches the job's stderr */
    (void)!syscall(SYS_write, 2, msg, strlen(msg));
}

void *lat_real_cached(void **slot, const char *name)
{
    void *p = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
    if (!p) {
        p = dlsym(RTLD_NEXT, name);
        if (!p) {
            lat_say("libcnclient: no next definition of ");
            lat_say(name);
            lat_say("\n");
            abort();
        }
        __atomic_store_n(slot, p, __ATOMIC_RELEASE);
    }
    return p;
}

/* A fork()ed child ships on the connection it shares with its parent,
 * the two taking turns through the shared page's lock (no thread of ours
 * is inside a call across the fork); it inherits the placeholders, which
 * keep the remote descriptors open for it (holders.c). */
static void atfork_prepare(void)
{
    lat_holders_share();
    shipc_conn_lock();
}
static void atfork_parent(void) { shipc_conn_unlock(); }
static void atfork_child(void)
{
    shipc_conn_unlock();
    forked = 1;
    self = (pid_t)syscall(SYS_getpid);
    shipc_forked();
    if (sharedp)
        lat_holders_forked();
}

int lat_vforked(void)
{
    return active && (pid_t)syscall(SYS_getpid) != self;
}

static void seq_init(void)
{
    const char *s = lat_getenv("LATTICE_IO_SEQ_FD");
    char *end;
    struct stat st;
    if (!s || !*s)
        return;
    errno = 0;
    long fd = strtol(s, &end, 10);
    if (errno || *end || fd < 0 || fd > INT_MAX || fd == conn || syscall(SYS_fstat, (int)fd, &st) != 0 ||
        !S_ISREG(st.st_mode) || st.st_size < (off_t)sizeof(uint32_t))
        return;
    if (st.st_size < (off_t)sizeof(struct lat_page))
        return;
    void *p = REAL(mmap)(NULL, sizeof(struct lat_page), PROT_READ | PROT_WRITE, MAP_SHARED, (int)fd, 0);
    if (p == MAP_FAILED)
        return;
    sharedp = p;
    seq_fd = lat_move_own((int)fd, "LATTICE_IO_SEQ_FD");
}

static void init(void)
{
    const char *s = lat_getenv("LATTICE_IO_FD");
    if (!s || !*s)
        return;
    char *end;
    errno = 0;
    long fd = strtol(s, &end, 10);
    struct stat st;
    if (errno || *end || fd < 0 || fd > INT_MAX || syscall(SYS_fstat, (int)fd, &st) != 0 ||
        !S_ISSOCK(st.st_mode)) {
        lat_say("libcnclient: LATTICE_IO_FD is not a connected socket; file calls stay local\n");
        return;
    }
    conn = lat_move_own((int)fd, "LATTICE_IO_FD");
    self = (pid_t)syscall(SYS_getpid);
    seq_init();
    lat_close_image();
    pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
    lat_fd_init(conn, seq_fd);
    int first = lat_stdio_identify(sharedp);
    if (sharedp)
        lat_holders_init(conn, seq_fd, first);
    /* Only the process that said hello shares a mailbox (ciod opens our
     * memfd through /proc/<that pid>/fd: LATTICE_IO_PID) and lets ciod
     * reach its memory (a rendezvous: ciod reads and writes that pid's);
     * an exec()'d program of it shares a new one, another process none. */
    const char *off = lat_getenv("LATTICE_MAILBOX"), *pid = lat_getenv("LATTICE_IO_PID");
    int hello = pid && atol(pid) == (long)self;
    struct shipc_cfg cfg = {
        .conn = conn,
        .dp = hello ? lat_getenv("LATTICE_IO_DP") : NULL,
        .mailbox = !(off && !strcmp(off, "0")) && hello,
        .mailbox_name = "libcnclient-mailbox",
        .shared = sharedp ? &sharedp->core : NULL,
    };
    if (cfg.mailbox)
        lat_usercopy_init();
    if (shipc_init(&cfg) < 0) {
        lat_say("libcnclient: LATTICE_IO_FD is not a connected socket; file calls stay local\n");
        return;
    }
    active = 1;
    lat_stdio_init();
    if (sharedp)
        atexit(lat_holders_exit);
}

int lat_active(void)
{
    pthread_once(&once, init);
    return active;
}

int lat_conn_fd(void)
{
    return conn;
}

int lat_seq_fd(void)
{
    return seq_fd;
}

int lat_forked(void)
{
    return forked;
}

/* The library sets up stdio before main even if no call is interposed. */
__attribute__((constructor)) static void lat_client_ctor(void)
{
    (void)lat_active();
}

/* One shipped call: ret, or -1 with errno (EIO once the connection is lost). */
int64_t lat_call(uint16_t type, int64_t a0, int64_t a1, int64_t a2, int64_t a3,
                 const struct iovec *out, int nout, const struct iovec *in, int nin, size_t *got)
{
    const int64_t a[4] = { a0, a1, a2, a3 };

    return lcn_ret(shipc_call_msg(type, a, out, nout, in, nin, got));
}
