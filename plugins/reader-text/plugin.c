/* plugins/reader-text/plugin.c - glue for reader-text: entry point, descriptor, declared
 * parameters and the grm_reader_ops table. The work is in text_ref.c (parsing, chunks)
 * and text_src.c (plain or zstd bytes, lines). */
#include <stddef.h>
#include <string.h>

#include "text.h"

static const grm_host_api *text_host;   /* the only mutable global (STYLE.md §5.2) */

static const grm_device text_cpu = { GRM_DEVICE_CPU, 0 };

static const grm_param_decl text_params[] = {
    GRM_PARAM_DECL_STRING(text_config, path, GRM_PARAM_REQUIRED,
                          "input file (relative to the INI file); a name ending in .zst is "
                          "decompressed while reading"),
    GRM_PARAM_DECL_ENUM(text_config, format, "tsv", "tsv|csv|ssv|movielens",
                        "field separator: tab, comma, runs of spaces, or '::' (MovieLens "
                        "ratings.dat)"),
    GRM_PARAM_DECL_STR_LIST(text_config, columns, GRM_PARAM_REQUIRED,
                            "name:type per field (i64 f32 str list_i64 list_f32; a list is last "
                            "and takes the rest; '_' skips a field), e.g. "
                            "user:i64,item:i64,rating:f32,ts:i64"),
    GRM_PARAM_DECL_BOOL(text_config, header, "false", "skip the first line of the file"),
    GRM_PARAM_DECL_ENUM(text_config, on_bad_row, "fail", "fail|skip",
                        "a malformed row stops reading with its file:line (fail) or is counted "
                        "and skipped"),
    GRM_PARAM_DECL_INT(text_config, chunk_rows, "65536", GRM_PARAM_RANGE(1, 16777216),
                       "rows per chunk"),
    GRM_PARAM_DECL_END
};

static void text_close(void *inst)
{
    text_reader *const r = inst;
    if (r == NULL) return;
    text_src_close(&r->src);
    text_spec_free(r);
    text_host->free(text_cpu, r);
}

static grm_status text_open(const void *config, int32_t shard, int32_t nshards, void **inst)
{
    const text_config *const cfg = config;
    grm_status st;

    if (config == NULL || inst == NULL) {
        return text_host->errorf(GRM_EINVAL, "reader-text: open: config and inst must not "
                                 "be NULL");
    }
    *inst = NULL;
    if (nshards < 1 || shard < 0 || shard >= nshards) {
        return text_host->errorf(GRM_EINVAL, "reader-text: open: shard %d of %d is out of "
                                 "range; need 0 <= shard < nshards", shard, nshards);
    }
    if (cfg->path == NULL || cfg->path[0] == '\0') {
        return text_host->errorf(GRM_EINVAL, "reader-text: path is empty; set it to the "
                                 "input file");
    }
    if (cfg->format < TEXT_FMT_TSV || cfg->format > TEXT_FMT_MOVIELENS
        || cfg->chunk_rows < 1) {
        return text_host->errorf(GRM_EINVAL, "reader-text: open: config not filled by the "
                                 "host (format %d, chunk_rows %lld)", cfg->format,
                                 (long long)cfg->chunk_rows);
    }
    text_reader *const r = text_host->alloc(text_cpu, sizeof(*r), 0);
    if (r == NULL) return GRM_ENOMEM;
    memset(r, 0, sizeof(*r));
    r->host = text_host;
    r->cfg = cfg;
    r->shard = shard;
    r->nshards = nshards;
    st = text_spec_parse(r);
    if (st != GRM_OK) goto fail;
    st = text_src_open(&r->src, text_host, cfg->path);
    if (st != GRM_OK) goto fail;
    *inst = r;
    return GRM_OK;

fail:
    text_close(r);
    return st;
}

static grm_status text_schema(void *inst, const grm_schema **schema)
{
    if (inst == NULL || schema == NULL) {
        return text_host->errorf(GRM_EINVAL, "reader-text: schema: inst and schema must "
                                 "not be NULL");
    }
    *schema = &((text_reader *)inst)->schema;
    return GRM_OK;
}

static grm_status text_next(void *inst, const grm_chunk **chunk)
{
    if (inst == NULL || chunk == NULL) {
        return text_host->errorf(GRM_EINVAL, "reader-text: next: inst and chunk must not "
                                 "be NULL");
    }
    return text_reader_next(inst, chunk);
}

static grm_status text_stats(void *inst, grm_reader_stats *stats)
{
    if (inst == NULL || stats == NULL) {
        return text_host->errorf(GRM_EINVAL, "reader-text: stats: inst and stats must not "
                                 "be NULL");
    }
    *stats = ((const text_reader *)inst)->stats;
    return GRM_OK;
}

static const grm_reader_ops text_ops = {
    .struct_size = (uint32_t)sizeof(grm_reader_ops),
    .open = text_open,
    .schema = text_schema,
    .next = text_next,
    .close = text_close,
    .stats = text_stats,
};

static const grm_plugin_info text_info = {
    GRM_PLUGIN_INFO_HEADER,
    .kind = GRM_KIND_READER,
    .name = "reader-text",
    .version = "1.0.0",
    .description = "delimited text (tsv, csv, ssv, MovieLens ::), optionally zstd, "
                   "into typed column chunks",
    .ops = &text_ops,
    .params = text_params,
    .config_size = sizeof(text_config),
};

// grm/plugin.h declares only the entry's type; this prototype keeps
// -Wmissing-prototypes quiet.
GRM_PLUGIN_DEFINE(text_host, &text_info);
