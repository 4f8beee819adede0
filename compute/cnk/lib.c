/*
 * lib.c - the little libc cnk carries (see lib.h).
 */
#include <asm/unistd.h>
#include <linux/errno.h>

#include "lib.h"

/* rep movsb/stosb: gcc cannot turn these back into calls to themselves */
void *memcpy(void *restrict d, const void *restrict s, size_t n)
{
    void *r = d;
    __asm__ volatile("rep movsb" : "+D"(d), "+S"(s), "+c"(n) : : "memory");
    return r;
}

void *memmove(void *d, const void *s, size_t n)
{
    if ((uintptr_t)d - (uintptr_t)s >= n)
        return memcpy(d, s, n);
    /* overlapping with d above s: copy backwards */
    unsigned char *dp = (unsigned char *)d + n - 1;
    const unsigned char *sp = (const unsigned char *)s + n - 1;
    __asm__ volatile("std; rep movsb; cld" : "+D"(dp), "+S"(sp), "+c"(n) : : "memory");
    return d;
}

void *memset(void *d, int c, size_t n)
{
    void *r = d;
    __asm__ volatile("rep stosb" : "+D"(d), "+c"(n) : "a"(c) : "memory");
    return r;
}

int memcmp(const void *a, const void *b, size_t n)
{
    const unsigned char *p = a, *q = b;
    for (; n; n--, p++, q++)
        if (*p != *q)
            return *p - *q;
    return 0;
}

size_t strlen(const char *s)
{
    const char *p = s;
    while (*p)
        p++;
    return (size_t)(p - s);
}

size_t strnlen(const char *s, size_t max)
{
    size_t n = 0;
    while (n < max && s[n])
        n++;
    return n;
}

int strcmp(const char *a, const char *b)
{
    while (*a && *a == *b)
        a++, b++;
    return (unsigned char)*a - (unsigned char)*b;
}

int strncmp(const char *a, const char *b, size_t n)
{
    for (; n; n--, a++, b++)
        if (*a != *b || !*a)
            return (unsigned char)*a - (unsigned char)*b;
    return 0;
}

char *strchr(const char *s, int c)
{
    for (;; s++) {
        if (*s == (char)c)
            return (char *)s;
        if (!*s)
            return NULL;
    }
}

const char *kgetenv(char **envp, const char *name)
{
    size_t n = strlen(name);
    for (; envp && *envp; envp++)
        if (!strncmp(*envp, name, n) && (*envp)[n] == '=')
            return *envp + n + 1;
    return NULL;
}

int kparse_u64(const char *s, uint64_t *out)
{
    uint64_t v = 0;
    if (!s || *s < '0' || *s > '9')
        return -1;
    for (; *s >= '0' && *s <= '9'; s++) {
        if (v > (UINT64_MAX - 9) / 10)
            return -1;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    unsigned shift = 0;
    switch (*s | 0x20) {    /* lower case */
    case 'k': shift = 10; break;
    case 'm': shift = 20; break;
    case 'g': shift = 30; break;
    case 't': shift = 40; break;
    default: break;
    }
    if (shift)
        s++;
    if (*s || (shift && v > UINT64_MAX >> shift))
        return -1;
    *out = v << shift;
    return 0;
}

/* ---- formatted output ---- */

struct out {
    char *buf;
    size_t n, len;          /* capacity, characters wanted so far */
};

static void put(struct out *o, char c)
{
    if (o->len + 1 < o->n)
        o->buf[o->len] = c;
    o->len++;
}

static void put_padded(struct out *o, const char *s, size_t len, int width, int left, char pad)
{
    int fill = width > (int)len ? width - (int)len : 0;
    if (!left && pad == '0' && len && (*s == '-')) {    /* sign before zero padding */
        put(o, *s++);
        len--;
    }
    if (!left)
        while (fill-- > 0)
            put(o, pad);
    while (len--)
        put(o, *s++);
    while (left && fill-- > 0)
        put(o, ' ');
}

static size_t utoa(char *end, unsigned long long v, unsigned base)
{
    char *p = end;
    do {
        *--p = "0123456789abcdef"[v % base];
        v /= base;
    } while (v);
    return (size_t)(end - p);
}

int kvfmt(char *buf, size_t n, const char *fmt, va_list ap)
{
    struct out o = { buf, n, 0 };
    char num[24];
    for (; *fmt; fmt++) {
        if (*fmt != '%') {
            put(&o, *fmt);
            continue;
        }
        int left = 0, width = 0, lng = 0;
        char pad = ' ';
        for (fmt++; *fmt == '-' || *fmt == '0'; fmt++)
            *fmt == '-' ? (left = 1) : (pad = '0');
        for (; *fmt >= '0' && *fmt <= '9'; fmt++)
            width = width * 10 + (*fmt - '0');
        for (; *fmt == 'l' || *fmt == 'z'; fmt++)
            lng++;
        unsigned long long u;
        size_t len;
        switch (*fmt) {
        case 'd':
        case 'i': {
            long long v = lng ? va_arg(ap, long long) : va_arg(ap, int);
            u = v < 0 ? 0ull - (unsigned long long)v : (unsigned long long)v;
            len = utoa(num + sizeof num, u, 10);
            if (v < 0)
                num[sizeof num - ++len] = '-';
            put_padded(&o, num + sizeof num - len, len, width, left, pad);
            break;
        }
        case 'u':
        case 'x':
            u = lng ? va_arg(ap, unsigned long long) : va_arg(ap, unsigned);
            len = utoa(num + sizeof num, u, *fmt == 'x' ? 16 : 10);
            put_padded(&o, num + sizeof num - len, len, width, left, pad);
            break;
        case 'p':
            u = (uintptr_t)va_arg(ap, void *);
            len = utoa(num + sizeof num, u, 16);
            num[sizeof num - ++len] = 'x';
            num[sizeof num - ++len] = '0';
            put_padded(&o, num + sizeof num - len, len, width, left, ' ');
            break;
        case 's': {
            const char *s = va_arg(ap, const char *);
            if (!s)
                s = "(null)";
            put_padded(&o, s, strlen(s), width, left, ' ');
            break;
        }
        case 'c':
            num[0] = (char)va_arg(ap, int);
            put_padded(&o, num, 1, width, left, ' ');
            break;
        case '%':
            put(&o, '%');
            break;
        default:        /* unknown conversion: show it, stop before a lone '%' */
            put(&o, '%');
            if (!*fmt)
                fmt--;
            else
                put(&o, *fmt);
            break;
        }
    }
    if (n)
        buf[o.len < n ? o.len : n - 1] = 0;
    return (int)o.len;
}

int kfmt(char *buf, size_t n, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int r = kvfmt(buf, n, fmt, ap);
    va_end(ap);
    return r;
}

void kprint(int fd, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = kvfmt(buf, sizeof buf, fmt, ap);
    va_end(ap);
    kwrite_all(fd, buf, n < (int)sizeof buf ? (size_t)n : sizeof buf - 1);
}

int kwrite_all(int fd, const void *buf, size_t n)
{
    const char *p = buf;
    while (n) {
        long r = ksys3(__NR_write, fd, p, n);
        if (r == -EINTR)
            continue;
        if (r < 0)
            return (int)r;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

int kread_all(int fd, void *buf, size_t n)
{
    char *p = buf;
    while (n) {
        long r = ksys3(__NR_read, fd, p, n);
        if (r == -EINTR)
            continue;
        if (r < 0)
            return (int)r;
        if (r == 0)
            return -EPIPE;
        p += r;
        n -= (size_t)r;
    }
    return 0;
}

void kexit(int code)
{
    for (;;)
        ksys1(__NR_exit_group, code);
}

/* ---- the thread's block, and the lock ---- */

#define ARCH_SET_GS_ 0x1001
#define SIG_UNBLOCK_ 1

static struct kthread main_thread;

void kthread_enter(struct kthread *t)
{
    t->self = t;
    ksys2(__NR_arch_prctl, ARCH_SET_GS_, t);
}

void kthread_main(void)
{
    main_thread.used = 1;
    kthread_enter(&main_thread);
}

/* crit goes up before a klock is taken and down after it is released, so
 * a signal arriving in between finds it raised and waits (signal.c). */
void kcrit_enter(void)
{
    __atomic_add_fetch(&kthread_self()->crit, 1, __ATOMIC_RELAXED);
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
}

void kcrit_leave(void)
{
    struct kthread *t = kthread_self();
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (__atomic_sub_fetch(&t->crit, 1, __ATOMIC_RELAXED))
        return;
    /* the signals held back meanwhile are pending and blocked: unblocking
     * them delivers them here, on the way out of cnk */
    uint64_t held = __atomic_exchange_n(&t->deferred, 0, __ATOMIC_RELAXED);
    if (held)
        ksys4(__NR_rt_sigprocmask, SIG_UNBLOCK_, &held, NULL, sizeof held);
}

void klock(struct klock *l)
{
    kcrit_enter();
    kmutex_lock(&l->m);
}

void kunlock(struct klock *l)
{
    kmutex_unlock(&l->m);
    kcrit_leave();
}
