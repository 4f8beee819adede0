/* secrets_probe: what a job can see of the machine's secrets.  Prints its
 * uid, then "open PATH: ok" or "open PATH: <errno>" for each argument (a
 * directory is listed rather than read), then "env NAME=VALUE" for each
 * variable of its environment. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

extern char **environ;

static void probe(const char *path)
{
    struct stat st;
    char buf[4096];

    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (!d) {
            printf("open %s: %s\n", path, strerror(errno));
            return;
        }
        while (readdir(d))
            ;
        closedir(d);
        printf("open %s: ok\n", path);
        return;
    }
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        printf("open %s: %s\n", path, strerror(errno));
        return;
    }
    ssize_t n = read(fd, buf, sizeof buf);
    close(fd);
    printf("open %s: %s\n", path, n < 0 ? strerror(errno) : "ok");
}

int main(int argc, char **argv)
{
    printf("uid %u\n", (unsigned)getuid());
    for (int i = 1; i < argc; i++)
        probe(argv[i]);
    for (char **e = environ; *e; e++)
        printf("env %s\n", *e);
    return 0;
}
