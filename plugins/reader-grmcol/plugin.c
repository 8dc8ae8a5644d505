/* plugins/reader-grmcol/plugin.c - glue for reader-grmcol: entry point, descriptor,
 * declared parameters and the grm_reader_ops table. Files, sharding and the reference
 * load are in colr_ref.c; the thread-pool prefetch in colr_uv.c; the format in
 * core/grmcol.c (share/doc/grmcol.md). ColumnIO of RecIS §2.1-2.2.1. */
#include <stddef.h>
#include <string.h>

#include "colr.h"

static const grm_host_api *colr_host;   /* the only mutable global (STYLE.md §5.2) */

static const grm_device colr_cpu = { GRM_DEVICE_CPU, 0 };

static const grm_param_decl colr_params[] = {
    GRM_PARAM_DECL_STRING(colr_config, path, GRM_PARAM_REQUIRED,
                          "a grmcol file, a directory (every *.grmcol in it) or a glob, "
                          "relative to the INI file; files are read in sorted order"),
    GRM_PARAM_DECL_STR_LIST(colr_config, columns, NULL,
                            "columns to read, in this order (only their chunks are read and "
                            "decompressed); empty: all"),
    GRM_PARAM_DECL_INT(colr_config, prefetch, "4", GRM_PARAM_RANGE(0, 256),
                       "row groups decoded ahead on libuv's thread pool (UV_THREADPOOL_SIZE "
                       "threads); 0 decodes in the calling thread"),
    GRM_PARAM_DECL_ENUM(colr_config, on_bad_chunk, "fail", "fail|skip",
                        "a damaged chunk or file stops reading with file, row group and column "
                        "(fail), or is skipped, logged and counted in bad_rows (skip)"),
    GRM_PARAM_DECL_END
};

static void colr_close(void *inst)
{
    colr_reader *const r = inst;
    if (r == NULL) return;
    colr_uv_fini(r);
    if (r->bad_chunks > 0 || r->bad_files > 0) {
        colr_host->log(GRM_LOG_WARN, "reader-grmcol", "skipped %lld damaged row groups "
                       "(%lld rows) and %lld damaged files of '%s'", (long long)r->bad_chunks,
                       (long long)r->stats.bad_rows, (long long)r->bad_files, r->cfg->path);
    }
    colr_slots_free(r);
    colr_plan_free(r);
    colr_host->free(colr_cpu, r);
}

static grm_status colr_open(const void *config, int32_t shard, int32_t nshards, void **inst)
{
    const colr_config *const cfg = config;
    grm_status st;

    if (config == NULL || inst == NULL) {
        return colr_host->errorf(GRM_EINVAL, "reader-grmcol: open: config and inst must not "
                                 "be NULL");
    }
    *inst = NULL;
    if (nshards < 1 || shard < 0 || shard >= nshards) {
        return colr_host->errorf(GRM_EINVAL, "reader-grmcol: open: shard %d of %d is out of "
                                 "range; need 0 <= shard < nshards", shard, nshards);
    }
    if (cfg->path == NULL || cfg->path[0] == '\0') {
        return colr_host->errorf(GRM_EINVAL, "reader-grmcol: path is empty; set it to a "
                                 "grmcol file, directory or glob");
    }
    if (cfg->prefetch < 0 || cfg->prefetch > 256 || cfg->on_bad_chunk < COLR_BAD_FAIL
        || cfg->on_bad_chunk > COLR_BAD_SKIP) {
        return colr_host->errorf(GRM_EINVAL, "reader-grmcol: open: config not filled by the "
                                 "host (prefetch %lld, on_bad_chunk %d)",
                                 (long long)cfg->prefetch, cfg->on_bad_chunk);
    }
    colr_reader *const r = colr_host->alloc(colr_cpu, sizeof(*r), 0);
    if (r == NULL) return GRM_ENOMEM;
    memset(r, 0, sizeof(*r));
    r->host = colr_host;
    r->cfg = cfg;
    r->held = -1;
    if ((st = colr_plan(r, shard, nshards)) != GRM_OK) goto fail;
    if ((st = colr_slots_create(r, (int32_t)cfg->prefetch + 1)) != GRM_OK) goto fail;
    if (cfg->prefetch > 0 && (st = colr_uv_init(r)) != GRM_OK) goto fail;
    r->chunk.struct_size = (uint32_t)sizeof(grm_chunk);
    r->chunk.ncols = r->nout;
    *inst = r;
    return GRM_OK;

fail:
    colr_close(r);
    return st;
}

static grm_status colr_schema(void *inst, const grm_schema **schema)
{
    if (inst == NULL || schema == NULL) {
        return colr_host->errorf(GRM_EINVAL, "reader-grmcol: schema: inst and schema must "
                                 "not be NULL");
    }
    *schema = &((colr_reader *)inst)->schema;
    return GRM_OK;
}

static grm_status colr_next(void *inst, const grm_chunk **chunk)
{
    colr_reader *const r = inst;
    grm_status st;

    if (inst == NULL || chunk == NULL) {
        return colr_host->errorf(GRM_EINVAL, "reader-grmcol: next: inst and chunk must not "
                                 "be NULL");
    }
    *chunk = NULL;
    if (r->failed != GRM_OK) {
        return colr_host->errorf(r->failed, "reader-grmcol: %s: an earlier error stopped "
                                 "this reader; close it and open a new one", r->cfg->path);
    }
    if (r->held >= 0) {
        r->slots[r->held].state = COLR_IDLE;   // the previous chunk is released
        r->held = -1;
    }
    while (r->next_out < r->ngroups) {
        const int32_t idx = (int32_t)(r->next_out % r->nslots);
        colr_slot *const s = &r->slots[idx];
        if (r->cfg->prefetch == 0) {
            s->task = r->next_out;
            colr_load(s);
        } else if ((st = colr_uv_wait(r, s)) != GRM_OK) {
            r->failed = st;
            return st;
        }
        if (s->task != r->next_out || s->state == COLR_QUEUED) {
            r->failed = GRM_EINTERNAL;
            return colr_host->errorf(GRM_EINTERNAL, "reader-grmcol: slot %d holds row group "
                                     "task %lld, expected %lld", idx, (long long)s->task,
                                     (long long)r->next_out);
        }
        const colr_group *const q = &r->groups[r->next_out];
        const int64_t rows = r->files[q->file].meta.group_rows[q->g];
        r->next_out++;
        r->stats.bytes += s->bytes;
        if (s->st != GRM_OK) {
            s->state = COLR_IDLE;
            if (s->st == GRM_EFORMAT && r->cfg->on_bad_chunk == COLR_BAD_SKIP) {
                if (r->bad_chunks++ < COLR_LOG_BAD_MAX) {
                    colr_host->log(GRM_LOG_WARN, "reader-grmcol", "skipping %lld rows: %s",
                                   (long long)rows, s->err.msg);
                }
                r->stats.bad_rows += rows;
                continue;
            }
            r->failed = s->st;
            return colr_host->errorf(s->st, "reader-grmcol: %s", s->err.msg);
        }
        s->state = COLR_DONE;
        r->held = idx;
        r->chunk.rows = rows;
        r->chunk.cols = s->cols;
        r->stats.rows += rows;
        *chunk = &r->chunk;
        // Keep the pool busy while the caller works on this chunk.
        if (r->cfg->prefetch > 0 && (st = colr_uv_submit(r)) != GRM_OK) {
            r->failed = st;
            *chunk = NULL;
            return st;
        }
        return GRM_OK;
    }
    return GRM_OK;
}

static grm_status colr_stats(void *inst, grm_reader_stats *stats)
{
    if (inst == NULL || stats == NULL) {
        return colr_host->errorf(GRM_EINVAL, "reader-grmcol: stats: inst and stats must not "
                                 "be NULL");
    }
    *stats = ((const colr_reader *)inst)->stats;
    return GRM_OK;
}

static const grm_reader_ops colr_ops = {
    .struct_size = (uint32_t)sizeof(grm_reader_ops),
    .open = colr_open,
    .schema = colr_schema,
    .next = colr_next,
    .close = colr_close,
    .stats = colr_stats,
};

static const grm_plugin_info colr_info = {
    GRM_PLUGIN_INFO_HEADER,
    .kind = GRM_KIND_READER,
    .name = "reader-grmcol",
    .version = "1.0.0",
    .description = "grmcol columnar files (zstd chunks, checksums): sharded by row group, "
                   "column projection, decoded ahead on libuv's pool (RecIS §2.2.1)",
    .ops = &colr_ops,
    .params = colr_params,
    .config_size = sizeof(colr_config),
};

// grm/plugin.h declares only the entry's type; this prototype keeps
// -Wmissing-prototypes quiet.
GRM_PLUGIN_DEFINE(colr_host, &colr_info);
