/*
 * main.c - cnk's start-up: the report page, its own descriptors out of the
 * program's way, the arguments, then load, trap and enter the program.
 */
#include <asm/unistd.h>
#include <linux/errno.h>
#include <linux/fcntl.h>
#include <linux/mman.h>

#include "cnk.h"

#define CONN_FD     3       /* LATTICE_IO_FD */
#define IMAGE_FD    4
#define DEFAULT_MEMORY (512ull << 20)   /* the service node's default */
#define USAGE "usage: cnk [--memory BYTES] [--cores N] [--first-core I] [--trace] -- PROGRAM [ARGS...]"

struct cnk_config cnk = { .cores = 2, .conn_fd = -1, .image_fd = -1, .err_fd = 2 };

static struct cnk_report private_report;    /* run by hand, without cnode's page */

void cnk_fail(int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    kvfmt(cnk.report->message, sizeof cnk.report->message, fmt, ap);
    va_end(ap);
    cnk.report->launch_err = err;
    kprint(cnk.err_fd, "cnk: %s\n", cnk.report->message);
    kexit(127);
}

/* Move a descriptor of cnk's out of the program's way (shipc_own_floor,
 * >= CNK_FD_FLOOR); -errno if it is not open. */
static int move_fd(int fd)
{
    long r = shipc_own_dup(fd, 1);
    if (r >= 0)
        ksys1(__NR_close, fd);
    return (int)r;
}

static void map_report(void)
{
    cnk.report = &private_report;
    int fd = move_fd(CNK_REPORT_FD);
    if (fd >= 0) {
        long p = ksys6(__NR_mmap, 0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p >= 0)
            cnk.report = (struct cnk_report *)p;
        ksys1(__NR_close, fd);
    }
    cnk.report->magic = CNK_REPORT_MAGIC;
}

static void parse_args(int argc, char **argv)
{
    int i;
    cnk.memory = DEFAULT_MEMORY;
    for (i = 1; i < argc && strcmp(argv[i], "--"); i++) {
        uint64_t v;
        if (!strcmp(argv[i], "--trace")) {
            cnk.trace = 1;
        } else if (!strcmp(argv[i], "--memory") && i + 1 < argc && !kparse_u64(argv[i + 1], &v) && v) {
            cnk.memory = v;
            i++;
        } else if (!strcmp(argv[i], "--cores") && i + 1 < argc && !kparse_u64(argv[i + 1], &v) &&
                   v && v <= 4096) {
            cnk.cores = (unsigned)v;
            i++;
        } else if (!strcmp(argv[i], "--first-core") && i + 1 < argc && !kparse_u64(argv[i + 1], &v) &&
                   v < 4096) {
            cnk.first_core = (unsigned)v;
            i++;
        } else {
            cnk_fail(EINVAL, "bad argument '%s'; " USAGE, argv[i]);
        }
    }
    if (i + 1 >= argc)
        cnk_fail(EINVAL, "no program; " USAGE);
    cnk.argc = argc - i - 1;
    cnk.argv = argv + i + 1;
}

__attribute__((noreturn)) void cnk_main(long *sp);

void cnk_main(long *sp)
{
    kthread_main();     /* klock needs it */
    int argc = (int)sp[0];
    char **argv = (char **)(sp + 1);
    cnk.envp = argv + argc + 1;
    char **e = cnk.envp;
    while (*e)
        e++;
    cnk.auxv = (const unsigned long *)(e + 1);

    map_report();
    long err = shipc_own_dup(2, 1);
    cnk.err_fd = err >= 0 ? (int)err : -1;
    parse_args(argc, argv);
    uint64_t rank;
    if (!kparse_u64(kgetenv(cnk.envp, "LATTICE_RANK"), &rank))
        cnk.rank = (int)rank;
    cnk.image_fd = move_fd(IMAGE_FD);
    if (cnk.image_fd < 0)
        cnk_fail(EBADF, "no program image on descriptor %d", IMAGE_FD);
    cnk.conn_fd = move_fd(CONN_FD);
    libcache_init();    /* before ship_init: its descriptor is one of cnk's own */

    int r = ship_init(cnk.conn_fd);
    if (r < 0)
        cnk_fail(-r, "cannot set up function shipping to the I/O node (error %d)", -r);
    shipc_fd_on_close(shipc_epoll_closed);    /* closed descriptors leave the core's epoll records */
    uintptr_t entry, stack;
    load_program(&entry, &stack);
    ksys1(__NR_close, cnk.image_fd);
    cnk.image_fd = -1;
    thread_init();
    r = trap_install();
    if (r < 0)
        cnk_fail(-r, "cannot install the system call trap (error %d)", -r);
    cnk.report->loaded = 1;
    cputime_start();    /* the program's CPU time starts now */
    enter_program(entry, stack);
}
