/*
 * stdio_malloc: an ordinary C program using stdio and malloc, unchanged.
 *
 *   stdio_malloc N
 *
 * Builds a linked list of N small blocks holding i*i, grows a buffer with
 * realloc, takes a large block (malloc's mmap path) and a calloc'd one,
 * checks them, and prints
 *   rank R: stdio+malloc ok sum=S big=B
 * where S = sum of i*i for i < N and B = the checksum of the large block,
 * so the caller can check the values.  stderr gets one line too.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct node { struct node *next; uint64_t v; char pad[40]; };

static void die(const char *what)
{
    fprintf(stderr, "stdio_malloc: %s: %s\n", what, strerror(errno));
    exit(1);
}

int main(int argc, char **argv)
{
    const char *rank = getenv("LATTICE_RANK");
    long n = argc > 1 ? atol(argv[1]) : 1000;

    struct node *head = NULL;
    for (long i = 0; i < n; i++) {
        struct node *p = malloc(sizeof *p);
        if (!p) die("malloc");
        p->v = (uint64_t)i * (uint64_t)i;
        p->next = head;
        head = p;
    }
    uint64_t sum = 0;
    while (head) {
        struct node *next = head->next;
        sum += head->v;
        free(head);
        head = next;
    }

    /* a growing buffer: realloc moves it around the heap */
    size_t len = 0, cap = 16;
    char *text = malloc(cap);
    if (!text) die("malloc");
    for (long i = 0; i < n; i++) {
        char item[32];
        int k = snprintf(item, sizeof item, "%ld,", i);
        if (len + (size_t)k + 1 > cap) {
            cap *= 2;
            char *t = realloc(text, cap);
            if (!t) die("realloc");
            text = t;
        }
        memcpy(text + len, item, (size_t)k + 1);
        len += (size_t)k;
    }
    long parsed = 0, count = 0;
    for (char *tok = strtok(text, ","); tok; tok = strtok(NULL, ","), count++)
        parsed += atol(tok);
    if (count != n || parsed != n * (n - 1) / 2) {
        fprintf(stderr, "stdio_malloc: realloc'd text is wrong (%ld items, sum %ld)\n", count, parsed);
        return 1;
    }
    free(text);

    /* a large block (mmap'd by malloc under Linux) and a zeroed one */
    size_t big = 64u << 20;
    uint32_t *b = malloc(big);
    uint32_t *z = calloc(big / sizeof *z, sizeof *z);
    if (!b || !z) die("malloc 64 MiB");
    uint64_t check = 0;
    for (size_t i = 0; i < big / sizeof *b; i++)
        b[i] = (uint32_t)(i * 2654435761u);
    for (size_t i = 0; i < big / sizeof *b; i += 1024)
        check += b[i] + z[i];
    free(b);
    free(z);

    fprintf(stderr, "rank %s: stderr works\n", rank ? rank : "?");
    printf("rank %s: stdio+malloc ok sum=%llu big=%llu\n", rank ? rank : "?",
           (unsigned long long)sum, (unsigned long long)check);
    return 0;
}
