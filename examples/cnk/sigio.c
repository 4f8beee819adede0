/*
 * sigio: signal handlers that make file calls while the interrupted code is
 * in the middle of its own, and the ways a signal must still interrupt.
 * Under cnk a shipped call holds the connection's lock; a handler that ran
 * on top of it would deadlock or scribble on the call in flight, so cnk
 * holds such signals back until the lock is let go (compute/cnk/signal.c).
 *
 *   sigio DIR     (files are made in DIR and removed)
 *
 * 1. io: a SIGALRM itimer (every 100 us) whose handler pwrites a record to
 *    its own file and preads it back, while the main thread and a second
 *    thread each pwrite and pread back records of their own file in a loop
 *    (until the handler has run at least MIN_HANDLED times); then every
 *    byte of all three files is checked.
 * 2. eintr: a blocking read of an empty pipe, interrupted by a one-shot
 *    SIGALRM: -1 EINTR without SA_RESTART; with SA_RESTART the read goes on
 *    and returns the byte the handler wrote into the pipe.
 * 3. sigsys: SIGSYS raised by the main thread runs the program's SIGSYS
 *    handler before raise returns; the handler makes file calls while a
 *    second thread makes its own.  (Not sent to a thread busy making calls:
 *    under cnk such a SIGSYS may merge with a trap's, compute/cnk/README.md.)
 * 4. sigaction: what the program set is what it reads back.
 * Prints "ok NAME ..." per part, or "FAIL ..." and exits 1.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define REC 64              /* bytes of one record */
#define LOOP_RECS 512       /* records a loop cycles over */
#define MIN_HANDLED 200     /* handler runs the io part waits for */
#define MAX_HANDLED 4096    /* records the handler's file holds */

static int hfd = -1;                        /* the handler's file */
static atomic_int handled, handler_bad;
static atomic_int stop;

static void fail(const char *what)
{
    printf("FAIL %s (errno %d %s)\n", what, errno, strerror(errno));
    exit(1);
}

static void fill(char *b, char tag, long n)
{
    for (int i = 0; i < REC; i++)
        b[i] = (char)(tag + ((n * 7 + i) % 23));
}

/* ---- 1. io ---- */

static void on_alarm_io(int sig)
{
    int saved = errno, n = atomic_fetch_add(&handled, 1);    /* handlers may run on both threads */
    char w[REC], r[REC];
    (void)sig;
    if (n >= MAX_HANDLED)
        return;
    fill(w, 'H', n);
    if (pwrite(hfd, w, REC, (off_t)n * REC) != REC || pread(hfd, r, REC, (off_t)n * REC) != REC ||
        memcmp(w, r, REC))
        atomic_fetch_add(&handler_bad, 1);
    errno = saved;
}

struct looper { int fd; char tag; long rounds, bad; };

static void *loop_io(void *arg)
{
    struct looper *l = arg;
    char w[REC], r[REC];
    for (long i = 0; !atomic_load(&stop); i++) {
        long slot = i % LOOP_RECS;
        fill(w, l->tag, i);
        if (pwrite(l->fd, w, REC, slot * REC) != REC)
            fail("loop pwrite");
        if (pread(l->fd, r, REC, slot * REC) != REC)
            fail("loop pread");
        l->bad += memcmp(w, r, REC) != 0;
        l->rounds = i + 1;
    }
    return NULL;
}

/* every record of a looper's file holds the last thing written to it */
static long check_loop_file(const struct looper *l)
{
    char want[REC], got[REC];
    long bad = 0;
    for (long slot = 0; slot < LOOP_RECS && slot < l->rounds; slot++) {
        long last = slot + ((l->rounds - 1 - slot) / LOOP_RECS) * LOOP_RECS;
        fill(want, l->tag, last);
        if (pread(l->fd, got, REC, slot * REC) != REC)
            fail("check pread");
        bad += memcmp(want, got, REC) != 0;
    }
    return bad;
}

static int open_tmp(const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0)
        fail(path);
    unlink(path);
    return fd;
}

static void part_io(const char *dir)
{
    struct sigaction sa = { 0 };
    struct looper a = { open_tmp(dir, "sigio-a"), 'a', 0, 0 }, b = { open_tmp(dir, "sigio-b"), 'A', 0, 0 };
    struct itimerval it = { { 0, 100 }, { 0, 100 } }, off = { 0 };
    pthread_t t;

    hfd = open_tmp(dir, "sigio-h");
    sa.sa_handler = on_alarm_io;
    sa.sa_flags = SA_RESTART;
    if (sigaction(SIGALRM, &sa, NULL))
        fail("sigaction");
    if (pthread_create(&t, NULL, loop_io, &b))
        fail("pthread_create");
    if (setitimer(ITIMER_REAL, &it, NULL))
        fail("setitimer");
    /* the main loop in slices, until the handler has run often enough */
    for (int slice = 0; atomic_load(&handled) < MIN_HANDLED; slice++) {
        if (slice == 100000)
            fail("the itimer's handler never ran often enough");
        char w[REC], r[REC];
        for (long i = 0; i < 64; i++) {
            long n = a.rounds, s = n % LOOP_RECS;
            fill(w, a.tag, n);
            if (pwrite(a.fd, w, REC, s * REC) != REC || pread(a.fd, r, REC, s * REC) != REC)
                fail("main pwrite/pread");
            a.bad += memcmp(w, r, REC) != 0;
            a.rounds = n + 1;
        }
    }
    setitimer(ITIMER_REAL, &off, NULL);
    atomic_store(&stop, 1);
    pthread_join(t, NULL);
    signal(SIGALRM, SIG_IGN);

    int n = atomic_load(&handled) < MAX_HANDLED ? atomic_load(&handled) : MAX_HANDLED;
    long hbad = 0;
    char want[REC], got[REC];
    for (int i = 0; i < n; i++) {
        fill(want, 'H', i);
        if (pread(hfd, got, REC, (off_t)i * REC) != REC)
            fail("check handler pread");
        hbad += memcmp(want, got, REC) != 0;
    }
    long abad = a.bad + check_loop_file(&a), bbad = b.bad + check_loop_file(&b);
    if (atomic_load(&handler_bad) || hbad || abad || bbad) {
        printf("FAIL io: handler %d bad in flight, %ld in its file; main %ld bad; thread %ld bad\n",
               atomic_load(&handler_bad), hbad, abad, bbad);
        exit(1);
    }
    printf("ok io handled=%d main_rounds=%ld thread_rounds=%ld\n", n, a.rounds, b.rounds);
    close(a.fd);
    close(b.fd);
}

/* ---- 2. eintr ---- */

static int pipe_w = -1;
static atomic_int alarms;

static void on_alarm_pipe(int sig)
{
    (void)sig;
    atomic_fetch_add(&alarms, 1);
    if (pipe_w >= 0)
        (void)!write(pipe_w, "x", 1);
}

static void one_shot(void)
{
    struct itimerval it = { { 0, 0 }, { 0, 20000 } };
    if (setitimer(ITIMER_REAL, &it, NULL))
        fail("setitimer one-shot");
}

static void part_eintr(void)
{
    struct sigaction sa = { 0 };
    int p[2];
    char c;

    if (pipe(p))
        fail("pipe");
    sa.sa_handler = on_alarm_pipe;
    if (sigaction(SIGALRM, &sa, NULL))     /* no SA_RESTART: EINTR */
        fail("sigaction");
    one_shot();
    ssize_t r = read(p[0], &c, 1);
    if (r != -1 || errno != EINTR || atomic_load(&alarms) != 1) {
        printf("FAIL eintr: read gave %zd errno %d with %d alarms, wanted -1 EINTR after 1\n", r, errno,
               atomic_load(&alarms));
        exit(1);
    }
    sa.sa_flags = SA_RESTART;               /* restarted: the handler's byte */
    if (sigaction(SIGALRM, &sa, NULL))
        fail("sigaction");
    pipe_w = p[1];
    one_shot();
    r = read(p[0], &c, 1);
    if (r != 1 || c != 'x' || atomic_load(&alarms) != 2) {
        printf("FAIL restart: read gave %zd (errno %d) with %d alarms, wanted the handler's byte\n", r,
               errno, atomic_load(&alarms));
        exit(1);
    }
    pipe_w = -1;
    signal(SIGALRM, SIG_IGN);
    close(p[0]);
    close(p[1]);
    printf("ok eintr\n");
}

/* ---- 3. sigsys ---- */

static atomic_int sys_handled, sys_bad;
static int sfd = -1;

static void on_sigsys(int sig, siginfo_t *si, void *uc)
{
    char w[REC], r[REC];
    int saved = errno, n = atomic_load(&sys_handled);     /* sent one at a time */
    (void)sig, (void)uc;
    if (si->si_code != SI_TKILL)
        atomic_fetch_add(&sys_bad, 1);
    fill(w, 'S', n);
    if (pwrite(sfd, w, REC, 0) != REC || pread(sfd, r, REC, 0) != REC || memcmp(w, r, REC))
        atomic_fetch_add(&sys_bad, 1);
    atomic_store(&sys_handled, n + 1);
    errno = saved;
}

static void part_sigsys(const char *dir)
{
    struct sigaction sa = { 0 };
    struct looper l = { open_tmp(dir, "sigio-s"), 's', 0, 0 };
    pthread_t t;

    sfd = open_tmp(dir, "sigio-t");
    sa.sa_sigaction = on_sigsys;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    if (sigaction(SIGSYS, &sa, NULL))
        fail("sigaction SIGSYS");
    atomic_store(&stop, 0);
    if (pthread_create(&t, NULL, loop_io, &l))
        fail("pthread_create");
    for (int i = 0; i < 200; i++) {
        int before = atomic_load(&sys_handled);
        if (raise(SIGSYS))
            fail("raise");
        if (atomic_load(&sys_handled) != before + 1) {
            printf("FAIL sigsys: raise %d returned before its handler ran\n", i);
            exit(1);
        }
    }
    atomic_store(&stop, 1);
    pthread_join(t, NULL);
    long bad = l.bad + check_loop_file(&l);
    if (atomic_load(&sys_bad) || bad) {
        printf("FAIL sigsys: %d bad in the handler, %ld in the thread's file\n", atomic_load(&sys_bad), bad);
        exit(1);
    }
    printf("ok sigsys handled=%d thread_rounds=%ld\n", atomic_load(&sys_handled), l.rounds);
}

/* ---- 4. sigaction ---- */

static void on_usr1(int sig) { (void)sig; }

static void part_sigaction(void)
{
    struct sigaction sa = { 0 }, got;
    sa.sa_handler = on_usr1;
    sa.sa_flags = SA_RESTART | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGUSR2);
    if (sigaction(SIGUSR1, &sa, NULL) || sigaction(SIGUSR1, NULL, &got))
        fail("sigaction");
    if (got.sa_handler != on_usr1 || (got.sa_flags & (SA_RESTART | SA_ONSTACK | SA_SIGINFO)) !=
        (SA_RESTART | SA_ONSTACK) || !sigismember(&got.sa_mask, SIGUSR2) || sigismember(&got.sa_mask, SIGINT)) {
        printf("FAIL sigaction: read back handler %p flags %#x\n", (void *)got.sa_handler,
               (unsigned)got.sa_flags);
        exit(1);
    }
    raise(SIGUSR1);
    signal(SIGUSR1, SIG_DFL);
    if (sigaction(SIGUSR1, NULL, &got) || got.sa_handler != SIG_DFL)
        fail("sigaction SIG_DFL read back");
    printf("ok sigaction\n");
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: sigio DIR\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IONBF, 0);
    part_io(argv[1]);
    part_eintr();
    part_sigsys(argv[1]);
    part_sigaction();
    return 0;
}
