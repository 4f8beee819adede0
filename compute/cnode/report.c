/*
 * report.c - the report line of a cnk process: what cnk left on its report
 * page (struct cnk_report, lattice/cnk_report.h) as the exit message's last
 * line (docs/protocol.md, section 5).
 */
#include "job.h"
/* The report page as cnk left it; 0 if cnk never wrote it. */
int report_read(const struct proc *j, struct cnk_report *r)
{
    memset(r, 0, sizeof *r);
    if (j->reportfd < 0 || pread(j->reportfd, r, sizeof *r, 0) != (ssize_t)sizeof *r)
        return 0;
    return r->magic == CNK_REPORT_MAGIC;
}

static const char *page_name(uint64_t bytes, char *buf, size_t len)
{
    if (bytes >= (1ull << 30) && bytes % (1ull << 30) == 0)
        snprintf(buf, len, "%lluG", (unsigned long long)(bytes >> 30));
    else if (bytes >= (1ull << 20) && bytes % (1ull << 20) == 0)
        snprintf(buf, len, "%lluM", (unsigned long long)(bytes >> 20));
    else if (bytes >= 1024 && bytes % 1024 == 0)
        snprintf(buf, len, "%lluK", (unsigned long long)(bytes >> 10));
    else if (bytes)
        snprintf(buf, len, "%llu", (unsigned long long)bytes);
    else
        snprintf(buf, len, "none");
    return buf;
}

/*
 * The report line of a cnk job, one line of space-separated fields with the
 * free text last:
 *   kernel=cnk pages=2M bigmem=1073741824 local=N shipped=N unsupported=N
 *   libcache=DIR|off:WORD libmaps=N libfetched=BYTES libcopied=N threads=LIMIT
 *   threadsrefused=N why=TEXT
 * (docs/protocol.md, section 5).
 */
void report_line(const struct cnk_report *r, char *buf, size_t len)
{
    char why[sizeof r->pages_why + 1], pg[32];
    size_t n = strnlen(r->pages_why, sizeof r->pages_why);
    memcpy(why, r->pages_why, n);
    why[n] = '\0';
    for (char *c = why; *c; c++)
        if (*c == '\n' || *c == '\r')
            *c = ' ';
    char lib[sizeof r->lib_dir + sizeof r->lib_off + 8];   /* one word: the cache or why not */
    snprintf(lib, sizeof lib, "%.*s", (int)sizeof r->lib_dir, r->lib_dir);
    if (!lib[0])
        snprintf(lib, sizeof lib, "off:%.*s", (int)sizeof r->lib_off, r->lib_off[0] ? r->lib_off : "-");
    for (char *c = lib; *c; c++)
        if (*c == ' ' || *c == '\n')
            *c = '_';
    snprintf(buf, len, "kernel=cnk pages=%s bigmem=%llu local=%llu shipped=%llu unsupported=%llu "
             "libcache=%s libmaps=%llu libfetched=%llu libcopied=%llu threads=%u threadsrefused=%u why=%s",
             page_name(r->page_size, pg, sizeof pg), (unsigned long long)r->bigmem_bytes,
             (unsigned long long)r->count[CNK_LOCAL], (unsigned long long)r->count[CNK_SHIPPED],
             (unsigned long long)r->count[CNK_UNSUPPORTED], lib, (unsigned long long)r->lib_maps,
             (unsigned long long)r->lib_fetched, (unsigned long long)r->lib_copied, r->thread_limit,
             r->threads_refused, why[0] ? why : "-");
}

