/*
 * lockwait DIR - two ranks, one record lock (tests/e2e/test_t0660_mpiio_locks.py):
 * rank 0 and the last rank (behind another I/O node when there are two).
 *
 * Rank 0 takes a write lock on DIR/lock.dat, says so (DIR/held), and keeps
 * it until the last rank shows that a signal handler ran while it waited for
 * the lock (DIR/signalled); then it writes DIR/released and lets go.
 * The last rank sees F_SETLK refused, then waits in F_SETLKW with a SIGALRM timer
 * running (SA_RESTART) and a second thread that, once the handler has run,
 * makes DIR/signalled (a file call while the first thread waits).  When
 * F_SETLKW returns, DIR/released must exist: the wait ended because the
 * holder let go.  Each rank prints what it saw; exit 0 when all held.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static char dir[4096];
static volatile sig_atomic_t handled;

static void path(char *buf, size_t n, const char *name) { snprintf(buf, n, "%s/%s", dir, name); }

static int exists(const char *name)
{
    char p[4200];
    struct stat st;
    path(p, sizeof p, name);
    return stat(p, &st) == 0;
}

static void make(const char *name)
{
    char p[4200];
    path(p, sizeof p, name);
    close(open(p, O_CREAT | O_WRONLY, 0644));
}

static void nap_ms(long ms)
{
    struct timespec t = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&t, NULL);
}

/* at most two minutes: a rank that never sees the other's file says so */
static int await(const char *name)
{
    for (int i = 0; i < 12000; i++, nap_ms(10))
        if (exists(name))
            return 1;
    return 0;
}

static void on_alarm(int sig) { (void)sig; handled++; }

static void *tell_when_signalled(void *arg)
{
    (void)arg;
    while (!handled)
        nap_ms(5);
    make("signalled");
    return NULL;
}

static struct flock whole(short type) { return (struct flock){ .l_type = type, .l_whence = SEEK_SET }; }

static int holder(int fd)
{
    struct flock lk = whole(F_WRLCK);
    if (fcntl(fd, F_SETLK, &lk) != 0) {
        printf("rank 0: F_SETLK = %s\n", strerrorname_np(errno));
        return 1;
    }
    make("held");
    int seen = await("signalled");
    printf("rank 0: the waiting rank handled a signal while it waited = %s\n", seen ? "yes" : "NO");
    make("released");
    lk = whole(F_UNLCK);
    return fcntl(fd, F_SETLK, &lk) != 0 || !seen;
}

static int waiter(int fd)
{
    if (!await("held")) {
        printf("last rank: rank 0 never took the lock\n");
        return 1;
    }
    struct flock lk = whole(F_WRLCK);
    int r = fcntl(fd, F_SETLK, &lk);
    printf("last rank: F_SETLK while rank 0 holds it = %s\n", r == 0 ? "0" : strerrorname_np(errno));
    lk = whole(F_RDLCK);
    r = fcntl(fd, F_GETLK, &lk);
    printf("last rank: F_GETLK = %s %s\n", r == 0 ? "0" : strerrorname_np(errno),
           lk.l_type == F_WRLCK ? "F_WRLCK" : "not F_WRLCK");

    struct sigaction sa = { .sa_handler = on_alarm, .sa_flags = SA_RESTART };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    pthread_t t;
    pthread_create(&t, NULL, tell_when_signalled, NULL);
    struct itimerval it = { { 0, 20000 }, { 0, 300000 } };     /* first after 300 ms, then every 20 ms */
    setitimer(ITIMER_REAL, &it, NULL);
    lk = whole(F_WRLCK);
    r = fcntl(fd, F_SETLKW, &lk);
    int e = errno, released = exists("released");
    it = (struct itimerval){ 0 };
    setitimer(ITIMER_REAL, &it, NULL);
    pthread_join(t, NULL);
    printf("last rank: F_SETLKW = %s, after rank 0 let go = %s, handler ran = %s\n", r == 0 ? "0" : strerrorname_np(e),
           released ? "yes" : "NO", handled ? "yes" : "NO");
    lk = whole(F_UNLCK);
    fcntl(fd, F_SETLK, &lk);
    return r != 0 || !released || !handled;
}

int main(int argc, char **argv)
{
    int rank = atoi(getenv("LATTICE_RANK") ? getenv("LATTICE_RANK") : "0");
    int size = atoi(getenv("LATTICE_SIZE") ? getenv("LATTICE_SIZE") : "2");
    char p[4200];

    if (argc < 2) {
        fprintf(stderr, "usage: lockwait DIR\n");
        return 2;
    }
    snprintf(dir, sizeof dir, "%s", argv[1]);
    setvbuf(stdout, NULL, _IOLBF, 0);
    path(p, sizeof p, "lock.dat");
    int fd = open(p, O_CREAT | O_RDWR, 0644);
    if (fd < 0) {
        printf("rank %d: open(lock.dat) = %s\n", rank, strerrorname_np(errno));
        return 1;
    }
    int bad = rank == 0 ? holder(fd) : rank == size - 1 ? waiter(fd) : 0;
    close(fd);
    return bad;
}
