/*
 * conformance_proc.h - the processes, signals and limits part of
 * examples/conformance.c (included once, after conformance.h): fork,
 * popen, kill and sigqueue of the program itself and of a pid that does
 * not exist, a handler's sa_mask while the handler makes calls, and
 * EMFILE at RLIMIT_NOFILE.
 */
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static void processes(void)
{
    printf("# processes\n");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0)
        _exit(7);
    int status = 0;
    if (pid < 0)
        printf("fork, child _exit(7), waitpid = -1 %s\n", strerrorname_np(errno));
    else if (waitpid(pid, &status, 0) != pid)
        printf("fork, child _exit(7), waitpid = -1 %s (waitpid)\n", strerrorname_np(errno));
    else
        printf("fork, child _exit(7), waitpid = exit status %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    /* the child's output comes through a pipe, local on every kernel */
    FILE *p = popen("echo from-the-child; echo second line", "r");
    char line[64] = "", more[64] = "";
    if (!p) {
        printf("popen(echo, r) = NULL %s\npclose = not run\n", strerrorname_np(errno));
        return;
    }
    if (!fgets(line, sizeof line, p) || !fgets(more, sizeof more, p))
        printf("popen(echo, r) reads = nothing (%s)\n", ferror(p) ? strerrorname_np(errno) : "EOF");
    else
        printf("popen(echo, r) reads = %.*s, %.*s\n", (int)strcspn(line, "\n"), line,
               (int)strcspn(more, "\n"), more);
    int st = pclose(p);
    printf("pclose = exit status %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}

static volatile sig_atomic_t handled, usr2_seen, usr2_seen_inside, usr2_blocked_inside, queued_value;

static void on_usr2(int sig)
{
    (void)sig;
    usr2_seen++;
}

/* SIGUSR2 is in this handler's sa_mask: raised here, it must wait */
static void on_signal(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)uc;
    handled++;
    queued_value = si->si_code == SI_QUEUE ? si->si_value.sival_int : -1;
    if (handled == 1) {
        sigset_t now;
        raise(SIGUSR2);
        sigprocmask(SIG_BLOCK, NULL, &now);
        usr2_blocked_inside = sigismember(&now, SIGUSR2);
        usr2_seen_inside = usr2_seen;
    }
}

/* raise sig, whose handler masks SIGUSR2, and say what the handler saw */
static void masked_handler(int sig, const char *name)
{
    struct sigaction a = { .sa_sigaction = on_signal, .sa_flags = SA_SIGINFO };
    sigemptyset(&a.sa_mask);
    sigaddset(&a.sa_mask, SIGUSR2);
    sigaction(sig, &a, NULL);
    handled = usr2_seen = usr2_seen_inside = usr2_blocked_inside = 0;
    SAY(kill(getpid(), sig), "kill(self, %s)", name);
    printf("%s handler ran = %d, SIGUSR2 raised inside ran there = %d, was blocked there = %d, "
           "ran after = %d\n", name, (int)handled, (int)usr2_seen_inside, (int)usr2_blocked_inside, (int)usr2_seen);
}

static void signals(void)
{
    printf("# signals\n");
    signal(SIGUSR2, on_usr2);
    const pid_t none = 0x3ffffff0;      /* above any pid_max: no such process */

    SAY(kill(getpid(), 0), "kill(self, 0)");
    SAY(kill(none, 0), "kill(no such pid, 0)");
    SAY(kill(none, SIGKILL), "kill(no such pid, SIGKILL)");
    SAY(kill(0, 0), "kill(0, 0)");
    SAY(kill(-getpgrp(), 0), "kill(-own process group, 0)");
    SAY(kill(getpid(), 99), "kill(self, 99)");
    SAY(syscall(SYS_tgkill, none, none, 0), "tgkill(no such pid, 0)");
    masked_handler(SIGSYS, "SIGSYS");      /* cnk's own signal: the program's action is virtual */
    signal(SIGSYS, SIG_DFL);
    masked_handler(SIGUSR1, "SIGUSR1");
    SAY(sigqueue(getpid(), SIGUSR1, (union sigval){ .sival_int = 42 }), "sigqueue(self, SIGUSR1, 42)");
    printf("queued value seen by the handler = %d\n", (int)queued_value);
    SAY(sigqueue(none, SIGUSR1, (union sigval){ .sival_int = 1 }), "sigqueue(no such pid, SIGUSR1)");
    siginfo_t si = { .si_signo = SIGUSR1, .si_code = SI_QUEUE, .si_pid = getpid(), .si_uid = getuid(),
                     .si_value.sival_int = 43 };
    SAY(syscall(SYS_rt_tgsigqueueinfo, getpid(), gettid(), SIGUSR1, &si), "rt_tgsigqueueinfo(self, SIGUSR1, 43)");
    printf("queued value seen by the handler = %d\n", (int)queued_value);
    signal(SIGUSR1, SIG_DFL);
    signal(SIGUSR2, SIG_DFL);
}

/* Every number below the soft RLIMIT_NOFILE the program starts with is its
 * own (the test starts it with 1024, below the hard limit): the client's
 * descriptors take none of them. */
static void emfile_at_start(void)
{
    struct rlimit now;
    getrlimit(RLIMIT_NOFILE, &now);
    printf("RLIMIT_NOFILE at start = %llu\n", (unsigned long long)now.rlim_cur);
    int *mine = calloc(now.rlim_cur, sizeof *mine), n = 0, fd, last = -1, closed = 0;
    while (mine && n < (int)now.rlim_cur && (fd = open("/dev/null", O_RDONLY)) >= 0)
        last = mine[n++] = fd;
    printf("open(/dev/null) until it fails = -1 %s, the last descriptor %d\n", strerrorname_np(errno), last);
    for (fd = 0; fd < (int)now.rlim_cur; fd++)
        closed += fcntl(fd, F_GETFD) < 0;
    printf("numbers below the limit not open = %d\n", closed);
    while (n > 0)
        close(mine[--n]);
    free(mine);
}

/* last: it lowers RLIMIT_NOFILE for a moment */
static void emfile(void)
{
    struct rlimit old, lim;
    printf("# EMFILE\n");
    emfile_at_start();
    getrlimit(RLIMIT_NOFILE, &old);
    lim = old;
    lim.rlim_cur = 40;
    SAY(setrlimit(RLIMIT_NOFILE, &lim), "setrlimit(RLIMIT_NOFILE, 40)");
    int last = -1, fd;
    while ((fd = open("s.dat", O_RDONLY)) >= 0)
        last = fd;
    printf("open until it fails = -1 %s, the last descriptor %d\n", strerrorname_np(errno), last);
    SAY(dup(base), "dup at the limit");
    for (fd = base; fd <= last; fd++)
        close(fd);
    setrlimit(RLIMIT_NOFILE, &old);
}
