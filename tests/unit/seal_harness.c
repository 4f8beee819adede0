/*
 * seal_harness.c - drives protocol/peer/seal.c for tests/unit/test_seal.py.
 * One command a line on stdin, one answer a line on stdout (hex):
 *   derive KEY SN CN ROLE NODE JOB   -> UP DOWN (the peer's tx and rx keys)
 *   seal KEY N PLAIN                 -> the sealed frame, frame number N
 *   open KEY FRAME...                -> each frame opened in turn from number 0, or FAIL (then stops)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lattice/seal.h>

static size_t unhex(const char *s, uint8_t *out, size_t cap)
{
    size_t n = strlen(s) / 2;
    if (n > cap)
        exit(2);
    for (size_t i = 0; i < n; i++)
        sscanf(s + 2 * i, "%2hhx", &out[i]);
    return n;
}

static void hex(const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        printf("%02x", p[i]);
}

static uint8_t a[LAT_SEAL_MAX + 64], b[LAT_SEAL_MAX + 64];
static char line[4 * (LAT_SEAL_MAX + 64)];

int main(void)
{
    while (fgets(line, sizeof line, stdin)) {
        char *cmd = strtok(line, " \n");
        struct lat_seal_keys k = { 0 };
        struct lat_seal s;
        if (!cmd)
            continue;
        if (!strcmp(cmd, "derive")) {
            uint8_t key[32], sn[32], cn[32];
            unhex(strtok(NULL, " \n"), key, 32);
            unhex(strtok(NULL, " \n"), sn, 32);
            unhex(strtok(NULL, " \n"), cn, 32);
            uint32_t role = (uint32_t)strtoul(strtok(NULL, " \n"), NULL, 0);
            uint32_t node = (uint32_t)strtoul(strtok(NULL, " \n"), NULL, 0);
            uint64_t job = strtoull(strtok(NULL, " \n"), NULL, 0);
            if (lat_seal_derive(key, sn, cn, role, node, job, false, &k) < 0)
                return 1;
            hex(k.tx, 32);
            printf(" ");
            hex(k.rx, 32);
        } else if (!strcmp(cmd, "seal")) {
            unhex(strtok(NULL, " \n"), k.tx, 32);
            k.tx_n = strtoull(strtok(NULL, " \n"), NULL, 0);
            size_t n = unhex(strtok(NULL, " \n"), a, sizeof a);
            struct iovec v = { a, n };
            if (lat_seal_init(&s, &k) < 0)
                return 1;
            long m = lat_seal_frame(&s, &v, 1, b);
            if (m < 0)
                printf("FAIL");
            else
                hex(b, (size_t)m);
            lat_seal_free(&s);
        } else if (!strcmp(cmd, "open")) {
            unhex(strtok(NULL, " \n"), k.rx, 32);
            if (lat_seal_init(&s, &k) < 0)
                return 1;
            for (char *f; (f = strtok(NULL, " \n"));) {
                size_t n = unhex(f, a, sizeof a);
                uint32_t len;
                /* as a receiver: the length first, then exactly that many bytes and the tag */
                if (n < LAT_SEAL_LEN_BYTES || lat_open_begin(&s, a, &len) < 0 ||
                    n != LAT_SEAL_LEN_BYTES + len + LAT_SEAL_TAG_BYTES ||
                    lat_open_update(&s, a + LAT_SEAL_LEN_BYTES, len, b) < 0 ||
                    lat_open_end(&s, a + LAT_SEAL_LEN_BYTES + len) < 0) {
                    printf("FAIL");
                    break;
                }
                hex(b, len);
                printf(" ");
            }
            lat_seal_free(&s);
        }
        printf("\n");
        fflush(stdout);
    }
    return 0;
}
