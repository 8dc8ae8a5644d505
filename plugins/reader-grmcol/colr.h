/* plugins/reader-grmcol/colr.h - reader-grmcol internals shared by plugin.c (ops glue),
 * colr_ref.c (files, sharding plan, loading one row group in the calling thread: the
 * reference) and colr_uv.c (the same loads on libuv's thread pool with `prefetch` row
 * groups in flight). Format: share/doc/grmcol.md; RecIS §2.1-2.2.1 (ColumnIO), MTGRBoost
 * §3 "Data I/O" (sharded columnar input, prefetch). Nothing here crosses the ABI. */
#ifndef GRM_READER_GRMCOL_H
#define GRM_READER_GRMCOL_H

#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include <grm/grm.h>

#include "grmcol.h"

/* Values of the `on_bad_chunk` ENUM, in the order of its choices string. */
enum colr_on_bad {
    COLR_BAD_FAIL = 0,
    COLR_BAD_SKIP = 1
};

/* The config struct the host fills from the declared params (plugin.c). */
typedef struct colr_config {
    const char *path;          /* file, directory (every *.grmcol in it) or glob pattern */
    grm_str_list columns;      /* projection: columns to read, in output order; empty: all */
    int64_t prefetch;          /* row groups decoded ahead on the pool; 0: in the caller */
    int32_t on_bad_chunk;      /* enum colr_on_bad */
    int32_t reserved;
} colr_config;

/* One input file. */
typedef struct colr_file {
    char *path;                /* owned */
    int fd;                    /* open for pread; -1 when skipped */
    grm__grmcol_meta meta;     /* footer */
    int32_t *colmap;           /* [nout] output column -> file column */
} colr_file;

/* One row group this shard reads. */
typedef struct colr_group {
    int32_t file;              /* index into files */
    int32_t reserved;
    int64_t g;                 /* row group within the file */
} colr_group;

/* States of a slot. */
enum { COLR_IDLE = 0, COLR_QUEUED = 1, COLR_DONE = 2 };

/* Buffers for one row group in flight: the stored and decoded bytes of every output
 * column. A slot is touched by one thread at a time: the pool worker while QUEUED, the
 * reader's thread otherwise. */
typedef struct colr_slot {
    struct colr_reader *r;
    uv_work_t req;             /* req.data == this slot */
    int32_t state;             /* COLR_IDLE, COLR_QUEUED, COLR_DONE */
    int32_t canceled;          /* uv_cancel succeeded: nothing was loaded */
    int64_t task;              /* index into the reader's groups */
    grm_status st;             /* outcome of the load */
    grm__grmcol_err err;       /* message when st != GRM_OK */
    void **stored;             /* [nout] stored (zstd) chunk bytes */
    size_t *stored_cap;        /* [nout] */
    void **payload;            /* [nout] decoded payloads (grmcol.md §4) */
    size_t *payload_cap;       /* [nout] */
    grm_column *cols;          /* [nout] columns pointing into payload */
    void *dctx;                /* ZSTD_DCtx *, one per slot */
    int64_t bytes;             /* stored bytes read by the load */
} colr_slot;

/* A reader instance. */
typedef struct colr_reader {
    const grm_host_api *host;
    const colr_config *cfg;    /* borrowed for the instance's life */
    colr_file *files;          /* [nfiles] */
    int32_t nfiles;
    int32_t nout;              /* output columns */
    grm_field *fields;         /* [nout] names borrowed from the first readable file */
    grm_schema schema;
    colr_group *groups;        /* [ngroups] this shard's row groups, in global order */
    int64_t ngroups;
    int64_t next_submit;       /* next task to load */
    int64_t next_out;          /* next task to hand out */
    colr_slot *slots;          /* [nslots] task t uses slots[t % nslots] */
    int32_t nslots;            /* prefetch + 1 */
    int32_t failed;            /* grm_status of an earlier fatal error, else GRM_OK */
    int32_t held;              /* slot index of the chunk handed out, or -1 */
    int32_t loop_ok;           /* loop initialized */
    uv_loop_t loop;            /* completions of the pool's work (prefetch > 0) */
    grm_chunk chunk;
    grm_reader_stats stats;
    int64_t bad_chunks;        /* row groups skipped (on_bad_chunk = skip) */
    int64_t bad_files;         /* files skipped (on_bad_chunk = skip) */
} colr_reader;

/* Bad chunks and files logged in full with on_bad_chunk = skip; later ones are counted. */
#define COLR_LOG_BAD_MAX 5

/* ---- colr_ref.c ---- */

/* Expand cfg->path, open every file, check schemas, apply the projection, and list this
 * shard's row groups (global row group k goes to shard k % nshards). GRM_ENOTFOUND,
 * GRM_EIO, GRM_EFORMAT, GRM_EINVAL, GRM_ENOMEM. */
grm_status colr_plan(colr_reader *r, int32_t shard, int32_t nshards);
/* Release what colr_plan allocated. */
void colr_plan_free(colr_reader *r);
/* Allocate nslots slots with their per-column arrays. GRM_ENOMEM. */
grm_status colr_slots_create(colr_reader *r, int32_t nslots);
void colr_slots_free(colr_reader *r);
/* Read and decode task s->task into the slot; the outcome goes to s->st and s->err (no
 * host error is set: this runs on pool threads). The reference: plain, one row group. */
void colr_load(colr_slot *s);

/* ---- colr_uv.c ---- */

/* Start the loop (prefetch > 0). GRM_EINTERNAL with libuv's message. */
grm_status colr_uv_init(colr_reader *r);
/* Cancel or wait for every load in flight and close the loop; safe when not started. */
void colr_uv_fini(colr_reader *r);
/* Queue loads until prefetch + 1 are in flight, then wait until task r->next_out is
 * loaded. GRM_EINTERNAL when libuv refuses the work. */
grm_status colr_uv_wait(colr_reader *r, colr_slot *s);
/* Queue loads to fill the free slots (prefetch > 0). */
grm_status colr_uv_submit(colr_reader *r);

#endif /* GRM_READER_GRMCOL_H */
