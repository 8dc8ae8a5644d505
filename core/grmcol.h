/* core/grmcol.h - the grmcol columnar format (share/doc/grmcol.md, the normative spec):
 * a writer and a reader of files and byte buffers. It depends on libc, zstd and xxhash
 * only (never on libgrmcore), so it is compiled into grmhost and into reader-grmcol.
 * Errors are written into a caller's grm__grmcol_err instead of the thread's last error;
 * callers pass the text on (grm_errorf in core, host->errorf in plugins).
 * Implements ColumnIO's storage side, RecIS §2.1 and §2.2.1. */
#ifndef GRM_GRMCOL_H
#define GRM_GRMCOL_H

#include <stddef.h>
#include <stdint.h>

#include <grm/status.h>
#include <grm/tensor.h>

/* The format version this code reads and writes (grmcol.md §2). */
#define GRM__GRMCOL_MAJOR 1
#define GRM__GRMCOL_MINOR 0

#define GRM__GRMCOL_HEADER_SIZE 16
#define GRM__GRMCOL_TRAILER_SIZE 24
#define GRM__GRMCOL_MAX_COLS 4096
#define GRM__GRMCOL_MAX_NAME 255
#define GRM__GRMCOL_MAX_GROUP_ROWS 2147483647LL

/* An error message, filled by the function that fails (empty when none). */
typedef struct grm__grmcol_err {
    char msg[512];
} grm__grmcol_err;

/* Where one chunk is and what it holds (grmcol.md §5). */
typedef struct grm__grmcol_chunk {
    uint64_t offset;     /* first stored byte */
    uint64_t csize;      /* stored (zstd) bytes */
    uint64_t usize;      /* payload bytes after decompression */
    uint64_t xxh64;      /* XXH64 (seed 0) of the stored bytes */
} grm__grmcol_chunk;

/* A parsed footer: schema, row groups and chunk table. */
typedef struct grm__grmcol_meta {
    uint16_t major, minor;
    int32_t ncols;
    grm_field *fields;             /* [ncols]; names owned (malloc) */
    int64_t nrows;                 /* R */
    int64_t ngroups;               /* G */
    int64_t *group_rows;           /* [G] */
    grm__grmcol_chunk *chunks;     /* [G * ncols], row group major */
    uint64_t file_size;
    uint64_t footer_offset;        /* end of the data area */
} grm__grmcol_meta;

/* Release what a parse filled; a zeroed meta is accepted. */
void grm__grmcol_meta_fini(grm__grmcol_meta *m);

/* Index of column `name` in m, or -1. */
int32_t grm__grmcol_find(const grm__grmcol_meta *m, const char *name);

/* Static name of a column type ("i64", "f32", "string", "list<i64>", "list<f32>"), or NULL
 * for an unknown code. */
const char *grm__grmcol_type_name(int32_t type);

/* ---- reading ---- */

/* Check the 16-byte header `h` of file `name` (magic, version, flags). GRM_EFORMAT;
 * GRM_ENOTSUP for a newer major version (not damage: never skipped). */
grm_status grm__grmcol_check_header(const void *h, size_t n, const char *name,
                                    grm__grmcol_err *e);

/* Parse the trailer and footer. `tail` holds the last `tail_len` bytes of a file of
 * `file_size` bytes (borrowed); when it is too short for the footer, returns GRM_OK with
 * *need set to the tail length required (call again with that much); else *need = 0 and
 * m is filled (release with grm__grmcol_meta_fini). GRM_EFORMAT, GRM_ENOMEM. */
grm_status grm__grmcol_parse_footer(const void *tail, size_t tail_len, uint64_t file_size,
                                    const char *name, grm__grmcol_meta *m, size_t *need,
                                    grm__grmcol_err *e);

/* Parse a whole file held in memory (tests, fuzzing): header, trailer, footer. */
grm_status grm__grmcol_parse_buffer(const void *buf, size_t len, const char *name,
                                    grm__grmcol_meta *m, grm__grmcol_err *e);

/* Open a file: read and check header, trailer and footer. *fd: an open descriptor for
 * pread (close it with close(2)). GRM_EIO, GRM_EFORMAT, GRM_ENOMEM. */
grm_status grm__grmcol_open(const char *path, int *fd, grm__grmcol_meta *m,
                            grm__grmcol_err *e);

/* Decode chunk (g, c): verify the checksum of `stored` [csize] (borrowed), decompress into
 * `payload` [usize] (caller's, 8-byte aligned), check sizes and offsets, and byte-swap on
 * big-endian hosts. `dctx` is a ZSTD_DCtx * or NULL (one is made). Thread-safe for
 * distinct dctx. GRM_EFORMAT naming file, row group and column. */
grm_status grm__grmcol_decode(const grm__grmcol_meta *m, const char *name, int64_t g,
                              int32_t c, const void *stored, void *payload, void *dctx,
                              grm__grmcol_err *e);

/* Point `col` at a decoded payload of chunk (g, c): values and offsets borrow `payload`. */
void grm__grmcol_column(const grm__grmcol_meta *m, int64_t g, int32_t c, void *payload,
                        grm_column *col);

/* ---- writing ---- */

typedef struct grm__grmcol_writer grm__grmcol_writer;

/* Create `path`.tmp for a file of `nfields` columns (names and types borrowed for the
 * call) at zstd `level` (1..19). *out: owned, finish with close or abort. GRM_EIO,
 * GRM_EINVAL (bad schema), GRM_ENOMEM. */
grm_status grm__grmcol_writer_open(const char *path, const grm_field *fields,
                                   int32_t nfields, int32_t level, grm__grmcol_writer **out,
                                   grm__grmcol_err *e);

/* Append one row group of `rows` rows (1..2^31-1): cols [nfields] in schema order, each
 * with `rows` rows (borrowed). GRM_EIO, GRM_EINVAL, GRM_ENOMEM. */
grm_status grm__grmcol_writer_append(grm__grmcol_writer *w, const grm_column *cols,
                                     int64_t rows, grm__grmcol_err *e);

/* Write footer and trailer, rename path.tmp to path, free w (also on failure). */
grm_status grm__grmcol_writer_close(grm__grmcol_writer *w, grm__grmcol_err *e);

/* Drop an unfinished file (removes path.tmp) and free w; NULL is accepted. */
void grm__grmcol_writer_abort(grm__grmcol_writer *w);

/* Serialize a whole file into memory (tests, fuzz seeds): *buf malloc'ed, *len bytes.
 * One row group per `rows_per_group` rows of cols [nfields] (each with `rows` rows). */
grm_status grm__grmcol_write_buffer(const grm_field *fields, int32_t nfields,
                                    const grm_column *cols, int64_t rows,
                                    int64_t rows_per_group, int32_t level, void **buf,
                                    size_t *len, grm__grmcol_err *e);

/* grmhost's convert and inspect commands (core/convert.c) are declared in core/cli.h. */

#endif /* GRM_GRMCOL_H */
