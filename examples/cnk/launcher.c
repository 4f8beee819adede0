/*
 * launcher: the MPMD launcher style of Blue Gene (one program that chooses
 * by rank and execs another image once), unchanged.
 *
 *   launcher [-e PATH]... [-t] [-f FILE] EVEN [ARGS...] -- ODD [ARGS...]
 *
 * -e PATH  first try to exec PATH, print the error and carry on:
 *            launcher: rank R: exec PATH: ENOENT
 * -t       first try to exec with a second thread alive (cnk: EAGAIN):
 *            launcher: rank R: exec with 2 threads: EAGAIN
 * -f FILE  set up what execprobe checks: descriptors on FILE (shipped)
 *          and on pipes (local), with and without close-on-exec, a caught,
 *          an ignored and a blocked signal; their numbers go in EXECPROBE.
 * Then even ranks (LATTICE_RANK, else PMI_RANK) exec EVEN, odd ranks ODD,
 * with the arguments given and the environment:
 *            launcher: rank R: exec PROG
 * Exits 2 if that exec fails.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern char **environ;

static int rank;

static void try_exec(const char *path)
{
    char *argv[] = { (char *)path, NULL };
    execve(path, argv, environ);
    printf("launcher: rank %d: exec %s: %s\n", rank, path, strerrorname_np(errno));
}

static int gate[2];

static void *waiter(void *arg)
{
    char c;
    (void)arg;
    while (read(gate[0], &c, 1) < 0 && errno == EINTR)
        ;
    return NULL;
}

static void with_thread(void)
{
    pthread_t t;
    if (pipe(gate) || pthread_create(&t, NULL, waiter, NULL)) {
        perror("launcher: thread");
        exit(1);
    }
    try_exec("/bin/true");
    printf("launcher: rank %d: exec with 2 threads: %s\n", rank, strerrorname_np(errno));
    if (write(gate[1], "x", 1) != 1 || pthread_join(t, NULL))
        exit(1);
    close(gate[0]);
    close(gate[1]);
}

static void on_usr1(int sig) { (void)sig; }

static int must(int fd, const char *what)
{
    if (fd < 0) {
        fprintf(stderr, "launcher: %s: %s\n", what, strerror(errno));
        exit(1);
    }
    return fd;
}

static void setup(const char *file)
{
    char four[4], env[256];
    int keep = must(open(file, O_RDONLY), file);
    if (read(keep, four, 4) != 4)           /* the new image reads on from offset 4 */
        exit(1);
    int cloexec = must(open(file, O_RDONLY | O_CLOEXEC), file);
    int setfd = must(dup(keep), "dup");
    must(fcntl(setfd, F_SETFD, FD_CLOEXEC), "F_SETFD");
    int p[2], q[2];
    must(pipe(p), "pipe");
    must(pipe2(q, O_CLOEXEC), "pipe2");
    if (write(p[1], "pipe-data", 9) != 9)
        exit(1);
    int localsetfd = must(open("/dev/null", O_RDONLY), "/dev/null");
    must(fcntl(localsetfd, F_SETFD, FD_CLOEXEC), "F_SETFD");
    snprintf(env, sizeof env, "keep=%d,cloexec=%d,setfd=%d,pipe=%d,pipecloexec=%d,localsetfd=%d",
             keep, cloexec, setfd, p[0], q[0], localsetfd);
    setenv("EXECPROBE", env, 1);

    struct sigaction sa = { .sa_handler = on_usr1 };
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGSYS, &sa, NULL);
    signal(SIGUSR2, SIG_IGN);
    sigset_t hup;
    sigemptyset(&hup);
    sigaddset(&hup, SIGHUP);
    sigprocmask(SIG_BLOCK, &hup, NULL);
}

int main(int argc, char **argv)
{
    const char *r = getenv("LATTICE_RANK") ? getenv("LATTICE_RANK") : getenv("PMI_RANK");
    rank = r ? atoi(r) : 0;
    int i = 1;
    for (; i < argc && argv[i][0] == '-' && strcmp(argv[i], "--"); i++) {
        if (!strcmp(argv[i], "-e") && i + 1 < argc)
            try_exec(argv[++i]);
        else if (!strcmp(argv[i], "-t"))
            with_thread();
        else if (!strcmp(argv[i], "-f") && i + 1 < argc)
            setup(argv[++i]);
        else
            break;
    }
    int sep = i;
    while (sep < argc && strcmp(argv[sep], "--"))
        sep++;
    if (i >= sep || sep + 1 >= argc) {
        fprintf(stderr, "usage: launcher [-e PATH]... [-t] [-f FILE] EVEN [ARGS...] -- ODD [ARGS...]\n");
        return 1;
    }
    argv[sep] = NULL;
    char **prog = rank % 2 ? argv + sep + 1 : argv + i;
    printf("launcher: rank %d: exec %s\n", rank, prog[0]);
    fflush(stdout);
    execve(prog[0], prog, environ);
    printf("launcher: rank %d: exec %s failed: %s\n", rank, prog[0], strerrorname_np(errno));
    return 2;
}
