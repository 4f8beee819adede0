/*
 * exec.c - the single execve of an MPMD launcher (one program that
 * chooses by rank and execs another image once, as on Blue Gene).
 *
 * Before anything of the old program is touched, the new image (and its
 * interpreter) is opened as the job's user and read completely through the
 * I/O node into buffers outside big memory (loader_prepare), and argv/envp
 * are copied there too: a missing, non-executable or malformed image gives
 * the caller ENOENT, EACCES, ENOEXEC... and it carries on.  Then, on a
 * stack of cnk's own (the old one is in big memory): caught signals go back
 * to default, descriptors marked close-on-exec (shipped and local) are
 * closed, big memory is unmapped and mapped afresh, and the new program is
 * loaded and entered.  cnk's own descriptors, the report page and its
 * counters carry on.  A second execve is unsupported (ENOSYS), and so is an
 * execve with more than one thread alive (EAGAIN: cnk will not kill
 * threads behind the program's back; it may join them and try again).
 */
#include <asm/unistd.h>
#include <linux/errno.h>
#include <linux/fcntl.h>
#include <linux/mman.h>

#include "cnk.h"

#define PAGE 4096ul
#define PATH_MAX_ 4096

static int exec_done;                           /* the one execve has happened */
static char exec_stack[64 << 10] __attribute__((aligned(16)));

/* The new argv and envp, copied out of the old program's memory. */
static struct {
    char **argv, **envp;
    int argc;
    const char *path;
    void *buf;
    size_t len;
} x;

static long count_strings(char *const *v, size_t *n, size_t *bytes)
{
    *n = 0;
    for (; v && v[*n]; (*n)++) {
        *bytes += strlen(v[*n]) + 1;
        if (*bytes + (*n + 2) * sizeof(char *) > CNK_ARG_MAX)
            return -E2BIG;
    }
    return 0;
}

static char *copy_string(char **at, const char *s)
{
    size_t n = strlen(s) + 1;
    char *r = memcpy(*at, s, n);
    *at += n;
    return r;
}

/* argv and envp (NULL is taken as empty, as Linux does) and the path, into
 * one mapping outside big memory.  An empty argv gets "" as argv[0], as
 * Linux gives since 5.18. */
static long copy_args(const char *path, char *const *argv, char *const *envp)
{
    size_t argc, envc, bytes = strnlen(path, PATH_MAX_) + 2;
    if (bytes > PATH_MAX_)
        return -ENAMETOOLONG;
    long r = count_strings(argv, &argc, &bytes);
    if (r == 0)
        r = count_strings(envp, &envc, &bytes);
    if (r == 0 && bytes + (argc + envc + 3) * sizeof(char *) > CNK_ARG_MAX)
        r = -E2BIG;
    if (r < 0)
        return r;
    x.len = (argc + envc + 3) * sizeof(char *) + bytes;
    long m = ksys6(__NR_mmap, 0, x.len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m < 0)
        return -ENOMEM;
    x.buf = (void *)m;
    x.argv = (char **)m;
    x.envp = x.argv + (argc ? argc : 1) + 1;
    char *str = (char *)(x.envp + envc + 1);
    x.path = copy_string(&str, path);
    x.argc = argc ? (int)argc : 1;
    for (size_t i = 0; i < argc; i++)
        x.argv[i] = copy_string(&str, argv[i]);
    if (!argc)
        x.argv[0] = copy_string(&str, "");
    x.argv[x.argc] = NULL;
    for (size_t i = 0; i < envc; i++)
        x.envp[i] = copy_string(&str, envp[i]);
    x.envp[envc] = NULL;
    return 0;
}

/* Local descriptors marked FD_CLOEXEC, found in /proc/self/fd: the kernel
 * never runs an exec, so cnk closes them.  Shipped placeholders (always
 * O_CLOEXEC locally) go by the program's flag instead, and cnk's own stay. */
static void close_local_cloexec(void)
{
    char buf[4096];
    int dir = (int)ksys4(__NR_openat, AT_FDCWD, "/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
    if (dir < 0)
        return;
    for (;;) {
        long n = ksys3(__NR_getdents64, dir, buf, sizeof buf);
        if (n <= 0)
            break;
        for (long off = 0; off < n;) {
            struct { uint64_t ino; int64_t off; uint16_t reclen; uint8_t type; char name[]; } *d =
                (void *)(buf + off);
            off += d->reclen;
            uint64_t fd;
            if (kparse_u64(d->name, &fd) || fd > 0x7fffffff || (int)fd == dir || shipc_fd_is_shipped((int)fd) ||
                shipc_fd_is_hidden((int)fd))
                continue;
            long fl = ksys2(__NR_fcntl, fd, F_GETFD);
            if (fl >= 0 && (fl & FD_CLOEXEC) && ksys1(__NR_close, fd) == 0)
                shipc_fd_closed((unsigned)fd, (unsigned)fd);
        }
    }
    ksys1(__NR_close, dir);
}

/* On exec_stack: nothing of the old program is needed any more. */
__attribute__((noreturn)) static void commit(void *unused)
{
    (void)unused;
    signal_exec();
    shipc_exec_cloexec();
    close_local_cloexec();
    ksys2(__NR_set_robust_list, NULL, 24);  /* both point into the old memory */
    ksys1(__NR_set_tid_address, NULL);
    for (long id = 0; id < 64; id++)        /* the program's POSIX timers; cnk has none */
        ksys1(__NR_timer_delete, id);
    bigmem_reset();

    cnk.argc = x.argc;
    cnk.argv = x.argv;
    cnk.envp = x.envp;
    cnk.execfn = x.path;
    thread_exec();
    uintptr_t entry, sp;
    loader_load_prepared(&entry, &sp);
    /* from here on the program's own stack holds them */
    cnk.argv = (char **)(sp + 8);
    cnk.envp = cnk.argv + cnk.argc + 1;
    cnk.execfn = NULL;
    ksys2(__NR_munmap, x.buf, x.len);
    enter_program(entry, sp);
}

static long do_exec(struct cnk_call *c, int dirfd, const char *path, char *const *argv,
                    char *const *envp, int flags)
{
    if (exec_done) {
        c->cls = CNK_UNSUPPORTED;   /* the launcher's one exec is spent */
        return -ENOSYS;
    }
    if (flags & ~(AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW))
        return -EINVAL;
    if (!path)
        return -EFAULT;
    if (thread_alive() > 1)
        return -EAGAIN;
    long r = copy_args(path, argv, envp);
    if (r < 0)
        return r;
    int owned;
    long fd = shipc_exec_open(dirfd, path, flags, &owned);
    r = fd < 0 ? fd : loader_prepare((int)fd, path);
    if (fd >= 0 && owned)
        shipc_close((int)fd);
    if (r < 0) {
        ksys2(__NR_munmap, x.buf, x.len);
        return r;
    }
    exec_done = 1;
    trap_account(c, 0);             /* it does not come back to dispatch */
    cnk_on_stack(exec_stack + sizeof exec_stack, commit, NULL);
}

long sys_execve(struct cnk_call *c)
{
    return do_exec(c, AT_FDCWD, (const char *)c->a[0], (char *const *)c->a[1], (char *const *)c->a[2], 0);
}

long sys_execveat(struct cnk_call *c)
{
    return do_exec(c, (int)c->a[0], (const char *)c->a[1], (char *const *)c->a[2], (char *const *)c->a[3],
                   (int)c->a[4]);
}
