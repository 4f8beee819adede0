/*
 * cnode - the compute node supervisor (Lattice's stand-in for CNK's job
 * loader on Linux).
 *
 *   cnode --personality FILE.json --client /abs/path/libcnclient.so [--cnk /abs/path/cnk]
 *
 * A job runs in Linux mode (exec'd with libcnclient.so preloaded; with its
 * LAT_JOB_SANDBOX flag in the node sandbox instead, sandbox.c, whose network
 * namespace and /dev/shm the personality's "sandbox" object names) or, when
 * its LAT_JOB_CNK flag is set, under the compute node kernel given by --cnk.
 *
 * Reads its personality, hides the I/O nodes' file systems from the jobs
 * (private mount namespace, empty tmpfs over each "hide" path), connects to
 * its ciod as role NODE and then runs the jobs ciod pushes to it, one at a
 * time, until LAT_NODE_SHUTDOWN or until the connection to ciod is lost.
 */
#include <errno.h>
#include <fcntl.h>
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
#include "container.h"

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

static void bad_field(const char *file, const char *key, const char *what)
{
    fprintf(stderr, "cnode: %s: \"%s\" must be %s\n", file, key, what);
    exit(1);
}

static json_int_t get_int(json_t *o, const char *key, json_int_t lo, json_int_t hi, const char *file)
{
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi) {
        char what[96];
        snprintf(what, sizeof what, "an integer %lld..%lld", (long long)lo, (long long)hi);
        bad_field(file, key, what);
    }
    return json_integer_value(v);
}

static void get_triple(json_t *o, const char *key, json_int_t lo, json_int_t v[3], const char *file)
{
    json_t *a = json_object_get(o, key);
    if (!json_is_array(a) || json_array_size(a) != 3)
        bad_field(file, key, "a list of 3 integers");
    for (size_t i = 0; i < 3; i++) {
        json_t *e = json_array_get(a, i);
        if (!json_is_integer(e) || json_integer_value(e) < lo || json_integer_value(e) > 1 << 20)
            bad_field(file, key, "a list of 3 integers");
        v[i] = json_integer_value(e);
    }
}

/* A string that may go into LATTICE_PERSONALITY: printable, no ';', '=' or space. */
static void check_token(const char *s, const char *key, const char *file)
{
    if (!*s || strlen(s) > 64)
        bad_field(file, key, "1 to 64 characters");
    for (const char *q = s; *q; q++)
        if (*q <= ' ' || *q > '~' || *q == ';' || *q == '=')
            bad_field(file, key, "printable, without spaces, ';' or '='");
}

/* LATTICE_PERSONALITY, the job's view of this node (no key: jobs never see it). */
static void personality_env(json_t *o, struct personality *p, const char *file)
{
    json_int_t c[3], t[3];
    char *ionode = dup_string(o, "ionode_location", 1, file), *mode = dup_string(o, "mode", 1, file);
    const char *block = p->block ? p->block : "unknown";
    get_triple(o, "coords", 0, c, file);
    get_triple(o, "torus", 1, t, file);
    json_int_t pset = get_int(o, "pset", 0, 1 << 20, file);
    json_int_t pset_size = get_int(o, "pset_size", 1, LAT_MAX_PSET, file);
    if (p->node >= pset_size)
        bad_field(file, "node", "below pset_size");
    if (strcmp(mode, "co") && strcmp(mode, "vn"))
        bad_field(file, "mode", "\"co\" or \"vn\"");
    check_token(block, "block", file);
    check_token(p->location, "location", file);
    check_token(ionode, "ionode_location", file);
    char buf[1024];
    int n = snprintf(buf, sizeof buf,
                     "block=%s;location=%s;coords=%lld,%lld,%lld;torus=%lld,%lld,%lld;pset=%lld;pset_size=%lld;"
                     "rank_in_pset=%u;ionode=%s;memory=%llu;cores=%u;mode=%s",
                     block, p->location, (long long)c[0], (long long)c[1], (long long)c[2], (long long)t[0],
                     (long long)t[1], (long long)t[2], (long long)pset, (long long)pset_size, p->node, ionode,
                     (unsigned long long)p->memory, p->cores, mode);
    if (n < 0 || (size_t)n >= sizeof buf)
        bad_field(file, "block", "shorter");
    p->env = strdup(buf);
    p->env_head = strdup(buf);
    *strstr(p->env_head, ";memory=") = '\0';
    p->mode = mode;
    free(ionode);
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
    p->memory = (uint64_t)get_int(o, "memory", 1 << 20, INT64_MAX, file);
    p->cores = json_object_get(o, "cores") ? (uint32_t)get_int(o, "cores", 1, 4096, file) : 2;
    p->container = dup_string(o, "container", 0, file);     /* the host agent names it per machine and block */
    p->by_agent = p->container != NULL;
    if (!p->container) {        /* started by hand: a name nobody else uses */
        char name[128];
        snprintf(name, sizeof name, "lattice/%.64s-cnode%ld", p->block ? p->block : "unknown", (long)getpid());
        for (char *c = name + 8; *c; c++)
            if (!(*c == '-' || *c == '_' || (*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z')))
                *c = '_';
        p->container = strdup(name);
    }
    json_t *sb = json_object_get(o, "sandbox");
    if (sb && !json_is_object(sb))
        bad_field(file, "sandbox", "an object");
    if (sb) {       /* made by the host agent for the node sandbox (sandbox.c) */
        p->sandbox.netns = dup_string(sb, "netns", 0, file);
        p->sandbox.shm = dup_string(sb, "shm", 0, file);
        p->sandbox.ipcns = dup_string(sb, "ipcns", 0, file);
        p->sandbox.pidns = dup_string(sb, "pidns", 0, file);
        p->sandbox.ifname = dup_string(sb, "ifname", 0, file);
        p->sandbox.address = dup_string(sb, "address", 0, file);
        p->sandbox.gateway = dup_string(sb, "gateway", 0, file);
        if ((p->sandbox.netns && p->sandbox.netns[0] != '/') || (p->sandbox.shm && p->sandbox.shm[0] != '/') ||
            (p->sandbox.ipcns && p->sandbox.ipcns[0] != '/') || (p->sandbox.pidns && p->sandbox.pidns[0] != '/'))
            bad_field(file, "sandbox", "an object whose \"netns\", \"shm\", \"ipcns\" and \"pidns\" are absolute paths");
        if (p->sandbox.ifname && (!p->sandbox.ifname[0] || strlen(p->sandbox.ifname) >= 16 || strchr(p->sandbox.ifname, ',')))
            bad_field(file, "sandbox", "an object whose \"ifname\" is a network interface name");
    }
    personality_env(o, p, file);
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
    fprintf(stderr, "usage: cnode --personality FILE.json --client /abs/path/libcnclient.so "
            "[--cnk /abs/path/cnk]\n");
    exit(64);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        { "personality", required_argument, NULL, 'p' },
        { "client", required_argument, NULL, 'c' },
        { "cnk", required_argument, NULL, 'k' },
        { NULL, 0, NULL, 0 },
    };
    const char *pfile = NULL, *client = NULL;
    struct kernels k = { .cnk_fd = -1 };
    for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
        if (c == 'p')
            pfile = optarg;
        else if (c == 'c')
            client = optarg;
        else if (c == 'k')
            k.cnk = optarg;
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
    k.client = client;
    if (k.cnk) {
        /* opened now, as root if we are: the job's user needs no path to it */
        if (k.cnk[0] != '/' || (k.cnk_fd = open(k.cnk, O_RDONLY | O_CLOEXEC)) < 0 ||
            access(k.cnk, X_OK) != 0) {
            fprintf(stderr, "cnode: compute node kernel %s: %s\n", k.cnk,
                    k.cnk[0] != '/' ? "must be an absolute path" : strerror(errno));
            return 1;
        }
    }

    struct personality pers = { 0 };
    load_personality(pfile, &pers);
    location = pers.location;
    hide_paths(pers.hide);
    char why[512];
    if (container_setup(pers.container, why, sizeof why) < 0)
        say(container_required() ? "no job can run here: %s" : "warning: not root, so jobs run without a container: %s",
            why);

    /* SIGTERM/SIGINT/SIGHUP arrive through the poll loop so the job dies with us */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    sigprocmask(SIG_BLOCK, &sigs, NULL);
    int sfd = signalfd(-1, &sigs, SFD_CLOEXEC);
    signal(SIGPIPE, SIG_IGN);

    /* the ciod may start listening late on a loaded host: wait as long as
     * the agent that started us lives (it ends a boot that stops making
     * progress, $LATTICE_BOOT_STALL); started by hand, 30 s */
    pid_t agent = getppid();
    int conn;
    while ((conn = net_connect(pers.ciod, 30.0)) < 0 && errno != EINVAL && errno != ENAMETOOLONG &&
           pers.by_agent && agent != 1 && getppid() == agent)
        ;
    if (conn < 0) {
        say("cannot connect to ciod at %s: %s", pers.ciod, strerror(errno));
        return 1;
    }
    if (net_hello(conn, LAT_ROLE_NODE, pers.node, 0, pers.key, 1) < 0) {
        say("ciod at %s refused this node: %s", pers.ciod, strerror(errno));
        return 1;
    }

    struct job *job = job_new(&pers, &k, conn, 1);     /* the hello was seq 1 */
    struct msg m = { 0 };
    struct pollfd *pfd = NULL;
    size_t room = 0;
    for (;;) {
        size_t want = 2 + (size_t)job_pollfd_max(job);     /* as many processes as the job has */
        if (want > room) {
            struct pollfd *more = realloc(pfd, want * sizeof *pfd);
            if (!more) {
                say("out of memory");
                job_kill_now(job);
                return 1;
            }
            pfd = more;
            room = want;
        }
        pfd[0] = (struct pollfd){ .fd = conn, .events = POLLIN };
        pfd[1] = (struct pollfd){ .fd = sfd, .events = POLLIN };
        int n = 2 + job_pollfds(job, pfd + 2, (int)(room - 2));
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
