/*
 * fdtable.c - app-visible descriptors that stand for remote ones.
 *
 * Each remote descriptor is shown to the program under the number of a
 * local placeholder: an O_PATH descriptor of /dev/null, so the kernel never
 * hands that number out for something else, and a call that slips past the
 * client on it (mmap, ioctl...) fails with EBADF instead of doing the wrong
 * thing quietly.  App descriptors 0, 1, 2 are the real local ones (cnode's
 * /dev/null and pipes) standing for remote 0, 1, 2.
 *
 * slot[fd] holds remote+1 (0 = not remote) so the table needs no set-up.
 * Lookups are lock-free; changes take fdlock.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "client.h"

#define FD_SLOTS 65536

static int32_t slot[FD_SLOTS];
static uint8_t cloexec[FD_SLOTS];   /* the program's FD_CLOEXEC; placeholders always have it */
static pthread_mutex_t fdlock = PTHREAD_MUTEX_INITIALIZER;

enum lat_route lat_fd_route(int fd, int *remote)
{
    if (!lat_active())
        return LAT_LOCAL;
    if (fd == lat_conn_fd() || fd == lat_seq_fd())
        return LAT_HIDE;
    if (fd < 0 || fd >= FD_SLOTS)
        return LAT_LOCAL;
    int32_t v = __atomic_load_n(&slot[fd], __ATOMIC_ACQUIRE);
    if (v == 0)
        return LAT_LOCAL;
    *remote = v - 1;
    return LAT_SHIP;
}

unsigned lat_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur > FD_SLOTS)
        return FD_SLOTS;
    return (unsigned)rl.rlim_cur;
}

/* A placeholder numbered >= minfd (lowest free, like open and F_DUPFD). */
static int placeholder(int minfd)
{
    int fd = (int)syscall(SYS_openat, AT_FDCWD, "/dev/null", O_PATH | O_CLOEXEC);
    if (fd < 0)
        fd = (int)syscall(SYS_openat, AT_FDCWD, "/", O_PATH | O_CLOEXEC);
    if (fd < 0 || fd >= minfd)
        return fd;
    int moved = (int)syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, minfd);
    int e = errno;
    syscall(SYS_close, fd);
    errno = e;
    return moved;
}

int lat_fd_install(int remote, int cx, int minfd)
{
    int fd = placeholder(minfd);
    if (fd >= FD_SLOTS) {
        syscall(SYS_close, fd);
        fd = -1;
        errno = EMFILE;
    }
    if (fd < 0) {
        int e = errno;
        lat_ship_close(remote);
        return lat_fail(e);
    }
    pthread_mutex_lock(&fdlock);
    cloexec[fd] = cx != 0;
    __atomic_store_n(&slot[fd], remote + 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&fdlock);
    return fd;
}

int lat_fd_install_at(int remote, int cx, int fd)
{
    if (fd < 0 || fd >= FD_SLOTS || fd == lat_conn_fd() || fd == lat_seq_fd()) {
        lat_ship_close(remote);
        return lat_fail(EBADF);
    }
    int ph = placeholder(0);
    if (ph < 0) {
        int e = errno;
        lat_ship_close(remote);
        return lat_fail(e);
    }
    pthread_mutex_lock(&fdlock);
    /* dup3 closes whatever was local at fd atomically */
    long r = syscall(SYS_dup3, ph, fd, O_CLOEXEC);
    int e = errno;
    syscall(SYS_close, ph);
    int32_t old = 0;
    if (r >= 0) {
        old = slot[fd];
        cloexec[fd] = cx != 0;
        __atomic_store_n(&slot[fd], remote + 1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&fdlock);
    if (r < 0) {
        lat_ship_close(remote);
        return lat_fail(e);
    }
    lat_epoll_closed((unsigned)fd, (unsigned)fd);  /* what was at fd is gone */
    if (old)
        lat_ship_close(old - 1);
    return fd;
}

int lat_fd_forget(int fd, int close_local)
{
    if (fd < 0 || fd >= FD_SLOTS)
        return -1;
    pthread_mutex_lock(&fdlock);
    int32_t v = slot[fd];
    __atomic_store_n(&slot[fd], 0, __ATOMIC_RELEASE);
    cloexec[fd] = 0;
    if (v && close_local)
        syscall(SYS_close, fd);
    pthread_mutex_unlock(&fdlock);
    if (v)
        lat_epoll_closed((unsigned)fd, (unsigned)fd);
    return v - 1;
}

int lat_fd_cloexec(int fd)
{
    return fd >= 0 && fd < FD_SLOTS && cloexec[fd];
}

void lat_fd_set_cloexec(int fd, int on)
{
    if (fd >= 0 && fd < FD_SLOTS)
        cloexec[fd] = on != 0;
}

void lat_fd_init_std(void)
{
    for (int fd = 0; fd < 3; fd++)
        slot[fd] = fd + 1;
}
