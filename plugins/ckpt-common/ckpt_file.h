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

/* A tensor larger than this is written (save_rows) and read (load_rows) a piece of about
 * this many bytes of rows at a time, never whole: the same size in every format. */
#define CKPT_PIECE_BYTES ((size_t)16 << 20)

/* Rows of row_bytes bytes in one piece: CKPT_PIECE_BYTES of them, at least one, at most
 * the tensor's `rows` (when rows > 0). */
static inline int64_t ckpt_piece_rows(size_t row_bytes, int64_t rows)
{
    int64_t per = row_bytes >= CKPT_PIECE_BYTES ? 1 : (int64_t)(CKPT_PIECE_BYTES / row_bytes);
    return rows > 0 && per > rows ? rows : per;
}

/* Rows of a range of a group of tensors read by rows that have as many rows, read a range
 * of all of them at a time (save_rows: a store whose rows live in a file, emb-dynamic's
 * tiered tables, reads a range of its records once for all of its tensors); group_row_bytes
 * is a row of all of them together. The range holds about CKPT_PIECE_BYTES / 2 of them: the
 * save holds a range of one tensor and its compressed copy, and the store the range, about
 * what a save of 16 MiB pieces of one tensor at a time held (synthetic-tiered's peak RSS:
 * 113-118 MB against 114-120 MB; with ranges of 16 MiB, 135-137 MB). */
static inline int64_t ckpt_group_rows(size_t group_row_bytes, int64_t rows)
{
    return ckpt_piece_rows(2 * group_row_bytes, rows);
}

/* fsync the directory holding path, so a rename into it is durable. 0 or an errno. */
int ckpt_fsync_dir(const char *path);

#endif /* CKPT_FILE_H */
