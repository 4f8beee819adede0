/*
 * usercopy.c - small structs to and from the program's memory without
 * trusting the pointer (plan D7): memcpy where the entry knows the memory
 * is mapped (shipc_ent_user_ok), else the kernel copies (process_vm_readv/
 * writev on ourselves, ~1 us), so a bad pointer is EFAULT, as Linux
 * answers, never a fault inside the client (the rank would die of it).
 */
#include "internal.h"

/* n bytes between local and the program's remote, by the kernel: 0, or
 * -EFAULT; 1 when the kernel will not copy for us (then the caller copies). */
static long vm_copy(long nr, void *local, const void *remote, size_t n)
{
    struct iovec l = { local, n }, r = { (void *)remote, n };
    long got = ksys6(nr, ksys0(__NR_getpid), (long)&l, 1, (long)&r, 1, 0);

    if (got == (long)n)
        return 0;
    return got >= 0 || got == -EFAULT ? -EFAULT : 1;
}

int shipc_put(void *dst, const void *src, size_t n)
{
    if (!dst)
        return -EFAULT;
    if (!shipc_ent_user_ok(dst, n, 1)) {
        long r = vm_copy(__NR_process_vm_writev, (void *)src, dst, n);
        if (r <= 0)
            return (int)r;
    }
    memcpy(dst, src, n);
    return 0;
}

int shipc_get(void *dst, const void *src, size_t n)
{
    if (!src)
        return -EFAULT;
    if (!shipc_ent_user_ok(src, n, 0)) {
        long r = vm_copy(__NR_process_vm_readv, dst, src, n);
        if (r <= 0)
            return (int)r;
    }
    memcpy(dst, src, n);
    return 0;
}

/* strnlen of a program string, checked page by page: -EFAULT where it runs
 * into memory that is not mapped (the kernel's answer for a bad path). */
long shipc_strnlen(const char *s, size_t max)
{
    size_t n = 0;

    while (n < max) {
        const char *p = s + n;
        size_t in_page = 4096 - ((uintptr_t)p & 4095);
        char probe;
        if (in_page > max - n)
            in_page = max - n;
        if (!shipc_ent_user_ok(p, in_page, 0) && vm_copy(__NR_process_vm_readv, &probe, p, 1) < 0)
            return -EFAULT;
        for (size_t i = 0; i < in_page; i++)
            if (!p[i])
                return (long)(n + i);
        n += in_page;
    }
    return (long)max;
}
