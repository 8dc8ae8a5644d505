/* core/checkpoint.h - the names of checkpoint files and directories, defined once in
 * core/checkpoint.c for the trainer and core/reshard.c: step-S.ext (S written as %010lld
 * so names sort by step), best.ext, and rank-R-of-N directories of an N-rank job. */
#ifndef GRM_CHECKPOINT_H
#define GRM_CHECKPOINT_H

#include "grm_core.h"

/* 1 and *step when `name` is step-S.<ext> with S >= 0, else 0. */
int grm__ckpt_is_step_name(const char *name, const char *ext, int64_t *step);
/* "step-S" (no extension) into buf [cap]. */
void grm__ckpt_step_stem(char *buf, size_t cap, int64_t step);
/* 1 and *r, *n when `name` is rank-R-of-N with 0 <= R < N, else 0. */
int grm__ckpt_is_rank_dir(const char *name, int *r, int *n);
/* Rank r's directory of an n-rank job under dir: dir itself when n is 1. */
void grm__ckpt_rank_dir(char *buf, size_t cap, const char *dir, int32_t r, int32_t n);
/* mkdir -p dir; GRM_EIO naming the directory that could not be made. */
grm_status grm__ckpt_make_dirs(const char *dir);

/* Bytes of one row of t (a row: its first dim; the dtype's size for 0 or 1 dims). */
size_t grm__ckpt_row_bytes(const grm_tensor *t);
/* A piece of load_rows (rows [row0, row0 + its first dim) of a tensor of `rows` rows) lies
 * inside its tensor: GRM_OK, else GRM_EFORMAT naming path, the tensor and the rows. */
grm_status grm__ckpt_piece_fits(const char *path, const grm_named_tensor *nt, int64_t row0,
                                int64_t rows);

/* XXH64 of the parsed configuration (sections, keys, values in order): "config_hash". */
uint64_t grm__ckpt_config_hash(const grm__config *cfg);

/* The metadata of checkpoint `path` in a buffer of GRM__CKPT_META_CAP bytes (*out, free()d
 * by the caller), read with `ops`/`inst`. */
#define GRM__CKPT_META_CAP ((size_t)1 << 20)
grm_status grm__ckpt_read_meta(const grm_ckpt_ops *ops, void *inst, const char *path,
                               char **out);
/* The "settings" object a checkpoint records (`"[section] key":"value"` of every key that
 * defines the model; checkpoint.c model_key), JSON-escaped, in a malloc()ed string (NULL:
 * out of memory). Compared with the INI on resume, copied by reshard. */
char *grm__ckpt_settings_json(const grm__config *cfg);
/* The `"settings":{...}` member of metadata `meta`, as a span into it (NULL: none). */
const char *grm__ckpt_meta_settings(const char *meta, size_t *len);

/* A checkpoint format picked by a file's extension: any ckpt-* plugin in the registry, so
 * that a run whose [checkpoint] plugin changed resumes from the other format's files, and
 * `grmhost inspect/export/recommend` read either. */
typedef struct grm__ckpt_fmt {
    const grm__plugin *plugin;     /* borrowed from the registry */
    const grm_ckpt_ops *ops;       /* plugin->info->ops */
    void *inst;                    /* owned: created with the plugin's defaults */
    const char *ext;               /* the plugin's extension, valid while inst lives */
} grm__ckpt_fmt;

/* The format of `path` (its extension after the last dot). GRM_ENOTFOUND naming the file
 * and the extensions the registry's formats have. */
grm_status grm__ckpt_fmt_for(const grm__registry *reg, const char *path, grm__ckpt_fmt *out);
/* Every ckpt format of the registry, in registry order, into out [cap]; *n how many. */
grm_status grm__ckpt_fmt_all(const grm__registry *reg, grm__ckpt_fmt *out, int32_t cap,
                             int32_t *n);
void grm__ckpt_fmt_fini(grm__ckpt_fmt *f);

#endif /* GRM_CHECKPOINT_H */
