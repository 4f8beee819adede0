/*
 * holder: a program that keeps a secret in its memory, for the attack test
 * (tests/e2e/test_t0740_attacks.py), installed setuid root by the test, or
 * left an ordinary program.
 *
 *   holder FD_OUT FD_IN
 *
 * Writes the address of its secret to FD_OUT, waits until FD_IN has a byte
 * (the attacker is done), then prints whether the secret is intact.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SECRET "holder-secret-7f3a9c1e-only-root-may-read-this"

static char secret[64] = SECRET;

int main(int argc, char **argv)
{
    char line[64], b;

    if (argc != 3)
        return 2;
    int out = atoi(argv[1]), in = atoi(argv[2]);
    int n = snprintf(line, sizeof line, "%p %zu\n", (void *)secret, sizeof secret);
    if (write(out, line, (size_t)n) != n)
        return 1;
    close(out);
    if (read(in, &b, 1) != 1)
        return 1;
    printf("holder euid %d: secret %s\n", (int)geteuid(), strcmp(secret, SECRET) ? "OVERWRITTEN" : "intact");
    return 0;
}
