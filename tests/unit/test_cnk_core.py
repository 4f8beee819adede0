"""cnk's core: loading, big memory, the trap, threads and signals.

Small C programs run under build/bin/cnk directly, started the way cnode
starts it: descriptor 3 is a PROC connection (served here by the fake ciod
of test_client, under a scratch working directory), 4 the executable, 6 the
report page.  Output written by the program is shipped, so it arrives in the
fake's buffers; cnk's own messages go to its real stderr.
"""
from __future__ import annotations

import fcntl
import os
import re
import shutil
import socket
import struct
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from test_client import FakeCiod

ROOT = Path(__file__).resolve().parents[2]
CNK = ROOT / "build" / "bin" / "cnk"
MIB = 1 << 20
GIB = 1 << 30
LOCAL, SHIPPED, UNSUPPORTED = 0, 1, 2


@dataclass
class Report:
    magic: int
    loaded: int
    launch_err: int
    bigmem_bytes: int
    page_size: int
    count: tuple[int, int, int]
    pages_why: str
    message: str

    @classmethod
    def parse(cls, page: bytes) -> "Report":
        magic, loaded, err, _, big, ps = struct.unpack_from("<IIiIQQ", page)
        count = struct.unpack_from("<3Q", page, 32)
        text = lambda a, b: page[a:b].split(b"\0")[0].decode()  # noqa: E731
        return cls(magic, loaded, err, big, ps, count, text(56, 216), text(216, 728))


@dataclass
class Run:
    rc: int
    out: str            # the program's stdout, shipped
    err: str            # the program's stderr, shipped
    cnk_err: str        # cnk's own stderr (messages, --trace)
    report: Report
    fake: FakeCiod


def run(prog: Path, *args: str, memory: str = "256M", cores: int = 2, trace: bool = False,
        env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 120) -> Run:
    a, b = socket.socketpair()
    fake = FakeCiod(a, str(cwd or prog.parent))
    fake.start()
    report = os.memfd_create("report")
    os.ftruncate(report, 4096)
    image = os.open(prog, os.O_RDONLY)
    fds = (b.fileno(), image, report)

    def child_fds() -> None:
        high = [fcntl.fcntl(f, fcntl.F_DUPFD, 100) for f in fds]
        for f, to in zip(high, (3, 4, 6)):
            os.dup2(f, to)

    argv = [str(CNK), "--memory", memory, "--cores", str(cores), *(["--trace"] if trace else []),
            "--", str(prog), *args]
    try:
        p = subprocess.run(argv, preexec_fn=child_fds, close_fds=False, stdin=subprocess.DEVNULL,
                           capture_output=True, timeout=timeout,
                           env={"PATH": "/usr/bin:/bin", "LATTICE_RANK": "5", **(env or {})})
    finally:
        b.close()
        os.close(image)
    fake.join(600)
    page = os.pread(report, 4096, 0)
    os.close(report)
    assert not fake.protocol_errors
    return Run(p.returncode, fake.out[1].decode(errors="replace"), fake.out[2].decode(errors="replace"),
               p.stderr.decode(errors="replace"), Report.parse(page), fake)


# ---------------------------------------------------------------------------
# The programs

HELLO = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int main(int argc, char **argv)
{
    char *p = malloc(100);
    strcpy(p, "heap");
    printf("hello %s argc=%d argv1=%s env=%s\n", p, argc, argc > 1 ? argv[1] : "-", getenv("GREETING"));
    return 3;
}
"""

AUXV = r"""
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>
int main(int argc, char **argv)
{
    unsigned char *r = (unsigned char *)getauxval(AT_RANDOM);
    printf("pagesz=%lu platform=%s execfn_is_argv0=%d secure=%lu uid_ok=%d gid_ok=%d\n",
           getauxval(AT_PAGESZ), (char *)getauxval(AT_PLATFORM),
           !strcmp((char *)getauxval(AT_EXECFN), argv[0]), getauxval(AT_SECURE),
           getauxval(AT_UID) == getuid() && getauxval(AT_EUID) == geteuid(),
           getauxval(AT_GID) == getgid() && getauxval(AT_EGID) == getegid());
    printf("vdso=%d hwcap=%d clktck=%lu phent=%lu entry_ok=%d minsig=%d\n",
           getauxval(AT_SYSINFO_EHDR) != 0, getauxval(AT_HWCAP) != 0, getauxval(AT_CLKTCK),
           getauxval(AT_PHENT), getauxval(AT_ENTRY) != 0, getauxval(AT_MINSIGSTKSZ) != 0);
    printf("random=");
    for (int i = 0; i < 16; i++)
        printf("%02x", r[i]);
    printf("\nargs=%d", argc);
    for (int i = 1; i < argc; i++)
        printf(" [%s]", argv[i]);
    printf("\n");
    return 0;
}
"""

# No libc: check the stack exactly as the kernel's contract says, at entry.
RAWSTART = r"""
__asm__(".globl _start\n_start:\n mov %rsp, %rdi\n call check\n hlt\n");
static long sys(long n, long a) { long r; __asm__ volatile("syscall" : "=a"(r) : "a"(n), "D"(a) : "rcx", "r11", "memory"); return r; }
void check(long *sp)
{
    long argc = sp[0];
    char **argv = (char **)(sp + 1), **envp = argv + argc + 1, **e = envp;
    while (*e) e++;
    unsigned long *aux = (unsigned long *)(e + 1);
    int ok = ((unsigned long)sp % 16 == 0) && argc == 3 && argv[3] == 0 && argv[1][0] == 'x';
    int n = 0;
    for (; aux[0]; aux += 2)
        n++;
    sys(231, ok && n >= 18 ? 42 : 1);
}
"""

PASS = r"""
#include <linux/futex.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(void)
{
    int word = 0, same = 1;
    long pid = syscall(SYS_getpid), woken = 0;
    for (int i = 0; i < 1000; i++) {
        same &= syscall(SYS_getpid) == pid;
        woken += syscall(SYS_futex, &word, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    }
    printf("getpid same %d futex woke %ld\n", same, woken);
    return 0;
}
"""

VDSO = r"""
#include <stdio.h>
#include <sys/time.h>
#include <time.h>
int main(void)
{
    struct timespec ts;
    struct timeval tv;
    for (int i = 0; i < 1000; i++) {
        clock_gettime(CLOCK_MONOTONIC, &ts);
        gettimeofday(&tv, NULL);
    }
    printf("time ok %d\n", ts.tv_sec > 0 && tv.tv_sec > 0);
    return 0;
}
"""

BIG = r"""
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv)
{
    size_t n = strtoull(argv[1], NULL, 0) << 20;
    char *p = malloc(n);
    if (!p) {
        printf("malloc NULL\n");
        return 1;
    }
    for (size_t i = 0; i < n; i += 4096)
        p[i] = 1;
    size_t s = 0;
    for (size_t i = 0; i < n; i += 4096)
        s += p[i];
    free(p);
    p = calloc(1, n);           /* the same memory again: must read as zero */
    size_t dirty = 0;
    for (size_t i = 0; p && i < n; i += 4096)
        dirty += p[i] != 0;
    printf("touched %zu pages, dirty after calloc %zu\n", s, dirty);
    return 0;
}
"""

THREADS = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
static volatile int go;
static __thread long mine;
static void *work(void *arg)
{
    mine = (long)arg;
    while (!go)             /* all alive at once */
        sched_yield();
    return (void *)(mine * 10 + (syscall(SYS_gettid) != getpid()));
}
int main(int argc, char **argv)
{
    int n = atoi(argv[1]), made = 0;
    pthread_t t[8];
    for (long i = 0; i < n; i++) {
        int r = pthread_create(&t[i], NULL, work, (void *)(i + 1));
        printf("create %ld: %s\n", i + 1, r ? strerror(r) : "ok");
        if (r)
            break;
        made++;
    }
    go = 1;
    for (int i = 0; i < made; i++) {
        void *ret;
        pthread_join(t[i], &ret);
        printf("joined %ld\n", (long)ret);
    }
    pthread_t u;        /* the exited ones no longer count */
    int r = pthread_create(&u, NULL, work, (void *)7);
    void *ret = NULL;
    if (!r)
        pthread_join(u, &ret);
    printf("again: %s %ld\n", r ? strerror(r) : "ok", (long)ret);
    cpu_set_t set;
    sched_getaffinity(0, sizeof set, &set);
    printf("cpus %d\n", CPU_COUNT(&set));
    return 0;
}
"""

PROCS = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
static void show(const char *what, long r)
{
    printf("%s %ld %s\n", what, r, r < 0 ? strerrorname_np(errno) : "-");
}
int main(void)
{
    pid_t p = fork();
    if (p == 0)
        _exit(9);
    show("fork", p);
    show("vfork", syscall(SYS_vfork));
    show("clone3", syscall(SYS_clone3, 0, 0));
    char *argv[] = { "/nonexistent/true", NULL };  /* the one exec cnk allows: fails, program goes on */
    show("execve", execve("/nonexistent/true", argv, argv + 1));
    show("kill_init", kill(1, 0));
    show("kill_self", kill(getpid(), 0));
    show("tgkill_other", syscall(SYS_tgkill, 1, 1, 0));
    show("ptrace", syscall(SYS_ptrace, 0, 0, 0, 0));
    return 0;
}
"""

SMAPS = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static char data[100] = "data";
static void where(const char *what, void *p)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    unsigned long lo, hi, a = (unsigned long)p;
    int in = 0;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 && line[strcspn(line, " ") - 1] != ':') {
            in = a >= lo && a < hi;
            if (in)
                printf("%s %lx-%lx", what, lo, hi);
        } else if (in && !strncmp(line, "KernelPageSize:", 15)) {
            printf(" %ld\n", strtol(line + 15, NULL, 10));
        }
    }
    fclose(f);
}
static void *thread(void *arg)
{
    int local;
    where("thread_stack", &local);
    where("thread_malloc", malloc(200000));
    return arg;
}
int main(void)
{
    int local;
    where("stack", &local);
    where("heap", malloc(100));
    where("big_malloc", malloc(64 << 20));
    where("data", data);
    where("text", (void *)main);
    pthread_t t;
    pthread_create(&t, NULL, thread, NULL);
    pthread_join(t, NULL);
    return 0;
}
"""

SIGNALS = r"""
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
static volatile int alarms, sys_code;
static void on_alarm(int s) { (void)s; alarms++; write(1, "in handler\n", 11); }
static void on_sys(int s, siginfo_t *si, void *uc) { (void)s; (void)uc; sys_code = si->si_code; }
int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);   /* in order with the handler's write */
    struct sigaction sa = { 0 };
    sa.sa_handler = on_alarm;
    sigfillset(&sa.sa_mask);        /* a handler blocking everything still makes calls */
    sigaction(SIGALRM, &sa, NULL);
    alarm(1);
    unsigned left = sleep(5);       /* interrupted while cnk runs the call */
    printf("sleep interrupted %d alarms %d\n", left > 0, alarms);

    sigset_t all, old, now;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old);
    sigprocmask(SIG_SETMASK, NULL, &now);
    printf("blocked int %d sys %d\n", sigismember(&now, SIGINT), sigismember(&now, SIGSYS));
    raise(SIGALRM);
    printf("while blocked alarms %d\n", alarms);
    sigprocmask(SIG_SETMASK, &old, NULL);
    printf("unblocked alarms %d\n", alarms);

    struct sigaction ss = { 0 }, prev;
    ss.sa_sigaction = on_sys;
    ss.sa_flags = SA_SIGINFO;
    sigaction(SIGSYS, &ss, NULL);
    sigaction(SIGSYS, NULL, &prev);
    raise(SIGSYS);
    printf("sigsys kept %d ran %d\n", prev.sa_sigaction == on_sys, sys_code == SI_TKILL);

    stack_t st = { .ss_sp = malloc(65536), .ss_size = 65536 }, cur;
    sigaltstack(&st, NULL);
    sigaltstack(NULL, &cur);
    printf("altstack %d\n", cur.ss_sp == st.ss_sp && cur.ss_flags == 0);
    fflush(stdout);
    if (argc > 1)
        abort();
    return 0;
}
"""

MMAP = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
static void *heap;
static int in_bigmem(void *p)   /* same mapping as the heap? */
{
    FILE *f = fopen("/proc/self/maps", "r");
    char l[512];
    unsigned long x, y, a = (unsigned long)heap, b = (unsigned long)p;
    int r = 0;
    while (fgets(l, sizeof l, f))
        if (sscanf(l, "%lx-%lx", &x, &y) == 2 && a >= x && a < y)
            r = b >= x && b < y;
    fclose(f);
    return r;
}
int main(void)
{
    heap = malloc(10);
    char name[64];
    snprintf(name, sizeof name, "/cnk_core_%d", getpid());
    int fd = shm_open(name, O_RDWR | O_CREAT, 0600);
    ftruncate(fd, 8192);
    char *a = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    char *b = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    strcpy(a, "shared");
    printf("shm shared=%d outside=%d\n", !strcmp(b, "shared") && a != b, !in_bigmem(a));
    shm_unlink(name);
    char *s = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    printf("anon_shared inside=%d zero=%d\n", in_bigmem(s), s[5000] == 0);
    char *r = malloc(8 << 20);
    memset(r, 7, 8 << 20);
    r = realloc(r, 64 << 20);
    printf("realloc kept=%d inside=%d\n", r[0] == 7 && r[(8 << 20) - 1] == 7, in_bigmem(r));
    memset(s, 9, 8192);
    char *z = mmap(s, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    printf("fixed same=%d zero=%d\n", z == s, z[10] == 0 && s[4096] == 9);
    printf("noreplace %s\n", mmap(s, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                                  -1, 0) == MAP_FAILED ? strerrorname_np(errno) : "mapped");
    madvise(s, 8192, MADV_DONTNEED);
    printf("dontneed zero=%d\n", s[100] == 0 && s[8000] == 0);
    int f = open("data.txt", O_RDONLY);     /* shipped: read through the I/O node */
    char *m = mmap(NULL, 10000, PROT_READ, MAP_PRIVATE, f, 4096);
    printf("file %.6s inside=%d tail_zero=%d\n", m, in_bigmem(m), m[9999] == 0);
    printf("mprotect %d\n", mprotect(m, 4096, PROT_NONE));
    printf("badoff %s\n", mmap(NULL, 100, PROT_READ, MAP_PRIVATE, f, 100) == MAP_FAILED
                          ? strerrorname_np(errno) : "mapped");
    printf("toobig %s\n", mmap(NULL, 1ul << 40, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) == MAP_FAILED
                          ? strerrorname_np(errno) : "mapped");
    printf("cnkfd %s\n", mmap(NULL, 100, PROT_READ, MAP_PRIVATE, 1000, 0) == MAP_FAILED
                          ? strerrorname_np(errno) : "mapped");
    return 0;
}
"""

# mmap's errors for descriptors cnk cannot map as asked: as Linux's.  Run
# natively and under cnk (where the relative names are shipped).
MAPERR = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
static void try(const char *what, const char *path, int oflags, int prot, int mflags)
{
    int fd = open(path, oflags);
    if (fd < 0) {
        printf("%s open %s\n", what, strerrorname_np(errno));
        return;
    }
    char *p = mmap(NULL, 8192, prot, mflags, fd, 0);
    if (p == MAP_FAILED)
        printf("%s %s\n", what, strerrorname_np(errno));
    else
        printf("%s mapped %.6s\n", what, (prot & PROT_READ) ? p + 4096 : "");
    close(fd);
}
int main(int argc, char **argv)
{
    const char *f = argc > 1 ? argv[1] : "data.txt";
    try("rdonly_shared_write", f, O_RDONLY, PROT_READ | PROT_WRITE, MAP_SHARED);
    try("rdonly_shared_validate_write", f, O_RDONLY, PROT_READ | PROT_WRITE, MAP_SHARED_VALIDATE);
    try("wronly_private_read", f, O_WRONLY, PROT_READ, MAP_PRIVATE);
    try("wronly_shared_read", f, O_WRONLY, PROT_READ, MAP_SHARED);
    try("wronly_shared_write", f, O_WRONLY, PROT_READ | PROT_WRITE, MAP_SHARED);
    try("path_private_read", f, O_PATH, PROT_READ, MAP_PRIVATE);
    try("dir_private_read", ".", O_RDONLY | O_DIRECTORY, PROT_READ, MAP_PRIVATE);
    try("dir_shared_read", ".", O_RDONLY | O_DIRECTORY, PROT_READ, MAP_SHARED);
    try("rdonly_private_write", f, O_RDONLY, PROT_READ | PROT_WRITE, MAP_PRIVATE);
    try("rdonly_shared_read", f, O_RDONLY, PROT_READ, MAP_SHARED);
    try("rdwr_shared_write", f, O_RDWR, PROT_READ | PROT_WRITE, MAP_SHARED);
    return 0;
}
"""

FDS = r"""
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
int main(void)
{
    int hidden = 0;
    for (int fd = 1000; fd < 1064; fd++)
        hidden += fcntl(fd, F_GETFD) == -1 && errno == EBADF;
    printf("image %d report %d hidden %d first_open %d\n", fcntl(4, F_GETFD) == -1,
           fcntl(6, F_GETFD) == -1, hidden, open("data.txt", O_RDONLY));
    return 0;
}
"""

STRESS = r"""
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
static void on_usr1(int s)      /* lands while its thread may be inside cnk */
{
    (void)s;
    void *p = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap(p, 8192);
}
static void *work(void *arg)
{
    long dirty = 0;
    for (int i = 0; i < 5000; i++) {
        size_t n = 4096 * (size_t)(1 + (i * 7919 + (long)arg) % 300);
        unsigned char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        for (size_t k = 0; k < n; k += 4096) {
            dirty += p[k] != 0;
            p[k] = 0xAA;
        }
        munmap(p, n);
        free(malloc(n));
    }
    return (void *)dirty;
}
int main(void)
{
    signal(SIGUSR1, on_usr1);
    pthread_t t[3];
    for (long i = 0; i < 3; i++)
        pthread_create(&t[i], NULL, work, (void *)i);
    for (int i = 0; i < 100; i++) {
        pthread_kill(t[i % 3], SIGUSR1);
        usleep(200);
    }
    long dirty = 0;
    for (int i = 0; i < 3; i++) {
        void *r;
        pthread_join(t[i], &r);
        dirty += (long)r;
    }
    printf("dirty %ld\n", dirty);
    return 0;
}
"""

FORTRAN = """
program hello
  implicit none
  integer :: i
  real(8), allocatable :: a(:)
  allocate(a(1000000))
  do i = 1, size(a)
    a(i) = i * 0.5d0
  end do
  write(*,'(A,F20.1)') 'fortran sum ', sum(a)
  open(10, file='fort.txt', status='replace')
  write(10,*) 'from fortran'
  close(10)
end program
"""

BIG_BSS = "static char big[1536ul << 20];\nint main(void) { big[0] = 1; return big[4096]; }\n"


def elf_header(cls: int, machine: int) -> bytes:
    """An ELF header with one empty program header slot, for format errors."""
    if cls == 64:
        return (b"\x7fELF\x02\x01\x01" + bytes(9) +
                struct.pack("<HHIQQQIHHHHHH", 2, machine, 1, 0x400000, 64, 0, 0, 64, 56, 1, 64, 0, 0) +
                bytes(4096))
    return (b"\x7fELF\x01\x01\x01" + bytes(9) +
            struct.pack("<HHIIIIIHHHHHH", 2, machine, 1, 0x8048000, 52, 0, 0, 52, 32, 1, 40, 0, 0) + bytes(4096))


@pytest.fixture(scope="module")
def progs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    subprocess.run(["make", "-C", str(ROOT), "build/bin/cnk"], check=True, capture_output=True)
    d = tmp_path_factory.mktemp("cnk_core")

    def cc(name: str, src: str, *flags: str) -> None:
        c = d / f"{name.split('.')[0]}.c"
        c.write_text(src)
        p = subprocess.run(["gcc", "-O2", "-D_GNU_SOURCE", "-o", str(d / name), str(c), *flags],
                           capture_output=True, text=True)
        assert p.returncode == 0, p.stderr

    cc("hello_static", HELLO, "-static")
    cc("hello_static_pie", HELLO, "-static-pie")
    cc("hello_dynamic", HELLO)
    cc("hello_nopie", HELLO, "-no-pie")
    cc("auxv", AUXV)
    cc("rawstart", RAWSTART, "-static", "-nostdlib", "-fno-stack-protector")
    cc("vdso", VDSO)
    cc("pass", PASS)
    cc("big", BIG)
    cc("threads", THREADS, "-pthread")
    cc("threads_static", THREADS, "-pthread", "-static")
    cc("procs", PROCS)
    cc("smaps", SMAPS, "-pthread")
    cc("smaps_static", SMAPS, "-pthread", "-static")
    cc("signals", SIGNALS)
    cc("mmap", MMAP)
    cc("maperr", MAPERR)
    cc("fds", FDS)
    cc("stress", STRESS, "-pthread")
    cc("big_bss", BIG_BSS, "-static")
    cc("bad_interp", HELLO, "-Wl,--dynamic-linker=/lib64/ld-nowhere.so.2")
    if shutil.which("gfortran"):
        (d / "f.f90").write_text(FORTRAN)
        subprocess.run(["gfortran", "-O2", "-o", str(d / "fortran"), str(d / "f.f90")], check=True)
    whole = (d / "hello_static").read_bytes()
    (d / "trunc_header").write_bytes(whole[:40])
    (d / "trunc_segment").write_bytes(whole[:20000])
    (d / "aarch64").write_bytes(elf_header(64, 183))
    (d / "i386").write_bytes(elf_header(32, 3))
    (d / "script.sh").write_text("#!/bin/sh\necho hi\n")
    (d / "data.txt").write_bytes(b"x" * 4096 + b"SECOND" + b"y" * 100)
    return d


# ---------------------------------------------------------------------------
# The build


def test_static_pie_without_libc(progs: Path) -> None:
    assert "static-pie linked" in subprocess.run(["file", str(CNK)], capture_output=True, text=True).stdout
    dyn = subprocess.run(["readelf", "-d", str(CNK)], capture_output=True, text=True).stdout
    assert "PIE" in dyn and "NEEDED" not in dyn
    assert "INTERP" not in subprocess.run(["readelf", "-l", str(CNK)], capture_output=True, text=True).stdout
    relocs = subprocess.run(["readelf", "-r", str(CNK)], capture_output=True, text=True).stdout
    assert set(re.findall(r"R_X86_64_\w+", relocs)) <= {"R_X86_64_RELATIVE"}


# ---------------------------------------------------------------------------
# Loading


@pytest.mark.parametrize("prog", ["hello_static", "hello_static_pie", "hello_dynamic", "hello_nopie"])
def test_hello(progs: Path, prog: str) -> None:
    r = run(progs / prog, "first arg", env={"GREETING": "hi there"})
    assert r.rc == 3, r.cnk_err
    assert r.out == "hello heap argc=2 argv1=first arg env=hi there\n"
    rep = r.report
    assert (rep.magic, rep.loaded, rep.launch_err, rep.message) == (0x4B4E43, 1, 0, "")
    assert rep.bigmem_bytes == 256 * MIB and rep.page_size in (4096, 2 * MIB, GIB) and rep.pages_why
    assert rep.count[LOCAL] > 3 and rep.count[SHIPPED] >= 2 and rep.count[UNSUPPORTED] == 0


def test_dynamic_libraries_come_through_the_io_node(progs: Path) -> None:
    r = run(progs / "hello_dynamic")
    assert r.rc == 3
    assert r.fake.calls["openat"] >= 1 and r.fake.calls["pread"] >= 1   # libc.so.6, read into big memory


def test_initial_stack_and_auxv(progs: Path) -> None:
    r1 = run(progs / "auxv", "a b", "", "c")
    r2 = run(progs / "auxv")
    assert r1.rc == 0 and r2.rc == 0, r1.cnk_err
    lines = r1.out.splitlines()
    assert lines[0] == "pagesz=4096 platform=x86_64 execfn_is_argv0=1 secure=0 uid_ok=1 gid_ok=1"
    assert lines[1] == "vdso=1 hwcap=1 clktck=100 phent=56 entry_ok=1 minsig=1"
    assert lines[3] == "args=4 [a b] [] [c]"
    random1, random2 = lines[2], r2.out.splitlines()[2]
    assert random1.startswith("random=") and random1 != random2 and random1 != "random=" + "00" * 16


def test_stack_alignment_at_entry(progs: Path) -> None:
    r = run(progs / "rawstart", "x", "y")
    assert r.rc == 42, r.cnk_err


def test_vdso_calls_never_trap(progs: Path) -> None:
    r = run(progs / "vdso", trace=True)
    assert r.rc == 0 and r.out == "time ok 1\n"
    assert "clock_gettime" not in r.cnk_err and "gettimeofday" not in r.cnk_err
    assert r.report.count[LOCAL] < 100


def test_plain_local_calls_skip_the_trap_unless_traced(progs: Path) -> None:
    """getpid and futex run as they are: the filter lets them through (not
    counted), while --trace traps, prints and counts every one."""
    fast, traced = run(progs / "pass"), run(progs / "pass", trace=True)
    for r in (fast, traced):
        assert r.rc == 0 and r.out == "getpid same 1 futex woke 0\n", r.cnk_err
    assert fast.report.count[LOCAL] < 500, fast.report.count
    assert traced.report.count[LOCAL] >= 2000, traced.report.count
    assert traced.cnk_err.count("] getpid() = ") >= 1001 and traced.cnk_err.count("] futex(") >= 1000


def test_fortran(progs: Path) -> None:
    if not (progs / "fortran").exists():
        pytest.skip("no gfortran")
    r = run(progs / "fortran")
    assert r.rc == 0, r.cnk_err
    assert r.out == "fortran sum       250000250000.0\n"
    assert (progs / "fort.txt").read_text().strip() == "from fortran"


def test_cnk_descriptors_are_out_of_the_way(progs: Path) -> None:
    r = run(progs / "fds")
    assert r.out == "image 1 report 1 hidden 64 first_open 3\n"


# ---------------------------------------------------------------------------
# Programs that cannot run: a clean message, exit 127, nothing run


@pytest.mark.parametrize("prog, err, words", [
    ("trunc_header", 8, ["exec format error", "truncated ELF"]),
    ("trunc_segment", 8, ["exec format error", "truncated ELF", "segment"]),
    ("aarch64", 8, ["exec format error", "aarch64", "not x86-64"]),
    ("i386", 8, ["exec format error", "32-bit", "i386"]),
    ("script.sh", 8, ["not an ELF executable", "scripts"]),
    ("bad_interp", 2, ["interpreter", "/lib64/ld-nowhere.so.2"]),
    ("big_bss", 12, ["needs more memory", "--memory is 1024 MiB"]),
])
def test_load_errors(progs: Path, prog: str, err: int, words: list[str]) -> None:
    r = run(progs / prog, memory="1G")
    assert r.rc == 127
    rep = r.report
    assert rep.magic == 0x4B4E43 and rep.loaded == 0 and rep.launch_err == err
    for w in words:
        assert w in rep.message
    assert f"cnk: {rep.message}\n" in r.cnk_err
    assert r.out == "" and sum(rep.count) == 0


def test_bad_usage(progs: Path) -> None:
    p = subprocess.run([str(CNK), "--memory", "lots", "--", "x"], capture_output=True, text=True)
    assert p.returncode == 127 and "usage: cnk" in p.stderr


# ---------------------------------------------------------------------------
# Big memory


def test_memory_beyond_big_memory_is_enomem(progs: Path) -> None:
    r = run(progs / "big", "1536", memory="2G")
    assert r.rc == 0, r.cnk_err
    assert r.out == f"touched {1536 * 256} pages, dirty after calloc 0\n"
    r = run(progs / "big", "1536", memory="1G")
    assert r.rc == 1 and r.out == "malloc NULL\n"     # the program's NULL, not a cnk crash
    r = run(progs / "big_bss", memory="2G")
    assert r.rc == 0


def smaps_regions(out: str) -> dict[str, tuple[str, int]]:
    regions = {}
    for line in out.splitlines():
        what, span, kps = line.split()
        regions[what] = (span, int(kps))
    return regions


@pytest.mark.parametrize("prog", ["smaps", "smaps_static"])
def test_everything_lives_in_big_memory(progs: Path, prog: str) -> None:
    r = run(progs / prog)
    assert r.rc == 0, r.cnk_err
    regions = smaps_regions(r.out)
    assert set(regions) == {"stack", "heap", "big_malloc", "data", "text", "thread_stack", "thread_malloc"}
    assert len(set(regions.values())) == 1, regions   # one mapping, one page size
    span, kps = regions["stack"]
    lo, hi = (int(x, 16) for x in span.split("-"))
    assert hi - lo >= 256 * MIB
    assert kps * 1024 == r.report.page_size
    if kps == 4:
        assert "transparent huge pages" in r.report.pages_why and "warning" in r.cnk_err


def hugetlb_free(size_kb: int) -> int:
    return int((Path(f"/sys/kernel/mm/hugepages/hugepages-{size_kb}kB") / "free_hugepages").read_text())


@pytest.fixture
def huge_2m() -> Iterator[None]:
    """At least 256 MiB of free 2 MiB pages, reserved for the test if need be."""
    knob = Path("/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages")
    if hugetlb_free(2048) >= 160:
        yield
        return
    if os.geteuid() != 0:
        pytest.skip("no free 2 MiB huge pages and not root")
    # the pool's own pages: nr_hugepages counts other jobs' surplus pages too,
    # and writing it back would make them the pool's
    old = int(knob.read_text()) - int(knob.with_name("surplus_hugepages").read_text())
    knob.write_text(str(old + 160))
    try:
        if hugetlb_free(2048) < 160:
            pytest.skip("the kernel could not reserve 2 MiB pages")
        yield
    finally:
        knob.write_text(str(old))


def test_hugetlb_pages_back_big_memory(progs: Path, huge_2m: None) -> None:
    r = run(progs / "smaps", memory="256M")
    regions = smaps_regions(r.out)
    kps = {v[1] for v in regions.values()}
    assert kps == {2048}, regions       # 256 MiB fills no 1 GiB page: never rounded up to one
    assert r.report.page_size == 2 << 20
    assert r.report.pages_why == "256 MiB is not a whole number of GiB; 2 MiB hugetlb pages"
    # a fixed-address program below 1 GiB cannot sit in a 1 GiB page
    r = run(progs / "smaps_static", memory="256M")
    assert {v[1] for v in smaps_regions(r.out).values()} == {2048}
    assert smaps_regions(r.out)["text"][0].startswith("400000-")


def test_mmap_semantics(progs: Path) -> None:
    r = run(progs / "mmap")
    assert r.rc == 0, r.cnk_err
    assert r.out.splitlines() == [
        "shm shared=1 outside=1",
        "anon_shared inside=1 zero=1",
        "realloc kept=1 inside=1",
        "fixed same=1 zero=1",
        "noreplace EEXIST",
        "dontneed zero=1",
        "file SECOND inside=1 tail_zero=1",
        "mprotect 0",
        "badoff EINVAL",
        "toobig ENOMEM",
        "cnkfd EBADF",
    ]


def test_mmap_errors_are_linux_errors(progs: Path) -> None:
    """Where cnk cannot map an I/O-node file as asked, or could not read it,
    mmap fails as Linux would for that descriptor (EACCES for one not open
    for reading, or not for writing when the view is shared and writable;
    EBADF for O_PATH; ENODEV for a directory); only a shared writable view
    of a file open read-write, which Linux maps, is ENODEV under cnk."""
    data = progs / "data.txt"
    native = subprocess.run([str(progs / "maperr"), str(data)], cwd=progs, capture_output=True, text=True,
                            check=True).stdout.splitlines()
    r = run(progs / "maperr")
    assert r.rc == 0, r.cnk_err
    got = r.out.splitlines()
    assert len(got) == len(native) == 11, (got, native)
    assert got[:-1] == native[:-1], (got, native)
    assert native[0] == "rdonly_shared_write EACCES" and native[2] == "wronly_private_read EACCES", native
    assert "dir_private_read ENODEV" in native and "rdonly_shared_read mapped SECOND" in native, native
    assert native[-1] == "rdwr_shared_write mapped SECOND" and got[-1] == "rdwr_shared_write ENODEV", got


# ---------------------------------------------------------------------------
# Threads, processes, signals


@pytest.mark.parametrize("prog", ["threads", "threads_static"])
def test_threads_up_to_cores(progs: Path, prog: str) -> None:
    r = run(progs / prog, "2", cores=3)
    assert r.rc == 0, r.cnk_err
    assert r.out.splitlines() == ["create 1: ok", "create 2: ok", "joined 11", "joined 21", "again: ok 71",
                                  f"cpus {min(3, os.cpu_count() or 1)}"]
    assert r.report.count[UNSUPPORTED] == 3     # clone3, before glibc falls back to clone


def test_threads_beyond_cores_get_eagain(progs: Path) -> None:
    r = run(progs / "threads", "2", cores=2)
    assert r.rc == 0, r.cnk_err
    assert r.out.splitlines()[:4] == ["create 1: ok", "create 2: Resource temporarily unavailable",
                                      "joined 11", "again: ok 71"]


def test_no_processes(progs: Path) -> None:
    r = run(progs / "procs")
    assert r.rc == 0, r.cnk_err
    assert r.out.splitlines() == ["fork -1 ENOSYS", "vfork -1 ENOSYS", "clone3 -1 ENOSYS", "execve -1 ENOENT",
                                  "kill_init -1 ESRCH", "kill_self 0 -", "tgkill_other -1 ESRCH",
                                  "ptrace -1 ENOSYS"]
    assert r.report.count[UNSUPPORTED] == 4


def test_signals(progs: Path) -> None:
    r = run(progs / "signals")
    assert r.rc == 0, r.cnk_err
    assert r.out.splitlines() == ["in handler", "sleep interrupted 1 alarms 1", "blocked int 1 sys 0",
                                  "while blocked alarms 1", "in handler", "unblocked alarms 2",
                                  "sigsys kept 1 ran 1", "altstack 1"]


def test_killed_by_a_signal_still_reports(progs: Path) -> None:
    r = run(progs / "signals", "abort")
    assert r.rc == -6
    assert r.report.loaded == 1 and r.report.count[LOCAL] > 10


def test_threads_signals_and_memory_under_load(progs: Path) -> None:
    r = run(progs / "stress", cores=4)
    assert r.rc == 0, r.cnk_err
    assert r.out == "dirty 0\n"


# ---------------------------------------------------------------------------
# --trace


def test_trace(progs: Path) -> None:
    r = run(progs / "procs", trace=True)
    lines = r.cnk_err.splitlines()
    calls = [ln for ln in lines if ln.startswith("[cnk 5] ")]
    assert calls and all(re.fullmatch(r"\[cnk 5\] \w+\(.*\) = \S+ (local|shipped|unsupported)", ln)
                         for ln in calls), calls
    assert any(re.fullmatch(r'\[cnk 5\] openat\(-100, "/lib/x86_64-linux-gnu/libc\.so\.6", 0x80000, 0x0\) '
                            r"= 3 shipped", ln) for ln in calls)
    assert any(re.match(r"\[cnk 5\] clone\(0x1200011, .*\) = -ENOSYS unsupported", ln) for ln in calls)
    assert any(re.match(r"\[cnk 5\] kill\(1, 0\) = -ESRCH local", ln) for ln in calls)
    assert calls[-1] == "[cnk 5] exit_group(0) = ? local"
    assert len(calls) == sum(r.report.count)
