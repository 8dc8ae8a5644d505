/* plugins/ckpt-common/ckpt_file.c - see ckpt_file.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt_file.h"

grm_status ckpt_map(const grm_host_api *host, const char *who, const char *path,
                    const uint8_t **data, size_t *size)
{
    *data = NULL;
    *size = 0;
    // O_NONBLOCK: a FIFO named like a checkpoint blocked open() forever (issue 25 item 12);
    // it changes nothing for the regular files accepted below.
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return host->errorf(GRM_EIO, "%s: %s: cannot open: %s", who, path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        const int err = errno;
        close(fd);
        return host->errorf(GRM_EIO, "%s: %s: cannot stat: %s", who, path, strerror(err));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return host->errorf(GRM_EIO, "%s: %s: not a regular file (a FIFO, device or "
                            "directory); move it out of the checkpoint directory", who, path);
    }
    if (sb.st_size > 0) {
        void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            const int err = errno;
            close(fd);
            return host->errorf(GRM_EIO, "%s: %s: cannot map %zu bytes: %s", who, path,
                                (size_t)sb.st_size, strerror(err));
        }
        *data = m;
        *size = (size_t)sb.st_size;
    }
    close(fd);
    return GRM_OK;
}

void ckpt_unmap(const uint8_t *data, size_t size)
{
    if (data != NULL) munmap((void *)data, size);
}

void ckpt_unneed(const uint8_t *data, size_t off, size_t len)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = (uintptr_t)(data + off), b = a + len;
    a = (a + page - 1) & ~(page - 1);
    b &= ~(page - 1);
    if (data != NULL && b > a) (void)madvise((void *)a, b - a, MADV_DONTNEED);
}

int ckpt_fsync_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char *dir = slash == NULL ? strdup(".")
                : slash == path ? strdup("/") : strndup(path, (size_t)(slash - path));
    if (dir == NULL) return ENOMEM;
    int err = 0;
    const int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0) {
        err = errno;
    } else {
        // Some file systems cannot fsync a directory (EINVAL); the rename is then as
        // durable as that file system makes it.
        if (fsync(fd) != 0 && errno != EINVAL) err = errno;
        close(fd);
    }
    free(dir);
    return err;
}
