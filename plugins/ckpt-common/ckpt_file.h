/* plugins/ckpt-common/ckpt_file.h - file handling every checkpoint format shares, compiled
 * into each ckpt-*.so (plugins link no libgrmcore): map a file read-only for verification,
 * and fsync the directory after the rename that makes a save atomic. */
#ifndef CKPT_FILE_H
#define CKPT_FILE_H

#include <stddef.h>
#include <stdint.h>

#include <grm/host.h>

/* Map the regular file at path read-only: *data [*size] (NULL when empty), released with
 * ckpt_unmap. GRM_EIO naming who (the plugin), path and strerror on failure. */
grm_status ckpt_map(const grm_host_api *host, const char *who, const char *path,
                    const uint8_t **data, size_t *size);

/* Release a mapping from ckpt_map; accepts NULL. */
void ckpt_unmap(const uint8_t *data, size_t size);

/* Let go of the pages of data [off, off + len) of a mapping from ckpt_map (the whole
 * pages inside it; MADV_DONTNEED): read again, they come back from the page cache. A
 * reader that walks a file larger than memory keeps its resident set to what it walks. */
void ckpt_unneed(const uint8_t *data, size_t off, size_t len);

/* fsync the directory holding path, so a rename into it is durable. 0 or an errno. */
int ckpt_fsync_dir(const char *path);

#endif /* CKPT_FILE_H */
