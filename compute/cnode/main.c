/*
 * cnode - the compute node supervisor (Lattice's stand-in for CNK's job
 * loader on Linux).
 *
 *   cnode --personality FILE.json --client /abs/path/libcnclient.so
 *
 * Reads its personality, hides the I/O nodes' file systems from the jobs
 * (private mount namespace, empty tmpfs over each "hide" path), connects to
 * its ciod as role NODE and then runs the jobs ciod pushes to it, one at a
 * time, until LAT_NODE_SHUTDOWN or until the connection to ciod is lost.
 */
#include <errno.h>
#include <getopt.h>
#include <sched.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cnode.h"

static const char *location = "cnode";

void say(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "cnode %s: %s\n", location, buf);
}

static int hexval(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

static char *dup_string(json_t *o, const char *key, int required, const char *file)
{
    json_t *v = json_object_get(o, key);
    if (!v && !required)
        return NULL;
    if (!json_is_string(v)) {
        fprintf(stderr, "cnode: %s: \"%s\" must be a string\n", file, key);
        exit(1);
    }
    return strdup(json_string_value(v));
}

static void load_personality(const char *file, struct personality *p)
{
    json_error_t err;
    json_t *o = json_load_file(file, 0, &err);
    if (!o || !json_is_object(o)) {
        fprintf(stderr, "cnode: %s: %s (line %d)\n", file, o ? "not an object" : err.text,
                o ? 0 : err.line);
        exit(1);
    }
    p->block = dup_string(o, "block", 0, file);
    p->ciod = dup_string(o, "ciod", 1, file);
    p->location = dup_string(o, "location", 0, file);
    if (!p->location)
        p->location = strdup("unknown");
    char *key = dup_string(o, "key", 1, file);
    if (strlen(key) != 2 * LAT_KEY_BYTES) {
        fprintf(stderr, "cnode: %s: \"key\" must be %u hex digits\n", file, 2 * LAT_KEY_BYTES);
        exit(1);
    }
    for (unsigned i = 0; i < LAT_KEY_BYTES; i++) {
        int hi = hexval(key[2 * i]), lo = hexval(key[2 * i + 1]);
        if (hi < 0 || lo < 0) {
            fprintf(stderr, "cnode: %s: \"key\" is not hex\n", file);
            exit(1);
        }
        p->key[i] = (uint8_t)(hi << 4 | lo);
    }
    free(key);
    json_t *node = json_object_get(o, "node");
    if (!json_is_integer(node) || json_integer_value(node) < 0 ||
        json_integer_value(node) >= (json_int_t)LAT_MAX_PSET) {
        fprintf(stderr, "cnode: %s: \"node\" must be an integer 0..%u\n", file, LAT_MAX_PSET - 1);
        exit(1);
    }
    p->node = (uint32_t)json_integer_value(node);
    json_t *hide = json_object_get(o, "hide");
    size_t n = json_is_array(hide) ? json_array_size(hide) : 0;
    if (hide && !json_is_array(hide)) {
        fprintf(stderr, "cnode: %s: \"hide\" must be a list of paths\n", file);
        exit(1);
    }
    p->hide = calloc(n + 1, sizeof *p->hide);
    for (size_t i = 0; i < n; i++) {
        json_t *h = json_array_get(hide, i);
        if (!json_is_string(h) || json_string_value(h)[0] != '/') {
            fprintf(stderr, "cnode: %s: \"hide\" entries must be absolute paths\n", file);
            exit(1);
        }
        p->hide[i] = strdup(json_string_value(h));
    }
    json_decref(o);
}

/* The job's files must only be reachable through function shipping: cover
 * the I/O nodes' directories with empty file systems in our own namespace. */
static void hide_paths(char **hide)
{
    if (!hide[0])
        return;
    if (geteuid() != 0) {
        say("warning: not root, so the job can still see %s and the paths after it locally", hide[0]);
        return;
    }
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) {
        say("warning: cannot make a private mount namespace: %s", strerror(errno));
        return;
    }
    for (char **h = hide; *h; h++) {
        struct stat st;
        if (stat(*h, &st) < 0 || !S_ISDIR(st.st_mode)) {
            say("warning: cannot hide %s: %s", *h, errno ? strerror(errno) : "not a directory");
            continue;
        }
        if (mount("lattice-hidden", *h, "tmpfs", MS_NOSUID | MS_NODEV | MS_RDONLY, "size=4k,mode=0755") < 0)
            say("warning: cannot hide %s: %s", *h, strerror(errno));
    }
}

static void usage(void)
{
    fprintf(stderr, "usage: cnode --personality FILE.json --client /abs/path/libcnclient.so\n");
    exit(64);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "personality", required_argument, NULL, 'p' },
        { "client", required_argument, NULL, 'c' },
        { NULL, 0, NULL, 0 },
    };
    const char *pfile = NULL, *client = NULL;
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        if (c == 'p')
            pfile = optarg;
        else if (c == 'c')
            client = optarg;
        else
            usage();
    }
    if (!pfile || !client || optind != argc)
        usage();
    if (client[0] != '/' || access(client, R_OK) != 0) {
        fprintf(stderr, "cnode: client library %s: %s\n", client,
                client[0] != '/' ? "must be an absolute path" : strerror(errno));
        return 1;
    }

    struct personality pers = { 0 };
    load_personality(pfile, &pers);
    location = pers.location;
    hide_paths(pers.hide);

    /* SIGTERM/SIGINT/SIGHUP arrive through the poll loop so the job dies with us */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    sigprocmask(SIG_BLOCK, &sigs, NULL);
    int sfd = signalfd(-1, &sigs, SFD_CLOEXEC);
    signal(SIGPIPE, SIG_IGN);

    int conn = net_connect(pers.ciod, 30.0);
    if (conn < 0) {
        say("cannot connect to ciod at %s: %s", pers.ciod, strerror(errno));
        return 1;
    }
    if (net_hello(conn, LAT_ROLE_NODE, pers.node, 0, pers.key) < 0) {
        say("ciod at %s refused this node: %s", pers.ciod, strerror(errno));
        return 1;
    }

    struct job *job = job_new(&pers, client, conn);
    struct msg m = { 0 };
    for (;;) {
        struct pollfd pfd[8];
        pfd[0] = (struct pollfd){ .fd = conn, .events = POLLIN };
        pfd[1] = (struct pollfd){ .fd = sfd, .events = POLLIN };
        int n = 2 + job_pollfds(job, pfd + 2, 6);
        if (poll(pfd, (nfds_t)n, -1) < 0) {
            if (errno == EINTR)
                continue;
            say("poll: %s", strerror(errno));
            job_kill_now(job);
            return 1;
        }
        job_events(job, pfd + 2, n - 2);
        if (pfd[1].revents) {
            struct signalfd_siginfo si;
            if (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
                say("terminated by signal %u", si.ssi_signo);
                job_kill_now(job);
                return 1;
            }
        }
        if (pfd[0].revents) {
            int r = net_recv(conn, &m);
            if (r <= 0) {
                say("connection to ciod lost (%s); ending", r == 0 ? "closed" : strerror(errno));
                job_kill_now(job);
                return 1;
            }
            if (job_message(job, &m))
                return 0;
        }
    }
}
