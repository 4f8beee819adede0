/*
 * spawn.c - before this process makes another that inherits its
 * descriptors, or execs a program, its placeholders become shared ones
 * (holders.c: a memfd that names its remote descriptor and tells who still
 * holds it).  Until then they are private O_PATHs, as cheap as an open.
 *
 * fork() is pthread_atfork's (conn.c); these are the others a program
 * calls through libc's dynamic symbols: vfork (a trampoline: a wrapper's
 * frame would be gone when the child returns through it), clone,
 * posix_spawn[p], system, popen, and the exec family.  glibc's own
 * internal spawns (system's and popen's posix_spawn) are covered by
 * their exported callers; a raw fork/clone/execve system call is not
 * (its child or program sees private placeholders as /dev/null).
 */
#include <sched.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "client.h"

extern char **environ;

/* vfork: the placeholders shared, then glibc's vfork with our caller's
 * return address still on top of the stack (a jump, not a call). */
LAT_HIDDEN void *lat_vfork_prep(void);

void *lat_vfork_prep(void)
{
    lat_holders_share();
    return REAL(vfork);
}

__asm__(".text\n"
        ".globl vfork\n"
        ".type vfork, @function\n"
        "vfork:\n"
        "    sub $8, %rsp\n"                 /* the call below with an aligned stack */
        "    call lat_vfork_prep\n"
        "    add $8, %rsp\n"
        "    jmp *%rax\n"
        ".size vfork, .-vfork\n");

int clone(int (*fn)(void *), void *stack, int flags, void *arg, ...)
{
    va_list ap;
    va_start(ap, arg);
    void *ptid = va_arg(ap, void *), *tls = va_arg(ap, void *), *ctid = va_arg(ap, void *);
    va_end(ap);
    lat_holders_share();
    return REAL(clone)(fn, stack, flags, arg, ptid, tls, ctid);
}

int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
                const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
    lat_holders_share();
    return REAL(posix_spawn)(pid, path, fa, attr, argv, envp);
}

int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
                 const posix_spawnattr_t *attr, char *const argv[], char *const envp[])
{
    lat_holders_share();
    return REAL(posix_spawnp)(pid, file, fa, attr, argv, envp);
}

int system(const char *cmd)
{
    lat_holders_share();
    return REAL(system)(cmd);
}

FILE *popen(const char *cmd, const char *mode)
{
    lat_holders_share();
    return REAL(popen)(cmd, mode);
}

int execve(const char *path, char *const argv[], char *const envp[])
{
    lat_holders_share();
    return REAL(execve)(path, argv, envp);
}

int execv(const char *path, char *const argv[])
{
    lat_holders_share();
    return REAL(execv)(path, argv);
}

int execvp(const char *file, char *const argv[])
{
    lat_holders_share();
    return REAL(execvp)(file, argv);
}

int execvpe(const char *file, char *const argv[], char *const envp[])
{
    lat_holders_share();
    return REAL(execvpe)(file, argv, envp);
}

int fexecve(int fd, char *const argv[], char *const envp[])
{
    lat_holders_share();
    return REAL(fexecve)(fd, argv, envp);
}

int execveat(int dirfd, const char *path, char *const argv[], char *const envp[], int flags)
{
    lat_holders_share();
    return REAL(execveat)(dirfd, path, argv, envp, flags);
}

/* execl, execlp, execle: the list made a vector (on the stack: exec
 * replaces the process, and a failed one returns here) */
#define ARGV_FROM_LIST(arg0, ap, argv, envp_out)                        \
    size_t n_ = 1;                                                      \
    va_start(ap, arg0);                                                 \
    while (va_arg(ap, char *))                                          \
        n_++;                                                           \
    va_end(ap);                                                         \
    char *argv[n_ + 1];                                                 \
    argv[0] = (char *)(arg0);                                           \
    va_start(ap, arg0);                                                 \
    for (size_t i_ = 1; i_ <= n_; i_++)                                 \
        argv[i_] = va_arg(ap, char *);                                  \
    envp_out;                                                           \
    va_end(ap)

int execl(const char *path, const char *arg, ...)
{
    va_list ap;
    ARGV_FROM_LIST(arg, ap, argv, (void)0);
    return execv(path, argv);
}

int execlp(const char *file, const char *arg, ...)
{
    va_list ap;
    ARGV_FROM_LIST(arg, ap, argv, (void)0);
    return execvp(file, argv);
}

int execle(const char *path, const char *arg, ...)
{
    va_list ap;
    char **envp;
    ARGV_FROM_LIST(arg, ap, argv, envp = va_arg(ap, char **));
    return execve(path, argv, envp);
}
