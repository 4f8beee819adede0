/*
 * systab.c - the one table: for each x86-64 system call number cnk knows,
 * its name, its class (README "System call classes"), its handler and how
 * --trace shows its arguments (d int, l long, x hex, s string).  A number
 * not here is unsupported: ENOSYS.
 *
 * LOCAL with no handler runs the call as it is; SHIP entries decide by path
 * or descriptor and correct the class; UNSUPPORTED entries only give the
 * name to --trace.
 */
#include <asm/unistd.h>

#include "cnk.h"

#include <lattice/zoid_nr.h>
#define __NR_lattice_zoid LAT_NR_ZOID      /* Lattice-private: a plug-in call (plugin.c) */

#define ENTRY(n, c, f, a) [__NR_##n] = { #n, c, f, a },
#define L(n, a)     ENTRY(n, CNK_LOCAL, NULL, a)          /* local, as it is */
#define H(n, f, a)  ENTRY(n, CNK_LOCAL, f, a)             /* local, by cnk */
#define S(n, a)     ENTRY(n, CNK_SHIPPED, sys_##n, a)     /* shipped unless node-local */
#define U(n)        ENTRY(n, CNK_UNSUPPORTED, NULL, NULL)
#define K(n, a)     ENTRY(n, CNK_LOCAL, sock_##n, a)      /* local, or shipped by sock.c */

const struct cnk_sysent cnk_systab[CNK_NSYS] = {
    /* files: shipped to the I/O node, or local by the path rule (ship.c, fd.c, path.c) */
    S(read, "dxl") S(write, "dxl") S(open, "sxx") S(close, "d") S(stat, "sx") S(fstat, "dx")
    S(lstat, "sx") S(lseek, "dld") S(pread64, "dxll") S(pwrite64, "dxll") S(readv, "dxd")
    S(writev, "dxd") S(access, "sx") S(dup, "d") S(dup2, "dd") S(fcntl, "ddx") S(flock, "dx")
    S(fsync, "d") S(fdatasync, "d") S(truncate, "sl") S(ftruncate, "dl") S(getdents64, "dxl")
    S(getcwd, "xl") S(chdir, "s") S(fchdir, "d") S(rename, "ss") S(mkdir, "sx") S(rmdir, "s")
    S(creat, "sx") S(link, "ss") S(unlink, "s") S(symlink, "ss") S(readlink, "sxl")
    S(chmod, "sx") S(fchmod, "dx") S(chown, "sdd") S(fchown, "ddd") S(lchown, "sdd")
    S(umask, "x") S(statfs, "sx") S(fstatfs, "dx") S(openat, "dsxx") S(mkdirat, "dsx")
    S(fchownat, "dsddx") S(newfstatat, "dsxx") S(unlinkat, "dsx") S(renameat, "dsds")
    S(linkat, "dsdsx") S(symlinkat, "sds") S(readlinkat, "dsxl") S(fchmodat, "dsx")
    S(faccessat, "dsx") S(utimensat, "dsxx") S(dup3, "ddx") S(preadv, "dxdl") S(pwritev, "dxdl")
    S(renameat2, "dsdsx") S(statx, "dsxxx") S(faccessat2, "dsxx") S(close_range, "ddx")
    S(preadv2, "dxdlx") S(pwritev2, "dxdlx") S(ioctl, "dxx") S(fadvise64, "dlld")
    S(sendfile, "ddxl") S(copy_file_range, "dxdxlx")

    /* plug-in calls (plugin.c, docs/plugins.md): always shipped */
    S(lattice_zoid, "ddxdxd")

    /* memory: big memory (bigmem.c) */
    H(brk, sys_brk, "x") H(mmap, sys_mmap, "xlxxdx") H(munmap, sys_munmap, "xl")
    H(mremap, sys_mremap, "xllxx") H(mprotect, sys_mprotect, "xlx") H(madvise, sys_madvise, "xld")
    H(msync, sys_mem_range, "xlx") H(mlock, sys_mem_range, "xl") H(munlock, sys_mem_range, "xl")
    H(mlock2, sys_mem_range, "xlx") H(mlockall, sys_mlockall, "x") H(munlockall, sys_mlockall, "")
    L(get_mempolicy, "xxlxx")

    /* the node's own inter-process memory: SysV segments (bigmem.c) and
     * cross-memory attach between the ranks of a node (MPI's shared memory) */
    L(shmget, "xlx") H(shmat, sys_shmat, "dxx") H(shmdt, sys_shmdt, "x") L(shmctl, "ddx")
    L(process_vm_readv, "dxlxlx") L(process_vm_writev, "dxlxlx")

    /* threads (thread.c) */
    H(clone, sys_clone, "xxxxx") H(exit, sys_exit, "d") L(exit_group, "d") L(futex, "xdxxxx")
    L(futex_waitv, "xdxxd") L(set_tid_address, "x") L(set_robust_list, "xl")
    L(get_robust_list, "dxx") H(rseq, sys_rseq, "xddx") H(arch_prctl, sys_arch_prctl, "xx") H(prctl, sys_prctl, "dxxxx")
    L(membarrier, "ddd") L(sched_yield, "") H(sched_getaffinity, sys_sched_getaffinity, "ddx")
    H(sched_setaffinity, sys_sched_setaffinity, "ddx")
    L(getcpu, "xxx") L(sched_getparam, "dx") L(sched_getscheduler, "d")
    L(sched_get_priority_max, "d") L(sched_get_priority_min, "d")

    /* the MPMD launcher's one execve (exec.c); a second one is unsupported */
    H(execve, sys_execve, "sxx") H(execveat, sys_execveat, "dsxxx")

    /* signals (signal.c) */
    H(rt_sigaction, sys_rt_sigaction, "dxxd") H(rt_sigprocmask, sys_rt_sigprocmask, "dxxd")
    H(sigaltstack, sys_sigaltstack, "xx") L(rt_sigreturn, "") H(kill, sys_kill, "dd")
    H(tgkill, sys_tgkill, "ddd") H(tkill, sys_tkill, "dd") L(rt_sigpending, "xd")
    H(rt_sigsuspend, sys_rt_sigsuspend, "xd") L(rt_sigtimedwait, "xxxd") L(pause, "")
    L(restart_syscall, "")

    /* time: the program's own timers; cnk has none */
    L(clock_gettime, "dx") L(clock_getres, "dx") L(clock_nanosleep, "ddxx") L(gettimeofday, "xx")
    L(time, "x") L(nanosleep, "xx") L(alarm, "d") L(setitimer, "dxx") L(getitimer, "dx")
    L(timer_create, "dxx") L(timer_settime, "ddxx") L(timer_gettime, "dx")
    L(timer_getoverrun, "d") L(timer_delete, "d") L(timerfd_create, "dx")
    L(timerfd_settime, "ddxx") L(timerfd_gettime, "dx")

    /* identity and limits of this process */
    L(getpid, "") L(gettid, "") L(getppid, "") L(getuid, "") L(geteuid, "") L(getgid, "")
    L(getegid, "") L(getgroups, "dx") L(getresuid, "xxx") L(getresgid, "xxx") L(getpgrp, "")
    L(getpgid, "d") L(getsid, "d") L(uname, "x") L(getrlimit, "dx") L(setrlimit, "dx")
    L(prlimit64, "ddxx") L(getrandom, "xlx") L(sysinfo, "x") L(getrusage, "dx") L(times, "x")

    /* descriptors that are the node's own: pipes, sockets, events */
    K(poll, "xdd") K(ppoll, "xdxxd") K(select, "dxxxx") K(pselect6, "dxxxxx")
    L(epoll_create, "d") L(epoll_create1, "x") K(epoll_ctl, "dddx") K(epoll_wait, "dxdd")
    K(epoll_pwait, "dxddxd") ENTRY(epoll_pwait2, CNK_LOCAL, sock_epoll_pwait, "dxdxxd")
    L(eventfd, "d") L(eventfd2, "dx") L(pipe, "x") L(pipe2, "xx") L(memfd_create, "sx")
    /* sockets: local, or shipped by the destination rule (sock.c) */
    K(socket, "ddd") L(socketpair, "dddx") K(bind, "dxd") K(listen, "dd") K(accept, "dxx")
    ENTRY(accept4, CNK_LOCAL, sock_accept, "dxxx") K(connect, "dxd") K(getsockname, "dxx")
    K(getpeername, "dxx") K(sendto, "dxlxxd") K(recvfrom, "dxlxxx") K(sendmsg, "dxx")
    K(recvmsg, "dxx") K(sendmmsg, "dxdx") K(recvmmsg, "dxdxx") K(setsockopt, "dddxd")
    K(getsockopt, "dddxx") K(shutdown, "dd")

    /* unsupported, named for --trace: processes, machine administration, ... */
    U(fork) U(vfork) U(clone3) U(wait4) U(waitid) U(ptrace) U(mount)
    U(umount2) U(pivot_root) U(chroot) U(reboot) U(kexec_load) U(kexec_file_load) U(init_module)
    U(finit_module) U(delete_module) U(swapon) U(swapoff) U(setuid) U(setgid) U(setreuid)
    U(setregid) U(setresuid) U(setresgid) U(setgroups) U(setsid) U(setpgid) U(setns) U(unshare)
    U(sched_setscheduler) U(sched_setparam) U(mbind) U(set_mempolicy) U(migrate_pages)
    U(move_pages) U(io_uring_setup) U(bpf) U(perf_event_open) U(userfaultfd) U(seccomp)
    U(sethostname) U(setdomainname) U(settimeofday) U(clock_settime) U(adjtimex) U(acct)
    U(quotactl) U(msgget) U(semget) U(personality) U(syslog) U(iopl) U(ioperm) U(mknod)
    U(mknodat) U(getdents) U(signalfd) U(signalfd4) U(inotify_init1) U(fanotify_init)
    U(remap_file_pages) U(pkey_mprotect) U(name_to_handle_at) U(open_by_handle_at)
};
