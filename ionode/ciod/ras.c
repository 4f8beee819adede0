/*
 * ras.c - RAS events for the service node, diagnostics for humans.
 *
 * The spool is shared with nobody else in this process but may be shared
 * with other ciods, so each event is one line written by one write() on
 * an O_APPEND descriptor:
 *   <ISO-8601 UTC>\t<SEVERITY>\tCIOD\t<LOCATION>\t<message>\n
 */
#include "ciod.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static int ras_fd = -1;
static const char *const sev_name[] = { "INFO", "WARNING", "ERROR", "FATAL" };

int errprintf(char *buf, size_t len, const char *fmt, ...)
{
    int saved = errno;
    va_list ap;
    int n;

    if (buf && len) {
        va_start(ap, fmt);
        n = vsnprintf(buf, len, fmt, ap);
        va_end(ap);
        if (n >= 0 && (size_t)n >= len && len > 1)
            buf[len - 2] = '+';             /* mark truncation */
    }
    errno = saved;
    return -1;
}

int ras_open(const char *path, char *err, size_t errlen)
{
    ras_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (ras_fd < 0)
        return errprintf(err, errlen, "cannot open RAS spool %s: %s", path, strerror(errno));
    return 0;
}

static void stamp(char *buf, size_t len, bool millis)
{
    struct timespec ts;
    struct tm tm;
    size_t n;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
    if (millis)
        snprintf(buf + n, len - n, ".%03ldZ", ts.tv_nsec / 1000000);
    else
        snprintf(buf + n, len - n, "Z");
}

void logmsg(const char *fmt, ...)
{
    char line[1024], ts[40];
    va_list ap;
    int n;

    stamp(ts, sizeof(ts), true);
    n = snprintf(line, sizeof(line), "%s ciod[%s/%u]: ", ts, cfg.block ? cfg.block : "?", cfg.pset);
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
    va_end(ap);
    n = strlen(line);
    line[n++] = '\n';
    if (write(STDERR_FILENO, line, n) < 0) {
        /* nowhere left to complain */
    }
}

void ras_event(enum ras_sev sev, const char *location, const char *fmt, ...)
{
    char msg[1024], line[1400], ts[40];
    va_list ap;
    int n;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    for (char *p = msg; *p; p++)            /* the message is one field of one line */
        if (*p == '\t' || *p == '\n' || *p == '\r')
            *p = ' ';
    logmsg("RAS %s %s: %s", sev_name[sev], location, msg);
    if (ras_fd < 0)
        return;
    stamp(ts, sizeof(ts), false);
    n = snprintf(line, sizeof(line), "%s\t%s\tCIOD\t%s\t%s\n", ts, sev_name[sev], location, msg);
    if (n >= (int)sizeof(line)) {
        n = sizeof(line) - 1;
        line[n - 1] = '\n';
    }
    if (write(ras_fd, line, n) < 0)
        logmsg("cannot write RAS spool: %s", strerror(errno));
}

/*
 * Compute node locations.  ciod knows only its own location and the
 * pset-local node index, so it derives the compute node's name the way
 * the service node names them:  the I/O node "R00-M0-N00-I:J00" serving
 * pset p of size P has compute nodes "R00-M0-N00-C:Jnn" with
 * nn = p * P + node, printed with at least two digits.  A location
 * without "-I:" just gets "-C:Jnn" appended.
 */
void node_location(uint32_t node, char *buf, size_t len)
{
    const char *loc = cfg.location;
    const char *io = strstr(loc, "-I:");
    unsigned long nn = (unsigned long)cfg.pset * cfg.pset_size + node;
    int plen = io ? (int)(io - loc) : (int)strlen(loc);

    snprintf(buf, len, "%.*s-C:J%02lu", plen, loc, nn);
}
