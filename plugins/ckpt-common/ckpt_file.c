/* plugins/ckpt-common/ckpt_file.c - see ckpt_file.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
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

grm_status ckpt_tmp_open(const grm_host_api *host, const char *who, const char *path,
                         int stream, ckpt_tmp *o)
{
    const size_t len = strlen(path) + 32;
    *o = (ckpt_tmp){ .who = who, .path = path, .fd = -1 };
    if ((o->name = malloc(len)) == NULL)
        return host->errorf(GRM_ENOMEM, "%s: %s: out of memory", who, path);
    snprintf(o->name, len, "%s.tmp.%ld", path, (long)getpid());
    o->fd = open(o->name, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (o->fd >= 0 && stream && (o->f = fdopen(o->fd, "wb")) == NULL) {
        const int err = errno;
        close(o->fd);
        unlink(o->name);
        o->fd = -1;
        errno = err;
    }
    if (o->fd < 0) {
        const grm_status st = host->errorf(GRM_EIO, "%s: %s: cannot create %s: %s", who, path,
                                           o->name, strerror(errno));
        free(o->name);
        o->name = NULL;
        return st;
    }
    return GRM_OK;
}

int ckpt_pwrite_all(int fd, const void *buf, size_t len, uint64_t off)
{
    for (size_t done = 0; done < len;) {
        errno = 0;
        const ssize_t w = pwrite(fd, (const char *)buf + done, len - done, (off_t)(off + done));
        if (w <= 0) return errno ? errno : -1;
        done += (size_t)w;
    }
    return 0;
}

void ckpt_tmp_pwrite(ckpt_tmp *o, const void *buf, size_t len, uint64_t off)
{
    if (o->err == 0) o->err = ckpt_pwrite_all(o->fd, buf, len, off);
}

grm_status ckpt_tmp_commit(const grm_host_api *host, ckpt_tmp *o, grm_status st)
{
    int err = o->err;
    if (st == GRM_OK && err == 0 && o->f != NULL && fflush(o->f) != 0) err = errno;
    if (st == GRM_OK && err == 0 && fsync(o->fd) != 0) err = errno;
    // the close reports what a file system defers to it (NFS, a quota): a failed write
    if ((o->f != NULL ? fclose(o->f) : close(o->fd)) != 0 && err == 0) err = errno;
    if (st == GRM_OK && err != 0)
        st = host->errorf(GRM_EIO, "%s: %s: cannot write %s: %s", o->who, o->path, o->name,
                          err > 0 ? strerror(err) : "short write");
    if (st == GRM_OK && rename(o->name, o->path) != 0)
        st = host->errorf(GRM_EIO, "%s: %s: cannot rename %s to it: %s", o->who, o->path,
                          o->name, strerror(errno));
    if (st != GRM_OK)
        unlink(o->name);
    else if ((err = ckpt_fsync_dir(o->path)) != 0)
        st = host->errorf(GRM_EIO, "%s: %s: saved, but cannot fsync its directory: %s", o->who,
                          o->path, strerror(err));
    free(o->name);
    *o = (ckpt_tmp){ .fd = -1 };
    return st;
}
