/* uring_write.c - a file opened, written and closed through io_uring
 * (liburing): the kernel's io_uring workers do the calls, not this thread. */
#include <fcntl.h>
#include <liburing.h>
#include <stdio.h>
#include <string.h>

static int one(struct io_uring *ring, const char *what)
{
    struct io_uring_cqe *cqe;
    if (io_uring_submit(ring) != 1) {
        fprintf(stderr, "%s: submit failed\n", what);
        return -1;
    }
    int r = io_uring_wait_cqe(ring, &cqe);
    if (r < 0) {
        fprintf(stderr, "%s: wait: %s\n", what, strerror(-r));
        return -1;
    }
    r = cqe->res;
    io_uring_cqe_seen(ring, cqe);
    if (r < 0)
        fprintf(stderr, "%s: %s\n", what, strerror(-r));
    return r;
}

int main(int argc, char **argv)
{
    static const char text[] = "uring ok\n";
    struct io_uring ring;
    if (argc != 2) {
        fprintf(stderr, "usage: uring_write FILE\n");
        return 2;
    }
    int r = io_uring_queue_init(4, &ring, 0);
    if (r < 0) {
        fprintf(stderr, "io_uring_queue_init: %s\n", strerror(-r));
        return 1;
    }
    io_uring_prep_openat(io_uring_get_sqe(&ring), AT_FDCWD, argv[1], O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int fd = one(&ring, "openat");
    if (fd < 0)
        return 1;
    io_uring_prep_write(io_uring_get_sqe(&ring), fd, text, strlen(text), 0);
    if (one(&ring, "write") != (int)strlen(text))
        return 1;
    io_uring_prep_fsync(io_uring_get_sqe(&ring), fd, 0);
    if (one(&ring, "fsync") < 0)
        return 1;
    io_uring_prep_close(io_uring_get_sqe(&ring), fd);
    if (one(&ring, "close") < 0)
        return 1;
    io_uring_queue_exit(&ring);
    puts("wrote");
    return 0;
}
