/*
 * fileops: each rank exercises the shipped file calls in its own directory
 * under the working directory, and leaves exactly
 *     rank-R/result.txt   containing "rank R of N\n" repeated R+1 times
 * and nothing else.  Any failure prints the call and exits 1.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CHECK(cond, what) do { if (!(cond)) { \
    fprintf(stderr, "rank %d: %s failed: %s\n", rank, what, strerror(errno)); exit(1); } } while (0)

static int rank;

int main(void)
{
    rank = atoi(getenv("LATTICE_RANK") ? getenv("LATTICE_RANK") : "0");
    int size = atoi(getenv("LATTICE_SIZE") ? getenv("LATTICE_SIZE") : "1");
    char dir[64], tmp[96], final[96], line[64], buf[4096];

    snprintf(dir, sizeof dir, "rank-%d", rank);
    snprintf(tmp, sizeof tmp, "%s/data.tmp", dir);
    snprintf(final, sizeof final, "%s/result.txt", dir);
    snprintf(line, sizeof line, "rank %d of %d\n", rank, size);

    CHECK(mkdir(dir, 0755) == 0, "mkdir");

    /* write with the raw calls... */
    int fd = open(tmp, O_CREAT | O_EXCL | O_WRONLY, 0644);
    CHECK(fd >= 0, "open");
    size_t len = strlen(line);
    for (int i = 0; i <= rank; i++)
        CHECK(write(fd, line, len) == (ssize_t)len, "write");
    CHECK(close(fd) == 0, "close");

    /* ...and read back through stdio */
    FILE *f = fopen(tmp, "r");
    CHECK(f != NULL, "fopen");
    size_t got = fread(buf, 1, sizeof buf - 1, f);
    CHECK(fclose(f) == 0, "fclose");
    CHECK(got == len * (size_t)(rank + 1), "read back length");
    for (int i = 0; i <= rank; i++)
        CHECK(memcmp(buf + (size_t)i * len, line, len) == 0, "read back content");

    struct stat st;
    CHECK(stat(tmp, &st) == 0, "stat");
    CHECK(st.st_size == (off_t)got && S_ISREG(st.st_mode), "stat result");

    /* a scratch file that must be gone at the end */
    char scratch[96];
    snprintf(scratch, sizeof scratch, "%s/scratch", dir);
    f = fopen(scratch, "w");
    CHECK(f != NULL, "fopen scratch");
    fprintf(f, "temporary\n");
    CHECK(fclose(f) == 0, "fclose scratch");

    int entries = 0;
    DIR *d = opendir(dir);
    CHECK(d != NULL, "opendir");
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            entries++;
    CHECK(closedir(d) == 0, "closedir");
    CHECK(entries == 2, "directory listing");

    CHECK(rename(tmp, final) == 0, "rename");
    CHECK(unlink(scratch) == 0, "unlink");
    CHECK(access(scratch, F_OK) == -1 && errno == ENOENT, "access after unlink");

    printf("rank %d: ok (%zu bytes, %d entries listed)\n", rank, got, entries);
    return 0;
}
