/*
 * loader.c - what execve does, into big memory: check the ELF image, copy
 * its segments (and those of its interpreter, read through the I/O node
 * like any file), and build the initial stack with argv, envp and auxv.
 * Segments are copied, not mapped: big memory cannot back file mappings.
 */
#include <asm/unistd.h>
#include <linux/auxvec.h>
#include <linux/elf.h>
#include <linux/errno.h>
#include <linux/fcntl.h>

#include <linux/mman.h>

#include "cnk.h"

#define PAGE        4096ul
#define STACK_SIZE  (8ul << 20)
#define MAX_PHDR    128
#define AT_RANDOM_BYTES 16
#define MB2         (2ul << 20)

static uintptr_t up(uintptr_t v, uintptr_t a) { return (v + a - 1) & ~(a - 1); }
static uintptr_t down(uintptr_t v, uintptr_t a) { return v & ~(a - 1); }

/* Where an ELF file is read from: the pushed image, a file via shipc_pread,
 * or (execve) a buffer that already holds it. */
struct src {
    const char *name;       /* for messages */
    int fd;
    long (*pread)(const struct src *s, void *buf, size_t len, int64_t off);
    const char *mem;        /* the buffer and its length */
    size_t len;
};

struct elf {
    Elf64_Ehdr eh;
    Elf64_Phdr ph[MAX_PHDR];
    uintptr_t lo, hi;       /* page-aligned span of the PT_LOAD segments */
    uintptr_t align;        /* largest segment alignment */
    uintptr_t bias;         /* load address minus link address */
};

static long image_pread(const struct src *s, void *buf, size_t len, int64_t off)
{
    return ksys4(__NR_pread64, s->fd, buf, len, off);
}

static long file_pread(const struct src *s, void *buf, size_t len, int64_t off)
{
    return shipc_pread(s->fd, buf, len, off);
}

static long mem_pread(const struct src *s, void *buf, size_t len, int64_t off)
{
    if ((uint64_t)off >= s->len)
        return 0;
    size_t n = s->len - (size_t)off < len ? s->len - (size_t)off : len;
    memcpy(buf, s->mem + off, n);
    return (long)n;
}

/* While execve prepares a new image, a load failure goes back to the
 * caller as an errno (the old program carries on) instead of ending it. */
static struct kjmp *catching;

__attribute__((noreturn, format(printf, 2, 3))) static void load_fail(int err, const char *fmt, ...)
{
    char msg[sizeof cnk.report->message];
    va_list ap;
    va_start(ap, fmt);
    kvfmt(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (!catching)
        cnk_fail(err, "%s", msg);
    if (cnk.trace)
        kprint(cnk.err_fd, "[cnk %d] execve: %s\n", cnk.rank, msg);
    struct kjmp *j = catching;
    catching = NULL;
    cnk_longjmp(j, err);
}

/* Read up to len bytes at off: fewer only at the end of the file. */
static size_t read_upto(const struct src *s, void *buf, size_t len, uint64_t off)
{
    size_t done = 0;
    while (done < len) {
        long r = s->pread(s, (char *)buf + done, len - done, (int64_t)(off + done));
        if (r == -EINTR)
            continue;
        if (r < 0)
            load_fail((int)-r, "cannot read %s: error %ld", s->name, -r);
        if (r == 0)
            break;
        done += (size_t)r;
    }
    return done;
}

/* Read exactly len bytes at off, or fail: a short file is a truncated ELF. */
static void read_exact(const struct src *s, void *buf, size_t len, uint64_t off, const char *what)
{
    if (read_upto(s, buf, len, off) < len)
        load_fail(ENOEXEC, "exec format error: %s is a truncated ELF file (%s needs bytes up to "
                 "offset %lu; the file is shorter)", s->name, what, (unsigned long)(off + len));
}

static const char *machine_name(unsigned m)
{
    switch (m) {
    case EM_386: return "i386";
    case EM_ARM: return "32-bit arm";
    case EM_AARCH64: return "aarch64";
    case EM_PPC: return "32-bit powerpc";
    case EM_PPC64: return "ppc64";
    case EM_S390: return "s390";
    case EM_RISCV: return "riscv";
    default: return "another architecture";
    }
}

/* Header checks: the reasons execve would say ENOEXEC, spelled out. */
static void check_header(const struct src *s, const Elf64_Ehdr *eh, size_t got)
{
    const unsigned char *id = eh->e_ident;
    if (got < SELFMAG || memcmp(id, ELFMAG, SELFMAG))
        load_fail(ENOEXEC, "exec format error: %s is not an ELF executable%s", s->name,
                 got >= 2 && id[0] == '#' && id[1] == '!' ? " (scripts cannot run on a compute node)" : "");
    if (got < sizeof *eh)
        load_fail(ENOEXEC, "exec format error: %s is a truncated ELF file (%zu bytes, shorter than "
                 "an ELF header)", s->name, got);
    if (id[EI_CLASS] != ELFCLASS64)
        load_fail(ENOEXEC, "exec format error: %s is a 32-bit ELF file (%s); compute nodes run "
                 "64-bit x86-64 programs", s->name,
                 machine_name(((const Elf32_Ehdr *)eh)->e_machine));
    if (id[EI_DATA] != ELFDATA2LSB || eh->e_machine != EM_X86_64)
        load_fail(ENOEXEC, "exec format error: %s is built for %s (ELF machine %u), not x86-64",
                 s->name, machine_name(eh->e_machine), eh->e_machine);
    if (eh->e_type != ET_EXEC && eh->e_type != ET_DYN)
        load_fail(ENOEXEC, "exec format error: %s is not an executable (ELF type %u)", s->name,
                 eh->e_type);
    if (eh->e_phentsize != sizeof(Elf64_Phdr) || !eh->e_phnum || eh->e_phnum > MAX_PHDR)
        load_fail(ENOEXEC, "exec format error: %s has a bad program header table (%u entries of "
                 "%u bytes)", s->name, eh->e_phnum, eh->e_phentsize);
}

static void read_elf(const struct src *s, struct elf *e)
{
    check_header(s, &e->eh, read_upto(s, &e->eh, sizeof e->eh, 0));
    read_exact(s, e->ph, e->eh.e_phnum * sizeof *e->ph, e->eh.e_phoff, "the program headers");
    e->lo = UINTPTR_MAX;
    e->hi = 0;
    e->align = PAGE;
    for (unsigned i = 0; i < e->eh.e_phnum; i++) {
        const Elf64_Phdr *p = &e->ph[i];
        if (p->p_type != PT_LOAD)
            continue;
        if (p->p_filesz > p->p_memsz || p->p_vaddr + p->p_memsz < p->p_vaddr ||
            p->p_vaddr + p->p_memsz > (1ull << 47) || p->p_offset + p->p_filesz < p->p_offset)
            load_fail(ENOEXEC, "exec format error: %s has a bad segment %u", s->name, i);
        if (p->p_vaddr < e->lo)
            e->lo = down(p->p_vaddr, PAGE);
        if (p->p_vaddr + p->p_memsz > e->hi)
            e->hi = up(p->p_vaddr + p->p_memsz, PAGE);
        if (p->p_align > e->align && p->p_align <= (1ul << 30) && !(p->p_align & (p->p_align - 1)))
            e->align = p->p_align;
    }
    if (!e->hi)
        load_fail(ENOEXEC, "exec format error: %s has nothing to load", s->name);
}

static void load_segments(const struct src *s, struct elf *e)
{
    for (unsigned i = 0; i < e->eh.e_phnum; i++) {
        const Elf64_Phdr *p = &e->ph[i];
        if (p->p_type == PT_LOAD && p->p_filesz)
            read_exact(s, (void *)(e->bias + p->p_vaddr), p->p_filesz, p->p_offset, "a segment");
    }
    bigmem_collapse(e->bias + e->lo, e->hi - e->lo);
}

__attribute__((noreturn)) static void too_big(const char *what, uint64_t need)
{
    load_fail(ENOMEM, "%s needs more memory than the node gives it: %lu MiB asked, --memory is "
             "%lu MiB", what, (unsigned long)((need + (1ul << 20) - 1) >> 20),
             (unsigned long)(cnk.memory >> 20));
}

/* Map big memory around the program and place it: a fixed-address
 * executable where it was linked, a position-independent one at the bottom
 * (its brk heap grows up from there). */
static void place_program(const struct src *s, struct elf *e)
{
    int fixed = e->eh.e_type == ET_EXEC;
    int r = bigmem_init(cnk.memory, fixed ? e->lo : 0, fixed ? e->hi : 0);
    if (r == -ENOMEM && fixed)
        too_big(s->name, e->hi - down(e->lo, 2ul << 20) + STACK_SIZE);
    if (r < 0)
        load_fail(-r, "cannot map %lu MiB of big memory (error %d)",
                 (unsigned long)(cnk.memory >> 20), -r);
    e->bias = fixed ? 0 : up(bigmem.base, e->align) - e->lo;
    if (bigmem_take(e->bias + e->lo, e->hi - e->lo) < 0)
        too_big(s->name, e->hi - e->lo + STACK_SIZE);
}

/* Open the interpreter (ld.so) named by the program, through the I/O node. */
static int open_interp(const struct src *prog, const struct elf *pe, char *path, size_t size)
{
    const Elf64_Phdr *p = NULL;
    for (unsigned i = 0; i < pe->eh.e_phnum && !p; i++)
        if (pe->ph[i].p_type == PT_INTERP)
            p = &pe->ph[i];
    if (!p || p->p_filesz < 2 || p->p_filesz > size)
        load_fail(ENOEXEC, "exec format error: %s has a bad interpreter name", prog->name);
    read_exact(prog, path, p->p_filesz, p->p_offset, "the interpreter name");
    path[p->p_filesz - 1] = 0;

    long fd = shipc_open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        load_fail((int)-fd, "cannot load the interpreter %s of %s: %s (error %ld)", path, prog->name,
                  fd == -ENOENT ? "no such file on the I/O node" : "cannot open it", -fd);
    return (int)fd;
}

static void check_interp(const struct src *s, const struct elf *ie)
{
    if (ie->eh.e_type != ET_DYN)
        load_fail(ENOEXEC, "exec format error: the interpreter %s is not position-independent", s->name);
}

/* The interpreter goes high in big memory, like a shared library. */
static void load_interp(const struct src *prog, const struct elf *pe, const struct src *s, struct elf *ie)
{
    uintptr_t at;
    if (bigmem_alloc(ie->hi - ie->lo, ie->align, &at) < 0)
        too_big(prog->name, pe->hi - pe->lo + STACK_SIZE + ie->hi - ie->lo);
    ie->bias = at - ie->lo;
    load_segments(s, ie);
}

static unsigned long own_aux(unsigned long type)
{
    for (const unsigned long *a = cnk.auxv; a && a[0] != AT_NULL; a += 2)
        if (a[0] == type)
            return a[1];
    return 0;
}

/* Where the program can find its program headers once loaded. */
static uintptr_t phdr_addr(const struct elf *e)
{
    for (unsigned i = 0; i < e->eh.e_phnum; i++)
        if (e->ph[i].p_type == PT_PHDR)
            return e->bias + e->ph[i].p_vaddr;
    for (unsigned i = 0; i < e->eh.e_phnum; i++) {
        const Elf64_Phdr *p = &e->ph[i];
        if (p->p_type == PT_LOAD && e->eh.e_phoff >= p->p_offset &&
            e->eh.e_phoff + e->eh.e_phnum * sizeof *p <= p->p_offset + p->p_filesz)
            return e->bias + p->p_vaddr + (e->eh.e_phoff - p->p_offset);
    }
    return 0;
}

/* Copy bytes to *at and move past them; returns where they went. */
static uintptr_t put(uintptr_t *at, const void *data, size_t len)
{
    uintptr_t r = *at;
    memcpy((void *)r, data, len);
    *at += len;
    return r;
}

/* The System V x86-64 initial stack at the top of [lo, lo+STACK_SIZE):
 * argc, argv[], NULL, envp[], NULL, auxv pairs, AT_NULL, then the strings;
 * rsp 16-byte aligned at argc. */
static uintptr_t build_stack(uintptr_t lo, const struct elf *pe, uintptr_t base, uintptr_t phdr)
{
    int envc = 0;
    const char *fn = cnk.execfn ? cnk.execfn : cnk.argv[0];
    size_t bytes = strlen(fn) + 1 + sizeof "x86_64" + AT_RANDOM_BYTES;
    for (int i = 0; i < cnk.argc; i++)
        bytes += strlen(cnk.argv[i]) + 1;
    for (; cnk.envp[envc]; envc++)
        bytes += strlen(cnk.envp[envc]) + 1;
    if (!phdr)
        bytes += pe->eh.e_phnum * sizeof *pe->ph;
    size_t words = 1 + (size_t)cnk.argc + 1 + (size_t)envc + 1 + 2 * 21;
    if (bytes + words * 8 > STACK_SIZE / 4)
        load_fail(E2BIG, "arguments and environment do not fit a quarter of the %lu MiB stack",
                 STACK_SIZE >> 20);
    uintptr_t str = down(lo + STACK_SIZE - bytes, 16);
    uintptr_t *sp = (uintptr_t *)down(str - words * 8, 16), *w = sp;

    unsigned char rnd[AT_RANDOM_BYTES];
    if (ksys3(__NR_getrandom, rnd, sizeof rnd, 0) != (long)sizeof rnd)
        load_fail(EIO, "getrandom failed");
    uintptr_t random = put(&str, rnd, sizeof rnd);
    if (!phdr)
        phdr = put(&str, pe->ph, pe->eh.e_phnum * sizeof *pe->ph);
    uintptr_t platform = put(&str, "x86_64", sizeof "x86_64");
    uintptr_t execfn = put(&str, fn, strlen(fn) + 1);
    *w++ = (uintptr_t)cnk.argc;
    for (int i = 0; i < cnk.argc; i++)
        *w++ = put(&str, cnk.argv[i], strlen(cnk.argv[i]) + 1);
    *w++ = 0;
    for (int i = 0; i < envc; i++)
        *w++ = put(&str, cnk.envp[i], strlen(cnk.envp[i]) + 1);
    *w++ = 0;

    const unsigned long aux[21][2] = {
        { AT_SYSINFO_EHDR, own_aux(AT_SYSINFO_EHDR) },  /* the vDSO: clock_gettime never traps */
        { AT_MINSIGSTKSZ, own_aux(AT_MINSIGSTKSZ) },
        { AT_HWCAP, own_aux(AT_HWCAP) },
        { AT_PAGESZ, PAGE },
        { AT_CLKTCK, own_aux(AT_CLKTCK) },
        { AT_PHDR, phdr },
        { AT_PHENT, sizeof(Elf64_Phdr) },
        { AT_PHNUM, pe->eh.e_phnum },
        { AT_BASE, base },
        { AT_FLAGS, 0 },
        { AT_ENTRY, pe->bias + pe->eh.e_entry },
        { AT_UID, own_aux(AT_UID) },
        { AT_EUID, own_aux(AT_EUID) },
        { AT_GID, own_aux(AT_GID) },
        { AT_EGID, own_aux(AT_EGID) },
        { AT_SECURE, 0 },
        { AT_RANDOM, random },
        { AT_HWCAP2, own_aux(AT_HWCAP2) },
        { AT_EXECFN, execfn },
        { AT_PLATFORM, platform },
        { AT_NULL, 0 },
    };
    memcpy(w, aux, sizeof aux);
    return (uintptr_t)sp;
}

static int is_dynamic(const struct elf *e)
{
    for (unsigned i = 0; i < e->eh.e_phnum; i++)
        if (e->ph[i].p_type == PT_INTERP)
            return 1;
    return 0;
}

/* Big memory, the program and its interpreter (is: NULL for a static one),
 * the stack: what the program starts with. */
static void place_all(const struct src *s, struct elf *prog, const struct src *is, struct elf *interp,
                      uintptr_t *entry, uintptr_t *sp)
{
    place_program(s, prog);
    load_segments(s, prog);
    bigmem_brk_init(prog->bias + prog->hi);

    uintptr_t stack;    /* first, so it is the top of big memory */
    if (bigmem_alloc(STACK_SIZE, PAGE, &stack) < 0)
        too_big(s->name, prog->hi - prog->lo + STACK_SIZE);
    if (is)
        load_interp(s, prog, is, interp);
    *sp = build_stack(stack, prog, is ? interp->bias + interp->lo : 0, phdr_addr(prog));
    *entry = is ? interp->bias + interp->eh.e_entry : prog->bias + prog->eh.e_entry;
}

static struct elf prog, interp;     /* too big for cnk's stack frame */

void load_program(uintptr_t *entry, uintptr_t *sp)
{
    struct src s = { cnk.argv[0], cnk.image_fd, image_pread, NULL, 0 };
    static char path[256];
    read_elf(&s, &prog);
    if (!is_dynamic(&prog)) {
        place_all(&s, &prog, NULL, NULL, entry, sp);
        return;
    }
    struct src is = { path, open_interp(&s, &prog, path, sizeof path), file_pread, NULL, 0 };
    read_elf(&is, &interp);
    check_interp(&is, &interp);
    place_all(&s, &prog, &is, &interp, entry, sp);
    shipc_close(is.fd);
}

/* ---- execve: the whole new image is read and checked before the old one goes ---- */

static struct src xs, xis;          /* the prepared program and interpreter, in buffers */
static int xdynamic, xfd = -1;      /* xfd: the interpreter while it is being read */
static char xname[256], xiname[256];

static void drop_buffer(struct src *s)
{
    if (s->mem)
        ksys2(__NR_munmap, s->mem, up(s->len, PAGE));
    s->mem = NULL;
    s->len = 0;
}

/* Check f's headers and read everything the loader will need from it
 * (program headers, segments, interpreter name) into a fresh buffer
 * outside big memory: *out reads from that buffer. */
static void slurp(const struct src *f, struct elf *e, struct src *out, const char *name)
{
    read_elf(f, e);
    uint64_t end = e->eh.e_phoff + e->eh.e_phnum * sizeof *e->ph;
    for (unsigned i = 0; i < e->eh.e_phnum; i++) {
        const Elf64_Phdr *p = &e->ph[i];
        if ((p->p_type == PT_LOAD || p->p_type == PT_INTERP) && p->p_offset + p->p_filesz > end)
            end = p->p_offset + p->p_filesz;
    }
    if (end > cnk.memory)
        too_big(f->name, end);
    long m = ksys6(__NR_mmap, 0, up(end, PAGE), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m < 0)
        load_fail(ENOMEM, "no memory to read %s (%lu bytes)", f->name, (unsigned long)end);
    *out = (struct src){ name, -1, mem_pread, (const char *)m, end };
    read_exact(f, (void *)m, end, 0, "its segments");
}

static void discard_prepared(void)
{
    if (xfd >= 0)
        shipc_close(xfd);
    xfd = -1;
    drop_buffer(&xs);
    drop_buffer(&xis);
}

long loader_prepare(int fd, const char *name)
{
    struct kjmp j;
    int err = cnk_setjmp(&j);
    if (err) {              /* load_fail while catching */
        discard_prepared();
        return -err;
    }
    catching = &j;
    kfmt(xname, sizeof xname, "%s", name);  /* the caller's memory goes away */
    struct src f = { xname, fd, file_pread, NULL, 0 };
    slurp(&f, &prog, &xs, xname);
    xdynamic = is_dynamic(&prog);
    uint64_t need = prog.eh.e_type == ET_EXEC ? prog.hi - down(prog.lo, MB2) + STACK_SIZE
                                              : prog.hi - prog.lo + STACK_SIZE + prog.align;
    if (xdynamic) {
        xfd = open_interp(&xs, &prog, xiname, sizeof xiname);
        struct src fi = { xiname, xfd, file_pread, NULL, 0 };
        slurp(&fi, &interp, &xis, xiname);
        check_interp(&xis, &interp);
        shipc_close(xfd);
        xfd = -1;
        need += interp.hi - interp.lo + interp.align;
    }
    /* what place_program and bigmem_init would refuse, said while the caller can hear it */
    if (prog.eh.e_type == ET_EXEC && prog.lo < MB2)
        load_fail(ENOMEM, "%s is linked below 2 MiB, where big memory cannot be", xname);
    if (need > cnk.memory)
        too_big(xname, need);
    catching = NULL;
    return 0;
}

void loader_load_prepared(uintptr_t *entry, uintptr_t *sp)
{
    /* prog and interp still hold the headers loader_prepare read */
    place_all(&xs, &prog, xdynamic ? &xis : NULL, &interp, entry, sp);
    drop_buffer(&xs);
    drop_buffer(&xis);
}
