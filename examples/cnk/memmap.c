/*
 * memmap: where does a program's memory live?  Prints, for the addresses of
 * a small malloc'd block, a large malloc'd block, a variable on the main
 * stack, a variable on a thread's stack, a static variable and main's code,
 * the mapping of /proc/self/smaps holding it (see smaps.h for the format):
 *   heap addr=0x... map=0xS-0xE size_kb=N page_kb=K thp_kb=T rss_kb=R perms=rw-p name=-
 *   bigblock ...   stack ...   thread ...   data ...   text ...
 * Every block is touched first, so the page counts are those of used memory.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "smaps.h"

static int data_var = 42;

static void *thread_main(void *arg)
{
    volatile char on_thread_stack[4096];
    memset((char *)on_thread_stack, 1, sizeof on_thread_stack);
    smaps_print(stdout, "thread", (const void *)on_thread_stack);
    return arg;
}

int main(void)
{
    volatile char on_stack[4096];
    memset((char *)on_stack, 1, sizeof on_stack);
    char *small = malloc(256);
    size_t big_len = 32u << 20;
    char *big = malloc(big_len);
    if (!small || !big) {
        perror("memmap: malloc");
        return 1;
    }
    memset(small, 1, 256);
    memset(big, 1, big_len);
    smaps_print(stdout, "heap", small);
    smaps_print(stdout, "bigblock", big);
    smaps_print(stdout, "stack", (const void *)on_stack);
    pthread_t t;
    if (pthread_create(&t, NULL, thread_main, NULL) != 0 || pthread_join(t, NULL) != 0) {
        perror("memmap: thread");
        return 1;
    }
    smaps_print(stdout, "data", &data_var);
    smaps_print(stdout, "text", (const void *)main);
    return 0;
}
