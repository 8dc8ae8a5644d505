/* plugins/ckpt-common/ckpt_file.h - file handling every checkpoint format shares, compiled
 * into each ckpt-*.so (plugins link no libgrmcore): map a file read-only for verification,
 * and write a file atomically (a temporary beside it, fsynced, renamed over it, its
 * directory fsynced; removed on any failure). */
#ifndef CKPT_FILE_H
#define CKPT_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

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

/* The temporary a save writes beside path ("<path>.tmp.<pid>"), made the file at path by
 * ckpt_tmp_commit: a crash at any moment leaves path as it was (or absent) and at worst a
 * temporary that the host's next run removes. Written with ckpt_tmp_pwrite (at offsets)
 * or through f (a stream, when opened with stream = 1); a write error through f is the
 * caller's to record in err. */
typedef struct ckpt_tmp {
    const char *who;           /* the plugin, in messages */
    const char *path;          /* borrowed: the file it becomes */
    char *name;                /* owned: the temporary's path */
    int fd;
    FILE *f;                   /* over fd when opened as a stream, else NULL */
    int err;                   /* the first write's errno (-1: a short write), 0: none */
} ckpt_tmp;

/* Create the temporary for path (truncating one of this pid's left from before). GRM_EIO
 * naming who, path and the temporary when it cannot be created; nothing to release then. */
grm_status ckpt_tmp_open(const grm_host_api *host, const char *who, const char *path,
                         int stream, ckpt_tmp *o);

/* All of buf [len] at offset off of the temporary, unless a write failed already; the
 * error is kept in o->err for ckpt_tmp_commit. */
void ckpt_tmp_pwrite(ckpt_tmp *o, const void *buf, size_t len, uint64_t off);

/* All of buf [len] at offset off of fd: 0 or an errno (-1: a short write). */
int ckpt_pwrite_all(int fd, const void *buf, size_t len, uint64_t off);

/* End the temporary. When st is GRM_OK and no write failed (o->err): flushed, fsynced,
 * closed, renamed to path, and path's directory fsynced; otherwise closed and removed.
 * Returns st, or GRM_EIO naming who, path and the failed step ("cannot write TMP: ENOSPC",
 * "cannot rename TMP to it", "saved, but cannot fsync its directory"). Releases o. */
grm_status ckpt_tmp_commit(const grm_host_api *host, ckpt_tmp *o, grm_status st);

#endif /* CKPT_FILE_H */
