/* plugins/reader-text/text.h - reader-text internals shared by plugin.c (ops glue),
 * text_src.c (bytes and lines from a plain or zstd file) and text_ref.c (splitting
 * lines into fields, parsing values, assembling chunks). Nothing here crosses the ABI. */
#ifndef GRM_READER_TEXT_H
#define GRM_READER_TEXT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <grm/grm.h>

/* Values of the `format` ENUM, in the order of its choices string. */
enum text_format {
    TEXT_FMT_TSV = 0,        /* one tab between fields */
    TEXT_FMT_CSV = 1,        /* one comma between fields; no quoting */
    TEXT_FMT_SSV = 2,        /* runs of spaces or tabs; leading/trailing ones ignored */
    TEXT_FMT_MOVIELENS = 3   /* "::" between fields (ml-1m ratings.dat) */
};

/* Values of the `on_bad_row` ENUM. */
enum text_on_bad {
    TEXT_BAD_FAIL = 0,
    TEXT_BAD_SKIP = 1
};

/* The config struct the host fills from the declared params (plugin.c). */
typedef struct text_config {
    const char *path;        /* input file; ".zst" suffix means zstd-compressed */
    int32_t format;          /* enum text_format */
    int32_t header;          /* 1: skip the first line */
    grm_str_list columns;    /* "name:type" entries; "_" skips a field */
    int32_t on_bad_row;      /* enum text_on_bad */
    int32_t reserved;
    int64_t chunk_rows;      /* rows per chunk, 1..1<<24 */
} text_config;

/* One declared field of a line. */
typedef struct text_colspec {
    char *name;              /* owned; NULL for a skipped field ("_") */
    int32_t type;            /* grm_coltype; for a skipped list field, LIST_I64 */
    int32_t out;             /* index into the output columns; -1 when skipped */
} text_colspec;

/* Growable storage behind one output column; reused across chunks. */
typedef struct text_colbuf {
    void *values;            /* I64/F32: [rows]; STR: bytes; LIST_*: [offsets[rows]] */
    size_t values_cap;       /* bytes */
    int64_t *offsets;        /* [rows+1] for STR and LIST_*; NULL otherwise */
    size_t offsets_cap;      /* bytes */
} text_colbuf;

/* A byte source (plain file or zstd stream) with a line buffer on top. */
typedef struct text_src {
    const grm_host_api *host;
    const char *path;        /* borrowed from the config */
    FILE *file;
    void *zds;               /* ZSTD_DStream *, or NULL for a plain file */
    unsigned char *zin;      /* [zin_cap] compressed input buffer (zstd only) */
    size_t zin_cap, zin_len, zin_pos;
    size_t zret;             /* last ZSTD_decompressStream hint; 0 at a frame's end */
    int file_eof;            /* fread reached the end of the file */
    int eof;                 /* no more decoded bytes */
    int64_t bytes;           /* file bytes read so far */
    char *buf;               /* [cap] decoded bytes; lines live in [start, end) */
    size_t cap, start, end;
} text_src;

/* One field of the current line: NUL-terminated in place inside the line buffer. */
typedef struct text_field {
    char *p;
    size_t n;
} text_field;

/* A reader instance. */
typedef struct text_reader {
    const grm_host_api *host;
    const text_config *cfg;   /* borrowed for the instance's life */
    int32_t shard, nshards;
    text_colspec *spec;       /* [nspec] */
    int32_t nspec;
    int32_t list_last;        /* 1: the last spec is a list taking the remaining fields */
    int32_t nout;             /* output columns */
    int32_t failed;           /* grm_status of an earlier fatal error, else GRM_OK */
    grm_field *fields;        /* [nout] output schema; names borrowed from spec */
    grm_schema schema;
    text_colbuf *bufs;        /* [nout] */
    grm_column *cols;         /* [nout] */
    grm_chunk chunk;
    text_src src;
    text_field *fv;           /* [fv_cap] fields of the current line */
    size_t fv_cap;
    int64_t line;             /* physical line number of the last line read (1-based) */
    int64_t data_row;         /* non-blank data lines seen, all shards (for sharding) */
    int64_t logged_bad;       /* bad rows written to the log so far */
    int done;                 /* end of input reached */
    grm_reader_stats stats;
} text_reader;

/* Bad rows logged in full with on_bad_row = skip; later ones are only counted. */
#define TEXT_LOG_BAD_MAX 5

/* ---- text_src.c ---- */

/* Open `path` (zstd when it ends in ".zst"). GRM_EIO naming the path; GRM_ENOMEM. */
grm_status text_src_open(text_src *src, const grm_host_api *host, const char *path);
/* Release everything; a zeroed or closed src is accepted. */
void text_src_close(text_src *src);
/* The next line without its "\n" or "\r\n", NUL-terminated in place (borrowed until the
 * next call); *line = NULL at the end. GRM_EIO, GRM_EFORMAT (corrupt zstd), GRM_ENOMEM. */
grm_status text_src_line(text_src *src, char **line, size_t *len);

/* ---- text_ref.c ---- */

/* Grow host-allocated *p (CPU) to hold at least `need` bytes, keeping its contents. */
grm_status text_grow(const grm_host_api *host, void **p, size_t *cap, size_t need);
/* Parse cfg->columns into r->spec, r->fields and r->bufs. GRM_EINVAL naming the entry. */
grm_status text_spec_parse(text_reader *r);
/* Release what text_spec_parse and text_reader_next allocated. */
void text_spec_free(text_reader *r);
/* Fill r->chunk with up to chunk_rows rows of this shard; *chunk = NULL at the end. */
grm_status text_reader_next(text_reader *r, const grm_chunk **chunk);

#endif /* GRM_READER_TEXT_H */
