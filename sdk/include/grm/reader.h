/* grm/reader.h - reader plugins: turn files into chunks of columns (DESIGN.md §3).
 * A reader is opened once per (shard, nshards) and yields chunks until it reports the
 * end. One thread uses an instance at a time. */
#ifndef GRM_READER_H
#define GRM_READER_H

#include <stdint.h>

#include <grm/status.h>
#include <grm/tensor.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Counters a reader keeps; filled by the optional stats op. */
typedef struct grm_reader_stats {
    int64_t rows;          /* good rows returned so far */
    int64_t bad_rows;      /* malformed rows skipped so far */
    int64_t bytes;         /* input bytes consumed so far */
} grm_reader_stats;

typedef struct grm_reader_ops {
    uint32_t struct_size;  /* sizeof(grm_reader_ops) */

    /* (required) Open the input described by `config` (the plugin's filled config
     * struct, borrowed for the instance's life) and read rows of shard `shard` of
     * `nshards`. *inst: owned, release with close. Returns GRM_EIO, GRM_EFORMAT,
     * GRM_EINVAL. */
    grm_status (*open)(const void *config, int32_t shard, int32_t nshards, void **inst);

    /* (required) The columns every chunk has. *schema: borrowed, valid until close. */
    grm_status (*schema)(void *inst, const grm_schema **schema);

    /* (required) The next chunk, or *chunk = NULL at the end of the input (not an error).
     * *chunk: borrowed, valid until the next call of next or close. */
    grm_status (*next)(void *inst, const grm_chunk **chunk);

    /* (required) Release the instance; NULL is accepted. */
    void (*close)(void *inst);

    /* (optional; if NULL, the host reports no reader counters) Copy counters. since 1.1 */
    grm_status (*stats)(void *inst, grm_reader_stats *stats);
} grm_reader_ops;

#ifdef __cplusplus
}
#endif
#endif /* GRM_READER_H */
