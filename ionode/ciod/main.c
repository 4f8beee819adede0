/*
 * main.c - ciod, the I/O node daemon of one pset: arguments, the block
 * key, the listening socket and the accept loop.  Every connection is
 * served by its own detached thread (session.c), so a call blocked in the
 * file system never holds up another node or process; admit.c caps how
 * many there are.
 */
#include "ciod.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

struct ciod_config cfg;

#define THREAD_STACK (512u * 1024u)    /* the deepest handler, a socket rendezvous, keeps ~48 KiB of segment lists on it */

static void usage(FILE *f)
{
    fprintf(f, "usage: ciod --block NAME --pset N --pset-size P --listen ADDR [--listen ADDR2]\n"
               "            --key-file FILE --ras FILE --location LOC [--notify-fd FD]\n"
               "            [--plugin PATH[:LIMIT][;CONFIG]]...\n"
               "  ADDR is unix:/abs/path.sock or tcp:HOST:PORT (PORT 0: any free port)\n"
               "  --notify-fd: write \"listening ADDR\" per address, \"node N\" as each compute node\n"
               "  connects and \"ready\" once every compute node of the pset is connected\n"
               "  (for the host agent)\n");
}

static int parse_u32(const char *s, uint32_t max, uint32_t *out)
{
    char *end;
    unsigned long v;

    errno = 0;
    v = strtoul(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v > max)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

/* 64 hex digits and an optional newline, readable by its owner only. */
static int load_key(const char *path, uint8_t key[LAT_KEY_BYTES], char *err, size_t errlen)
{
    char text[2 * LAT_KEY_BYTES + 2];
    struct stat st;
    ssize_t n;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return errprintf(err, errlen, "cannot open key file %s: %s", path, strerror(errno));
    if (fstat(fd, &st) < 0 || (st.st_mode & 077)) {
        close(fd);
        return errprintf(err, errlen, "key file %s must not be accessible to group or others "
                         "(mode %04o; chmod 600)", path, (unsigned)(st.st_mode & 07777));
    }
    n = read(fd, text, sizeof(text));
    close(fd);
    if (n == 2 * LAT_KEY_BYTES + 1 && text[n - 1] == '\n')
        n--;
    if (n != 2 * LAT_KEY_BYTES)
        return errprintf(err, errlen, "key file %s: want %u hex digits and an optional newline",
                         path, 2 * LAT_KEY_BYTES);
    for (unsigned i = 0; i < LAT_KEY_BYTES; i++) {
        unsigned v;
        char pair[3] = { text[2 * i], text[2 * i + 1], 0 };
        char *end;
        v = (unsigned)strtoul(pair, &end, 16);
        if (*end || !isxdigit((unsigned char)pair[0]) || !isxdigit((unsigned char)pair[1]))
            return errprintf(err, errlen, "key file %s: not hexadecimal", path);
        key[i] = (uint8_t)v;
    }
    return 0;
}

void notify(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    int n;

    if (cfg.notify_fd < 0)
        return;
    va_start(ap, fmt);
    n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof(line) - 1)
        return;
    line[n++] = '\n';
    if (write(cfg.notify_fd, line, (size_t)n) < 0) {
        /* the agent is gone: it kills us anyway */
    }
}

/* The address a listener really has: a tcp: one with port 0 gets its port. */
static void bound_address(int fd, const char *asked, char *out, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof(ss);
    const char *colon = strrchr(asked, ':');

    snprintf(out, len, "%s", asked);
    if (strncmp(asked, "tcp:", 4) != 0 || !colon || getsockname(fd, (struct sockaddr *)&ss, &sl) < 0)
        return;
    unsigned port = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                             : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    snprintf(out, len, "%.*s:%u", (int)(colon - asked), asked, port);
}

static int parse_args(int argc, char **argv, const char **keyfile, const char **ras)
{
    static const struct option opts[] = {
        { "block", required_argument, NULL, 'b' },
        { "pset", required_argument, NULL, 'p' },
        { "pset-size", required_argument, NULL, 's' },
        { "listen", required_argument, NULL, 'l' },
        { "key-file", required_argument, NULL, 'k' },
        { "ras", required_argument, NULL, 'r' },
        { "location", required_argument, NULL, 'L' },
        { "plugin", required_argument, NULL, 'P' },
        { "notify-fd", required_argument, NULL, 'n' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    bool have_pset = false, have_size = false;
    int o;

    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (o) {
        case 'b': cfg.block = optarg; break;
        case 'l':
            if (cfg.listen && cfg.listen_also) {
                fprintf(stderr, "ciod: at most two --listen addresses\n");
                return -1;
            }
            *(cfg.listen ? &cfg.listen_also : &cfg.listen) = optarg;
            break;
        case 'n': {
            uint32_t fd;
            if (parse_u32(optarg, 1u << 20, &fd) < 0 || fd < 3 || fcntl((int)fd, F_GETFD) < 0) {
                fprintf(stderr, "ciod: --notify-fd must be an open descriptor above 2: %s\n", optarg);
                return -1;
            }
            cfg.notify_fd = (int)fd;
            fcntl(cfg.notify_fd, F_SETFD, FD_CLOEXEC);     /* no worker or job inherits it */
            break;
        }
        case 'k': *keyfile = optarg; break;
        case 'r': *ras = optarg; break;
        case 'L': cfg.location = optarg; break;
        case 'p':
            if (parse_u32(optarg, 1u << 20, &cfg.pset) < 0) {
                fprintf(stderr, "ciod: bad --pset: %s\n", optarg);
                return -1;
            }
            have_pset = true;
            break;
        case 's':
            if (parse_u32(optarg, LAT_MAX_PSET, &cfg.pset_size) < 0 || cfg.pset_size == 0) {
                fprintf(stderr, "ciod: --pset-size must be 1..%u: %s\n", LAT_MAX_PSET, optarg);
                return -1;
            }
            have_size = true;
            break;
        case 'P': {
            char err[CIOD_ERRLEN];
            if (plugin_add(optarg, err, sizeof(err)) < 0) {
                fprintf(stderr, "ciod: %s\n", err);
                return -1;
            }
            break;
        }
        case 'h':
            usage(stdout);
            exit(0);
        default:
            usage(stderr);
            return -1;
        }
    }
    if (optind < argc || !cfg.block || !have_pset || !have_size || !cfg.listen || !*keyfile
        || !*ras || !cfg.location) {
        usage(stderr);
        return -1;
    }
    return 0;
}

static void serve(int fd, pthread_attr_t *attr)
{
    pthread_t t;
    struct conn *c = conn_new(fd);

    if (!c) {
        logmsg("no memory for a new connection");
        close(fd);
        return;
    }
    if (!admit_new(c)) {
        conn_put(c);                /* over the cap: closed at once */
        return;
    }
    int rc = pthread_create(&t, attr, session_thread, c);
    if (rc != 0) {
        logmsg("cannot start a connection thread: %s", strerror(rc));
        admit_undo(c);
        conn_put(c);
    }
}

int main(int argc, char **argv)
{
    const char *keyfile = NULL, *ras = NULL;
    char err[CIOD_ERRLEN], addr[2][300];
    pthread_attr_t attr;
    struct pollfd lfd[2] = { { .fd = -1, .events = POLLIN }, { .fd = -1, .events = POLLIN } };
    nfds_t nl = 1;

    cfg.notify_fd = -1;
    if (parse_args(argc, argv, &keyfile, &ras) < 0)
        return 2;
    /* a worker writes its name over argv: keep nothing there */
    cfg.block = strdup(cfg.block);
    cfg.listen = strdup(cfg.listen);
    cfg.listen_also = cfg.listen_also ? strdup(cfg.listen_also) : NULL;
    cfg.location = strdup(cfg.location);
    if (!cfg.block || !cfg.listen || !cfg.location)
        return 1;
    cfg.title = argv[0];
    cfg.titlelen = (size_t)(argv[argc - 1] + strlen(argv[argc - 1]) - argv[0]);
    /* Peers that vanish must cost an EPIPE, not the daemon. */
    signal(SIGPIPE, SIG_IGN);
    datapath_init();
    libcache_init();
    if (load_key(keyfile, cfg.key, err, sizeof(err)) < 0 || ras_open(ras, err, sizeof(err)) < 0
        || admit_init(err, sizeof(err)) < 0
        || plugin_load_all(err, sizeof(err)) < 0 || (lfd[0].fd = net_listen(cfg.listen, err, sizeof(err))) < 0
        || (cfg.listen_also && (lfd[nl++].fd = net_listen(cfg.listen_also, err, sizeof(err))) < 0)) {
        logmsg("%s", err);
        return 1;
    }
    bound_address(lfd[0].fd, cfg.listen, addr[0], sizeof(addr[0]));
    if (nl > 1)
        bound_address(lfd[1].fd, cfg.listen_also, addr[1], sizeof(addr[1]));
    ras_event(RAS_INFO, cfg.location, "ciod of block %s pset %u (%u compute nodes) listening on %s%s%s",
              cfg.block, cfg.pset, cfg.pset_size, addr[0], nl > 1 ? " and " : "", nl > 1 ? addr[1] : "");
    for (nfds_t i = 0; i < nl; i++)
        notify("listening %s", addr[i]);

    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, THREAD_STACK);
    for (;;) {
        if (nl > 1 && poll(lfd, nl, -1) < 0)
            continue;
        for (nfds_t i = 0; i < nl; i++) {
            if (nl > 1 && !(lfd[i].revents & POLLIN))
                continue;
            int fd = accept4(lfd[i].fd, NULL, NULL, SOCK_CLOEXEC);
            if (fd < 0) {
                if (errno == EINTR || errno == ECONNABORTED || errno == EAGAIN)
                    continue;
                /* out of descriptors or memory: wait for some to come back */
                logmsg("accept: %s", strerror(errno));
                nanosleep(&(struct timespec){ .tv_nsec = 100 * 1000 * 1000 }, NULL);
                continue;
            }
            serve(fd, &attr);
        }
    }
}
