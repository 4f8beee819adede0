/* cancel_probe MODE: a job for tests/e2e/test_t0430_cancel.py.  Every rank
 * prints "rank R ready", then waits for signals:
 *   stubborn   SIGTERM is ignored (so only SIGKILL ends it); SIGUSR1 prints "rank R got SIGUSR1"
 *   graceful   SIGTERM prints "rank R saving" and exits 0
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t got_usr1, got_term;

static void on_usr1(int sig) { (void)sig; got_usr1 = 1; }
static void on_term(int sig) { (void)sig; got_term = 1; }

int main(int argc, char **argv)
{
    const char *r = getenv("LATTICE_RANK");
    int graceful = argc > 1 && !strcmp(argv[1], "graceful");

    signal(SIGUSR1, on_usr1);
    signal(SIGTERM, graceful ? on_term : SIG_IGN);
    printf("rank %s ready\n", r ? r : "?");
    fflush(stdout);
    for (int i = 0; i < 600; i++) {
        usleep(100000);
        if (got_usr1) {
            got_usr1 = 0;
            printf("rank %s got SIGUSR1\n", r ? r : "?");
            fflush(stdout);
        }
        if (got_term) {
            printf("rank %s saving\n", r ? r : "?");
            return 0;
        }
    }
    return 1;
}
