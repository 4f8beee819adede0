/*
 * execprobe: what a program finds after a launcher's exec (examples/cnk/
 * launcher.c -f FILE), and that it cannot exec a second time.
 *
 *   execprobe [ARGS...]
 *
 * Prints, R being the rank:
 *   execprobe: rank R: argc=N args=A|B|...
 *   execprobe: rank R: fds keep=ok:DATA cloexec=closed setfd=closed pipe=ok:DATA pipecloexec=closed localsetfd=closed
 *   execprobe: rank R: signals usr1=default usr2=ignored hup=blocked sys=default
 *   execprobe: rank R: pmi_fd=N open          (when PMI_FD is set)
 *   execprobe: rank R: malloc ok
 *   execprobe: rank R: second exec: ENOSYS
 * where keep reads 4 more bytes of FILE (from offset 4: the launcher read
 * 4) and pipe reads what the launcher wrote into the pipe.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

static int probe_fd(const char *spec, const char *name, size_t want, char *out, size_t outlen)
{
    char key[32];
    snprintf(key, sizeof key, "%s=", name);
    const char *at = spec;
    while ((at = strstr(at, key)) && at != spec && at[-1] != ',')
        at++;
    if (!at)
        return snprintf(out, outlen, "%s=?", name), 0;
    int fd = atoi(at + strlen(key));
    if (fcntl(fd, F_GETFD) < 0)
        return snprintf(out, outlen, "%s=%s", name, errno == EBADF ? "closed" : strerror(errno)), 0;
    char buf[32] = "";
    ssize_t n = want ? read(fd, buf, want) : 0;
    buf[n > 0 ? n : 0] = 0;
    return snprintf(out, outlen, "%s=ok%s%s", name, want ? ":" : "", buf), 1;
}

static const char *disposition(int sig)
{
    struct sigaction sa;
    sigaction(sig, NULL, &sa);
    return sa.sa_handler == SIG_DFL ? "default" : sa.sa_handler == SIG_IGN ? "ignored" : "caught";
}

int main(int argc, char **argv)
{
    const char *r = getenv("LATTICE_RANK");
    int rank = r ? atoi(r) : 0;
    printf("execprobe: rank %d: argc=%d args=", rank, argc);
    for (int i = 1; i < argc; i++)
        printf("%s%s", i > 1 ? "|" : "", argv[i]);
    printf("\n");

    const char *spec = getenv("EXECPROBE");
    if (spec) {
        char a[6][64];
        probe_fd(spec, "keep", 4, a[0], sizeof a[0]);
        probe_fd(spec, "cloexec", 0, a[1], sizeof a[1]);
        probe_fd(spec, "setfd", 0, a[2], sizeof a[2]);
        probe_fd(spec, "pipe", 9, a[3], sizeof a[3]);
        probe_fd(spec, "pipecloexec", 0, a[4], sizeof a[4]);
        probe_fd(spec, "localsetfd", 0, a[5], sizeof a[5]);
        printf("execprobe: rank %d: fds %s %s %s %s %s %s\n", rank, a[0], a[1], a[2], a[3], a[4], a[5]);
        sigset_t cur;
        sigprocmask(SIG_BLOCK, NULL, &cur);
        printf("execprobe: rank %d: signals usr1=%s usr2=%s hup=%s sys=%s\n", rank, disposition(SIGUSR1),
               disposition(SIGUSR2), sigismember(&cur, SIGHUP) ? "blocked" : "unblocked",
               disposition(SIGSYS));
    }
    const char *pmi = getenv("PMI_FD");
    if (pmi)
        printf("execprobe: rank %d: pmi_fd=%s %s\n", rank, pmi, fcntl(atoi(pmi), F_GETFD) >= 0 ? "open" : "closed");

    size_t n = 8 << 20;
    unsigned char *p = malloc(n);
    unsigned long sum = 0;
    for (size_t i = 0; p && i < n; i += 4096)
        p[i] = (unsigned char)i, sum += p[i];
    printf("execprobe: rank %d: malloc %s\n", rank, p ? "ok" : "failed");
    free(p);

    char *again[] = { argv[0], NULL };
    fflush(stdout);
    execve(argv[0], again, environ);
    printf("execprobe: rank %d: second exec: %s\n", rank, strerrorname_np(errno));
    return 0;
}
