/*
 * threads: a pthreads program.  The main thread starts WORKERS threads
 * (default 1, so two threads run), each sums its share of 0..N-1 into a
 * mutex-protected total, counts in a thread-local variable, and signals a
 * condition variable when done.  Prints
 *   threads: W workers + main ok total=T tls=K
 * T = sum of 0..N-1 (the caller checks it), K = what each thread counted.
 * A pthread_create failure is reported with its error name, exit 3:
 *   threads: pthread_create #I failed: EAGAIN (...)
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
static uint64_t total;
static int done, go;     /* go: every worker has been created (or one could not be) */
static __thread long tls_count;
static long n, parts;

struct share { long part; long counted; pid_t tid; };

static void *work(void *arg)
{
    struct share *s = arg;
    uint64_t local = 0;
    /* all workers are alive at once, so a thread limit shows whatever the timing */
    pthread_mutex_lock(&lock);
    while (!go)
        pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    for (long i = s->part; i < n; i += parts) {
        local += (uint64_t)i;
        tls_count++;
    }
    s->counted = tls_count;
    s->tid = gettid();
    pthread_mutex_lock(&lock);
    total += local;
    done++;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
    return s;
}

int main(int argc, char **argv)
{
    int workers = argc > 1 ? atoi(argv[1]) : 1;
    n = argc > 2 ? atol(argv[2]) : 10000000;
    if (workers < 0 || workers > 64) return 2;
    parts = workers + 1;
    pthread_t t[64];
    struct share s[65];
    for (int i = 0; i <= workers; i++)
        s[i] = (struct share){ .part = i };
    for (int i = 0; i < workers; i++) {
        int e = pthread_create(&t[i], NULL, work, &s[i + 1]);
        if (e) {
            printf("threads: pthread_create #%d failed: %s (%s)\n", i + 1, strerrorname_np(e), strerror(e));
            return 3;
        }
    }
    pthread_mutex_lock(&lock);
    go = 1;
    pthread_cond_broadcast(&cond);
    pthread_mutex_unlock(&lock);
    work(&s[0]);
    pthread_mutex_lock(&lock);
    while (done < parts)
        pthread_cond_wait(&cond, &lock);
    pthread_mutex_unlock(&lock);
    long counted = 0;
    for (int i = 0; i < workers; i++) {
        void *r;
        pthread_join(t[i], &r);
        if (r != &s[i + 1]) return 4;
    }
    for (int i = 0; i <= workers; i++) {
        counted += s[i].counted;
        for (int j = 0; j < i; j++)
            if (s[i].tid == s[j].tid) {
                printf("threads: two workers ran on one thread\n");
                return 5;
            }
    }
    printf("threads: %d workers + main ok total=%llu tls=%ld\n", workers, (unsigned long long)total, counted);
    return counted == n ? 0 : 6;
}
