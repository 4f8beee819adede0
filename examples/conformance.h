/*
 * conformance.h - the line format of examples/conformance.c and
 * examples/conformance_fault.c: `call = result` or `call = -1 ENAME`, a
 * descriptor shown as B+n relative to the program's first one.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int base = -1;              /* the first descriptor the program opened */

/* `desc = rc` or `desc = -1 ENAME`; fd: rc is a descriptor, shown as B+n */
static void vsay(long rc, int err, int fd, const char *fmt, va_list ap)
{
    vprintf(fmt, ap);
    if (rc < 0)
        printf(" = %ld %s\n", rc, strerrorname_np(err) ? strerrorname_np(err) : "E?");
    else if (fd && base >= 0)
        printf(" = B%+ld\n", rc - base);
    else
        printf(" = %ld\n", rc);
}

static void say_(long rc, int err, int fd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsay(rc, err, fd, fmt, ap);
    va_end(ap);
}

/* run CALL once, keep its errno, print it; the value is CALL's */
#define SAY(call, ...)   ({ errno = 0; long r_ = (long)(call); say_(r_, errno, 0, __VA_ARGS__); r_; })
#define SAYFD(call, ...) ({ errno = 0; long r_ = (long)(call); say_(r_, errno, 1, __VA_ARGS__); (int)r_; })
