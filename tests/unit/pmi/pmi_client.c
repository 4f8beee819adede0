/*
 * pmi_client - a scripted PMI client for tests: speaks raw PMI-1 and PMI-2
 * lines on the PMI_FD its compute node gives it and prints every reply.
 *
 *   pmi_client STEP...
 *     1:TEXT   send TEXT + "\n" (PMI-1) and print the reply line
 *     2:TEXT   send TEXT with its 6-character length prefix (PMI-2), print the reply
 *     s:TEXT   send TEXT as it is ("\n" in TEXT is a newline), read nothing
 *     r1: r2:  read and print one PMI-1 / PMI-2 reply
 *     env:     print PMI_FD, PMI_RANK, PMI_SIZE, PMI_JOBID
 *     peer:    print the name of the process at the other end of PMI_FD (SO_PEERCRED)
 * In TEXT, %r is the rank, %n the size, %o the next rank (mod size), %j PMI_JOBID.
 * Each reply is printed as "<rank>> <reply>"; a read that fails prints "<rank>> EOF".
 */
#define _GNU_SOURCE             /* struct ucred, SO_PEERCRED */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int fd, rank, size;
static const char *jobid = "";

static void expand(const char *in, char *out, size_t cap)
{
    size_t n = 0;
    for (; *in && n + 32 < cap; in++) {
        if (in[0] == '%' && in[1]) {
            in++;
            if (*in == 'r') n += (size_t)snprintf(out + n, cap - n, "%d", rank);
            else if (*in == 'n') n += (size_t)snprintf(out + n, cap - n, "%d", size);
            else if (*in == 'o') n += (size_t)snprintf(out + n, cap - n, "%d", (rank + 1) % size);
            else if (*in == 'j') n += (size_t)snprintf(out + n, cap - n, "%s", jobid);
            else out[n++] = *in;
        } else if (in[0] == '\\' && in[1] == 'n') {
            out[n++] = '\n';
            in++;
        } else {
            out[n++] = *in;
        }
    }
    out[n] = '\0';
}

static void put(const char *s, size_t n)
{
    while (n) {
        ssize_t w = write(fd, s, n);
        if (w <= 0) {
            printf("%d> write failed\n", rank);
            exit(3);
        }
        s += w;
        n -= (size_t)w;
    }
}

static int get(char *buf, size_t n)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

static void reply1(void)
{
    char line[8192];
    size_t n = 0;
    while (n < sizeof line - 1 && get(line + n, 1) == 0 && line[n] != '\n')
        n++;
    if (n == 0 || (n < sizeof line - 1 && line[n] != '\n')) {
        printf("%d> EOF\n", rank);
        return;
    }
    line[n] = '\0';
    printf("%d> %s\n", rank, line);
}

static void reply2(void)
{
    char len[7] = { 0 }, body[8192];
    if (get(len, 6) < 0) {
        printf("%d> EOF\n", rank);
        return;
    }
    size_t n = (size_t)strtoul(len, NULL, 10);
    if (n >= sizeof body || get(body, n) < 0) {
        printf("%d> EOF\n", rank);
        return;
    }
    body[n] = '\0';
    printf("%d> [%s]%s\n", rank, len, body);
}

int main(int argc, char **argv)
{
    const char *f = getenv("PMI_FD"), *r = getenv("PMI_RANK"), *s = getenv("PMI_SIZE");
    if (!f || !r || !s) {
        printf("no PMI_FD/PMI_RANK/PMI_SIZE\n");
        return 2;
    }
    fd = atoi(f);
    rank = atoi(r);
    size = atoi(s);
    if (getenv("PMI_JOBID"))
        jobid = getenv("PMI_JOBID");
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int i = 1; i < argc; i++) {
        static char text[16384];
        const char *a = argv[i];
        if (!strcmp(a, "env:")) {
            printf("%d> PMI_FD=%s PMI_RANK=%s PMI_SIZE=%s PMI_JOBID=%s\n", rank, f, r, s, jobid);
        } else if (!strcmp(a, "peer:")) {
            struct ucred cr;
            socklen_t len = sizeof cr;
            char path[64], comm[64] = "?";
            FILE *cf;
            if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0) {
                snprintf(path, sizeof path, "/proc/%d/comm", (int)cr.pid);
                if ((cf = fopen(path, "r"))) {
                    if (fgets(comm, sizeof comm, cf))
                        comm[strcspn(comm, "\n")] = '\0';
                    fclose(cf);
                }
            }
            printf("%d> peer=%s\n", rank, comm);
        } else if (!strcmp(a, "r1:")) {
            reply1();
        } else if (!strcmp(a, "r2:")) {
            reply2();
        } else if (!strncmp(a, "1:", 2) || !strncmp(a, "s:", 2)) {
            expand(a + 2, text, sizeof text - 2);
            size_t n = strlen(text);
            if (a[0] == '1')
                text[n++] = '\n';
            put(text, n);
            if (a[0] == '1')
                reply1();
        } else if (!strncmp(a, "2:", 2)) {
            char pre[8];
            expand(a + 2, text, sizeof text);
            snprintf(pre, sizeof pre, "%6u", (unsigned)strlen(text));
            put(pre, 6);
            put(text, strlen(text));
            reply2();
        } else {
            printf("bad step %s\n", a);
            return 2;
        }
    }
    return 0;
}
