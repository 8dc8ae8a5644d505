/* plugins/ckpt-grm/plugin.c - glue of ckpt-grm, grm's own checkpoint format (DESIGN.md §3):
 * named tensors plus metadata in one zstd-compressed, XXH64-checksummed file. Entry,
 * descriptor, parameters, ops table and argument checks; the format lives in
 * ckpt_grm_save.c and ckpt_grm_load.c, its byte layout in README.md. */
#include <stdlib.h>
#include <string.h>

#include <grm/ckpt.h>
#include <grm/plugin.h>

#include "ckpt_grm.h"

static const grm_host_api *cg_host;

typedef struct cg_inst {
    int level;                 /* zstd level, 1..19 */
} cg_inst;

static grm_status cg_create(const void *config, void **inst)
{
    static const cg_config defaults = { 3 };
    const cg_config *cfg = config != NULL ? config : &defaults;

    if (inst == NULL) return cg_host->errorf(GRM_EINVAL, "ckpt-grm: create: inst is NULL");
    *inst = NULL;
    if (cfg->level < 1 || cfg->level > 19)
        return cg_host->errorf(GRM_EINVAL, "ckpt-grm: level = %lld; expected 1..19",
                               (long long)cfg->level);
    if (!cg_host_is_little_endian())
        return cg_host->errorf(GRM_ENOTSUP, "ckpt-grm: this host is big-endian; the format "
                               "stores little-endian tensors");
    cg_inst *c = calloc(1, sizeof(*c));
    if (c == NULL) return cg_host->errorf(GRM_ENOMEM, "ckpt-grm: create: out of memory");
    c->level = (int)cfg->level;
    *inst = c;
    return GRM_OK;
}

static void cg_destroy(void *inst)
{
    free(inst);
}

static const char *cg_extension(void *inst)
{
    (void)inst;
    return "grm";
}

static grm_status cg_save_op(void *inst, const char *path, const grm_named_tensor *tensors,
                             int64_t n, const char *meta)
{
    const cg_inst *c = inst;
    if (c == NULL) return cg_host->errorf(GRM_EINVAL, "ckpt-grm: save: inst is NULL");
    return cg_save(cg_host, c->level, path, tensors, n, meta, NULL, NULL);
}

static grm_status cg_save_rows_op(void *inst, const char *path,
                                  const grm_named_tensor *tensors, int64_t n, const char *meta,
                                  grm_ckpt_rows_fn rows, void *user)
{
    const cg_inst *c = inst;
    if (c == NULL || rows == NULL)
        return cg_host->errorf(GRM_EINVAL, "ckpt-grm: save_rows: inst or rows is NULL");
    return cg_save(cg_host, c->level, path, tensors, n, meta, rows, user);
}

static grm_status cg_load_op(void *inst, const char *path, grm_ckpt_visit_fn visit,
                             void *user)
{
    cg_file f;
    grm_status st;

    if (inst == NULL || path == NULL || visit == NULL)
        return cg_host->errorf(GRM_EINVAL, "ckpt-grm: load: inst, path or visit is NULL");
    if ((st = cg_open(cg_host, path, &f)) != GRM_OK) return st;
    for (int64_t i = 0; i < f.n; i++) {
        grm_named_tensor t;
        if ((st = cg_read(cg_host, &f, i, &t)) != GRM_OK) break;
        if ((st = visit(user, &t)) != GRM_OK) break;
    }
    cg_close(&f);
    return st;
}

/* load_rows (each tensor in turn) and load_rows_interleaved (the chunks in the file's
 * order): the file verified first (cg_open_pieces). */
static grm_status cg_load_pieces(void *inst, const char *path, grm_ckpt_piece_fn visit,
                                 void *user, int interleaved)
{
    cg_file f;
    grm_status st;

    if (inst == NULL || path == NULL || visit == NULL)
        return cg_host->errorf(GRM_EINVAL, "ckpt-grm: %s: inst, path or visit is NULL",
                               interleaved ? "load_rows_interleaved" : "load_rows");
    if ((st = cg_open_pieces(cg_host, path, &f)) != GRM_OK) return st;
    if (interleaved) {
        st = cg_pieces_in_file_order(cg_host, &f, visit, user);
    } else {
        for (int64_t i = 0; i < f.n && st == GRM_OK; i++)
            st = cg_pieces(cg_host, &f, i, visit, user);
    }
    cg_close(&f);
    return st;
}

static grm_status cg_load_rows_op(void *inst, const char *path, grm_ckpt_piece_fn visit,
                                  void *user)
{
    return cg_load_pieces(inst, path, visit, user, 0);
}

static grm_status cg_load_rows_interleaved_op(void *inst, const char *path,
                                              grm_ckpt_piece_fn visit, void *user)
{
    return cg_load_pieces(inst, path, visit, user, 1);
}

static grm_status cg_meta_op(void *inst, const char *path, char *buf, size_t cap)
{
    cg_file f;
    grm_status st;

    if (inst == NULL || path == NULL || (buf == NULL && cap > 0))
        return cg_host->errorf(GRM_EINVAL, "ckpt-grm: meta: inst, path or buf is NULL");
    // verified as load_rows verifies: a tensor above 16 MiB by its frame and the file
    // checksum, not decompressed (a resume reads the metadata before the tensors, and a
    // tiered table's would be held whole)
    if ((st = cg_open_pieces(cg_host, path, &f)) != GRM_OK) return st;
    if (f.meta_len >= cap) {
        st = cg_host->errorf(GRM_EFORMAT, "ckpt-grm: %s: metadata of %zu bytes does not fit "
                             "in a buffer of %zu; pass a larger one", path, f.meta_len, cap);
    } else {
        memcpy(buf, f.meta, f.meta_len);
        buf[f.meta_len] = '\0';
    }
    cg_close(&f);
    return st;
}

static const grm_param_decl cg_params[] = {
    GRM_PARAM_DECL_INT(cg_config, level, "3", GRM_PARAM_RANGE(1, 19),
                       "zstd compression level of tensor payloads (1 fastest, 19 smallest)"),
    GRM_PARAM_DECL_END
};

static const grm_ckpt_ops cg_ops = {
    .struct_size = sizeof(grm_ckpt_ops),
    .create = cg_create,
    .destroy = cg_destroy,
    .extension = cg_extension,
    .save = cg_save_op,
    .load = cg_load_op,
    .meta = cg_meta_op,
    .save_rows = cg_save_rows_op,
    .load_rows = cg_load_rows_op,
    .load_rows_interleaved = cg_load_rows_interleaved_op,
};

static const grm_plugin_info cg_info = {
    GRM_PLUGIN_INFO_HEADER,
    .kind = GRM_KIND_CKPT,
    .name = "ckpt-grm",
    .version = "2.1.0",
    .description = "single-file checkpoint: named tensors + metadata, zstd, XXH64-checked",
    .ops = &cg_ops,
    .params = cg_params,
    .config_size = sizeof(cg_config),
};

GRM_PLUGIN_DEFINE(cg_host, &cg_info);
