/*
 * init.c - lattice-pidns-init, pid 1 of a block's pid namespace on a host.
 *
 * The host agent starts it at boot under `unshare --pid=FILE --fork`
 * (service/lattice/nodes/blocknet.py), which keeps the namespace bound on
 * FILE; each node's sandbox holder of the block on this host is then cloned
 * into it (compute/cnode/sandbox.c), so the ranks of the block's nodes on a
 * host see each other's pids, as MPI's single-copy transfers need
 * (process_vm_readv: UCX's cma, Open MPI's vader).  A pid namespace takes
 * new processes only while its pid 1 lives, and processes orphaned in it
 * are reparented to pid 1: so this one lives as long as the block's
 * network and reaps, nothing else.  It installs no signal handler, so the
 * kernel drops every signal sent to it, from inside its namespace or from
 * the host, but SIGKILL from the host: a job cannot end it.  The agent
 * ends it so at `lattice free`, and with it every process left in the
 * namespace.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void)
{
    if (getpid() != 1) {
        fprintf(stderr, "lattice-pidns-init: must be pid 1 of a new pid namespace (started by the host agent "
                        "under unshare --pid --fork), not pid %d\n", (int)getpid());
        return 2;
    }
    prctl(PR_SET_DUMPABLE, 0);          /* a job of root (without capabilities) cannot trace it */
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    /* ready: the agent reads this line; then nothing of the agent's is held */
    if (write(1, "ready\n", 6) != 6)
        return 1;
    for (int fd = 0; fd < 3; fd++)
        close(fd);
    for (;;) {
        while (waitpid(-1, NULL, WNOHANG) > 0)
            ;
        if (sigwaitinfo(&chld, NULL) < 0 && errno != EINTR)
            return 1;
    }
}
