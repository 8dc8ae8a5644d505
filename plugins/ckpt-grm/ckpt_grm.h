/* plugins/ckpt-grm/ckpt_grm.h - internal declarations of ckpt-grm, grm's own checkpoint
 * file: named tensors plus a metadata string, each payload a zstd frame, every tensor and
 * the whole file checksummed with XXH64. README.md gives the byte layout; ckpt_grm_save.c
 * writes it, ckpt_grm_load.c verifies and reads it, plugin.c is the glue. */
#ifndef CKPT_GRM_H
#define CKPT_GRM_H

#include <stddef.h>
#include <stdint.h>

#include <grm/ckpt.h>
#include <grm/host.h>
#include <grm/tensor.h>

#include "ckpt_file.h"

/* File framing (README.md "Byte layout"). */
#define CG_MAGIC "GRMCKPT\0"            /* 8 bytes at offset 0 */
#define CG_END_MAGIC "GRMEND\0\0"       /* the file's last 8 bytes */
#define CG_MAGIC_LEN 8
#define CG_FORMAT_MAJOR 2u              /* written; 1.x is read too */
#define CG_FORMAT_MINOR 0u
#define CG_TRAILER_LEN 16               /* u64 file XXH64 + end magic */
#define CG_MAX_NAME 65535u              /* longest tensor name, bytes */
#define CG_XXH_SEED 0                   /* seed of every XXH64 in the file */

/* The config struct the declared parameters fill. */
typedef struct cg_config {
    int64_t level;             /* zstd level, 1..19 */
} cg_config;


/* A tensor larger than this is written (save_rows) and read (load_rows) a piece of about
 * this many bytes of rows at a time, never whole (ckpt-common's size). */
#define CG_PIECE_BYTES CKPT_PIECE_BYTES

/* Write tensors [n] and meta to path atomically (temp file, fsync, rename, fsync of the
 * directory). host: static. meta: NUL-terminated, NULL writes "{}". With rows non-NULL, a
 * tensor whose data is NULL is read through rows(user, ...) CG_PIECE_BYTES at a time. */
grm_status cg_save(const grm_host_api *host, int level, const char *path,
                   const grm_named_tensor *tensors, int64_t n, const char *meta,
                   grm_ckpt_rows_fn rows, void *user);

/* Fixed bytes of a 2.0 chunk header: tensor index, reserved, row0, rows, compressed bytes,
 * XXH64 (README.md "Byte layout"). */
#define CG_CHUNK_FIXED (4 + 4 + 8 + 8 + 8 + 8)

/* One chunk as read from the file: rows [row0, row0 + rows) of a tensor, one zstd frame.
 * A 1.0 file holds one chunk a tensor, all of its rows. */
typedef struct cg_chunk {
    int64_t tensor;            /* index of its tensor */
    int64_t row0, rows;
    uint64_t raw_bytes;        /* decompressed size: rows * the tensor's row bytes */
    uint64_t comp_bytes;       /* size of the zstd frame */
    uint64_t raw_hash;         /* XXH64 of the decompressed bytes */
    size_t payload;            /* file offset of the zstd frame */
} cg_chunk;

/* One tensor's header as read from the file. */
typedef struct cg_entry {
    const char *name;          /* NUL-terminated copy, in cg_file.names */
    int32_t dtype;             /* grm_dtype */
    int32_t ndim;              /* 0..GRM_TENSOR_MAX_DIMS */
    int64_t shape[GRM_TENSOR_MAX_DIMS];  /* dims beyond ndim are 1 */
    uint64_t raw_bytes;        /* decompressed size */
    int64_t rows;              /* shape[0], or 1 for a 0-d tensor */
    int64_t nchunks;           /* its chunks: cg_file.order [first, first + nchunks) */
    int64_t first;
    int64_t next;              /* while the chunks are parsed: the row its next chunk starts
                                * at; then, in cg_order, where its next chunk goes in order */
    size_t name_off;           /* file offset of the name's bytes */
    uint32_t name_len;         /* bytes of the name, without a NUL */
    int pieces;                /* read a piece at a time (cg_open_pieces, > CG_PIECE_BYTES) */
} cg_entry;

/* A checkpoint mapped into memory and fully verified by cg_open. */
typedef struct cg_file {
    const char *path;          /* borrowed, for messages */
    const uint8_t *data;       /* [size] read-only mapping (NULL when size is 0) */
    size_t size;
    const char *meta;          /* [meta_len] inside data, not NUL-terminated */
    size_t meta_len;
    uint32_t major;            /* the file's format: 1 or 2 */
    int64_t n;                 /* tensors */
    cg_entry *entries;         /* owned (malloc) [n] */
    int64_t nchunks;
    cg_chunk *chunks;          /* owned (malloc) [nchunks], in file order */
    int64_t *order;            /* owned (malloc) [nchunks]: chunk numbers by tensor, then row */
    char *names;               /* owned (malloc): the entries' names, NUL-separated */
    void *buf;                 /* owned (malloc) [max_raw]: one decompressed tensor */
    size_t max_raw;            /* largest raw_bytes of any tensor */
    void *dctx;                /* owned ZSTD_DCtx */
    int lazy;                  /* opened by cg_open_pieces */
} cg_file;

/* Map path and verify everything: magic, version, every header's bounds, every payload's
 * decompressed size and XXH64, the end marker and the file checksum. On failure nothing
 * is left open and the status is GRM_EIO (cannot read) or GRM_EFORMAT (bad contents). */
grm_status cg_open(const grm_host_api *host, const char *path, cg_file *f);

/* cg_open for a reader of pieces (load_rows): a tensor above CG_PIECE_BYTES is checked
 * for its frame's bounds and size and by the file checksum, not decompressed; its own
 * XXH64 is checked by cg_pieces after its last piece. The mapping's pages are let go as
 * they are walked, so the reader's resident set stays at a piece. */
grm_status cg_open_pieces(const grm_host_api *host, const char *path, cg_file *f);

/* Hand tensor i of a file to visit: whole (one piece), or, when opened by cg_open_pieces
 * and larger than CG_PIECE_BYTES, CG_PIECE_BYTES of rows at a time. */
grm_status cg_pieces(const grm_host_api *host, cg_file *f, int64_t i, grm_ckpt_piece_fn visit,
                     void *user);

/* Every tensor of a file to visit in the order its chunks lie in the file
 * (load_rows_interleaved): a tensor of several chunks, or one read by pieces, a chunk at a
 * time (cut into pieces as cg_pieces cuts it), so the ranges of tensors save_rows wrote
 * together come interleaved; a tensor of one chunk, whole. */
grm_status cg_pieces_in_file_order(const grm_host_api *host, cg_file *f,
                                   grm_ckpt_piece_fn visit, void *user);

/* Decompress tensor i of a verified file into f->buf and describe it in *out (which
 * borrows f->buf and the name until the next cg_read or cg_close). */
grm_status cg_read(const grm_host_api *host, cg_file *f, int64_t i, grm_named_tensor *out);

/* Unmap and free; accepts a zeroed or already closed cg_file. */
void cg_close(cg_file *f);

/* Little-endian field access (the file is little-endian on every host). */
static inline void cg_put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void cg_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t cg_get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}
static inline uint64_t cg_get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

/* 1 on a little-endian host: tensor payloads are stored as the host's bytes, so a
 * big-endian host is refused at create. */
static inline int cg_host_is_little_endian(void)
{
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
}

#endif /* CKPT_GRM_H */
