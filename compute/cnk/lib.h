/*
 * lib.h - the little libc cnk carries: raw system calls, memory and string
 * helpers, formatted output, a futex lock.  No errno (the program owns it):
 * system calls return -errno.  No TLS (the program owns %fs).
 */
#ifndef CNK_LIB_H
#define CNK_LIB_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <lattice/ksys.h>

/* memory and strings (also the symbols gcc may emit calls to) */
void *memcpy(void *restrict d, const void *restrict s, size_t n);
void *memmove(void *d, const void *s, size_t n);
void *memset(void *d, int c, size_t n);
int memcmp(const void *a, const void *b, size_t n);
size_t strlen(const char *s);
size_t strnlen(const char *s, size_t max);
int strcmp(const char *a, const char *b);
int strncmp(const char *a, const char *b, size_t n);
char *strchr(const char *s, int c);
const char *kgetenv(char **envp, const char *name);
int kparse_u64(const char *s, uint64_t *out);   /* decimal, with K/M/G suffix; 0 or -1 */

/* formatted output: %d %i %u %ld %lu %lld %llu %x %lx %llx %zu %zd %s %c %p %% and
 * the '-', '0' flags and a width; always NUL-terminates; returns the length it
 * wanted (like snprintf). */
int kvfmt(char *buf, size_t n, const char *fmt, va_list ap);
int kfmt(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void kprint(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int kwrite_all(int fd, const void *buf, size_t n);          /* 0 or -errno */
int kread_all(int fd, void *buf, size_t n);                 /* 0, -EPIPE on EOF, or -errno */
__attribute__((noreturn)) void kexit(int code);            /* exit_group */

/* Each thread of the program has one of these, found through %gs (the
 * program owns %fs; x86-64 Linux programs leave %gs alone, and cnk refuses
 * them ARCH_SET_GS).  crit counts the klocks the thread holds: while it is
 * not 0 a signal for one of the program's handlers is held back (signal.c)
 * and its bit set in deferred, and the last kunlock lets it through. */
struct kthread {
    struct kthread *self;           /* %gs:0 */
    int crit;                       /* klocks held */
    int used;                       /* thread.c: the slot belongs to a live thread */
    uint64_t deferred;              /* signals held back, blocked in the thread's mask */
};
static inline struct kthread *kthread_self(void)
{
    struct kthread *t;
    __asm__("mov %%gs:0, %0" : "=r"(t));
    return t;
}
void kthread_enter(struct kthread *t);  /* this thread's block from now on (ARCH_SET_GS) */
void kthread_main(void);                /* the main thread's, first thing at start */

/* A futex mutex between the program's threads (cnk's shipping connection).
 * No program signal handler runs on the holder's thread while it holds one
 * (kthread.crit), so none can deadlock on the same lock; holding it costs no
 * system call. */
struct klock { struct kmutex m; };
void klock(struct klock *l);
void kunlock(struct klock *l);
/* The crit count alone (klock raises it around its mutex). */
void kcrit_enter(void);
void kcrit_leave(void);

#endif
