/*
 * fuse_io: the file I/O bench/fuse_io.py times, with plain POSIX calls, so
 * the same binary runs on the host (the baseline), as a sandboxed job (its
 * working directory through lattice-fs) and under the preload client.
 * Works in its working directory; prints one key=value line.
 *
 *   fuse_io seq MIB      write MIB MiB in 1 MiB writes and fsync, then read
 *                        them back in 1 MiB reads: write_MBps= read_MBps=
 *   (every line starts with fstype=0x..., the working directory's file system)
 *   fuse_io small COUNT  COUNT times: create, write 4 KiB, close, stat,
 *                        unlink one file: files_per_s=
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int seq(long mib)
{
    size_t bs = 1 << 20;
    char *buf = malloc(bs);
    if (!buf)
        return 1;
    memset(buf, 'l', bs);
    int fd = open("fuse_io.dat", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) { perror("open fuse_io.dat"); return 1; }
    double t0 = now();
    for (long i = 0; i < mib; i++)
        if (write(fd, buf, bs) != (ssize_t)bs) { perror("write"); return 1; }
    if (fsync(fd) < 0) { perror("fsync"); return 1; }
    close(fd);
    double tw = now() - t0;
    fd = open("fuse_io.dat", O_RDONLY);
    if (fd < 0) { perror("open fuse_io.dat"); return 1; }
    t0 = now();
    long got = 0;
    ssize_t n;
    while ((n = read(fd, buf, bs)) > 0)
        got += n;
    double tr = now() - t0;
    close(fd);
    unlink("fuse_io.dat");
    if (n < 0 || got != mib << 20) { fprintf(stderr, "read back %ld bytes of %ld\n", got, mib << 20); return 1; }
    printf("write_MBps=%.1f read_MBps=%.1f\n", (double)(mib << 20) / tw / 1e6, (double)(mib << 20) / tr / 1e6);
    return 0;
}

static int small(long count)
{
    char buf[4096], name[64];
    struct stat st;
    memset(buf, 's', sizeof buf);
    double t0 = now();
    for (long i = 0; i < count; i++) {
        snprintf(name, sizeof name, "fuse_io.%ld", i);
        int fd = open(name, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0 || write(fd, buf, sizeof buf) != (ssize_t)sizeof buf || close(fd) < 0 ||
            stat(name, &st) < 0 || st.st_size != (off_t)sizeof buf || unlink(name) < 0) {
            perror(name);
            return 1;
        }
    }
    printf("files_per_s=%.1f\n", (double)count / (now() - t0));
    return 0;
}

/* The working directory's file system type: FUSE's 0x65735546 through lattice-fs. */
static long fstype(void)
{
    struct statfs sf;
    return statfs(".", &sf) == 0 ? (long)sf.f_type : -1;
}

int main(int argc, char **argv)
{
    printf("fstype=0x%lx ", fstype());
    if (argc == 3 && !strcmp(argv[1], "seq"))
        return seq(atol(argv[2]));
    if (argc == 3 && !strcmp(argv[1], "small"))
        return small(atol(argv[2]));
    fprintf(stderr, "usage: fuse_io seq MIB | small COUNT\n");
    return 2;
}
