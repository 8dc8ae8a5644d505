/* tests/kill-at-write.c - an LD_PRELOAD fixture of tests/test-train-tiered.sh: the process
 * SIGKILLs itself in the middle of its Nth write (GRM_KILL_AT=N) to a file whose path
 * contains GRM_KILL_MATCH, after writing the first half of it: pwrite for emb-dynamic's
 * backing file (".tier": a write-back), fwrite for a checkpoint's temporary (".grm.tmp":
 * a save). So a crash lands inside a write-back or a checkpoint deterministically. With
 * GRM_FULL_AT=N instead, the disk fills up at the Nth such write: a pwrite writes half and
 * returns that short count, an fwrite writes half its items and says ENOSPC, and every
 * later one fails with ENOSPC. Without either it only passes the calls on. */
#include <errno.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static long kill_count, full_count;

/* 1 when fd's path contains GRM_KILL_MATCH and `var` is set. */
static int path_matches(int fd, const char *var)
{
    const char *m = getenv("GRM_KILL_MATCH");
    char link[64], path[4096];
    if (m == NULL || getenv(var) == NULL) return 0;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    const ssize_t n = readlink(link, path, sizeof path - 1);
    if (n < 0) return 0;
    path[n] = '\0';
    return strstr(path, m) != NULL;
}

static int kill_matches(int fd)
{
    return path_matches(fd, "GRM_KILL_AT")
           && __atomic_add_fetch(&kill_count, 1, __ATOMIC_SEQ_CST) == atol(getenv("GRM_KILL_AT"));
}

typedef ssize_t (*pwrite_fn)(int, const void *, size_t, off_t);

static ssize_t kill_pwrite(const char *name, int fd, const void *buf, size_t n, off_t off)
{
    const pwrite_fn real = (pwrite_fn)dlsym(RTLD_NEXT, name);
    if (path_matches(fd, "GRM_FULL_AT")) {
        const long c = __atomic_add_fetch(&full_count, 1, __ATOMIC_SEQ_CST),
                   at = atol(getenv("GRM_FULL_AT"));
        if (c == at && n > 1) return real(fd, buf, n / 2, off);
        if (c >= at) {
            errno = ENOSPC;
            return -1;
        }
    }
    if (kill_matches(fd)) {
        if (real(fd, buf, n / 2, off) < 0) perror("kill-at-write");
        kill(getpid(), SIGKILL);
    }
    return real(fd, buf, n, off);
}

ssize_t pwrite(int fd, const void *buf, size_t n, off_t off)
{
    return kill_pwrite("pwrite", fd, buf, n, off);
}

ssize_t pwrite64(int fd, const void *buf, size_t n, off_t off)
{
    return kill_pwrite("pwrite64", fd, buf, n, off);
}

typedef size_t (*fwrite_fn)(const void *, size_t, size_t, FILE *);

size_t fwrite(const void *p, size_t size, size_t nmemb, FILE *f)
{
    const fwrite_fn real = (fwrite_fn)dlsym(RTLD_NEXT, "fwrite");
    if (path_matches(fileno(f), "GRM_FULL_AT")) {
        const long c = __atomic_add_fetch(&full_count, 1, __ATOMIC_SEQ_CST),
                   at = atol(getenv("GRM_FULL_AT"));
        if (c >= at) {
            const size_t k = c == at && size > 0 ? real(p, size, nmemb / 2, f) : 0;
            errno = ENOSPC;
            return k;
        }
    }
    if (kill_matches(fileno(f))) {
        real(p, 1, size * nmemb / 2, f);
        fflush(f);
        kill(getpid(), SIGKILL);
    }
    return real(p, size, nmemb, f);
}
