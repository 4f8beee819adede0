/*
 * aio_probe: POSIX AIO on a file of the job (shipped in Linux mode without
 * the sandbox), for tests/e2e/test_t0850_preload_children.py.  Writes
 * FILE with aio_write (aio_suspend, aio_error, aio_return), reads it back
 * with aio_read, a lio_listio of two writes and a read (LIO_WAIT), an
 * aio_fsync, a SIGEV_SIGNAL notice, aio_cancel; prints "aio ok".
 */
#define _GNU_SOURCE
#include <aio.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t noticed;

static void on_sig(int sig, siginfo_t *si, void *ctx)
{
    (void)sig;
    (void)ctx;
    if (si->si_code == SI_ASYNCIO && si->si_value.sival_int == 42)
        noticed = 1;
}

static void die(const char *what)
{
    fprintf(stderr, "aio_probe: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* until cb is done, as a program waits: aio_suspend, then aio_error */
static ssize_t finish(struct aiocb *cb)
{
    const struct aiocb *list[1] = { cb };
    while (aio_error(cb) == EINPROGRESS)
        if (aio_suspend(list, 1, NULL) < 0 && errno != EINTR)
            die("aio_suspend");
    int e = aio_error(cb);
    ssize_t n = aio_return(cb);
    if (e) {
        errno = e;
        die("request");
    }
    return n;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: aio_probe FILE\n");
        return 2;
    }
    int fd = open(argv[1], O_CREAT | O_RDWR | O_TRUNC, 0644);
    if (fd < 0)
        die("open");
    static char data[100000], back[100000];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (char)('a' + i % 23);

    struct sigaction sa = { .sa_sigaction = on_sig, .sa_flags = SA_SIGINFO };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    struct aiocb w = { .aio_fildes = fd, .aio_buf = data, .aio_nbytes = sizeof data, .aio_offset = 0 };
    w.aio_sigevent.sigev_notify = SIGEV_SIGNAL;
    w.aio_sigevent.sigev_signo = SIGUSR1;
    w.aio_sigevent.sigev_value.sival_int = 42;
    if (aio_write(&w) < 0)
        die("aio_write");
    if (finish(&w) != (ssize_t)sizeof data)
        die("aio_write's count");

    struct aiocb r = { .aio_fildes = fd, .aio_buf = back, .aio_nbytes = sizeof back, .aio_offset = 0 };
    if (aio_read(&r) < 0)
        die("aio_read");
    if (finish(&r) != (ssize_t)sizeof back || memcmp(data, back, sizeof data))
        die("aio_read's bytes");

    struct aiocb a = { .aio_fildes = fd, .aio_lio_opcode = LIO_WRITE, .aio_buf = "head", .aio_nbytes = 4 };
    struct aiocb b = { .aio_fildes = fd, .aio_lio_opcode = LIO_WRITE, .aio_buf = "tail", .aio_nbytes = 4,
                       .aio_offset = sizeof data };
    char four[4];
    struct aiocb c = { .aio_fildes = fd, .aio_lio_opcode = LIO_READ, .aio_buf = four, .aio_nbytes = 4,
                       .aio_offset = 4 };
    struct aiocb *list[3] = { &a, &b, &c };
    if (lio_listio(LIO_WAIT, list, 3, NULL) < 0)
        die("lio_listio");
    if (aio_return(&a) != 4 || aio_return(&b) != 4 || aio_return(&c) != 4 || memcmp(four, data + 4, 4))
        die("lio_listio's results");

    struct aiocb s = { .aio_fildes = fd };
    if (aio_fsync(O_SYNC, &s) < 0)
        die("aio_fsync");
    finish(&s);
    if (aio_cancel(fd, NULL) != AIO_ALLDONE)
        die("aio_cancel");
    if (!noticed)
        die("no SIGEV_SIGNAL notice");
    close(fd);
    printf("aio ok\n");
    return 0;
}
