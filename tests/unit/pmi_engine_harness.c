/*
 * pmi_engine_harness.c - drives ciod's PMI engine (ionode/ciod/pmi_engine.c)
 * with no socket: one command per line on stdin, what the engine's callbacks
 * got on stdout, then "." when the command is done (tests/unit/test_pmi_engine.py).
 *
 *   job ID NRANKS MAPPING RANK:NODE:APP...   a new engine (MAPPING "-": none)
 *   treejob ID NRANKS MAPPING RANK:NODE:APP...   the same, of a job with a PMI fence tree
 *   limits JK JB PK PB    the next job's struct pmi_limits (0: the default)
 *   tree NCHILDREN        the job's tree: I/O nodes below -> "tree ok" or "tree refused"
 *   treeup                the way up is open (fences may go up)
 *   child C JOB EPOCH FLAGS [KEY=VALUE...]   a LAT_CTL_FENCE from child C
 *                         -> "refused WHY" or "ok"
 *   childgone C           child C's connection ended
 *   in SLOT TEXT          the bytes TEXT (\n, \0, \\ escapes) from a process
 *   bytes SLOT TEXT       the same, one byte per call
 *   exit SLOT STATUS      the process exited
 *   slot RANK             -> "slot S node N" or "slot -1"
 *   fenceout JOB EPOCH FLAGS [KEY=VALUE...]   a LAT_CTL_FENCE_OUT
 *                         -> "refused WHY", "matched" or "unmatched"
 *   nameout RANK OP RC [PORT]   a LAT_CTL_NAME_OUT -> "matched" or "unmatched"
 *
 * Callbacks print: "answer SLOT RANK NODE TEXT" (escaped as above),
 * "fence JOB EPOCH FLAGS KEY=VALUE..." per chunk, "name RANK OP SERVICE PORT",
 * "abort RANK CODE MSG",
 * "bad RANK TEXT", "note TEXT", "broken TEXT".
 */
#include "pmi_engine.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put_escaped(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '\n')
            fputs("\\n", stdout);
        else if (s[i] == '\0')
            fputs("\\0", stdout);
        else if (s[i] == '\\')
            fputs("\\\\", stdout);
        else
            putchar(s[i]);
    }
}

static size_t unescape(char *s)
{
    size_t w = 0;

    for (size_t r = 0; s[r]; r++) {
        if (s[r] == '\\' && s[r + 1]) {
            r++;
            s[w++] = s[r] == 'n' ? '\n' : s[r] == '0' ? '\0' : s[r];
        } else {
            s[w++] = s[r];
        }
    }
    return w;
}

static void on_answer(void *ctx, const struct pmi_dest *to, const char *data, size_t len)
{
    (void)ctx;
    printf("answer %u %u %u ", to->slot, to->rank, to->node);
    put_escaped(data, len);
    putchar('\n');
}

static void on_fence(void *ctx, const char *msg, const size_t *len, int n)
{
    (void)ctx;
    for (int i = 0; i < n; i++) {
        struct lat_fence f;
        const char *s = msg + sizeof(f);
        memcpy(&f, msg, sizeof(f));
        printf("fence %" PRIu64 " %u %u", f.job, f.epoch, f.flags);
        for (uint32_t k = 0; k < f.nkv; k++) {
            const char *v = s + strlen(s) + 1;
            printf(" %s=%s", s, v);
            s = v + strlen(v) + 1;
        }
        if ((size_t)(s - msg) != len[i])
            printf(" LENGTH-MISMATCH");
        putchar('\n');
        msg += len[i];
    }
}

static void on_abort(void *ctx, const struct pmi_dest *who, int code, const char *msg)
{
    (void)ctx;
    printf("abort %u %d %s\n", who->rank, code, msg);
}

static void on_name(void *ctx, const struct pmi_dest *who, int op, const char *service, const char *port)
{
    (void)ctx;
    printf("name %u %d %s %s\n", who->rank, op, service, *port ? port : "-");
}

static void on_bad_request(void *ctx, const struct pmi_dest *who, const char *text)
{
    (void)ctx;
    printf("bad %u %s\n", who->rank, text);
}

static void on_note(void *ctx, const char *text)
{
    (void)ctx;
    printf("note %s\n", text);
}

static void on_broken(void *ctx, const char *text)
{
    (void)ctx;
    printf("broken %s\n", text);
}

static const struct pmi_ops ops = { .answer = on_answer, .fence = on_fence, .name = on_name, .abort = on_abort,
                                    .bad_request = on_bad_request, .note = on_note, .broken = on_broken };

static struct pmi_limits lim;

static struct pmi_engine *new_job(char *args, bool tree)
{
    static struct lat_slot slot[64];
    static char mapping[65536];
    struct pmi_job job = { .slot = slot, .tree = tree, .lim = lim };
    int used;

    if (sscanf(args, "%" SCNu64 " %u %65535s%n", &job.id, &job.nranks, mapping, &used) != 3)
        return NULL;
    job.mapping = strcmp(mapping, "-") ? mapping : "";
    for (char *tok = strtok(args + used, " "); tok && job.nslots < 64; tok = strtok(NULL, " ")) {
        struct lat_slot *s = &slot[job.nslots++];
        if (sscanf(tok, "%u:%u:%u", &s->rank, &s->node, &s->app) != 3)
            return NULL;
    }
    return pmi_engine_new(&job, &ops);
}

/* A fence message from "JOB EPOCH FLAGS KEY=VALUE...": its length, 0 if malformed. */
static size_t fence_msg(char *args, char *msg)
{
    struct lat_fence f = { 0 };
    size_t len = sizeof(f);
    int used;

    if (sscanf(args, "%" SCNu64 " %u %u%n", &f.job, &f.epoch, &f.flags, &used) != 3)
        return 0;
    for (char *tok = strtok(args + used, " "); tok; tok = strtok(NULL, " ")) {
        char *eq = strchr(tok, '=');
        if (!eq)
            continue;
        *eq = '\0';
        len += (size_t)sprintf(msg + len, "%s", tok) + 1;
        len += (size_t)sprintf(msg + len, "%s", eq + 1) + 1;
        f.nkv++;
    }
    memcpy(msg, &f, sizeof(f));
    return len;
}

static void fence_out(struct pmi_engine *e, char *args)
{
    static char msg[65536];
    char why[256];
    size_t len = fence_msg(args, msg);

    if (!len)
        puts("usage");
    else if (pmi_fence_check(msg, len, why, sizeof(why)) < 0)
        printf("refused %s\n", why);
    else
        puts(pmi_engine_fence_out(e, msg, NULL) ? "matched" : "unmatched");
}

static void child_fence(struct pmi_engine *e, char *args)
{
    static char msg[65536];
    char why[256];
    unsigned child;
    int used = 0;
    size_t len;

    if (sscanf(args, "%u %n", &child, &used) < 1 || !(len = fence_msg(args + used, msg)))
        puts("usage");
    else if (pmi_fence_check(msg, len, why, sizeof(why)) < 0
             || pmi_engine_child_fence(e, child, msg, why, sizeof(why), NULL) < 0)
        printf("refused %s\n", why);
    else
        puts("ok");
}

int main(void)
{
    static char line[131072];
    struct pmi_engine *e = NULL;

    setvbuf(stdout, NULL, _IOLBF, 0);
    while (fgets(line, sizeof(line), stdin)) {
        char *nl = strchr(line, '\n'), *arg;
        unsigned a, b;
        if (nl)
            *nl = '\0';
        arg = strchr(line, ' ');
        arg = arg ? arg + 1 : line + strlen(line);
        if (!strncmp(line, "limits ", 7)) {
            if (sscanf(arg, "%u %zu %u %zu", &lim.job_keys, &lim.job_bytes, &lim.proc_keys, &lim.proc_bytes) != 4)
                puts("bad limits");
        } else if (!strncmp(line, "job ", 4) || !strncmp(line, "treejob ", 8)) {
            pmi_engine_free(e);
            if (!(e = new_job(arg, line[0] == 't')))
                puts("no engine");
        } else if (!e) {
            puts("no job");
        } else if (!strncmp(line, "in ", 3) || !strncmp(line, "bytes ", 6)) {
            char *text = strchr(arg, ' ');
            text = text ? text + 1 : arg + strlen(arg);
            size_t n = unescape(text);
            a = (unsigned)strtoul(arg, NULL, 10);
            if (line[0] == 'i')
                pmi_engine_input(e, a, text, n, NULL);
            else
                for (size_t i = 0; i < n; i++)
                    pmi_engine_input(e, a, text + i, 1, NULL);
        } else if (sscanf(line, "exit %u %u", &a, &b) == 2) {
            pmi_engine_exit(e, a, (int)b, NULL);
        } else if (sscanf(line, "slot %u", &a) == 1) {
            uint32_t node = 0;
            int s = pmi_engine_slot(e, a, &node);
            if (s < 0)
                puts("slot -1");
            else
                printf("slot %d node %u\n", s, node);
        } else if (!strncmp(line, "fenceout ", 9)) {
            fence_out(e, arg);
        } else if (sscanf(line, "tree %u", &a) == 1) {
            puts(pmi_engine_tree(e, a) == 0 ? "tree ok" : "tree refused");
        } else if (!strcmp(line, "treeup")) {
            pmi_engine_tree_up(e, NULL);
        } else if (!strncmp(line, "child ", 6)) {
            child_fence(e, arg);
        } else if (sscanf(line, "childgone %u", &a) == 1) {
            pmi_engine_child_gone(e, a, NULL);
        } else if (!strncmp(line, "nameout ", 8)) {
            unsigned rank;
            int op, rc, used = 0;
            if (sscanf(arg, "%u %d %d %n", &rank, &op, &rc, &used) < 3)
                puts("usage");
            else
                puts(pmi_engine_name_out(e, rank, op, rc, arg + used, NULL) ? "matched" : "unmatched");
        } else {
            printf("unknown command: %s\n", line);
        }
        puts(".");
    }
    pmi_engine_free(e);
    return 0;
}
