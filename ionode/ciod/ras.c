/*
 * ras.c - RAS events for the service node, diagnostics for humans.
 *
 * The spool is shared with nobody else in this process but may be shared
 * with other ciods, so each event is one line written by one write() on
 * an O_APPEND descriptor:
 *   <ISO-8601 UTC>\t<SEVERITY>\tCIOD\t<LOCATION>\t<JOB>\t<message>\n
 * The time has microseconds, as the service node's own events (one format,
 * so that the events of both sort by time); JOB is the job the event is
 * about (ras_job_event, or the worker's job: ras_set_job), "-" for none,
 * so that `lattice ras --job N` finds it.
 *
 * Folding.  What an untrusted peer causes (a connection before its hello
 * is accepted, a compute process's requests: ras_thread_peer) must not cost
 * a line per bad message.  Events of one kind (the call's format string),
 * severity and location from one peer identity (its uid, or its host: not
 * a pid or port it can change) share a window of RAS_FOLD_WINDOW seconds
 * from the first: RAS_FOLD_BURST of them are written as they come, the
 * rest counted, and when the window ends (a timer thread, or the next such
 * event, or exit) the last of them is written with the count:
 *   <message> [repeated N times in the last T s]
 * so the N events it stands for are accounted for.  An entry whose window
 * folded something stays folding for another window; one that folded
 * nothing is freed.  With all RAS_FOLDS entries taken, the events of other
 * peers share one more entry, whose summary adds ", by other peers".
 * LATTICE_RAS_WINDOW (seconds, 0: no folding) changes the window (tests).
 */
#include "ciod.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define RAS_FOLDS        64u            /* peer x kind pairs folded at once */
#define RAS_FOLD_BURST   10u            /* events of one pair written in full per window */
#define RAS_FOLD_WINDOW  10             /* seconds */
#define RAS_MSG          1024u

static int spool = -1;
static const char *const sev_name[] = { "INFO", "WARNING", "ERROR", "FATAL" };

struct fold {
    const char   *kind;                 /* the events' format string; NULL: a free entry */
    enum ras_sev  sev;
    char          who[72], location[96];
    unsigned      written;              /* in full, this window */
    uint64_t      folded;               /* counted instead, this window */
    double        start;                /* the window's, monotonic seconds */
    enum ras_sev  last_sev;             /* the last folded event (the overflow entry mixes kinds) */
    char          last_loc[96];
    char          last[RAS_MSG];
    uint64_t      job, last_job;        /* the events' job (0: none); the last folded one's */
};

static pthread_mutex_t fold_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t  fold_wake;
static struct fold     folds[RAS_FOLDS];
static struct fold     other;           /* events of peers that found no free entry */
static const char      other_kind[] = "other peers";
static int             window = RAS_FOLD_WINDOW;
static _Thread_local const char *thread_who;
static uint64_t        process_job;     /* ras_set_job: every event of this process is about it */

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

static double mono(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *fold_timer(void *arg);

int ras_open(const char *path, char *err, size_t errlen)
{
    const char *w = getenv("LATTICE_RAS_WINDOW");
    pthread_condattr_t ca;
    pthread_t t;
    char *end;
    int rc;

    if (w && *w) {
        long v = strtol(w, &end, 10);
        if (*end || v < 0 || v > 3600)
            return errprintf(err, errlen, "LATTICE_RAS_WINDOW must be 0..3600 seconds, not \"%s\"", w);
        window = (int)v;
    }
    spool = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (spool < 0)
        return errprintf(err, errlen, "cannot open RAS spool %s: %s", path, strerror(errno));
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&fold_wake, &ca);
    pthread_condattr_destroy(&ca);
    if (window > 0) {
        if ((rc = pthread_create(&t, NULL, fold_timer, NULL)) != 0)
            return errprintf(err, errlen, "cannot start the RAS fold timer: %s", strerror(rc));
        pthread_detach(t);
        atexit(ras_flush);
    }
    return 0;
}

/* ISO-8601 UTC with microseconds: the one format of every RAS event
 * (service/lattice/state/ras.py stamps its own the same way). */
static void stamp(char *buf, size_t len)
{
    struct timespec ts;
    struct tm tm;
    size_t n;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf + n, len - n, ".%06ldZ", ts.tv_nsec / 1000);
}

void logmsg(const char *fmt, ...)
{
    char line[1024], ts[40];
    va_list ap;
    int n;

    stamp(ts, sizeof(ts));
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

/* One line to the spool and the log. */
static void emit(enum ras_sev sev, const char *location, uint64_t job, const char *msg)
{
    char line[RAS_MSG + 400], ts[40], jobf[24] = "-";
    int n;

    logmsg("RAS %s %s: %s", sev_name[sev], location, msg);
    if (spool < 0)
        return;
    stamp(ts, sizeof(ts));
    if (job)
        snprintf(jobf, sizeof(jobf), "%" PRIu64, job);
    n = snprintf(line, sizeof(line), "%s\t%s\tCIOD\t%s\t%s\t%s\n", ts, sev_name[sev], location, jobf, msg);
    if (n >= (int)sizeof(line)) {
        n = sizeof(line) - 1;
        line[n - 1] = '\n';
    }
    if (write(spool, line, n) < 0)
        logmsg("cannot write RAS spool: %s", strerror(errno));
}

/* Under fold_lock: the window of e is over (or the daemon exits). */
static void end_window(struct fold *e, double now)
{
    char msg[RAS_MSG + 100];

    if (e->folded == 0) {
        e->kind = NULL;                 /* quiet for a window: free */
        return;
    }
    snprintf(msg, sizeof(msg), "%.900s [repeated %" PRIu64 " times in the last %.0f s%s]", e->last, e->folded,
             now - e->start < 1 ? 1 : now - e->start + 0.5, e == &other ? ", by other peers" : "");
    emit(e->last_sev, e->last_loc, e->last_job, msg);
    e->folded = 0;
    e->start = now;                     /* still folding: the burst stays spent */
}

static void fold(const char *who, enum ras_sev sev, const char *location, uint64_t job, const char *kind,
                 const char *msg)
{
    struct fold *e = NULL, *free_e = NULL;
    double now = mono();

    pthread_mutex_lock(&fold_lock);
    for (unsigned i = 0; i < RAS_FOLDS && !e; i++) {
        struct fold *f = &folds[i];
        if (f->kind == kind && f->sev == sev && f->job == job && !strcmp(f->who, who) &&
            !strcmp(f->location, location))
            e = f;
        else if (!f->kind && !free_e)
            free_e = f;
    }
    if (e && now >= e->start + window) {
        end_window(e, now);
        if (!e->kind)
            free_e = e, e = NULL;
    }
    if (!e && free_e) {
        e = free_e;
        *e = (struct fold){ .kind = kind, .sev = sev, .job = job, .start = now };
        snprintf(e->who, sizeof(e->who), "%s", who);
        snprintf(e->location, sizeof(e->location), "%s", location);
        pthread_cond_signal(&fold_wake);
    } else if (!e) {
        e = &other;
        if (other.kind && now >= other.start + window)
            end_window(&other, now);
        if (!other.kind) {
            other = (struct fold){ .kind = other_kind, .start = now };
            pthread_cond_signal(&fold_wake);
        }
    }
    if (e->written < RAS_FOLD_BURST) {
        e->written++;
        emit(sev, location, job, msg);
    } else {
        e->folded++;
        e->last_sev = sev;
        e->last_job = job;
        snprintf(e->last_loc, sizeof(e->last_loc), "%s", location);
        snprintf(e->last, sizeof(e->last), "%s", msg);
    }
    pthread_mutex_unlock(&fold_lock);
}

/* Ends the windows that are over, sleeping until the next one is. */
static void *fold_timer(void *arg)
{
    (void)arg;
    pthread_setname_np(pthread_self(), "ciod-ras");
    pthread_mutex_lock(&fold_lock);
    for (;;) {
        double now = mono(), next = 0;
        for (unsigned i = 0; i <= RAS_FOLDS; i++) {
            struct fold *f = i < RAS_FOLDS ? &folds[i] : &other;
            if (f->kind && now >= f->start + window)
                end_window(f, now);
            if (f->kind && (next == 0 || f->start + window < next))
                next = f->start + window;
        }
        if (next == 0) {
            pthread_cond_wait(&fold_wake, &fold_lock);
        } else {
            struct timespec ts = { .tv_sec = (time_t)next, .tv_nsec = (long)((next - (time_t)next) * 1e9) };
            pthread_cond_timedwait(&fold_wake, &fold_lock, &ts);
        }
    }
    return NULL;
}

void ras_flush(void)
{
    double now = mono();

    pthread_mutex_lock(&fold_lock);
    for (unsigned i = 0; i <= RAS_FOLDS; i++) {
        struct fold *f = i < RAS_FOLDS ? &folds[i] : &other;
        if (f->kind && f->folded)
            end_window(f, now);
    }
    pthread_mutex_unlock(&fold_lock);
}

void ras_thread_peer(const char *who)
{
    thread_who = who;
}

/* Length of the UTF-8 sequence at p, 0 if it is not one (overlong, a
 * surrogate, beyond U+10FFFF, cut short: a NUL is no continuation byte). */
static size_t utf8_len(const unsigned char *p)
{
    unsigned c = p[0];
    size_t n = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;

    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    if ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] > 0x9f) || (c == 0xf0 && p[1] < 0x90) ||
        (c == 0xf4 && p[1] > 0x8f))
        return 0;
    return n;
}

/* in, as one field of one spool line that is safe on a terminal: C0
 * controls (tab and newline too), DEL, C1 controls and bytes that are not
 * UTF-8 become \xNN, as the service node shows them (service/lattice/text.py):
 * a job's PMI abort message can neither forge a second record nor send
 * escape sequences to whoever reads the log. */
void ras_escape(char *out, size_t len, const char *in)
{
    const unsigned char *p = (const unsigned char *)in;
    size_t o = 0;

    while (*p && o + 5 < len) {
        size_t n = utf8_len(p);
        if (*p >= 0x20 && *p < 0x7f) {
            out[o++] = (char)*p++;
        } else if (n == 2 && p[0] == 0xc2 && p[1] < 0xa0) {     /* U+0080..U+009F: C1 */
            o += (size_t)snprintf(out + o, len - o, "\\x%02x", p[1]);
            p += 2;
        } else if (n) {
            if (o + n >= len)
                break;
            memcpy(out + o, p, n);
            o += n;
            p += n;
        } else {
            o += (size_t)snprintf(out + o, len - o, "\\x%02x", *p++);
        }
    }
    out[o] = '\0';
}

static void vevent(const char *who, enum ras_sev sev, const char *location, uint64_t job, const char *fmt,
                   va_list ap)
{
    char raw[RAS_MSG], msg[RAS_MSG];

    vsnprintf(raw, sizeof(raw), fmt, ap);
    ras_escape(msg, sizeof(msg), raw);      /* the message is one field of one line */
    if (who && window > 0)
        fold(who, sev, location, job, fmt, msg);
    else
        emit(sev, location, job, msg);
}

void ras_event(enum ras_sev sev, const char *location, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vevent(thread_who, sev, location, process_job, fmt, ap);
    va_end(ap);
}

void ras_event_from(const char *who, enum ras_sev sev, const char *location, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vevent(who, sev, location, process_job, fmt, ap);
    va_end(ap);
}

void ras_job_event(uint64_t job, enum ras_sev sev, const char *location, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vevent(thread_who, sev, location, job, fmt, ap);
    va_end(ap);
}

void ras_set_job(uint64_t job)
{
    process_job = job;
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

int ras_fd(void)
{
    return spool;
}

/* In a forked worker: the monitor's threads (one may have held the lock)
 * and folds stay behind; the worker folds its own peers' events afresh. */
void ras_after_fork(void)
{

    pthread_condattr_t ca;

    pthread_mutex_init(&fold_lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&fold_wake, &ca);
    pthread_condattr_destroy(&ca);
    memset(folds, 0, sizeof(folds));
    memset(&other, 0, sizeof(other));
    pthread_t t;
    if (window > 0 && pthread_create(&t, NULL, fold_timer, NULL) == 0)
        pthread_detach(t);
}
