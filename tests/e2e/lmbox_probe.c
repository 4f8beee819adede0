/*
 * lmbox_probe: small file calls of a Linux-mode program, for the mailbox
 * test (tests/e2e/test_t0730_linux_mailbox.py).  Every mode writes a file
 * whose bytes the test recomputes, and prints one "... ok" line.
 *
 *   small FILE N          N records of 8 bytes from buffers of every kind
 *                         (stack, heap, static, mmap'd, literal), read back
 *   threads FILE T N      T threads, N records each, concurrently
 *   efault FILE           bad buffers give EFAULT, the connection lives on
 *   fork FILE             a forked child writes through the socket (it takes
 *                         turns with its parent, issue 25); so does one that
 *                         execs, and a child of a raw fork system call; the
 *                         parent goes on
 *   exec FILE             the same process execs "small FILE 16"
 *   signals FILE N        N records or more, until a 100 us timer (no
 *                         SA_RESTART) fired 50 times: no call may fail with
 *                         EINTR; prints how many records
 *   fifo FIFO             open and read 8 bytes of a FIFO on the I/O node:
 *                         calls that wait there (the client sleeps)
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#define REC 8

static char in_bss[REC];
static volatile unsigned long unmapped = 16;     /* an address nothing maps (volatile: no compiler warning) */
static const char in_rodata[REC] = "rodata!";

static void die(const char *what)
{
    fprintf(stderr, "lmbox_probe: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* record i of writer w: what the test recomputes */
static void record(char *b, unsigned w, unsigned i)
{
    snprintf(b, REC + 1, "%02x%06x", w & 0xff, i & 0xffffff);
}

static void put(int fd, const char *b, off_t at)
{
    if (pwrite(fd, b, REC, at) != REC)
        die("pwrite");
}

static void check(int fd, char *into, const char *want, off_t at)
{
    memset(into, 0, REC);
    if (pread(fd, into, REC, at) != REC)
        die("pread");
    if (memcmp(into, want, REC)) {
        fprintf(stderr, "lmbox_probe: record at %lld: '%.8s', not '%.8s'\n", (long long)at, into, want);
        exit(1);
    }
}

static int small(const char *path, unsigned n)
{
    int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (fd < 0)
        die("open");
    char *heap = malloc(REC), *map = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (!heap || map == MAP_FAILED)
        die("buffers");
    for (unsigned i = 0; i < n; i++) {
        char stack[REC + 1], *kinds[] = { stack, heap, in_bss, map };
        char *b = kinds[i % 4];
        char want[REC + 1];
        record(want, 0, i);
        memcpy(b, want, REC);
        put(fd, b, (off_t)i * REC);
        check(fd, kinds[(i + 1) % 4], want, (off_t)i * REC);
    }
    if (pwrite(fd, in_rodata, REC, (off_t)n * REC) != REC)    /* a literal, read-only */
        die("pwrite rodata");
    struct stat st;
    if (fstat(fd, &st) < 0 || st.st_size != (off_t)(n + 1) * REC || lseek(fd, 0, SEEK_END) != st.st_size)
        die("fstat");
    if (close(fd) < 0)
        die("close");
    printf("small ok %u\n", n);
    return 0;
}

struct worker {
    int fd;
    unsigned w, n;
};

static void *work(void *arg)
{
    struct worker *k = arg;
    char *heap = malloc(REC);          /* a thread's arena: mmap'd, not the brk heap */
    if (!heap)
        die("malloc");
    for (unsigned i = 0; i < k->n; i++) {
        char want[REC + 1];
        off_t at = ((off_t)k->w * k->n + i) * REC;
        record(want, k->w + 1, i);
        put(k->fd, want, at);
        check(k->fd, heap, want, at);
        struct stat st;
        if (i % 16 == 0 && fstat(k->fd, &st) < 0)
            die("fstat");
    }
    free(heap);
    return NULL;
}

static int threads(const char *path, unsigned t, unsigned n)
{
    int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (fd < 0 || t > 64)
        die("open");
    pthread_t th[64];
    struct worker k[64];
    for (unsigned w = 0; w < t; w++) {
        k[w] = (struct worker){ fd, w, n };
        if ((errno = pthread_create(&th[w], NULL, work, &k[w])))
            die("pthread_create");
    }
    for (unsigned w = 0; w < t; w++)
        pthread_join(th[w], NULL);
    close(fd);
    printf("threads ok %u\n", t * n);
    return 0;
}

static int expect_efault(long r, const char *what)
{
    if (r != -1 || errno != EFAULT) {
        fprintf(stderr, "lmbox_probe: %s: %ld (%s), not EFAULT\n", what, r, strerror(errno));
        exit(1);
    }
    return 0;
}

static int efault(const char *path)
{
    int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (fd < 0)
        die("open");
    char *none = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (none == MAP_FAILED || pwrite(fd, "12345678", REC, 0) != REC)
        die("setup");
    expect_efault(write(fd, (void *)unmapped, REC), "write from address 16");
    expect_efault(write(fd, none, REC), "write from PROT_NONE");
    expect_efault(pread(fd, (void *)unmapped, REC, 0), "pread into address 16");
    expect_efault(pread(fd, none, REC, 0), "pread into PROT_NONE");
    expect_efault(pread(fd, (void *)in_rodata, REC, 0), "pread into read-only data");
    /* the connection is still in step */
    char b[REC];
    if (pwrite(fd, "abcdefgh", REC, REC) != REC || pread(fd, b, REC, REC) != REC || memcmp(b, "abcdefgh", REC))
        die("after EFAULT");
    close(fd);
    printf("efault ok\n");
    return 0;
}

static int forks(const char *self, const char *path)
{
    int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (fd < 0)
        die("open");
    put(fd, "parent-1", 0);
    pid_t c = fork();
    if (c == 0) {   /* the shared connection, through the socket (the mailbox is the parent's) */
        long r = pwrite(fd, "fork-kid", REC, 6 * REC);
        _exit(r == REC ? 0 : 1);
    }
    int st;
    if (c < 0 || waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        die("the forked child could not write");
    put(fd, "parent-2", REC);
    if ((c = fork()) == 0) {    /* another pid on the same connection: the socket only */
        execl(self, self, "child-exec", path, (char *)NULL);
        _exit(127);
    }
    if (c < 0 || waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        die("the exec'd child failed");
    char b[REC];
    check(fd, b, "exec-kid", 2 * REC);
    put(fd, "parent-3", 3 * REC);
    /* a fork without pthread_atfork's handlers: the child must not crash on
     * (nor use) the parent's mailbox; it gets the socket, as before mailboxes */
    if ((c = (pid_t)syscall(SYS_fork)) == 0) {
        long r = pwrite(fd, "raw-kid!", REC, 4 * REC);
        syscall(SYS_exit_group, r == REC || (r == -1 && errno == EIO) ? 0 : 1);
    }
    if (c < 0 || waitpid(c, &st, 0) != c || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        die("the raw forked child failed");
    put(fd, "parent-4", 5 * REC);
    check(fd, b, "parent-1", 0);
    close(fd);
    printf("fork ok\n");
    return 0;
}

static volatile sig_atomic_t ticks;

static void tick(int sig)
{
    (void)sig;
    ticks++;
}

static int signals(const char *path, unsigned n)
{
    struct sigaction sa = { .sa_handler = tick };     /* no SA_RESTART */
    struct itimerval it = { { 0, 100 }, { 0, 100 } };
    int fd = open(path, O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (fd < 0 || sigaction(SIGALRM, &sa, NULL) < 0 || setitimer(ITIMER_REAL, &it, NULL) < 0)
        die("setup");
    unsigned i;
    for (i = 0; i < n || ticks < 50; i++) {     /* at least n records and 50 interruptions */
        char want[REC + 1], b[REC];
        record(want, 0, i);
        put(fd, want, (off_t)i * REC);
        check(fd, b, want, (off_t)i * REC);
    }
    it = (struct itimerval){ { 0, 0 }, { 0, 0 } };
    setitimer(ITIMER_REAL, &it, NULL);
    close(fd);
    printf("signals ok %u\n", i);
    return 0;
}

static int fifo(const char *path)
{
    char b[REC + 1] = { 0 };
    int fd = open(path, O_RDONLY);
    if (fd < 0 || read(fd, b, REC) != REC)
        die("fifo");
    close(fd);
    printf("fifo ok %s\n", b);
    return 0;
}

static int child_exec(const char *path)
{
    int fd = open(path, O_RDWR);
    if (fd < 0 || pwrite(fd, "exec-kid", REC, 2 * REC) != REC || close(fd) < 0)
        return 1;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "small"))
        return small(argv[2], (unsigned)atoi(argv[3]));
    if (argc == 5 && !strcmp(argv[1], "threads"))
        return threads(argv[2], (unsigned)atoi(argv[3]), (unsigned)atoi(argv[4]));
    if (argc == 3 && !strcmp(argv[1], "efault"))
        return efault(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "fork"))
        return forks("/proc/self/exe", argv[2]);
    if (argc == 4 && !strcmp(argv[1], "signals"))
        return signals(argv[2], (unsigned)atoi(argv[3]));
    if (argc == 3 && !strcmp(argv[1], "fifo"))
        return fifo(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "child-exec"))
        return child_exec(argv[2]);
    if (argc == 3 && !strcmp(argv[1], "exec")) {
        int fd = open(argv[2], O_CREAT | O_RDWR | O_TRUNC, 0644);
        if (fd < 0 || pwrite(fd, "pre-exec", REC, 0) != REC || close(fd) < 0)
            die("before exec");
        fflush(stdout);
        execl("/proc/self/exe", argv[0], "small", argv[2], "16", (char *)NULL);
        die("exec");
    }
    fprintf(stderr, "usage: lmbox_probe small|threads|efault|fork|exec|signals|fifo FILE ...\n");
    return 2;
}
