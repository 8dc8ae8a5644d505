/* plugins/ckpt-safetensors/st.h - internal declarations of ckpt-safetensors: the same named
 * tensors and metadata as ckpt-grm in Hugging Face's SafeTensors layout (8-byte little-endian
 * header length, a JSON header with dtype/shape/data_offsets per tensor and a `__metadata__`
 * string map, then the raw bytes), so Python's `safetensors` package reads grm checkpoints.
 * README.md gives the layout and the checks; st_parse.c validates a header (the part
 * tests/fuzz/fuzz_safetensors.c fuzzes), st_file.c maps and verifies files, st_save.c
 * writes them (sharded above `shard_bytes`), plugin.c is the glue. */
#ifndef CKPT_SAFETENSORS_H
#define CKPT_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include <grm/ckpt.h>
#include <grm/host.h>
#include <grm/tensor.h>

#include "ckpt_file.h"

/* Longest header accepted: the limit Python's safetensors applies (100 MB), so a file one
 * reads the other reads too, and a corrupt length never becomes a huge allocation. */
#define ST_MAX_HEADER (100u * 1000u * 1000u)
#define ST_XXH_SEED 0                   /* seed of every XXH64 recorded */
#define ST_META_GRM "grm"               /* __metadata__ key holding the trainer's JSON */
#define ST_META_XXH "xxh64:"            /* __metadata__ key prefix: "xxh64:<tensor name>" */
#define ST_META_SHARDS "grm_shards"     /* shard count, in the file at the checkpoint path */
#define ST_META_SHARD "grm_shard:"      /* "grm_shard:<i>" = "<file name> <XXH64 of it>" */

/* The config struct the declared parameters fill. */
typedef struct st_config {
    int64_t shard_bytes;       /* tensor bytes per file before a new shard starts; 0: never */
} st_config;

/* One tensor as the header describes it. */
typedef struct st_entry {
    const char *name;          /* NUL-terminated, UTF-8, in st_header.arena */
    int32_t dtype;             /* grm_dtype */
    int32_t ndim;              /* 0..GRM_TENSOR_MAX_DIMS */
    int64_t shape[GRM_TENSOR_MAX_DIMS];   /* dims beyond ndim are 1 */
    uint64_t begin, end;       /* data_offsets: bytes [begin, end) after the header */
    uint64_t xxh64;            /* recorded XXH64 of the bytes, when has_xxh */
    int32_t has_xxh;
    int64_t order;             /* place in the header's JSON: the order load visits */
} st_entry;

/* One __metadata__ entry, decoded. */
typedef struct st_kv {
    const char *key, *value;   /* NUL-terminated, in st_header.arena */
} st_kv;

/* A parsed and validated header. */
typedef struct st_header {
    uint64_t data_start;       /* file offset of byte 0 of the data: 8 + header length */
    uint64_t data_len;         /* bytes after the header */
    st_entry *entries;         /* owned [n], in the header's order (the saver's order) */
    int64_t n;
    st_kv *meta;               /* owned [nmeta], in the header's order */
    int64_t nmeta;
    char *arena;               /* owned: every decoded string */
} st_header;

/* Validate the header of the file image d [size] and fill *h: the header length against
 * the file, the JSON, each tensor's dtype, shape and data_offsets against its byte count
 * and the data's bounds, no two tensors overlapping and no hole between them, names valid
 * UTF-8 and unique, checksums naming existing tensors. Reads no byte outside d [size] and
 * no tensor data. GRM_EFORMAT naming `path` and what failed, GRM_ENOMEM; *h is left empty
 * on failure. */
grm_status st_parse(const grm_host_api *host, const char *path, const uint8_t *d, size_t size,
                    st_header *h);

/* Free what st_parse allocated; accepts a zeroed header. */
void st_header_fini(st_header *h);

/* The value of metadata key, or NULL. */
const char *st_meta_get(const st_header *h, const char *key);

/* The safetensors dtype name of a grm dtype ("F32"), or NULL. */
const char *st_dtype_name(int32_t dtype);

/* A checkpoint mapped and verified: one file, or the file at the path plus its shards. */
typedef struct st_part {
    char *path;                /* owned */
    const uint8_t *data;       /* [size] read-only mapping (NULL when size is 0) */
    size_t size;
    st_header h;
} st_part;

typedef struct st_file {
    const char *path;          /* borrowed, for messages */
    int release;               /* pages of the mappings released as they are verified
                                * (load_rows: a file larger than memory is walked in
                                * bounded residence) */
    st_part *parts;            /* owned [nparts]: [0] the file at path, then its shards */
    int32_t nparts;
    const char *meta;          /* the trainer's metadata (ST_META_GRM), or NULL */
    int64_t n;                 /* tensors over all parts */
} st_file;

/* Map path (and its shards), validate every header and every recorded XXH64 before
 * returning. GRM_EIO (cannot read), GRM_EFORMAT (bad contents), nothing left open then. */
grm_status st_open(const grm_host_api *host, const char *path, st_file *f, int release);

/* Let go of the pages of bytes [p, p + len) of one of f's mappings (load_rows). */
void st_unneed(const st_file *f, const void *p, size_t len);

/* Bytes of rows save_rows asks for and load_rows hands out at a time (ckpt-common's). */
#define ST_PIECE_BYTES CKPT_PIECE_BYTES

/* Tensor i of a verified file, in file order (shard by shard); *out borrows the mapping
 * until st_close. */
void st_tensor(const st_file *f, int64_t i, grm_named_tensor *out, const st_entry **e);

/* Unmap and free; accepts a zeroed or already closed st_file. */
void st_close(st_file *f);

/* Write tensors [n] and meta to path atomically (temp file, fsync, rename, fsync of the
 * directory); above shard_bytes (0: never) of tensor data, the tensors go to shard files
 * beside path, which then holds the shard list, and an index path.index.json is written
 * as Hugging Face's model.safetensors.index.json. meta: NUL-terminated, NULL is "{}". */
grm_status st_save(const grm_host_api *host, int64_t shard_bytes, const char *path,
                   const grm_named_tensor *tensors, int64_t n, const char *meta);

/* st_save, where a tensor whose data is NULL is read through rows(user, ...) ST_PIECE_BYTES
 * of rows at a time, twice: once for its XXH64 (the header, written first, records it),
 * once for its bytes. The file is the one st_save writes with the same tensors. */
grm_status st_save_rows(const grm_host_api *host, int64_t shard_bytes, const char *path,
                        const grm_named_tensor *tensors, int64_t n, const char *meta,
                        grm_ckpt_rows_fn rows, void *user);

/* 1 when s [len] is well-formed UTF-8 (no overlong forms, surrogates or > U+10FFFF). */
int st_utf8_valid(const uint8_t *s, size_t len);

/* Little-endian u64 access (the format is little-endian on every host). */
static inline uint64_t st_get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static inline void st_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

#endif /* CKPT_SAFETENSORS_H */
