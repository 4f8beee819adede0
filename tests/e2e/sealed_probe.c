/*
 * sealed_probe - a job that tries to outlive itself (tests/e2e/test_t0760_sealed.py).
 *
 *   sealed_probe escape MARKER exit|wait
 *       Linux mode: a setsid, double-forked `sleep` whose argv[0] is MARKER,
 *       holding no descriptor of the job's; prints "escaped PID" once it
 *       runs, then ends (exit) or sleeps until the job is ended (wait).
 *   sealed_probe leave DIR
 *       tries to move itself into the cgroup DIR (writes 0 to its
 *       cgroup.procs): prints "left" or "refused ERRNO".
 *   sealed_probe mount DIR
 *       tries to mount a cgroup2 file system on DIR (the node sandbox mounts
 *       none): prints "mounted" or "refused ERRNO".
 *   sealed_probe thread MARKER
 *       under cnk (no fork there): a thread that sleeps for ever beside the
 *       main one; prints "threaded" and sleeps until the job is ended.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

static void *forever(void *arg)
{
    (void)arg;
    for (;;)
        pause();
    return NULL;
}

static int escape(const char *marker, int wait)
{
    int ready[2];
    if (pipe2(ready, O_CLOEXEC) < 0) {
        perror("pipe2");
        return 1;
    }
    pid_t child = fork();
    if (child < 0) {
        perror("fork");
        return 1;
    }
    if (child == 0) {
        setsid();
        pid_t grandchild = fork();
        if (grandchild < 0)
            _exit(1);
        if (grandchild > 0) {       /* tell our parent who escaped, and go: init adopts it */
            (void)!write(ready[1], &grandchild, sizeof grandchild);
            _exit(0);
        }
        /* nothing of the job's but the ready pipe (closed by exec) */
        int nul = open("/dev/null", O_RDWR);
        dup2(nul, 0);
        dup2(nul, 1);
        dup2(nul, 2);
        for (int fd = 3; fd < 1024; fd++)
            if (fd != ready[1])
                close(fd);
        char *argv[] = { (char *)marker, "100000", NULL }, *envp[] = { NULL };
        execve("/bin/sleep", argv, envp);
        _exit(127);
    }
    close(ready[1]);
    pid_t who = 0;
    if (read(ready[0], &who, sizeof who) != (ssize_t)sizeof who) {
        fprintf(stderr, "no grandchild\n");
        return 1;
    }
    waitpid(child, NULL, 0);
    char c;
    if (read(ready[0], &c, 1) != 0) {   /* EOF: the grandchild exec'd (close-on-exec) */
        fprintf(stderr, "the grandchild did not exec\n");
        return 1;
    }
    printf("escaped %d\n", (int)who);
    fflush(stdout);
    while (wait)
        pause();
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "escape"))
        return escape(argv[2], !strcmp(argv[3], "wait"));
    if (argc == 3 && !strcmp(argv[1], "leave")) {
        char path[4096];
        snprintf(path, sizeof path, "%s/cgroup.procs", argv[2]);
        int fd = open(path, O_WRONLY);
        if (fd < 0 || write(fd, "0", 1) != 1)
            printf("refused %s\n", strerrorname_np(errno));
        else
            printf("left\n");
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "mount")) {
        if (mount("none", argv[2], "cgroup2", 0, NULL) < 0)
            printf("refused %s\n", strerrorname_np(errno));
        else
            printf("mounted\n");
        return 0;
    }
    if (argc == 3 && !strcmp(argv[1], "thread")) {
        pthread_t t;
        if (pthread_create(&t, NULL, forever, NULL) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            return 1;
        }
        printf("threaded\n");
        fflush(stdout);
        forever(NULL);
    }
    fprintf(stderr, "usage: sealed_probe escape MARKER exit|wait | leave DIR | mount DIR | thread MARKER\n");
    return 2;
}
