/*
 * unsupported: makes system calls a compute node kernel does not offer and
 * prints what each returned:
 *   mount: -1 ENOSYS (Function not implemented)
 *   umount2: ...   ptrace: ...   swapon: ...   chroot: ...   pivot_root: ...
 *   unsupported: still running
 * Every call is harmless on plain Linux too, even as root: the paths do not
 * exist (so Linux says ENOENT), PTRACE_TRACEME only names the parent as
 * tracer.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/swap.h>
#include <sys/syscall.h>
#include <unistd.h>

static void show(const char *what, long r)
{
    int e = errno;
    if (r < 0)
        printf("%s: -1 %s (%s)\n", what, strerrorname_np(e), strerror(e));
    else
        printf("%s: %ld\n", what, r);
    fflush(stdout);
}

int main(void)
{
    errno = 0;
    show("mount", mount("none", "/nonexistent-lattice-mnt", "tmpfs", 0, NULL));
    errno = 0;
    show("umount2", umount2("/nonexistent-lattice-mnt", 0));
    errno = 0;
    show("ptrace", ptrace(PTRACE_TRACEME, 0, NULL, NULL));
    errno = 0;
    show("swapon", swapon("/nonexistent-lattice-swap", 0));
    errno = 0;
    show("chroot", chroot("/nonexistent-lattice-root"));
    errno = 0;
    show("pivot_root", syscall(SYS_pivot_root, "/nonexistent-lattice-a", "/nonexistent-lattice-b"));
    printf("unsupported: still running\n");
    return 0;
}
